/*
 * The simulated GPU's runtime: everything an unmodified torch program calls
 * in libcudart, plus the driver and NVML, in one library. The build installs
 * it as libcudart.so.<major> and links libcuda.so.1, libcuda.so and
 * libnvidia-ml.so.1 to it, so the runtime, the driver (torch's own driver
 * calls, and cudarc's in vramkit's allocator) and NVML see one device.
 *
 * The bookkeeping is vramkit-pytorch's cudart.c, included here whole (its
 * statics, the address ranges above all, are shared): cudaMalloc, the
 * virtual-memory calls, events, streams and copies live there. This file
 * adds what full torch needs beyond PyTorch's allocator:
 *   - kernels: fat-binary registration, launches (no-ops), function
 *     attributes, occupancy, modules, linking, libraries;
 *   - host memory: pinned and registered memory is real host memory,
 *     remembered so pointer attributes can say "host";
 *   - memsets and 2D copies (nothing is written behind a device address);
 *   - the driver calls vramkit's allocator makes through cudarc
 *     (cuMemAlloc_v2, cuMemFree_v2, contexts, events, streams): the same
 *     ranges as cudaMalloc, so a copy into memory vramkit allocated is
 *     recognised as a copy to the device and writes nothing;
 *   - graph capture, IPC, user objects: refused (cudaErrorNotSupported), as
 *     on a GPU whose driver lacks them.
 * Device properties and attributes come from the preset (device.c): the
 * functions of cudart.c that report its fixed device are made weak here.
 */
#include "cudart.c"
#include "nvml.c"
#include "simgpu.h"

#if CUDART_VERSION >= 13000
#pragma weak cudaGetDeviceProperties
#else
#pragma weak get_properties_v1
#pragma weak get_properties_v2
#endif
#pragma weak cudaDeviceGetAttribute
#pragma weak cuDeviceGetAttribute
#pragma weak nvmlSystemGetCudaDriverVersion
#pragma weak nvmlSystemGetCudaDriverVersion_v2

int simgpu_cudart_properties(struct cudaDeviceProp *p, int ordinal) { return device_properties(p, ordinal); }

/* ---- opaque objects: modules, functions, kernels, libraries, links ---- */
/* Distinct, never freed (a few thousand at most), never read by anyone. */
static void *object(void) {
  void *o = calloc(1, 16);
  if (!o) misuse("out of host memory", 0);
  return o;
}

/* Device addresses of __device__ variables and library globals: one
 * reservation, so copies to and from them are device copies (no-ops). */
#define SYMBOL_SPACE (64ull << 20)
static uint64_t symbol_space;
static void *symbol_address(void) {
  INIT();
  LOCKED(if (!symbol_space) symbol_space = take_range(SYMBOL_SPACE, GRANULARITY, RANGE_RESERVE));
  return (void *)(uintptr_t)symbol_space;
}

/* ---- fat binaries and kernel launches (no kernel ever runs) ----------- */
SIMGPU_API(void **, __cudaRegisterFatBinary, (void *fat)) { (void)fat; return (void **)object(); }
SIMGPU_API(void, __cudaRegisterFatBinaryEnd, (void **h)) { (void)h; }
SIMGPU_API(void, __cudaUnregisterFatBinary, (void **h)) { (void)h; }
SIMGPU_API(void, __cudaRegisterFunction, (void **h, const char *host, char *dev, const char *name, int limit, void *tid,
                                          void *bid, void *bdim, void *gdim, int *wsize)) {
  (void)h; (void)host; (void)dev; (void)name; (void)limit; (void)tid; (void)bid; (void)bdim; (void)gdim; (void)wsize;
}
SIMGPU_API(void, __cudaRegisterVar, (void **h, char *host, char *dev, const char *name, int ext, size_t size, int constant,
                                     int global)) {
  (void)h; (void)host; (void)dev; (void)name; (void)ext; (void)size; (void)constant; (void)global;
}
SIMGPU_API(char, __cudaInitModule, (void **h)) { (void)h; return 1; }

/* <<<grid, block, shared, stream>>> pushes a configuration that the launch
 * stub pops again; keep it per thread, as the real runtime does. */
static __thread struct { dim3 grid, block; size_t shared; void *stream; } call;
SIMGPU_API(unsigned, __cudaPushCallConfiguration, (dim3 grid, dim3 block, size_t shared, void *stream)) {
  call.grid = grid; call.block = block; call.shared = shared; call.stream = stream;
  return 0;
}
SIMGPU_API(cudaError_t, __cudaPopCallConfiguration, (dim3 *grid, dim3 *block, size_t *shared, void *stream)) {
  *grid = call.grid; *block = call.block; *shared = call.shared;
  if (stream) *(void **)stream = call.stream;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, __cudaGetKernel, (void **kernel, const void *function)) {
  (void)function;
  *kernel = object();
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, __cudaLaunchKernel, (void *k, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s)) {
  (void)k; (void)g; (void)b; (void)args; (void)shared; (void)s;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLaunchKernel, (const void *f, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s)) {
  (void)f; (void)g; (void)b; (void)args; (void)shared; (void)s;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLaunchCooperativeKernel, (const void *f, dim3 g, dim3 b, void **args, size_t shared,
                                                      cudaStream_t s)) {
  (void)f; (void)g; (void)b; (void)args; (void)shared; (void)s;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLaunchKernelExC, (const void *config, const void *f, void **args)) {
  (void)config; (void)f; (void)args;
  return cudaSuccess;
}
/* Work completes at once here, so a host function runs at once. */
SIMGPU_API(cudaError_t, cudaLaunchHostFunc, (cudaStream_t s, void (*fn)(void *), void *data)) {
  (void)s;
  fn(data);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaStreamAddCallback, (cudaStream_t s, void (*fn)(cudaStream_t, cudaError_t, void *), void *data,
                                                unsigned flags)) {
  (void)flags;
  fn(s, cudaSuccess, data);
  return cudaSuccess;
}

/* ---- function attributes and occupancy -------------------------------- */
/* Blocks of `threads` threads (and `shared` dynamic shared memory) that
 * fit on one SM of the preset: what launch heuristics size grids with. */
static int resident_blocks(int threads, size_t shared) {
  const struct simgpu_device *d = simgpu_device();
  int n = threads > 0 ? d->threads_per_sm / threads : d->blocks_per_sm;
  if (shared > 0 && (int)(d->smem_per_sm / shared) < n) n = (int)(d->smem_per_sm / shared);
  if (n > d->blocks_per_sm) n = d->blocks_per_sm;
  return n;
}
SIMGPU_API(cudaError_t, cudaFuncGetAttributes, (struct cudaFuncAttributes *a, const void *f)) {
  (void)f;
  const struct simgpu_device *d = simgpu_device();
  memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 32;
  a->ptxVersion = d->cc_major * 10 + d->cc_minor;
  a->binaryVersion = a->ptxVersion;
  a->maxDynamicSharedSizeBytes = 49152;
  a->preferredShmemCarveout = -1;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaFuncSetAttribute, (const void *f, int attribute, int value)) {
  (void)f; (void)attribute; (void)value;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaKernelSetAttributeForDevice, (void *k, int attribute, int value, int device)) {
  (void)k; (void)attribute; (void)value; (void)device;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaOccupancyMaxActiveBlocksPerMultiprocessor, (int *n, const void *f, int threads, size_t shared)) {
  (void)f;
  *n = resident_blocks(threads, shared);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, (int *n, const void *f, int threads,
                                                                                  size_t shared, unsigned flags)) {
  (void)f; (void)flags;
  *n = resident_blocks(threads, shared);
  return cudaSuccess;
}

/* ---- libraries (CUDA 12.5+ runtime API for loading code) ------------- */
SIMGPU_API(cudaError_t, cudaLibraryLoadData, (void **lib, const void *code, void *a, void *b, unsigned n, void *c, void *d,
                                              unsigned m)) {
  (void)code; (void)a; (void)b; (void)n; (void)c; (void)d; (void)m;
  *lib = object();
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLibraryLoadFromFile, (void **lib, const char *file, void *a, void *b, unsigned n, void *c,
                                                  void *d, unsigned m)) {
  (void)file; (void)a; (void)b; (void)n; (void)c; (void)d; (void)m;
  *lib = object();
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLibraryUnload, (void *lib)) { (void)lib; return cudaSuccess; }
SIMGPU_API(cudaError_t, cudaLibraryGetKernel, (void **k, void *lib, const char *name)) {
  (void)lib; (void)name;
  *k = object();
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLibraryGetKernelCount, (unsigned *n, void *lib)) { (void)lib; *n = 0; return cudaSuccess; }
SIMGPU_API(cudaError_t, cudaLibraryGetUnifiedFunction, (void **f, void *lib, const char *name)) {
  (void)lib; (void)name;
  *f = object();
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLibraryGetGlobal, (void **p, size_t *bytes, void *lib, const char *name)) {
  (void)lib; (void)name;
  *p = symbol_address();
  if (bytes) *bytes = 8;
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaLibraryGetManaged, (void **p, size_t *bytes, void *lib, const char *name)) {
  return sim_cudaLibraryGetGlobal(p, bytes, lib, name);
}
SIMGPU_API(cudaError_t, cudaGetSymbolAddress, (void **p, const void *symbol)) {
  (void)symbol;
  *p = symbol_address();
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaMemcpyToSymbol, (const void *symbol, const void *src, size_t n, size_t offset, int kind)) {
  (void)symbol; (void)src; (void)n; (void)offset; (void)kind;
  return cudaSuccess;
}

/* ---- host memory: real, remembered ----------------------------------- */
typedef struct { char *start; size_t size; int allocated; } HostRange;
static HostRange *host_ranges;
static size_t n_host_ranges, cap_host_ranges;

static void remember_host(void *p, size_t n, int allocated) {
  pthread_mutex_lock(&lock);
  if (n_host_ranges == cap_host_ranges) {
    cap_host_ranges = cap_host_ranges ? 2 * cap_host_ranges : 64;
    host_ranges = realloc(host_ranges, cap_host_ranges * sizeof(HostRange));
    if (!host_ranges) misuse("out of host memory", 0);
  }
  host_ranges[n_host_ranges++] = (HostRange){p, n ? n : 1, allocated};
  pthread_mutex_unlock(&lock);
}
/* Forgets the range starting at p; whether it was allocated here (-1: unknown). */
static int forget_host(const void *p) {
  int allocated = -1;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < n_host_ranges; i++) {
    if (host_ranges[i].start != p) continue;
    allocated = host_ranges[i].allocated;
    host_ranges[i] = host_ranges[--n_host_ranges];
    break;
  }
  pthread_mutex_unlock(&lock);
  return allocated;
}
static int is_pinned(const void *p) {
  int yes = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < n_host_ranges && !yes; i++)
    yes = (const char *)p >= host_ranges[i].start && (const char *)p < host_ranges[i].start + host_ranges[i].size;
  pthread_mutex_unlock(&lock);
  return yes;
}

SIMGPU_API(cudaError_t, cudaHostAlloc, (void **p, size_t n, unsigned flags)) {
  (void)flags;
  *p = NULL;
  if (posix_memalign(p, 4096, n ? n : 1)) return fail(cudaErrorMemoryAllocation);
  remember_host(*p, n, 1);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaMallocHost, (void **p, size_t n)) { return sim_cudaHostAlloc(p, n, 0); }
SIMGPU_API(cudaError_t, cudaFreeHost, (void *p)) {
  if (!p) return cudaSuccess;
  if (forget_host(p) != 1) misuse("cudaFreeHost of an address cudaHostAlloc did not return", (uintptr_t)p);
  free(p);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaHostRegister, (void *p, size_t n, unsigned flags)) {
  (void)flags;
  remember_host(p, n, 0);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaHostUnregister, (void *p)) {
  if (forget_host(p) != 0) misuse("cudaHostUnregister of an address cudaHostRegister did not get", (uintptr_t)p);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaHostGetDevicePointer, (void **d, void *h, unsigned flags)) {
  (void)flags;
  *d = h;
  return cudaSuccess;
}
/* Managed memory is host memory here: kernels never touch it. */
SIMGPU_API(cudaError_t, cudaMallocManaged, (void **p, size_t n, unsigned flags)) {
  (void)flags;
  *p = calloc(1, n ? n : 1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
SIMGPU_API(cudaError_t, cudaPointerGetAttributes, (struct cudaPointerAttributes *a, const void *p)) {
  memset(a, 0, sizeof *a);
  if (is_device(p)) { a->type = cudaMemoryTypeDevice; a->device = 0; a->devicePointer = (void *)p; }
  else if (is_pinned(p)) { a->type = cudaMemoryTypeHost; a->device = 0; a->hostPointer = (void *)p; a->devicePointer = (void *)p; }
  else { a->type = cudaMemoryTypeUnregistered; a->device = -1; a->hostPointer = (void *)p; }
  return cudaSuccess;
}

/* ---- memsets and 2D copies -------------------------------------------- */
SIMGPU_API(cudaError_t, cudaMemset, (void *p, int value, size_t n)) {
  if (!is_device(p)) memset(p, value, n);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaMemsetAsync, (void *p, int value, size_t n, cudaStream_t s)) {
  (void)s;
  return sim_cudaMemset(p, value, n);
}
SIMGPU_API(cudaError_t, cudaMemcpy2D, (void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                                       int kind)) {
  (void)kind;
  for (size_t row = 0; row < height; row++) copy((char *)d + row * dpitch, (const char *)s + row * spitch, width);
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaMemcpy2DAsync, (void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                                            size_t height, int kind, cudaStream_t st)) {
  (void)st;
  return sim_cudaMemcpy2D(d, dpitch, s, spitch, width, height, kind);
}

/* ---- device, events, streams: what cudart.c leaves out ---------------- */
SIMGPU_API(cudaError_t, cudaDeviceGetPCIBusId, (char *id, int len, int device)) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  snprintf(id, (size_t)len, "0000:01:00.0");
  return cudaSuccess;
}
SIMGPU_API(cudaError_t, cudaProfilerStart, (void)) { return cudaSuccess; }
SIMGPU_API(cudaError_t, cudaProfilerStop, (void)) { return cudaSuccess; }
SIMGPU_API(cudaError_t, cudaEventRecordWithFlags, (cudaEvent_t e, cudaStream_t s, unsigned flags)) {
  (void)flags;
  return cudaEventRecord(e, s);
}
SIMGPU_API(cudaError_t, cudaStreamGetPriority, (cudaStream_t s, int *priority)) { (void)s; *priority = 0; return cudaSuccess; }

/* ---- refused: graph capture, IPC events, user objects ----------------- */
static cudaError_t refuse(void) { return fail(cudaErrorNotSupported); }
#define REFUSED(sym) SIMGPU_API(cudaError_t, sym, (void)) { return refuse(); }
REFUSED(cudaStreamBeginCapture)
REFUSED(cudaStreamBeginCaptureToGraph)
REFUSED(cudaStreamEndCapture)
REFUSED(cudaGraphInstantiate)
REFUSED(cudaGraphInstantiateWithFlags)
REFUSED(cudaGraphLaunch)
REFUSED(cudaGraphGetNodes)
REFUSED(cudaGraphDebugDotPrint)
REFUSED(cudaGraphAddNode)
REFUSED(cudaGraphConditionalHandleCreate)
REFUSED(cudaGraphRetainUserObject)
REFUSED(cudaUserObjectCreate)
REFUSED(cudaIpcGetEventHandle)
REFUSED(cudaIpcOpenEventHandle)
#if CUDART_VERSION >= 13000
REFUSED(cudaStreamUpdateCaptureDependencies)
#endif
#undef REFUSED
SIMGPU_API(cudaError_t, cudaGraphDestroy, (void *g)) { (void)g; return cudaSuccess; }
SIMGPU_API(cudaError_t, cudaGraphExecDestroy, (void *g)) { (void)g; return cudaSuccess; }
SIMGPU_API(cudaError_t, cudaUserObjectRelease, (void *o, unsigned n)) { (void)o; (void)n; return cudaSuccess; }

#include "driver.c"
