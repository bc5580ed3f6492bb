"""Drives the simulated runtime through ctypes, as vramkit's allocator does
(the driver API, which cudarc opens as libcuda.so) and as PyTorch does (the
runtime API), and prints what it saw as one JSON line.
usage: runtime_probe.py CUDA_MAJOR"""
import ctypes, json, sys
from ctypes import byref, c_int, c_size_t, c_uint, c_ulonglong, c_void_p

major = sys.argv[1]
rt = ctypes.CDLL("libcudart.so." + major)
drv = ctypes.CDLL("libcuda.so")
nvml = ctypes.CDLL("libnvidia-ml.so.1")
report = {}

def check(what, status):
    if status != 0:
        raise SystemExit(f"{what} returned {status}")

address = lambda f: ctypes.cast(f, c_void_p).value
report["one_library"] = address(rt.cudaMalloc) == address(drv.cudaMalloc) == address(nvml.cudaMalloc)

check("cuInit", drv.cuInit(0))
context = c_void_p()
check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(byref(context), 0))
check("cuCtxSetCurrent", drv.cuCtxSetCurrent(context))
current = c_void_p()
check("cuCtxGetCurrent", drv.cuCtxGetCurrent(byref(current)))
report["primary_context_is_current"] = current.value == context.value

def used():
    free, total = c_size_t(), c_size_t()
    check("cudaMemGetInfo", rt.cudaMemGetInfo(byref(free), byref(total)))
    return total.value - free.value

# Memory from the driver is device memory to the runtime: a host-to-device
# copy into it writes nothing, a device-to-host copy reads zeros.
p = c_ulonglong()
check("cuMemAlloc_v2", drv.cuMemAlloc_v2(byref(p), c_size_t(64 << 20)))
report["used_after_cuMemAlloc"] = used()
host = ctypes.create_string_buffer(b"x" * 4096)
check("cudaMemcpy H2D", rt.cudaMemcpy(c_void_p(p.value), host, c_size_t(4096), 1))
class PointerAttributes(ctypes.Structure):
    _fields_ = [("type", c_int), ("device", c_int), ("devicePointer", c_void_p), ("hostPointer", c_void_p)]
attributes = PointerAttributes()
check("cudaPointerGetAttributes", rt.cudaPointerGetAttributes(byref(attributes), c_void_p(p.value)))
report["pointer_type"] = attributes.type
back = ctypes.create_string_buffer(b"y" * 16)
check("cudaMemcpy D2H", rt.cudaMemcpy(back, c_void_p(p.value), c_size_t(16), 2))
report["read_back"] = back.raw[:16].hex()
check("cuMemFree_v2", drv.cuMemFree_v2(c_ulonglong(p.value)))
report["used_after_cuMemFree"] = used()

# Expandable segments' calls, and a copy into the mapped range.
va, handle = c_ulonglong(), c_ulonglong()
check("cuMemAddressReserve", drv.cuMemAddressReserve(byref(va), c_size_t(4 << 20), c_size_t(0), c_ulonglong(0), c_ulonglong(0)))
check("cuMemCreate", drv.cuMemCreate(byref(handle), c_size_t(2 << 20), None, c_ulonglong(0)))
check("cuMemMap", drv.cuMemMap(c_ulonglong(va.value), c_size_t(2 << 20), c_size_t(0), c_ulonglong(handle.value), c_ulonglong(0)))
check("cudaMemcpy H2D (mapped)", rt.cudaMemcpy(c_void_p(va.value), host, c_size_t(4096), 1))
report["used_while_mapped"] = used()
check("cuMemUnmap", drv.cuMemUnmap(c_ulonglong(va.value), c_size_t(2 << 20)))
check("cuMemRelease", drv.cuMemRelease(c_ulonglong(handle.value)))
check("cuMemAddressFree", drv.cuMemAddressFree(c_ulonglong(va.value), c_size_t(4 << 20)))

total = c_size_t()
check("cuDeviceTotalMem_v2", drv.cuDeviceTotalMem_v2(byref(total), 0))
report["total_bytes"] = total.value
report["oversized_cuMemAlloc"] = drv.cuMemAlloc_v2(byref(p), c_size_t(total.value + 1))

attributes = {"sm_count": 16, "cc_major": 75, "cc_minor": 76, "l2_bytes": 38, "threads_per_sm": 39, "bus_width": 37}
for name, number in attributes.items():
    runtime_value, driver_value = c_int(), c_int()
    check("cudaDeviceGetAttribute", rt.cudaDeviceGetAttribute(byref(runtime_value), number, 0))
    check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(byref(driver_value), number, 0))
    report[name] = runtime_value.value if runtime_value.value == driver_value.value else [runtime_value.value, driver_value.value]
name = ctypes.create_string_buffer(256)
check("cuDeviceGetName", drv.cuDeviceGetName(name, 256, 0))
report["name"] = name.value.decode()

check("nvmlInit_v2", nvml.nvmlInit_v2())
device = c_void_p()
check("nvmlDeviceGetHandleByIndex_v2", nvml.nvmlDeviceGetHandleByIndex_v2(c_uint(0), byref(device)))
check("nvmlDeviceGetName", nvml.nvmlDeviceGetName(device, name, c_uint(96)))
report["nvml_name"] = name.value.decode()
print(json.dumps(report))
