"""Smoke test of libvramkit_capi under PyTorch, for a machine with a GPU.

    cargo build --release -p vramkit-capi
    python crates/vramkit-capi/scripts/pytorch_smoke.py target/release/libvramkit_capi.so

Swaps PyTorch's allocator for vramkit's, runs a few tensor operations on two
streams, then reads vramkit's stats, summary and snapshot through ctypes.
Exits non-zero on the first failed check.
"""

import ctypes
import json
import sys

import torch

lib_path = sys.argv[1] if len(sys.argv) > 1 else "target/release/libvramkit_capi.so"
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "vramkit_malloc", "vramkit_free")
torch.cuda.memory.change_current_allocator(alloc)

lib = ctypes.CDLL(lib_path)
lib.vramkit_memory_stats.restype = ctypes.c_void_p
lib.vramkit_memory_summary.restype = ctypes.c_void_p
lib.vramkit_snapshot.restype = ctypes.c_void_p
lib.vramkit_boundary_errors.restype = ctypes.c_uint64
lib.vramkit_free_string.argtypes = [ctypes.c_void_p]
lib.vramkit_record_history.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t]


def take(ptr):
    assert ptr, "vramkit returned NULL"
    text = ctypes.string_at(ptr).decode()
    lib.vramkit_free_string(ptr)
    return text


assert lib.vramkit_record_history(0, 1, 0) == 0
x = torch.randn(1024, 1024, device="cuda")
y = (x @ x).relu()
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    z = torch.empty(4 << 20, device="cuda")
    z.fill_(1.0)
z.record_stream(torch.cuda.current_stream())
total = float(y.sum()) + float(z.sum())
del x, y, z
torch.cuda.synchronize()

stats = json.loads(take(lib.vramkit_memory_stats(0)))
print(take(lib.vramkit_memory_summary(0, 0)))
snapshot = json.loads(take(lib.vramkit_snapshot()))
actions = {e["action"] for e in snapshot["device_traces"][0]}
print("allocations:", stats["allocation.all.allocated"], "reserved:", stats["reserved_bytes.all.current"])
assert stats["allocation.all.allocated"] >= 3, stats
assert stats["allocated_bytes.all.current"] == 0, stats
assert {"segment_alloc", "alloc", "free_requested"} <= actions, actions
assert lib.vramkit_boundary_errors() == 0
lib.vramkit_empty_cache()
assert json.loads(take(lib.vramkit_memory_stats(0)))["reserved_bytes.all.current"] == 0
print("PYTORCH SMOKE OK", total)
