use vramkit_cuda::{driver_available, CudaDevice, CudaError};

#[test]
fn without_a_driver_new_is_an_error_not_a_panic() {
    if driver_available() {
        eprintln!("skipped: a CUDA driver is present here");
        return;
    }
    let error = CudaDevice::new(0).unwrap_err();
    assert!(matches!(error, CudaError::NoDriver | CudaError::NotBuilt), "{error:?}");
    assert!(matches!(CudaDevice::device_count(), Err(CudaError::NoDriver | CudaError::NotBuilt)));
    // Asking again is just as safe (the probe is cached, nothing panics).
    assert!(CudaDevice::new(3).is_err());
}

#[test]
fn the_no_driver_message_says_what_to_do() {
    let text = CudaError::NoDriver.to_string();
    assert!(text.starts_with("no CUDA driver found"), "{text}");
    assert!(text.contains("libcuda"), "{text}");
    let text = CudaError::InvalidDevice { index: 4, count: 2 }.to_string();
    assert_eq!(text, "CUDA device 4 does not exist: this machine has 2 CUDA device(s)");
}

#[test]
fn an_index_the_driver_does_not_list_is_refused() {
    let Ok(count) = CudaDevice::device_count() else {
        eprintln!("skipped: no CUDA driver");
        return;
    };
    assert_eq!(CudaDevice::new(-1).unwrap_err(), CudaError::InvalidDevice { index: -1, count });
    assert_eq!(CudaDevice::new(count).unwrap_err(), CudaError::InvalidDevice { index: count, count });
}
