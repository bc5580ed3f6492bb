/*
 * The driver API of the simulated GPU, beyond what cudart.c exports:
 * included at the end of runtime.c (it uses cudart.c's ranges, events and
 * copies), so the driver and the runtime are one device.
 *
 * Two callers: torch itself (libcaffe2_nvrtc links libcuda.so.1 for its
 * jiterator and NVRTC kernels: modules, functions, launches, links), and
 * vramkit's own allocator through cudarc (cuInit, the primary context,
 * cuMemAlloc_v2/cuMemFree_v2, the virtual-memory calls, events, streams),
 * which under torch.cuda's CUDAPluggableAllocator hands its addresses to
 * torch: they must be device memory to the runtime's copies too.
 *
 * The context: cudart.c answers cuCtxGetCurrent with (CUcontext)0x1, so
 * the primary context is that same value.
 */
#define PRIMARY_CONTEXT ((CUcontext)0x1)

/* ---- device and context ------------------------------------------------ */
SIMGPU_API(CUresult, cuDeviceGetCount, (int *n)) { INIT(); *n = 1; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuDeviceGetName, (char *name, int len, CUdevice d)) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "%s", simgpu_device()->name);
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuDeviceTotalMem_v2, (size_t *bytes, CUdevice d)) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  INIT();
  *bytes = total_mem;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuDeviceComputeCapability, (int *major, int *minor, CUdevice d)) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  *major = simgpu_device()->cc_major;
  *minor = simgpu_device()->cc_minor;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d)) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  INIT();
  *c = PRIMARY_CONTEXT;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice d)) { return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
SIMGPU_API(CUresult, cuDevicePrimaryCtxRelease, (CUdevice d)) { return sim_cuDevicePrimaryCtxRelease_v2(d); }
SIMGPU_API(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice d)) { return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
SIMGPU_API(CUresult, cuCtxGetDevice, (CUdevice *d)) { *d = 0; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuCtxSynchronize, (void)) { cudaDeviceSynchronize(); return CUDA_SUCCESS; }

/* ---- memory: the ranges cudaMalloc uses -------------------------------- */
/* cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2. */
SIMGPU_API(CUresult, cuMemAlloc_v2, (CUdeviceptr *p, size_t n)) {
  void *at = NULL;
  cudaError_t e = cudaMalloc(&at, n);
  *p = (CUdeviceptr)(uintptr_t)at;
  last_error = cudaSuccess;  /* a driver failure is not the runtime's sticky error */
  return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
SIMGPU_API(CUresult, cuMemFree_v2, (CUdeviceptr p)) { cudaFree((void *)(uintptr_t)p); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s)) { (void)s; return sim_cuMemAlloc_v2(p, n); }
SIMGPU_API(CUresult, cuMemFreeAsync, (CUdeviceptr p, CUstream s)) { (void)s; return sim_cuMemFree_v2(p); }
SIMGPU_API(CUresult, cuMemGetInfo_v2, (size_t *free_bytes, size_t *total_bytes)) {
  cudaMemGetInfo(free_bytes, total_bytes);
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuMemAllocHost_v2, (void **p, size_t n)) {
  return sim_cudaHostAlloc(p, n, 0) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
SIMGPU_API(CUresult, cuMemHostAlloc, (void **p, size_t n, unsigned flags)) {
  return sim_cudaHostAlloc(p, n, flags) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
SIMGPU_API(CUresult, cuMemFreeHost, (void *p)) { sim_cudaFreeHost(p); return CUDA_SUCCESS; }

SIMGPU_API(CUresult, cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n)) {
  copy((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)) { (void)st; return sim_cuMemcpy(d, s, n); }
SIMGPU_API(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr d, const void *s, size_t n)) { return sim_cuMemcpy(d, (CUdeviceptr)(uintptr_t)s, n); }
SIMGPU_API(CUresult, cuMemcpyDtoH_v2, (void *d, CUdeviceptr s, size_t n)) { return sim_cuMemcpy((CUdeviceptr)(uintptr_t)d, s, n); }
SIMGPU_API(CUresult, cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n)) { return sim_cuMemcpy(d, s, n); }
SIMGPU_API(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *s, size_t n, CUstream st)) {
  (void)st;
  return sim_cuMemcpyHtoD_v2(d, s, n);
}
SIMGPU_API(CUresult, cuMemcpyDtoHAsync_v2, (void *d, CUdeviceptr s, size_t n, CUstream st)) {
  (void)st;
  return sim_cuMemcpyDtoH_v2(d, s, n);
}
SIMGPU_API(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)) {
  (void)st;
  return sim_cuMemcpy(d, s, n);
}
SIMGPU_API(CUresult, cuMemsetD8_v2, (CUdeviceptr p, unsigned char v, size_t n)) {
  sim_cudaMemset((void *)(uintptr_t)p, v, n);
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuMemsetD8Async, (CUdeviceptr p, unsigned char v, size_t n, CUstream s)) {
  (void)s;
  return sim_cuMemsetD8_v2(p, v, n);
}
SIMGPU_API(CUresult, cuPointerGetAttribute, (void *data, int attribute, CUdeviceptr p)) {
  int device = is_device((const void *)(uintptr_t)p);
  switch (attribute) {
    case 1: *(CUcontext *)data = PRIMARY_CONTEXT; break;                  /* CONTEXT */
    case 2: *(unsigned *)data = device ? 2 : 1; break;                     /* MEMORY_TYPE: DEVICE / HOST */
    case 3: case 4: *(CUdeviceptr *)data = p; break;                      /* DEVICE / HOST_POINTER */
    case 9: *(int *)data = 0; break;                                      /* DEVICE_ORDINAL */
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* ---- events and streams: the runtime's -------------------------------- */
SIMGPU_API(CUresult, cuEventCreate, (CUevent *e, unsigned flags)) { cudaEventCreateWithFlags(e, flags); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuEventDestroy_v2, (CUevent e)) { cudaEventDestroy(e); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuEventRecord, (CUevent e, CUstream s)) { cudaEventRecord(e, s); return CUDA_SUCCESS; }
/* cudaErrorNotReady and CUDA_ERROR_NOT_READY are both 600. */
SIMGPU_API(CUresult, cuEventQuery, (CUevent e)) { return (CUresult)cudaEventQuery(e); }
SIMGPU_API(CUresult, cuEventSynchronize, (CUevent e)) { cudaEventSynchronize(e); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuEventElapsedTime, (float *ms, CUevent a, CUevent b)) { cudaEventElapsedTime(ms, a, b); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuStreamCreate, (CUstream *s, unsigned flags)) { cudaStreamCreateWithFlags(s, flags); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuStreamCreateWithPriority, (CUstream *s, unsigned flags, int priority)) {
  cudaStreamCreateWithPriority(s, flags, priority);
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuStreamDestroy_v2, (CUstream s)) { (void)s; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuStreamQuery, (CUstream s)) { (void)s; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuStreamSynchronize, (CUstream s)) { cudaStreamSynchronize(s); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned flags)) {
  cudaStreamWaitEvent(s, e, flags);
  return CUDA_SUCCESS;
}

/* ---- code: modules, functions, launches, links ------------------------- */
SIMGPU_API(CUresult, cuModuleLoad, (void **m, const char *file)) { (void)file; *m = object(); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuModuleLoadData, (void **m, const void *image)) { (void)image; *m = object(); return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuModuleLoadDataEx, (void **m, const void *image, unsigned n, void *options, void **values)) {
  (void)image; (void)n; (void)options; (void)values;
  *m = object();
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuModuleUnload, (void *m)) { (void)m; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuModuleGetFunction, (void **f, void *m, const char *name)) {
  (void)m; (void)name;
  *f = object();
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuModuleGetGlobal_v2, (CUdeviceptr *p, size_t *bytes, void *m, const char *name)) {
  (void)m; (void)name;
  *p = (CUdeviceptr)(uintptr_t)symbol_address();
  if (bytes) *bytes = 8;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuFuncGetAttribute, (int *value, int attribute, void *f)) {
  (void)f;
  const struct simgpu_device *d = simgpu_device();
  switch (attribute) {
    case 0: *value = 1024; break;                                  /* MAX_THREADS_PER_BLOCK */
    case 4: *value = 32; break;                                    /* NUM_REGS */
    case 5: case 6: *value = d->cc_major * 10 + d->cc_minor; break; /* PTX, BINARY_VERSION */
    case 8: *value = d->smem_per_block_optin; break;               /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuFuncSetAttribute, (void *f, int attribute, int value)) { (void)f; (void)attribute; (void)value; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuFuncSetCacheConfig, (void *f, int config)) { (void)f; (void)config; return CUDA_SUCCESS; }
SIMGPU_API(CUresult, cuOccupancyMaxActiveBlocksPerMultiprocessor, (int *n, void *f, int threads, size_t shared)) {
  (void)f;
  *n = resident_blocks(threads, shared);
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuLaunchKernel, (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                      unsigned shared, CUstream s, void **params, void **extra)) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s; (void)params; (void)extra;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuLaunchCooperativeKernel, (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                                 unsigned bz, unsigned shared, CUstream s, void **params)) {
  return sim_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, NULL);
}
/* A link yields an empty image, which cuModuleLoadData accepts. */
static char linked_image[16];
SIMGPU_API(CUresult, cuLinkCreate_v2, (unsigned n, void *options, void **values, void **state)) {
  (void)n; (void)options; (void)values;
  *state = object();
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuLinkAddData_v2, (void *state, int type, void *data, size_t size, const char *name, unsigned n,
                                        void *options, void **values)) {
  (void)state; (void)type; (void)data; (void)size; (void)name; (void)n; (void)options; (void)values;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuLinkComplete, (void *state, void **image, size_t *size)) {
  (void)state;
  *image = linked_image;
  *size = sizeof linked_image;
  return CUDA_SUCCESS;
}
SIMGPU_API(CUresult, cuLinkDestroy, (void *state)) { (void)state; return CUDA_SUCCESS; }
/* A TMA descriptor is 128 opaque bytes that only a kernel reads. */
SIMGPU_API(CUresult, cuTensorMapEncodeTiled, (void *map)) { memset(map, 0, 128); return CUDA_SUCCESS; }
