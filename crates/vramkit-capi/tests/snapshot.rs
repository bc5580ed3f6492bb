use serde_json::json;
use vramkit_capi::snapshot_json::snapshot_value;
use vramkit_capi::SharedAllocator;
use vramkit_core::{AllocatorConfig, HistoryConfig, StreamId};
use vramkit_sim::SimDevice;

#[test]
fn the_snapshot_has_pytorchs_dict_shape() {
    let config = AllocatorConfig::pytorch_default();
    let device = SimDevice::new(1 << 30).with_base_address(0x7f00_0000_0000);
    let shared = SharedAllocator::new(device, config.clone(), 1);
    shared.record_history(Some(HistoryConfig::default())).unwrap();
    let p = shared.malloc(1000, StreamId(0)).unwrap();
    let q = shared.malloc(4000, StreamId(0)).unwrap();
    shared.free(q, 4000).unwrap();
    assert!(shared.malloc(4 << 30, StreamId(0)).is_err());
    let value = snapshot_value(&[(1, shared.snapshot())], &config);

    let base = 0x7f00_0000_0000u64;
    assert_eq!(
        value["segments"],
        json!([{
            "device": 1, "address": base, "total_size": 2 << 20, "allocated_size": 1024,
            "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
            "segment_pool_id": [0, 0], "is_expandable": false, "frames": [],
            "blocks": [
                {"address": base, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": []},
                {"address": base + 1024, "size": (2 << 20) - 1024, "requested_size": 4000, "state": "inactive", "frames": []},
            ],
        }])
    );
    let traces = value["device_traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2, "one list per device index up to the highest");
    assert_eq!(traces[0], json!([]));
    let actions: Vec<&str> = traces[1].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["segment_alloc", "alloc", "alloc", "free_requested", "free_completed", "oom", "snapshot"]);
    let oom = &traces[1][5];
    assert!(oom.get("device_free").is_some() && oom.get("addr").is_none(), "{oom}");
    let alloc = &traces[1][1];
    assert_eq!(alloc["addr"], base);
    assert_eq!(alloc["size"], 1000);
    assert_eq!(p.0, base);

    let settings = &value["allocator_settings"];
    assert_eq!(settings["max_split_size"], -1);
    assert_eq!(settings["expandable_segments"], false);
    assert_eq!(settings["PYTORCH_CUDA_ALLOC_CONF"], "");
    let divisions = settings["roundup_power2_divisions"].as_object().unwrap();
    assert_eq!(divisions.len(), 16);
    assert!(divisions.contains_key("1") && divisions.contains_key("32768"));
}
