//! Errors of the settings parser. (Stub: being written.)

/// A settings string or value PyTorch would refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key's value is outside what PyTorch accepts.
    #[error("invalid value {value:?} for {key}: {allowed}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is allowed.
        allowed: String,
    },
}
