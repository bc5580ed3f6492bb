//! RMM `logging_resource_adaptor` CSV logs.

use vramkit_core::snapshot::TraceAction;
use vramkit_trace::rmm::read_rmm_log_str;
use vramkit_trace::TraceError;

const LOG: &str = "Thread,Time,Action,Pointer,Size,Stream
140573312345856,23:59:59.999000,allocate,0x7f8a40000000,1024,0x0
140573312345856,23:59:59.999500,allocate failure,(nil),1099511627776,0x0
140573312345857,00:00:00.000250,free,0x7f8a40000000,1024,0x7f8a38001020
";

#[test]
fn events_become_trace_entries() {
    let log = read_rmm_log_str(LOG).expect("reads");
    let actions: Vec<TraceAction> = log.entries.iter().map(|e| e.action).collect();
    assert_eq!(actions, [TraceAction::Alloc, TraceAction::Oom, TraceAction::FreeRequested, TraceAction::FreeCompleted]);
    let alloc = &log.entries[0];
    assert_eq!((alloc.addr, alloc.size, alloc.stream), (0x7f8a_4000_0000, 1024, 0));
    assert_eq!(log.entries[1].size, 1 << 40);
    assert_eq!(log.entries[1].addr, 0, "RMM records no free bytes for a failure");
    let free = &log.entries[3];
    assert_eq!((free.addr, free.stream), (0x7f8a_4000_0000, 0x7f8a_3800_1020));
    // Time of day, carried past midnight.
    let times: Vec<u64> = log.entries.iter().filter_map(|e| e.time_us).collect();
    assert_eq!(times[0], 86_399_999_000);
    assert_eq!(times[2], 86_400_000_250);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn columns_are_found_by_name_and_epoch_stamps_work() {
    let log = read_rmm_log_str("Action,Size,Pointer,Stream,Time\r\nallocate,16,7f00,0,1634567890.123456\r\n\r\ndeallocate,16,0x7f00,0,1634567890.5\r\n")
        .expect("reads");
    assert_eq!(log.entries.len(), 3);
    assert_eq!(log.entries[0].addr, 0x7f00);
    assert_eq!(log.entries[0].time_us, Some(1_634_567_890_123_456));
    assert_eq!(log.entries[2].time_us, Some(1_634_567_890_500_000));
    let file = log.into_snapshot_file();
    let mut out = Vec::new();
    vramkit_trace::write_pickle(&file, &mut out).expect("writes");
    assert_eq!(vramkit_trace::read_snapshot_bytes(&out).expect("reads back").snapshot, file.snapshot);
}

#[test]
fn malformed_lines_name_the_line() {
    let cases = [
        ("", 1, "empty log"),
        ("Thread,When,Action\n", 1, "Time column"),
        ("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.0,allocate,0x10,12\n", 2, "expected 6 fields"),
        ("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.0,resize,0x10,12,0x0\n", 2, "Action"),
        ("Thread,Time,Action,Pointer,Size,Stream\n\n1,00:00:00.0,allocate,0xzz,12,0x0\n", 3, "Pointer"),
        ("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.0,allocate,0x10,-4,0x0\n", 2, "Size"),
        ("Thread,Time,Action,Pointer,Size,Stream\n1,25:00:00.0,allocate,0x10,4,0x0\n", 2, "Time"),
    ];
    for (text, want_line, want) in cases {
        match read_rmm_log_str(text) {
            Err(TraceError::Rmm { line, message, .. }) => {
                assert_eq!(line, want_line, "{text:?}: {message}");
                assert!(message.contains(want), "{text:?}: {message}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}
