//! RAPIDS RMM `logging_resource_adaptor` CSV logs. (Being written.)
