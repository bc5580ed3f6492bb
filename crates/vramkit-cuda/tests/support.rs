use vramkit_cuda::CudaDevice;

/// Device 0, or `None` after printing why this test cannot run here.
pub fn gpu(test: &str) -> Option<CudaDevice> {
    match CudaDevice::new(0) {
        Ok(device) => Some(device),
        Err(error) => {
            eprintln!("skipped {test}: no usable GPU: {error}");
            None
        }
    }
}
