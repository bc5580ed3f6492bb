//! The `PYTORCH_CUDA_ALLOC_CONF` string syntax. (Stub: being written.)

use super::{AllocatorConfig, ConfigError};

pub(super) fn apply(_config: &mut AllocatorConfig, _conf: &str) -> Result<(), ConfigError> {
    Ok(())
}

pub(super) fn to_conf_string(_config: &AllocatorConfig) -> String {
    String::new()
}

pub(super) fn validate(_config: &AllocatorConfig) -> Result<(), ConfigError> {
    Ok(())
}
