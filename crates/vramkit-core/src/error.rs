//! The core's errors: [`Error`], what a public allocator call returns, and
//! [`PoolError`], the private-pool refusal it wraps.

use crate::config::ConfigError;
use crate::device::{DeviceAddr, DeviceError};
use crate::oom::OutOfMemoryError;
use crate::snapshot::MempoolId;

/// What can go wrong in a public allocator call.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request cannot be served even after releasing the cache.
    #[error("{0}")]
    OutOfMemory(Box<OutOfMemoryError>),
    /// The device failed with something other than out-of-memory.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// `free` or `record_stream` of an address this allocator did not hand out
    /// (or already took back).
    #[error("{addr} was not allocated by this allocator, or was already freed: pass an address that malloc returned, once")]
    UnknownPointer {
        /// The address passed.
        addr: DeviceAddr,
    },
    /// A settings string or value was refused. Boxed, as the
    /// out-of-memory details are: every `malloc` returns a `Result` of this
    /// type, and a small one is cheaper to pass back.
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// A private-pool call was refused.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// `set_memory_fraction` with a value outside [0, 1].
    #[error("invalid memory fraction {fraction}: the allowed range is 0.0 to 1.0 (PyTorch: \"Invalid fraction value: {fraction}. Allowed range: 0~1\")")]
    InvalidFraction {
        /// The value passed.
        fraction: f64,
    },
}

impl From<ConfigError> for Error {
    fn from(error: ConfigError) -> Self {
        Error::Config(Box::new(error))
    }
}

impl Error {
    /// The out-of-memory details, if this is one.
    pub fn as_oom(&self) -> Option<&OutOfMemoryError> {
        match self {
            Error::OutOfMemory(oom) => Some(oom),
            _ => None,
        }
    }
}

/// Why a private-pool call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// `begin_allocate_to_pool` for a pool already being allocated to.
    #[error("already allocating to private pool {id:?}: call end_allocate_to_pool first")]
    AlreadyAllocating {
        /// The pool.
        id: MempoolId,
    },
    /// `end_allocate_to_pool` or `release_pool` of a pool not in that state.
    #[error("private pool {id:?} is not {what}")]
    NotActive {
        /// The pool.
        id: MempoolId,
        /// What it should have been.
        what: &'static str,
    },
    /// `(0, 0)` names the default pool, which cannot be private.
    #[error("(0, 0) is the default pool; private pool ids must differ from it")]
    DefaultId,
}
