use vramkit_capi::{Error, SharedAllocator};
use vramkit_core::{AllocatorConfig, DeviceAddr, StreamId};
use vramkit_sim::SimDevice;

fn shared(capacity: u64) -> SharedAllocator<SimDevice> {
    SharedAllocator::new(SimDevice::new(capacity), AllocatorConfig::pytorch_default(), 0)
}

#[test]
fn zero_bytes_is_null_and_free_of_that_null_is_fine() {
    let a = shared(1 << 30);
    assert_eq!(a.malloc(0, StreamId(0)).unwrap(), DeviceAddr(0));
    a.free(DeviceAddr(0), 0).unwrap();
    assert_eq!(a.boundary_error_count(), 0);
    assert_eq!(a.stats().num_device_alloc, 0);
}

#[test]
fn every_kind_of_bad_free_is_refused_and_counted() {
    let a = shared(1 << 30);
    let p = a.malloc(1000, StreamId(0)).unwrap();
    let q = a.malloc(5000, StreamId(0)).unwrap();
    a.free(p, 1000).unwrap();

    let error = a.free(p, 1000).unwrap_err();
    assert!(matches!(error, Error::DoubleFree { addr, device: 0 } if addr == p), "{error:?}");
    assert_eq!(error.to_string(), format!("double free of {p} on device 0: it was already freed; nothing was freed"));

    let stranger = DeviceAddr(q.0 + 512); // an interior pointer
    let error = a.free(stranger, 512).unwrap_err();
    assert!(matches!(error, Error::UnknownPointer { .. }), "{error:?}");
    assert!(error.to_string().contains(&stranger.to_string()));

    let error = a.free(DeviceAddr(0), 64).unwrap_err();
    assert!(matches!(error, Error::NullPointer { size_bytes: 64 }), "{error:?}");

    let error = a.record_stream(p, StreamId(7)).unwrap_err();
    assert!(matches!(error, Error::NotLive { .. }), "{error:?}");

    // None of that touched the allocator.
    assert_eq!(a.live_count(), 1);
    assert_eq!(a.stats().allocation.all.current, 1);
    a.with_allocator(|alloc| alloc.check_invariants()).unwrap().unwrap();

    // A wrong size still frees the block the address names.
    let error = a.free(q, 4096).unwrap_err();
    assert!(
        matches!(error, Error::WrongSize { addr, size_bytes: 4096, allocated_bytes: 5000 } if addr == q),
        "{error:?}"
    );
    assert_eq!(a.live_count(), 0);
    assert_eq!(a.stats().allocation.all.current, 0);
    assert_eq!(a.boundary_error_count(), 5);
    assert!(error.is_misuse());
}

#[test]
fn a_reused_address_is_live_again_not_a_double_free() {
    let a = shared(1 << 30);
    let p = a.malloc(1000, StreamId(0)).unwrap();
    a.free(p, 1000).unwrap();
    let again = a.malloc(1000, StreamId(0)).unwrap();
    assert_eq!(again, p, "the cached block comes back");
    a.free(again, 1000).unwrap();
    assert_eq!(a.boundary_error_count(), 0);
}

#[test]
fn out_of_memory_is_pytorchs_error_with_the_diagnosis() {
    let a = shared(1 << 30);
    let error = a.malloc(2 << 30, StreamId(0)).unwrap_err();
    assert!(!error.is_misuse());
    let oom = error.as_oom().expect("an OOM");
    assert_eq!(oom.requested_bytes, 2 << 30);
    let text = error.to_string();
    assert!(
        text.starts_with("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 1024.00 MiB"),
        "{text}"
    );
    assert!(text.contains("\nvramkit: "), "{text}");
    assert_eq!(a.stats().num_ooms, 1);
}

#[test]
fn settings_fraction_and_cache_calls_go_through() {
    let a = shared(1 << 30);
    a.update_settings("max_split_size_mb:64").unwrap();
    assert_eq!(a.config().max_split_size_bytes, Some(64 << 20));
    assert!(a.update_settings("max_split_size_mb:1").is_err(), "PyTorch refuses <= 20");
    assert_eq!(a.config().max_split_size_bytes, Some(64 << 20), "a refused string changes nothing");
    a.set_memory_fraction(0.5).unwrap();
    assert!(a.set_memory_fraction(1.5).is_err());
    assert!(a.malloc(600 << 20, StreamId(0)).unwrap_err().as_oom().is_some(), "over the fraction");

    let p = a.malloc(30 << 20, StreamId(0)).unwrap();
    a.free(p, 30 << 20).unwrap();
    assert!(a.stats().reserved_bytes.all.current > 0);
    assert_eq!(a.memory_stats()["num_ooms"], 1);
    a.reset_peak_stats().unwrap();
    a.reset_accumulated_stats().unwrap();
    assert_eq!(a.memory_stats()["num_ooms"], 0, "an accumulated stat");
    a.empty_cache().unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(a.with_allocator(|alloc| alloc.device().used_bytes()).unwrap(), 0);
    let summary = a.memory_summary(false);
    assert!(summary.contains("PyTorch CUDA memory summary, device ID 0"), "{summary}");
}

#[test]
fn a_panic_inside_the_lock_stops_changes_but_not_reads() {
    let a = shared(1 << 30);
    let p = a.malloc(1000, StreamId(0)).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.with_allocator(|_| panic!("a bug inside the allocator")).unwrap();
    }));
    assert!(panicked.is_err());
    assert!(matches!(a.malloc(1000, StreamId(0)), Err(Error::Poisoned { device: 0 })));
    assert!(matches!(a.free(p, 1000), Err(Error::Poisoned { .. })));
    assert_eq!(a.stats().allocation.all.current, 1, "stats still readable");
    assert!(!a.memory_summary(true).is_empty());
}

#[test]
fn shared_allocator_on_a_real_gpu() {
    let device = match vramkit_cuda::CudaDevice::new(0) {
        Ok(device) => device,
        Err(error) => {
            eprintln!("skipped shared_allocator_on_a_real_gpu: no usable GPU: {error}");
            return;
        }
    };
    let a = SharedAllocator::new(device, AllocatorConfig::pytorch_default(), 0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let a = &a;
            s.spawn(move || {
                for i in 0..200u64 {
                    let size = 1 + (i * 7919 + t * 104_729) % (8 << 20);
                    let p = a.malloc(size, StreamId(0)).expect("malloc on the GPU");
                    a.free(p, size).expect("free on the GPU");
                }
            });
        }
    });
    assert_eq!(a.live_count(), 0);
    assert_eq!(a.stats().allocated_bytes.all.current, 0);
    a.empty_cache().unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(a.with_allocator(|alloc| alloc.device().driver_failure_count()).unwrap(), 0);
}
