//! Trace entries by column: the same entries as the core model holds, each
//! stack once.

use crate::common::snapshot_files;
use std::sync::Arc;
use vramkit_core::snapshot::{Frame, TraceAction, TraceEntry};
use vramkit_trace::{read_snapshot, read_trace_file, Entries, Entry};

fn stack(name: &str) -> vramkit_core::Frames {
    Arc::from(vec![Frame { filename: "train.py".into(), line: 3, name: name.into() }])
}

#[test]
fn optional_fields_survive_whichever_entries_have_them() {
    let site = stack("step");
    let mut entries = Vec::new();
    for i in 0..6u64 {
        let mut e = TraceEntry::new(TraceAction::ALL[i as usize], 0x1000 * i, 512 * i, i % 2);
        // Times from the third entry on, but not the fifth; stacks and strings here and there.
        e.time_us = (i >= 2 && i != 4).then_some(1_000 + i);
        e.frames = (i % 3 == 1).then(|| site.clone());
        e.compile_context = (i == 5).then(|| "N/A".to_string());
        e.user_metadata = (i == 0).then(String::new);
        entries.push(e);
    }
    let columns: Entries = entries.iter().cloned().collect();
    assert_eq!(columns.len(), 6);
    assert_eq!(columns.to_trace_entries(), entries);
    assert_eq!(columns.stacks().len(), 1, "one stack, held once");
    assert_eq!(columns.get(3), Entry { action: TraceAction::SegmentAlloc, addr: 0x3000, size: 1536, stream: 1 });
    assert_eq!(columns.iter().rev().map(|e| e.action).collect::<Vec<_>>()[0], TraceAction::SegmentMap);
    assert_eq!((columns.time_us(1), columns.time_us(4), columns.time_us(5)), (None, None, Some(1_005)));
    assert!(Entries::new().is_empty() && Entries::new().to_trace_entries().is_empty());
}

#[test]
fn a_trace_file_holds_what_the_snapshot_file_holds() {
    for path in snapshot_files() {
        let columns = read_trace_file(&path).expect("reads");
        let file = read_snapshot(&path).expect("reads");
        assert_eq!(columns.segments(), &file.snapshot.segments[..]);
        assert_eq!(columns.release_range(), file.release_range(), "{}", path.display());
        assert_eq!(columns.recorded_config(None), file.recorded_config(None));
        let expanded: Vec<Vec<TraceEntry>> = columns.device_traces.iter().map(Entries::to_trace_entries).collect();
        assert_eq!(expanded, file.snapshot.device_traces, "{}", path.display());
        for (entries, model) in columns.device_traces.iter().zip(&file.snapshot.device_traces) {
            let distinct: std::collections::HashSet<*const Frame> =
                model.iter().filter_map(|e| e.frames.as_ref().map(|f| f.as_ptr())).collect();
            assert_eq!(entries.stacks().len(), distinct.len(), "{}: each stack once", path.display());
        }
        assert_eq!(columns.into_snapshot_file(), file);
    }
}
