"""scripts/record_snapshots.py needs a GPU to record, but its frame trimming
(which keeps recorded files small without breaking sharing) runs anywhere."""

import importlib.util
import pathlib
import pickle

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "record_snapshots.py"


def load_script():
    spec = importlib.util.spec_from_file_location("record_snapshots", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trim_keeps_innermost_frames_and_sharing():
    script = load_script()
    frames = [{"filename": f"f{i}.py", "line": i, "name": f"fn{i}"} for i in range(20)]
    snapshot = {
        "segments": [{"frames": frames, "blocks": [{"frames": frames}, {"frames": []}]}],
        "device_traces": [[{"action": "alloc", "frames": frames}, {"action": "free_requested"}]],
    }
    out = script.trim_frames(snapshot)
    block_frames = out["segments"][0]["blocks"][0]["frames"]
    assert [f["line"] for f in block_frames] == list(range(script.MAX_FRAMES))
    # The same list object everywhere it was shared: pickles stay small.
    assert out["device_traces"][0][0]["frames"] is block_frames
    assert out["segments"][0]["frames"] is block_frames
    assert out["segments"][0]["blocks"][1]["frames"] == []
    assert pickle.loads(pickle.dumps(out, protocol=4)) == out


def test_every_setting_is_a_valid_vramkit_setting():
    import vramkit

    script = load_script()
    before = vramkit.settings()
    try:
        for conf in script.SETTINGS.values():
            vramkit.set_settings(conf)
    finally:
        vramkit.set_settings(before)
