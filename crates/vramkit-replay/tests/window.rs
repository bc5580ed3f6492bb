//! Windows that start in the middle of a process.

use vramkit_core::{AllocatorConfig, CachingAllocator, HistoryConfig, StreamId, TraceAction};
use vramkit_replay::{verify, DeviceTrace};
use vramkit_sim::SimDevice;

const MIB: u64 = 1 << 20;

/// A window that opens with `empty_cache()` freeing segments whose
/// addresses the driver hands out again, to a larger segment that lives to
/// the end (a real 2.7B forward pass opens with 742 such frees). The segment
/// at the start is the freed one, not the end state's: taking the end
/// state's size made two start segments overlap, and the replay panicked.
#[test]
fn a_freed_address_given_to_a_larger_segment_in_the_window() {
    crate::without_invariant_checks();
    let (a, b) = (0x7f00_0000_0000u64, 0x7f00_0140_0000u64);
    let mut device = SimDevice::unlimited();
    device.push_address(a);
    device.push_address(b);
    let mut alloc = CachingAllocator::new(device, AllocatorConfig::default());
    let first = alloc.malloc(20 * MIB, StreamId(0)).unwrap();
    let second = alloc.malloc(20 * MIB, StreamId(0)).unwrap();
    assert_eq!((first.0, second.0), (a, b));
    alloc.free(first).unwrap();
    alloc.free(second).unwrap();
    alloc.record_history(Some(HistoryConfig { max_entries: usize::MAX, ..HistoryConfig::default() }));
    alloc.empty_cache();
    alloc.device_mut().push_address(a);
    let big = alloc.malloc(40 * MIB, StreamId(0)).unwrap();
    assert_eq!(big.0, a, "the freed address is handed out again");
    let small = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
    alloc.free(small).unwrap();
    let trace = DeviceTrace::split(&alloc.snapshot()).remove(0);
    let v = verify(&trace, &AllocatorConfig::default()).unwrap();
    assert!(v.passed(), "{:?}", v.first_divergence);
    assert_eq!(v.segment_events_recorded, 4);
}

/// A trace cut short (an edited file that lost its last entries): the
/// allocations it never frees whose blocks are free at the end were freed
/// after its last entry, in the order they were made; an address allocated
/// again counts by its last allocation. Verify frees them after the last
/// entry, says the trace was cut, and matches the end state.
#[test]
fn allocations_a_cut_trace_never_frees_are_freed_after_it() {
    crate::without_invariant_checks();
    let mut alloc = CachingAllocator::new(SimDevice::unlimited(), AllocatorConfig::default());
    alloc.record_history(Some(HistoryConfig { max_entries: usize::MAX, ..HistoryConfig::default() }));
    let first = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
    let second = alloc.malloc(5 * MIB, StreamId(0)).unwrap();
    let kept = alloc.malloc(MIB, StreamId(0)).unwrap();
    alloc.free(first).unwrap();
    let again = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
    assert_eq!(again, first, "the freed block is handed out again");
    alloc.free(again).unwrap();
    alloc.free(second).unwrap();
    let mut snapshot = alloc.snapshot();
    let whole = DeviceTrace::split(&snapshot).remove(0);
    assert!(!verify(&whole, &AllocatorConfig::default()).unwrap().trace_cut);
    // The two last frees (a `free_requested` and a `free_completed` each) are lost.
    let entries = &mut snapshot.device_traces[0];
    let lost = entries.iter().rposition(|e| e.action == TraceAction::FreeRequested && e.addr == again.0).unwrap();
    assert_eq!(entries[lost..].iter().filter(|e| e.action == TraceAction::FreeRequested).count(), 2);
    entries.truncate(lost);
    let cut = DeviceTrace::split(&snapshot).remove(0);
    let start = vramkit_replay::rebuild_start(&cut, &AllocatorConfig::default()).unwrap();
    assert_eq!(start.cut_frees, vec![second.0, again.0], "in the order of their last allocations");
    let v = verify(&cut, &AllocatorConfig::default()).unwrap();
    assert!(v.trace_cut && v.passed(), "{:?}", v.first_divergence);
    assert!(alloc.segments().iter().flat_map(|s| &s.blocks).any(|b| b.address == kept.0 && b.state.is_active()));
}
