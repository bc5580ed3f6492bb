use crate::support::gpu;
use vramkit_core::{Device, DeviceError, StreamId};

/// `cudaStreamPerThread`: a valid stream handle that needs no creation.
const PER_THREAD_STREAM: StreamId = StreamId(0x2);

#[test]
fn malloc_and_free_round_trip() {
    let Some(mut device) = gpu("malloc_and_free_round_trip") else { return };
    let info = device.mem_get_info();
    assert!(info.total_bytes > 0 && info.free_bytes <= info.total_bytes, "{info:?}");
    assert_eq!(info.total_bytes, device.total_bytes());
    let a = device.malloc(2 << 20, StreamId(0)).expect("2 MiB");
    let b = device.malloc(20 << 20, StreamId(0)).expect("20 MiB");
    assert_ne!(a.0, 0);
    assert!(b.0 >= a.0 + (2 << 20) || b.0 + (20 << 20) <= a.0, "ranges overlap: {a} {b}");
    device.free(a, 2 << 20);
    device.free(b, 20 << 20);
    assert_eq!(device.driver_failure_count(), 0);
}

#[test]
fn more_than_the_device_has_is_out_of_memory() {
    let Some(mut device) = gpu("more_than_the_device_has_is_out_of_memory") else { return };
    let too_much = device.total_bytes() * 2;
    assert_eq!(device.malloc(too_much, StreamId(0)), Err(DeviceError::OutOfMemory { requested_bytes: too_much }));
    // The device is still usable afterwards.
    let a = device.malloc(512, StreamId(0)).expect("small allocation after an OOM");
    device.free(a, 512);
}

#[test]
fn events_complete_and_are_reused() {
    let Some(mut device) = gpu("events_complete_and_are_reused") else { return };
    for stream in [StreamId(0), PER_THREAD_STREAM] {
        let event = device.record_event(stream);
        device.synchronize_event(event);
        assert!(device.query_event(event), "an event is complete after synchronize");
        device.destroy_event(event);
        // The pooled event comes back for the next record.
        let again = device.record_event(stream);
        assert_eq!(again, event);
        device.synchronize_event(again);
        device.destroy_event(again);
    }
    assert_eq!(device.driver_failure_count(), 0);
}

#[test]
fn devices_can_move_between_threads() {
    let Some(mut device) = gpu("devices_can_move_between_threads") else { return };
    let a = device.malloc(2 << 20, StreamId(0)).expect("alloc on the main thread");
    let device = std::thread::spawn(move || {
        // No context is current on this new thread: the device makes its own.
        device.free(a, 2 << 20);
        let b = device.malloc(2 << 20, StreamId(0)).expect("alloc on another thread");
        device.free(b, 2 << 20);
        device
    })
    .join()
    .unwrap();
    assert_eq!(device.driver_failure_count(), 0);
}
