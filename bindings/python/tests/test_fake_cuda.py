"""The package on the CUDA backend without a GPU: vramkit's CudaDevice over
the fake driver of crates/vramkit-fake-cuda (a libcuda.so on bookkeeping
alone that refuses misuse). ci.sh compiles it and names its folder in
VRAMKIT_FAKE_CUDA_DIR; each check runs in a child interpreter that finds
it first on LD_LIBRARY_PATH."""

import os

import pytest

FAKE_DIR = os.environ.get("VRAMKIT_FAKE_CUDA_DIR")

pytestmark = pytest.mark.skipif(
    not FAKE_DIR or not os.path.exists(os.path.join(FAKE_DIR, "libcuda.so")),
    reason="VRAMKIT_FAKE_CUDA_DIR names no compiled fake driver (bindings/python/ci.sh sets it)",
)

LIVE = """
import ctypes, pickle, vramkit
MiB = 1 << 20
assert vramkit.backend() == "cuda", vramkit.backend()
lib = ctypes.CDLL(vramkit.library_path())
lib.vramkit_malloc.restype = ctypes.c_void_p
lib.vramkit_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.vramkit_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
vramkit.record_memory_history()
a = lib.vramkit_malloc(1000, 0, None)
b = lib.vramkit_malloc(30 * MiB, 0, None)
assert a and b
expandable = {expandable}
assert vramkit.memory_allocated() == 1024 + 30 * MiB
# Expandable large pages are 20 MiB: the 30 MiB block maps two of them.
assert vramkit.memory_reserved() == (2 * MiB + 40 * MiB if expandable else 2 * MiB + 30 * MiB), vramkit.memory_reserved()
snap = vramkit.snapshot()
assert snap["segments"] and all(s["is_expandable"] == expandable for s in snap["segments"]), snap["segments"]
actions = [e["action"] for e in snap["device_traces"][0]]
assert actions.count("alloc") == 2, actions
assert ("segment_map" in actions) == expandable and ("segment_alloc" in actions) != expandable, actions
lib.vramkit_free(b, 30 * MiB, 0, None)
lib.vramkit_free(a, 1000, 0, None)
vramkit.empty_cache()
assert vramkit.memory_reserved() == 0
assert "PyTorch CUDA memory summary, device ID 0" in vramkit.memory_summary()
# More than the (fake) GPU has: NULL, PyTorch's message on stderr.
assert not lib.vramkit_malloc(2 << 30, 0, None)
assert vramkit.memory_stats()["num_ooms"] == 1
assert vramkit.boundary_errors() == 0
pickle.loads(pickle.dumps(vramkit.snapshot()))
print("ok")
"""


def fake_env(**knobs):
    env = {
        "VRAMKIT_DEVICE": None,
        "LD_LIBRARY_PATH": FAKE_DIR + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""),
        "FAKE_CUDA_TOTAL_MB": "1024",
    }
    env.update(knobs)
    return env


@pytest.mark.parametrize("conf,expandable", [("", False), ("expandable_segments:True", True)])
def test_live_calls_on_the_cuda_backend(python, conf, expandable):
    result = python(LIVE.format(expandable=expandable), fake_env(VRAMKIT_ALLOC_CONF=conf))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok", result.stdout + result.stderr
    assert "fake-cuda: refused" not in result.stderr, result.stderr
    assert "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 1024.00 MiB" in result.stderr


def test_a_missing_device_is_a_clear_error(python):
    result = python(
        """
        import ctypes, vramkit
        lib = ctypes.CDLL(vramkit.library_path())
        lib.vramkit_malloc.restype = ctypes.c_void_p
        lib.vramkit_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        assert not lib.vramkit_malloc(1000, 1, None)
        print("ok")
        """,
        fake_env(FAKE_CUDA_DEVICES="1"),
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
    assert "vramkit: cannot use device 1: CUDA device 1 does not exist: this machine has 1 CUDA device(s)" in result.stderr
