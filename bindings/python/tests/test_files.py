"""The snapshot-file tools on a snapshot recorded by vramkit itself and
on the real traces shipped in the repository."""

import pytest

import vramkit
from conftest import MiB


@pytest.fixture(scope="module")
def recorded_snapshot(tmp_path_factory, cabi):
    """A snapshot file of a small trace recorded on simulated device 20:
    two allocations and one free, the settings PyTorch's defaults."""
    d = 20
    vramkit.record_memory_history(device=d)
    a = cabi.malloc(3 * MiB, d)
    b = cabi.malloc(1000, d)
    cabi.free(a, 3 * MiB, d)
    path = tmp_path_factory.mktemp("snapshots") / "trace.pickle"
    vramkit.dump_snapshot(path)
    cabi.free(b, 1000, d)
    vramkit.record_memory_history(False, device=d)
    return path, d


def test_replay_gives_recorded_and_predicted_numbers(recorded_snapshot):
    path, d = recorded_snapshot
    result = vramkit.replay(path)
    device = next(r for r in result["devices"] if r["device"] == d)
    assert device["has_events"]
    for side in ("recorded", "predicted"):
        metrics = device[side]
        assert metrics["peak_reserved_bytes"] == 22 * MiB, side
        assert metrics["peak_requested_bytes"] == 3 * MiB + 1000, side
        assert metrics["first_oom_event"] is None and metrics["oom_count"] == 0, side
        assert metrics["timeline"], side
    assert result["settings"] == result["recorded_settings"]


def test_replay_under_other_settings_and_a_capacity(recorded_snapshot):
    path, d = recorded_snapshot
    result = vramkit.replay(path, conf="expandable_segments:True", capacity="16MiB")
    assert "expandable_segments:True" in result["settings"]
    assert result["capacity_bytes"] == 16 * MiB
    device = next(r for r in result["devices"] if r["device"] == d)
    assert device["predicted"]["peak_reserved_bytes"] <= 16 * MiB


def test_verify_finds_vramkits_own_trace_faithful(recorded_snapshot):
    path, d = recorded_snapshot
    result = vramkit.verify(path)
    device = next(r for r in result["devices"] if r["device"] == d)
    assert device["alloc_events"] == 2 and device["match_rate"] == 1.0
    assert device["passed"] and device["first_divergence"] is None
    assert result["passed"]


def test_arguments_are_checked_before_the_file_is_read(recorded_snapshot, tmp_path):
    path, _ = recorded_snapshot
    with pytest.raises(FileNotFoundError):
        vramkit.replay(tmp_path / "missing.pickle")
    with pytest.raises(FileNotFoundError):
        vramkit.verify(str(tmp_path / "missing.pickle"))
    with pytest.raises(ValueError, match="max_split_size_mb"):
        vramkit.replay(path, conf="max_split_size_mb:1")
    with pytest.raises(ValueError, match="bad capacity"):
        vramkit.replay(path, capacity="lots")
    with pytest.raises(ValueError):
        vramkit.replay(path, capacity=0)
    with pytest.raises(TypeError):
        vramkit.replay(path, conf=128)


def test_doctor_and_tune_on_a_real_trace():
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[3] / "data" / "traces" / "pytorch_snapshots" / "cs336_silmont2000__mem_snapshot.pickle"
    report = vramkit.tune(path)
    result = report["results"][0]
    assert result["best"]["peak_reserved_bytes"] <= result["recorded"]["peak_reserved_bytes"]
    assert result["lower_bound_bytes"] <= result["best"]["peak_reserved_bytes"]
    # The recommendation replays to the same peak through vramkit.replay.
    again = vramkit.replay(path, conf=result["recommended"])
    device = again["devices"][0]
    assert device["predicted"]["peak_reserved_bytes"] == result["best"]["peak_reserved_bytes"]
    doctor = vramkit.doctor(path)
    text = doctor["devices"][0]["text"]
    assert "PYTORCH_CUDA_ALLOC_CONF" in text and "reserved" in text
    with pytest.raises(ValueError):
        vramkit.tune(path, capacity="24 bananas")


def test_verify_real_traces_shipped_in_the_repository():
    import pathlib
    traces = pathlib.Path(__file__).resolve().parents[3] / "data" / "traces" / "pytorch_snapshots"
    for name in ["cs336_silmont2000__mem_snapshot.pickle", "cs336_silmont2000__memory_forward_fp32_128.pickle"]:
        result = vramkit.verify(traces / name)
        assert result["passed"], (name, result)


def test_unreadable_file_is_a_value_error(tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04 not a snapshot")
    with pytest.raises(ValueError):
        vramkit.verify(bad)


def test_report_writes_the_html_page(tmp_path):
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[3] / "data" / "traces" / "pytorch_snapshots" / "cs336_silmont2000__mem_snapshot.pickle"
    out = tmp_path / "report.html"
    assert vramkit.report(path, out) == str(out)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # The recommendation tune makes for this trace, and both timelines.
    recommended = vramkit.tune(path)["results"][0]["recommended"]
    assert recommended and recommended in page
    assert page.count("<svg") >= 3
    with pytest.raises(ValueError, match="no device 7"):
        vramkit.report(path, tmp_path / "other.html", device=7)
    with pytest.raises(OSError):
        vramkit.report(path, tmp_path / "missing-folder" / "r.html")
    with pytest.raises(TypeError):
        vramkit.report(path, out, device="0")
