"""The live-allocator functions, on the simulated device: what the C ABI
(PyTorch's side) allocates shows up in vramkit's stats, summary and
snapshots in the same process."""

import collections
import pickle
import shutil
import subprocess

import pytest

import vramkit
from conftest import MiB


def test_the_extension_module_is_the_pluggable_allocator_library(cabi):
    # ctypes finds PyTorch's two symbols in the module's own file...
    assert cabi.lib.vramkit_malloc and cabi.lib.vramkit_free
    assert cabi.lib.vramkit_version().decode() == vramkit.__version__
    # ...and they are exported dynamic symbols, as a dlsym needs.
    nm = shutil.which("nm")
    if nm:
        out = subprocess.run([nm, "-D", "--defined-only", vramkit.library_path()], capture_output=True, text=True).stdout
        assert " vramkit_malloc" in out and " vramkit_free" in out


def test_tests_run_on_the_simulated_device():
    assert vramkit.backend() == f"sim:{8 << 30}"


def test_stats_follow_what_the_c_abi_allocates(cabi):
    d = 1
    assert vramkit.memory_allocated(d) == 0
    small = cabi.malloc(1000, d)
    large = cabi.malloc(3 * MiB, d)
    assert small and large
    assert vramkit.memory_allocated(d) == 1024 + 3 * MiB
    # A 2 MiB small-pool segment and a 20 MiB large-pool one, as in PyTorch.
    assert vramkit.memory_reserved(d) == 22 * MiB
    stats = vramkit.memory_stats(d)
    assert stats["requested_bytes.all.current"] == 1000 + 3 * MiB
    assert stats["allocation.all.current"] == 2
    assert stats["segment.large_pool.current"] == 1

    cabi.free(large, 3 * MiB, d)
    assert vramkit.memory_allocated(d) == 1024
    assert vramkit.max_memory_allocated(d) == 1024 + 3 * MiB
    assert vramkit.memory_reserved(d) == 22 * MiB, "freed memory stays cached"
    vramkit.reset_peak_memory_stats(d)
    assert vramkit.max_memory_allocated(d) == 1024
    assert vramkit.max_memory_reserved(d) == 22 * MiB

    vramkit.empty_cache()
    assert vramkit.memory_reserved(d) == 2 * MiB, "the small segment is still in use"
    cabi.free(small, 1000, d)
    vramkit.empty_cache()
    assert vramkit.memory_reserved(d) == 0
    vramkit.reset_accumulated_memory_stats(d)
    assert vramkit.memory_stats(d)["allocation.all.allocated"] == 0


def test_memory_stats_has_pytorchs_keys_sorted():
    stats = vramkit.memory_stats(2)
    assert isinstance(stats, collections.OrderedDict)
    assert list(stats) == sorted(stats)
    for key in [
        "active.all.current",
        "active_bytes.large_pool.peak",
        "allocated_bytes.all.current",
        "allocation.small_pool.allocated",
        "inactive_split_bytes.all.current",
        "requested_bytes.all.freed",
        "reserved_bytes.all.peak",
        "segment.all.current",
        "oversize_allocations.current",
        "oversize_segments.peak",
        "max_split_size",
        "num_alloc_retries",
        "num_device_alloc",
        "num_device_free",
        "num_ooms",
        "num_sync_all_streams",
    ]:
        assert key in stats, key
    assert stats["max_split_size"] == -1
    assert all(isinstance(v, int) for v in stats.values())


def test_memory_summary_is_pytorchs_table(cabi):
    d = 3
    p = cabi.malloc(5 * MiB, d)
    full = vramkit.memory_summary(d)
    short = vramkit.memory_summary(d, abbreviated=True)
    cabi.free(p, 5 * MiB, d)
    assert f"PyTorch CUDA memory summary, device ID {d}" in full
    for row in ["Allocated memory", "Active memory", "Requested memory", "GPU reserved memory", "Non-releasable memory"]:
        assert row in full, row
    assert "from large pool" in full and "from large pool" not in short
    assert len(short) < len(full)


def test_snapshot_has_pytorchs_shape_and_dumps_as_pickle_4(cabi, tmp_path):
    d = 4
    vramkit.record_memory_history(device=d)
    p = cabi.malloc(1 << 20, d, stream=0)
    snap = vramkit.snapshot()
    assert list(snap) == ["segments", "device_traces", "allocator_settings"]
    segments = [s for s in snap["segments"] if s["device"] == d]
    assert len(segments) == 1
    segment = segments[0]
    assert set(segment) == {
        "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
        "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks",
    }
    # 1 MiB is the largest small-pool request: a 2 MiB small segment.
    assert segment["segment_type"] == "small" and segment["segment_pool_id"] == (0, 0)
    assert segment["address"] == p and segment["total_size"] == 2 * MiB
    block = segment["blocks"][0]
    assert set(block) == {"address", "size", "requested_size", "state", "frames"}
    assert (block["address"], block["state"], block["requested_size"]) == (p, "active_allocated", 1 << 20)
    actions = [e["action"] for e in snap["device_traces"][d]]
    assert actions[:2] == ["segment_alloc", "alloc"]
    alloc = snap["device_traces"][d][1]
    assert (alloc["addr"], alloc["size"], alloc["stream"]) == (p, 1 << 20, 0)
    settings = snap["allocator_settings"]
    assert settings["expandable_segments"] is False and settings["max_split_size"] == -1

    path = tmp_path / "snap.pickle"
    vramkit.dump_snapshot(path)
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04", "pickle protocol 4"
    loaded = pickle.loads(data)
    assert [s["address"] for s in loaded["segments"] if s["device"] == d] == [p]

    cabi.free(p, 1 << 20, d)
    vramkit.record_memory_history(False, device=d)
    assert vramkit.snapshot()["device_traces"][d] == []


def test_devices_can_be_named_as_pytorch_names_them(cabi):
    d = 5
    p = cabi.malloc(4096, d)

    class FakeTorchDevice:
        type = "cuda"
        index = d

    assert vramkit.memory_allocated(f"cuda:{d}") == vramkit.memory_allocated(d) == 4096
    assert vramkit.memory_allocated(FakeTorchDevice()) == 4096
    cabi.free(p, 4096, d)
    assert vramkit.memory_allocated("cuda") == vramkit.memory_allocated(None) == vramkit.memory_allocated(0)
    with pytest.raises(ValueError, match="device indices run from 0 to 63"):
        vramkit.memory_stats(64)
    with pytest.raises(ValueError):
        vramkit.memory_summary(-1)
    with pytest.raises(ValueError, match="not a CUDA device"):
        vramkit.memory_stats("cpu")
    with pytest.raises(TypeError):
        vramkit.memory_stats(1.5)


def test_bad_settings_are_refused_with_the_key_named():
    before = vramkit.settings()
    with pytest.raises(ValueError, match="max_split_size_mb"):
        vramkit.set_settings("max_split_size_mb:10")
    with pytest.raises(ValueError, match="no_such_key"):
        vramkit.set_settings("no_such_key:1")
    with pytest.raises(ValueError, match="garbage_collection_threshold"):
        vramkit.set_settings("garbage_collection_threshold:1.5")
    with pytest.raises(TypeError):
        vramkit.set_settings(128)
    assert vramkit.settings() == before, "a refused string changes nothing"


def test_settings_change_only_the_keys_named(python):
    # In a process of its own: settings are process-wide.
    result = python(
        """
        import vramkit
        vramkit.set_settings("garbage_collection_threshold:0.6")
        vramkit.set_settings("max_split_size_mb:256")
        conf = vramkit.settings()
        assert "garbage_collection_threshold:0.6" in conf and "max_split_size_mb:256" in conf, conf
        assert vramkit.memory_stats(0)["max_split_size"] == 256 << 20
        assert vramkit.snapshot()["allocator_settings"]["max_split_size"] == 256 << 20
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_misuse_at_the_c_boundary_is_counted_not_fatal(cabi):
    before = vramkit.boundary_errors()
    cabi.free(0x1234000, 512, 7)  # never handed out
    assert vramkit.boundary_errors() == before + 1


def test_settings_come_from_the_environment(python):
    result = python(
        """
        import vramkit
        print(vramkit.settings())
        """,
        {"VRAMKIT_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": None},
    )
    assert result.returncode == 0, result.stderr
    assert "max_split_size_mb:128" in result.stdout and "expandable_segments:True" in result.stdout


def test_expandable_segments_on_the_simulated_device(python):
    result = python(
        """
        import ctypes, vramkit
        lib = ctypes.CDLL(vramkit.library_path())
        lib.vramkit_malloc.restype = ctypes.c_void_p
        lib.vramkit_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.vramkit_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        a = lib.vramkit_malloc(30 << 20, 0, None)
        b = lib.vramkit_malloc(30 << 20, 0, None)
        assert b == a + (30 << 20), "grows in place"
        assert vramkit.snapshot()["segments"][0]["is_expandable"] is True
        lib.vramkit_free(b, 30 << 20, 0, None)
        lib.vramkit_free(a, 30 << 20, 0, None)
        vramkit.empty_cache()
        assert vramkit.memory_reserved() == 0
        print("ok")
        """,
        {"VRAMKIT_ALLOC_CONF": "expandable_segments:True"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
