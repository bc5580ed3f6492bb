/*
 * A fake CUDA runtime (libcudart.so.12 / libcudart.so.13) on bookkeeping
 * alone, so PyTorch's own caching allocator (libc10_cuda.so from a torch
 * wheel) runs on a machine without a GPU.
 *
 * Device memory is books, not memory: cudaMalloc hands out addresses from a
 * fake range (the highest free gap below a fixed top, as the real driver
 * hands addresses out downward; deterministic) and counts bytes against a
 * capacity;
 * nothing is ever read or written behind those addresses. It exports the
 * runtime calls libc10_cuda.so imports (`nm -D --undefined-only`), under the
 * version node of the CUDA major it is compiled for, with structures laid
 * out by that major's own headers (pip packages nvidia-cuda-runtime[-cu12]).
 * The driver's virtual-memory calls that expandable segments make are
 * reached through cudaGetDriverEntryPoint[ByVersion] (torch >= 2.8), and
 * are also exported by name for torch 2.1 to 2.6, which dlopen
 * "libcuda.so.1": the build links that name to this same file, so there is
 * one simulated device behind both.
 *
 * It is strict about misuse, as a test bed must be: freeing an address it
 * never handed out, unmapping what is not exactly one mapping, releasing an
 * unknown handle, freeing a reservation with pages still mapped, or an
 * unknown event all print "fakecudart: misuse: ..." and abort().
 *
 * Knobs (environment, read once):
 *   FAKECUDA_TOTAL      device memory in bytes (default 80 GiB); cudaMalloc
 *                       and cuMemCreate refuse past it
 *   FAKECUDA_EVENTS     "manual": recorded events stay pending until the
 *                       program calls fakecuda_complete_events() (or a
 *                       synchronisation); default: complete at once
 *   FAKECUDA_MAJOR, FAKECUDA_MINOR  compute capability (default 9.0)
 *   FAKECUDA_NAME       device name (default "vramkit fake GPU")
 *   FAKECUDA_SM_COUNT, FAKECUDA_L2_BYTES, FAKECUDA_BUS_WIDTH,
 *   FAKECUDA_THREADS_PER_SM, FAKECUDA_BLOCKS_PER_SM, FAKECUDA_SMEM_PER_SM,
 *   FAKECUDA_SMEM_PER_BLOCK_OPTIN   the card's other properties (an H100's
 *                       by default), which PyTorch reads to pick kernels
 *   FAKECUDA_CONTEXT    bytes used outside PyTorch's allocator (the CUDA
 *                       context, other libraries); they count against the
 *                       capacity and in NVML's per-process report
 *
 * Extra entry points for the driver program: fakecuda_complete_events(),
 * fakecuda_used(), fakecuda_counters().
 *
 * Single device, single thread of bookkeeping behind one mutex.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
/* Exported under `name` whatever the headers' macros make of that name. */
#define EXPORT_AS(name) __asm__(name)
#define GRANULARITY (2ull << 20)
#define TOP 0x7f8000000000ull

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCKED(body) do { pthread_mutex_lock(&lock); body; pthread_mutex_unlock(&lock); } while (0)

static void misuse(const char *what, unsigned long long value) {
  fprintf(stderr, "fakecudart: misuse: %s (%#llx)\n", what, value);
  fflush(stderr);
  abort();
}

/* ---- knobs ---------------------------------------------------------- */
static unsigned long long total_mem = 80ull << 30;
static int manual_events = 0;
static int cc_major = 9, cc_minor = 0;
static int sm_count = 132, l2_bytes = 52428800, bus_width = 5120, threads_per_sm = 2048, blocks_per_sm = 32;
static int smem_per_sm = 233472, smem_per_block_optin = 232448;
static unsigned long long context_bytes;
static char device_name[256] = "vramkit fake GPU";

static void init_once(void) {
  const char *t = getenv("FAKECUDA_TOTAL");
  if (t && *t) total_mem = strtoull(t, NULL, 10);
  const char *e = getenv("FAKECUDA_EVENTS");
  manual_events = e && strcmp(e, "manual") == 0;
  const char *ma = getenv("FAKECUDA_MAJOR"), *mi = getenv("FAKECUDA_MINOR");
  if (ma && *ma) cc_major = atoi(ma);
  if (mi && *mi) cc_minor = atoi(mi);
  const char *n = getenv("FAKECUDA_NAME");
  if (n && *n) snprintf(device_name, sizeof device_name, "%s", n);
  const struct { const char *name; int *value; } knobs[] = {
    {"FAKECUDA_SM_COUNT", &sm_count}, {"FAKECUDA_L2_BYTES", &l2_bytes}, {"FAKECUDA_BUS_WIDTH", &bus_width},
    {"FAKECUDA_THREADS_PER_SM", &threads_per_sm}, {"FAKECUDA_BLOCKS_PER_SM", &blocks_per_sm},
    {"FAKECUDA_SMEM_PER_SM", &smem_per_sm}, {"FAKECUDA_SMEM_PER_BLOCK_OPTIN", &smem_per_block_optin},
  };
  for (size_t i = 0; i < sizeof knobs / sizeof *knobs; i++) {
    const char *v = getenv(knobs[i].name);
    if (v && *v) *knobs[i].value = atoi(v);
  }
  const char *c = getenv("FAKECUDA_CONTEXT");
  if (c && *c) context_bytes = strtoull(c, NULL, 10);
}
static pthread_once_t once = PTHREAD_ONCE_INIT;
#define INIT() pthread_once(&once, init_once)

/* ---- the address space: sorted [start, end) ranges in use ------------- */
enum { RANGE_MALLOC = 0, RANGE_RESERVE = 1 };
typedef struct { uint64_t start, end; int kind; } Range;
static Range *ranges;
static size_t n_ranges, cap_ranges;
static unsigned long long used_mem;

/* Counters for tests: cudaMalloc, cudaFree, cuMemCreate, cuMemRelease,
 * cuMemMap, cuMemUnmap, cuMemAddressReserve, cuMemAddressFree, refusals. */
static unsigned long long counters[9];
enum { C_MALLOC, C_FREE, C_CREATE, C_RELEASE, C_MAP, C_UNMAP, C_RESERVE, C_ADDRESS_FREE, C_REFUSED };

/* Top down, as the real driver hands out addresses: the highest aligned gap
 * below TOP that fits. PyTorch breaks best-fit ties between equal free
 * blocks by address, so the direction decides which segment a block lands
 * in. */
static uint64_t take_range(uint64_t size, uint64_t align, int kind) {
  uint64_t hi = TOP;
  size_t i = n_ranges;
  for (; i > 0; i--) {
    uint64_t at = (hi - size) / align * align;
    if (at >= ranges[i - 1].end) break;
    hi = ranges[i - 1].start;
  }
  uint64_t at = (hi - size) / align * align;
  if (n_ranges == cap_ranges) {
    cap_ranges = cap_ranges ? cap_ranges * 2 : 64;
    ranges = realloc(ranges, cap_ranges * sizeof(Range));
    if (!ranges) misuse("out of host memory", 0);
  }
  memmove(&ranges[i + 1], &ranges[i], (n_ranges - i) * sizeof(Range));
  ranges[i] = (Range){at, at + size, kind};
  n_ranges++;
  return at;
}

static Range *find_range(uint64_t addr) {
  size_t lo = 0, hi = n_ranges;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (ranges[mid].end <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo < n_ranges && ranges[lo].start <= addr ? &ranges[lo] : NULL;
}

static void drop_range(Range *r) {
  size_t i = (size_t)(r - ranges);
  memmove(&ranges[i], &ranges[i + 1], (n_ranges - i - 1) * sizeof(Range));
  n_ranges--;
}

/* Whether `p` lies in memory this device handed out (a cudaMalloc range or
 * a reservation): a copy from there reads zeros. */
static int is_device(const void *p) {
  int yes;
  LOCKED(yes = find_range((uint64_t)(uintptr_t)p) != NULL);
  return yes;
}

/* ---- events ----------------------------------------------------------- */
typedef struct Event { struct Event *next; int pending; cudaStream_t stream; } Event;
static Event *events;

EXPORT void fakecuda_complete_events(void) {
  LOCKED(for (Event *e = events; e; e = e->next) e->pending = 0);
}
static void complete_stream(cudaStream_t s) {
  LOCKED(for (Event *e = events; e; e = e->next) if (e->stream == s) e->pending = 0);
}
static Event *known_event(cudaEvent_t h) {
  for (Event *e = events; e; e = e->next) if (e == (Event *)h) return e;
  misuse("unknown event", (unsigned long long)(uintptr_t)h);
  return NULL;
}

EXPORT unsigned long long fakecuda_used(void) { unsigned long long u; LOCKED(u = used_mem); return u; }
EXPORT const unsigned long long *fakecuda_counters(void) { return counters; }

/* ---- device ----------------------------------------------------------- */
static cudaError_t last_error = cudaSuccess;
static int current_device = 0;

static cudaError_t fail(cudaError_t e) { last_error = e; return e; }

EXPORT cudaError_t cudaGetDeviceCount(int *count) { INIT(); *count = 1; return cudaSuccess; }
EXPORT cudaError_t cudaGetDevice(int *d) { *d = current_device; return cudaSuccess; }
EXPORT cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
EXPORT cudaError_t cudaDriverGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
EXPORT cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }

static cudaError_t device_properties(struct cudaDeviceProp *p, int d) {
  INIT();
  if (d != 0) return fail(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", device_name);
  p->totalGlobalMem = total_mem;
  p->major = cc_major;
  p->minor = cc_minor;
  p->multiProcessorCount = sm_count;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = threads_per_sm;
  p->maxBlocksPerMultiProcessor = blocks_per_sm;
  p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
  p->sharedMemPerBlock = 49152;
  p->sharedMemPerBlockOptin = smem_per_block_optin;
  p->sharedMemPerMultiprocessor = smem_per_sm;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->l2CacheSize = l2_bytes;
  p->memoryBusWidth = bus_width;
  p->totalConstMem = 65536;
  p->memPitch = 2147483647;
  p->textureAlignment = 512;
  p->concurrentKernels = 1;
  p->unifiedAddressing = 1;
  p->managedMemory = 1;
  p->pciBusID = 1;
  p->asyncEngineCount = 2;
  return cudaSuccess;
}
#if CUDART_VERSION >= 13000
EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) { return device_properties(p, d); }
#else
EXPORT cudaError_t get_properties_v2(struct cudaDeviceProp *p, int d) EXPORT_AS("cudaGetDeviceProperties_v2");
cudaError_t get_properties_v2(struct cudaDeviceProp *p, int d) { return device_properties(p, d); }
EXPORT cudaError_t get_properties_v1(struct cudaDeviceProp *p, int d) EXPORT_AS("cudaGetDeviceProperties");
cudaError_t get_properties_v1(struct cudaDeviceProp *p, int d) { return device_properties(p, d); }
#endif

EXPORT cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  struct cudaDeviceProp p;
  cudaError_t e = device_properties(&p, d);
  if (e != cudaSuccess) return e;
  switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrWarpSize: *v = p.warpSize; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *v = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *v = p.maxGridSize[2]; break;
    case cudaDevAttrMaxBlockDimX: *v = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *v = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *v = p.maxThreadsDim[2]; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceSynchronize(void) { fakecuda_complete_events(); return cudaSuccess; }
EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int a, int b) { (void)a; (void)b; *can = 0; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) { (void)peer; (void)flags; return fail(cudaErrorInvalidDevice); }
EXPORT cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

static const char *error_name(int e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}
static const char *error_string(int e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}
EXPORT const char *cudaGetErrorName(cudaError_t e) { return error_name(e); }
EXPORT const char *cudaGetErrorString(cudaError_t e) { return error_string(e); }

/* ---- cudaMalloc / cudaFree ------------------------------------------- */
EXPORT cudaError_t cudaMalloc(void **p, size_t size) {
  INIT();
  uint64_t rounded = (size + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
  if (rounded == 0) { *p = NULL; return cudaSuccess; }
  int refused;
  LOCKED(
    refused = context_bytes + used_mem + rounded > total_mem;
    if (refused) counters[C_REFUSED]++;
    else { *p = (void *)(uintptr_t)take_range(rounded, GRANULARITY, RANGE_MALLOC); used_mem += rounded; counters[C_MALLOC]++; }
  );
  if (refused) { *p = NULL; return fail(cudaErrorMemoryAllocation); }
  return cudaSuccess;
}
EXPORT cudaError_t cudaFree(void *p) {
  if (p == NULL) return cudaSuccess;
  LOCKED(
    Range *r = find_range((uint64_t)(uintptr_t)p);
    if (!r || r->start != (uint64_t)(uintptr_t)p || r->kind != RANGE_MALLOC) misuse("cudaFree of an address cudaMalloc did not return", (uintptr_t)p);
    used_mem -= r->end - r->start;
    counters[C_FREE]++;
    drop_range(r);
  );
  return cudaSuccess;
}
EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) { (void)s; return cudaMalloc(p, size); }
EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { (void)s; return cudaFree(p); }
EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
  INIT();
  LOCKED(*free_b = total_mem - context_bytes - used_mem; *total_b = total_mem);
  return cudaSuccess;
}

/* ---- events and streams ----------------------------------------------- */
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  (void)flags;
  Event *ev = calloc(1, sizeof(Event));
  if (!ev) misuse("out of host memory", 0);
  LOCKED(ev->next = events; events = ev);
  *e = (cudaEvent_t)ev;
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t h) {
  LOCKED(
    Event **at = &events;
    while (*at && *at != (Event *)h) at = &(*at)->next;
    if (!*at) misuse("cudaEventDestroy of an unknown event", (uintptr_t)h);
    *at = (*at)->next;
  );
  free(h);
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t s) {
  LOCKED(Event *e = known_event(h); e->pending = manual_events; e->stream = s);
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventQuery(cudaEvent_t h) {
  int pending;
  LOCKED(pending = known_event(h)->pending);
  return pending ? cudaErrorNotReady : cudaSuccess;
}
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t h) { LOCKED(known_event(h)->pending = 0); return cudaSuccess; }
EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 0; return cudaSuccess; }

static uintptr_t next_stream = 0x1000;
EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int prio) {
  (void)flags; (void)prio;
  LOCKED(*s = (cudaStream_t)(next_stream += 0x10));
  return cudaSuccess;
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) { return cudaStreamCreateWithPriority(s, flags, 0); }
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { complete_stream(s); return cudaSuccess; }
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f) { (void)s; (void)f; LOCKED(known_event(e)); return cudaSuccess; }
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) { (void)s; *st = cudaStreamCaptureStatusNone; return cudaSuccess; }
EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m) { (void)m; return cudaSuccess; }

/* Stream capture is never active: every capture query answers "none". The
 * signature differs by major (and by name within 12), so they are defined
 * with the widest parameter list and exported under each name. */
static cudaError_t capture_info(enum cudaStreamCaptureStatus *st, unsigned long long *id, void **g, const void **deps,
                                const void **edges, size_t *n) {
  *st = cudaStreamCaptureStatusNone;
  if (id) *id = 0;
  if (g) *g = NULL;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (n) *n = 0;
  return cudaSuccess;
}
#if CUDART_VERSION >= 13000
EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id,
                                            cudaGraph_t *g, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges, size_t *n) {
  (void)s;
  return capture_info(st, id, (void **)g, (const void **)deps, (const void **)edges, n);
}
EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *d, cudaGraphEdgeData *e, size_t *c) {
  (void)node; (void)d; (void)e;
  if (c) *c = 0;
  return cudaSuccess;
}
#else
EXPORT cudaError_t capture_info_v1(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id) EXPORT_AS("cudaStreamGetCaptureInfo");
cudaError_t capture_info_v1(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id) {
  (void)s;
  return capture_info(st, id, NULL, NULL, NULL, NULL);
}
EXPORT cudaError_t capture_info_v2(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id, cudaGraph_t *g,
                                   const cudaGraphNode_t **deps, size_t *n) EXPORT_AS("cudaStreamGetCaptureInfo_v2");
cudaError_t capture_info_v2(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id, cudaGraph_t *g,
                            const cudaGraphNode_t **deps, size_t *n) {
  (void)s;
  return capture_info(st, id, (void **)g, (const void **)deps, NULL, n);
}
EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *d, size_t *c) {
  (void)node; (void)d;
  if (c) *c = 0;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t c) {
  (void)n; (void)g; (void)d; (void)c;
  return fail(cudaErrorNotSupported);
}
EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t n, enum cudaGraphNodeType *t) { (void)n; (void)t; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *d, size_t n, unsigned int f) {
  (void)s; (void)d; (void)n; (void)f;
  return fail(cudaErrorNotSupported);
}
#endif

/* ---- copies: nothing lives behind a device address ------------------ */
static cudaError_t copy(void *d, const void *s, size_t n) {
  int fd = is_device(d), fs = is_device(s);
  if (!fd && fs) memset(d, 0, n);
  else if (!fd && !fs) memmove(d, s, n);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { (void)k; return copy(d, s, n); }
EXPORT cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { (void)k; (void)st; return copy(d, s, n); }
EXPORT cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st) {
  (void)d; (void)dd; (void)s; (void)sd; (void)n; (void)st;
  return cudaSuccess;
}

/* ---- what the caching allocator never needs here ---------------------- */
EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) { (void)h; (void)p; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int f) { (void)p; (void)h; (void)f; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaIpcCloseMemHandle(void *p) { (void)p; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int d) { (void)p; (void)d; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v) { (void)p; (void)a; (void)v; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v) { (void)p; (void)a; (void)v; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t p, const struct cudaMemAccessDesc *d, size_t n) { (void)p; (void)d; (void)n; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t p, size_t n) { (void)p; (void)n; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int d, enum cudaGraphMemAttributeType a, void *v) { (void)d; (void)a; (void)v; return fail(cudaErrorNotSupported); }
EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int d, enum cudaGraphMemAttributeType a, void *v) { (void)d; (void)a; (void)v; return fail(cudaErrorNotSupported); }

/* ---- the driver's virtual-memory calls (expandable segments) ----------- */
typedef struct Handle { struct Handle *next; uint64_t size; uint64_t mapped_at; } Handle;
static Handle *handles;
typedef struct Mapping { struct Mapping *next; uint64_t at, size; Handle *handle; } Mapping;
static Mapping *mappings;

static Handle *known_handle(CUmemGenericAllocationHandle h) {
  for (Handle *x = handles; x; x = x->next) if (x == (Handle *)(uintptr_t)h) return x;
  misuse("unknown allocation handle", (unsigned long long)h);
  return NULL;
}

EXPORT CUresult cuInit(unsigned int flags) { (void)flags; INIT(); return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = CUDART_VERSION; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE; *d = 0; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc_minor; break;
    default: return cudaDeviceGetAttribute(v, (enum cudaDeviceAttr)a, d) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  }
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags f) {
  (void)p; (void)f;
  *g = GRANULARITY;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long f) {
  (void)addr; (void)f;
  INIT();
  if (size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
  LOCKED(*p = take_range(size, align > GRANULARITY ? align : GRANULARITY, RANGE_RESERVE); counters[C_RESERVE]++);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  LOCKED(
    Range *r = find_range(p);
    if (!r || r->start != p || r->kind != RANGE_RESERVE || r->end - r->start != size) misuse("cuMemAddressFree of what cuMemAddressReserve did not return", p);
    for (Mapping *m = mappings; m; m = m->next) if (m->at >= r->start && m->at < r->end) misuse("cuMemAddressFree with pages still mapped", m->at);
    drop_range(r);
    counters[C_ADDRESS_FREE]++;
  );
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p, unsigned long long f) {
  (void)p; (void)f;
  INIT();
  if (size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  LOCKED(
    if (context_bytes + used_mem + size > total_mem) { r = CUDA_ERROR_OUT_OF_MEMORY; counters[C_REFUSED]++; }
    else {
      Handle *x = calloc(1, sizeof(Handle));
      if (!x) misuse("out of host memory", 0);
      x->size = size; x->next = handles; handles = x;
      used_mem += size; counters[C_CREATE]++;
      *h = (CUmemGenericAllocationHandle)(uintptr_t)x;
    }
  );
  return r;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  LOCKED(
    Handle *x = known_handle(h);
    if (x->mapped_at) misuse("cuMemRelease of a handle still mapped (vramkit's fake frees at release)", x->mapped_at);
    Handle **at = &handles;
    while (*at != x) at = &(*at)->next;
    *at = x->next;
    used_mem -= x->size;
    counters[C_RELEASE]++;
    free(x);
  );
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long f) {
  (void)f;
  LOCKED(
    Handle *x = known_handle(h);
    Range *r = find_range(p);
    if (!r || r->kind != RANGE_RESERVE || p + size > r->end) misuse("cuMemMap outside a reservation", p);
    if (offset != 0 || size != x->size) misuse("cuMemMap of part of a handle", p);
    if (x->mapped_at) misuse("cuMemMap of a handle already mapped", x->mapped_at);
    for (Mapping *m = mappings; m; m = m->next) if (p < m->at + m->size && m->at < p + size) misuse("cuMemMap over a mapping", p);
    Mapping *m = calloc(1, sizeof(Mapping));
    if (!m) misuse("out of host memory", 0);
    m->at = p; m->size = size; m->handle = x; m->next = mappings; mappings = m;
    x->mapped_at = p;
    counters[C_MAP]++;
  );
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  LOCKED(
    Mapping **at = &mappings;
    while (*at && !((*at)->at == p && (*at)->size == size)) at = &(*at)->next;
    if (!*at) misuse("cuMemUnmap of what is not exactly one mapping", p);
    Mapping *m = *at;
    *at = m->next;
    m->handle->mapped_at = 0;
    counters[C_UNMAP]++;
    free(m);
  );
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n) { (void)p; (void)size; (void)d; (void)n; return CUDA_SUCCESS; }
EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
  *s = e == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : e == CUDA_ERROR_INVALID_VALUE ? "invalid argument" : "fake driver error";
  return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
  *s = e == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : e == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)0x1; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) { (void)d; if (flags) *flags = 0; if (active) *active = 1; return CUDA_SUCCESS; }
/* cuda.h 12 renames cuStreamWriteValue32 to _v2; the driver exports both. */
EXPORT CUresult stream_write_value32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) EXPORT_AS("cuStreamWriteValue32");
CUresult stream_write_value32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f) { (void)s; (void)a; (void)v; (void)f; return CUDA_SUCCESS; }
static CUresult unsupported(void) { return CUDA_ERROR_NOT_SUPPORTED; }
/* The rest of what PyTorch's driver table looks up: IPC, multicast, green
 * contexts, logs. torch 2.1 to 2.6 resolve every name when they dlopen the
 * driver, so each must exist; none is used by the allocator here, and each
 * answers "not supported". */
#define UNSUPPORTED(n) EXPORT CUresult stub_##n(void) EXPORT_AS(#n); CUresult stub_##n(void) { return CUDA_ERROR_NOT_SUPPORTED; }
UNSUPPORTED(cuMemExportToShareableHandle)
UNSUPPORTED(cuMemImportFromShareableHandle)
UNSUPPORTED(cuMemGetAddressRange)
UNSUPPORTED(cuMemRetainAllocationHandle)
UNSUPPORTED(cuMemGetAllocationPropertiesFromHandle)
UNSUPPORTED(cuMemsetD32Async)
UNSUPPORTED(cuMulticastAddDevice)
UNSUPPORTED(cuMulticastBindMem)
UNSUPPORTED(cuMulticastCreate)
UNSUPPORTED(cuMulticastUnbind)
UNSUPPORTED(cuCtxPushCurrent)
UNSUPPORTED(cuCtxPopCurrent)
UNSUPPORTED(cuCtxFromGreenCtx)
UNSUPPORTED(cuGreenCtxCreate)
UNSUPPORTED(cuGreenCtxDestroy)
UNSUPPORTED(cuGreenCtxStreamCreate)
UNSUPPORTED(cuDevResourceGenerateDesc)
UNSUPPORTED(cuDevSmResourceSplitByCount)
UNSUPPORTED(cuDeviceGetDevResource)
UNSUPPORTED(cuLogsRegisterCallback)
UNSUPPORTED(cuLogsUnregisterCallback)
#undef UNSUPPORTED

static void *driver_entry(const char *sym) {
#define E(n) if (strcmp(sym, #n) == 0) return (void *)n;
  E(cuInit) E(cuDriverGetVersion) E(cuDeviceGet) E(cuDeviceGetAttribute) E(cuMemGetAllocationGranularity)
  E(cuMemAddressReserve) E(cuMemAddressFree) E(cuMemCreate) E(cuMemRelease) E(cuMemMap) E(cuMemUnmap) E(cuMemSetAccess)
  E(cuGetErrorString) E(cuGetErrorName) E(cuCtxGetCurrent) E(cuCtxSetCurrent) E(cuDevicePrimaryCtxGetState)
  if (strcmp(sym, "cuStreamWriteValue32") == 0) return (void *)stream_write_value32;
#undef E
  return (void *)unsupported;
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int ver, unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *st) {
  (void)ver; (void)flags;
  *fn = driver_entry(sym);
  if (st) *st = cudaDriverEntryPointSuccess;
  return cudaSuccess;
}
#if CUDART_VERSION < 13000
EXPORT cudaError_t entry_point_v1(const char *sym, void **fn, unsigned long long flags, enum cudaDriverEntryPointQueryResult *st)
    EXPORT_AS("cudaGetDriverEntryPoint");
cudaError_t entry_point_v1(const char *sym, void **fn, unsigned long long flags, enum cudaDriverEntryPointQueryResult *st) {
  return cudaGetDriverEntryPointByVersion(sym, fn, CUDART_VERSION, flags, st);
}
#endif
