/*
 * A fake CUDA driver: the subset of libcuda's API that vramkit-cuda calls,
 * on bookkeeping alone (no memory behind the addresses, no kernels), so the
 * CUDA code paths run and are checked on machines without a GPU.
 *
 * It is strict where the real driver is documented to be: a call without a
 * current context, a cuMemUnmap that is not exactly one mapping, a
 * cuMemAddressFree of a range with pages still mapped, an unknown handle,
 * a size off the granularity all fail, and each such refusal is printed to
 * stderr ("fake-cuda: refused ...") and counted. At exit it writes what was
 * still alive (allocations, reservations, mappings, handles, events,
 * context retains) to the file named by FAKE_CUDA_REPORT, one `key value`
 * per line, so a test can prove nothing leaked.
 *
 * Knobs (environment, read at cuInit):
 *   FAKE_CUDA_TOTAL_MB     memory per device, MiB (default 1024)
 *   FAKE_CUDA_DEVICES      device count (default 1)
 *   FAKE_CUDA_VMM          1: virtual memory management supported (default 1)
 *   FAKE_CUDA_GRANULARITY  allocation granularity in bytes (default 2 MiB)
 *   FAKE_CUDA_EVENT_LAG    cuEventQuery answers NOT_READY this many times
 *                          per recorded event before SUCCESS (default 0)
 *   FAKE_CUDA_REPORT       where to write the exit report
 *
 * Built by vramkit-fake-cuda's `build()` as libcuda.so; loaded by cudarc
 * through LD_LIBRARY_PATH. All state is behind one mutex; the current
 * context is per thread, as in CUDA.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUevent;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

/* The layouts cudarc (CUDA 12.8 headers) passes. */
typedef struct {
    int type;
    int id;
} CUmemLocation;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;
typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

#define ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define ALLOCATION_TYPE_PINNED 1
#define LOCATION_TYPE_DEVICE 1
#define ACCESS_READWRITE 3
#define MAX_DEVICES 8
#define MAX_ITEMS 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread CUcontext current_context;

static int initialized;
static int device_count = 1;
static int vmm_supported = 1;
static unsigned long long total_bytes = 1024ull << 20;
static unsigned long long granularity = 2ull << 20;
static int event_lag;

/* One primary context per device; the handle is the address of its slot. */
static struct {
    int retains;
} contexts[MAX_DEVICES];
static unsigned long long used_bytes[MAX_DEVICES];
static unsigned long long peak_used_bytes[MAX_DEVICES];

struct allocation {
    CUdeviceptr ptr;
    unsigned long long size;
    int device;
    int live;
};
struct reservation {
    CUdeviceptr ptr;
    unsigned long long size;
    int live;
};
struct handle {
    unsigned long long size;
    int device;
    int mappings; /* live mappings of it */
    int released; /* cuMemRelease was called */
    int live;     /* memory still counted */
};
struct mapping {
    CUdeviceptr ptr;
    unsigned long long size;
    unsigned long long handle; /* index + 1 */
    int live;
};
struct event {
    int device;
    int live;
    int recorded;
    int lag;
};

static struct allocation allocations[MAX_ITEMS];
static int n_allocations;
static struct reservation reservations[MAX_ITEMS];
static int n_reservations;
static struct handle handles[MAX_ITEMS];
static int n_handles;
static struct mapping mappings[MAX_ITEMS];
static int n_mappings;
static struct event events[MAX_ITEMS];
static int n_events;

static unsigned long long next_alloc_addr = 0x7f0000000000ull;
static unsigned long long next_reserve_addr = 0x600000000000ull;

static unsigned long long refusals;
static unsigned long long out_of_memory;
static unsigned long long calls;

static CUresult refuse(CUresult code, const char *call, const char *why) {
    refusals++;
    fprintf(stderr, "fake-cuda: refused %s: %s\n", call, why);
    return code;
}

static unsigned long long env_u64(const char *name, unsigned long long fallback) {
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    return strtoull(text, NULL, 0);
}

static unsigned long long round_up(unsigned long long n, unsigned long long to) {
    return (n + to - 1) / to * to;
}

/* The device whose primary context is current on this thread, or -1. */
static int current_device(void) {
    for (int d = 0; d < device_count; d++) {
        if (current_context == (CUcontext)&contexts[d] && contexts[d].retains > 0) return d;
    }
    return -1;
}

#define ENTER(name)                                                              \
    pthread_mutex_lock(&lock);                                                   \
    calls++;                                                                     \
    if (!initialized) {                                                          \
        pthread_mutex_unlock(&lock);                                             \
        return refuse(CUDA_ERROR_NOT_INITIALIZED, name, "cuInit was not called"); \
    }
#define LEAVE(code)               \
    do {                          \
        CUresult result_ = (code); \
        pthread_mutex_unlock(&lock); \
        return result_;           \
    } while (0)
#define NEED_CONTEXT(name, dev)                                                   \
    int dev = current_device();                                                   \
    if (dev < 0) LEAVE(refuse(CUDA_ERROR_INVALID_CONTEXT, name, "no current context on this thread"));

static CUresult charge(int device, unsigned long long size) {
    if (used_bytes[device] + size > total_bytes) {
        out_of_memory++;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    used_bytes[device] += size;
    if (used_bytes[device] > peak_used_bytes[device]) peak_used_bytes[device] = used_bytes[device];
    return CUDA_SUCCESS;
}

static void write_report(void) {
    const char *path = getenv("FAKE_CUDA_REPORT");
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    int live_allocations = 0, live_reservations = 0, live_mappings = 0, live_handles = 0, live_events = 0;
    int unreleased_handles = 0, retains = 0;
    unsigned long long used = 0, peak = 0;
    for (int i = 0; i < n_allocations; i++) live_allocations += allocations[i].live;
    for (int i = 0; i < n_reservations; i++) live_reservations += reservations[i].live;
    for (int i = 0; i < n_mappings; i++) live_mappings += mappings[i].live;
    for (int i = 0; i < n_handles; i++) {
        live_handles += handles[i].live;
        unreleased_handles += !handles[i].released;
    }
    for (int i = 0; i < n_events; i++) live_events += events[i].live;
    for (int d = 0; d < device_count; d++) {
        retains += contexts[d].retains;
        used += used_bytes[d];
        if (peak_used_bytes[d] > peak) peak = peak_used_bytes[d];
    }
    fprintf(f, "calls %llu\n", calls);
    fprintf(f, "refusals %llu\n", refusals);
    fprintf(f, "out_of_memory %llu\n", out_of_memory);
    fprintf(f, "allocations_made %d\n", n_allocations);
    fprintf(f, "live_allocations %d\n", live_allocations);
    fprintf(f, "reservations_made %d\n", n_reservations);
    fprintf(f, "live_reservations %d\n", live_reservations);
    fprintf(f, "mappings_made %d\n", n_mappings);
    fprintf(f, "live_mappings %d\n", live_mappings);
    fprintf(f, "live_handles %d\n", live_handles);
    fprintf(f, "unreleased_handles %d\n", unreleased_handles);
    fprintf(f, "events_made %d\n", n_events);
    fprintf(f, "live_events %d\n", live_events);
    fprintf(f, "context_retains %d\n", retains);
    fprintf(f, "used_bytes %llu\n", used);
    fprintf(f, "peak_used_bytes %llu\n", peak);
    fclose(f);
}

CUresult cuInit(unsigned int flags) {
    pthread_mutex_lock(&lock);
    calls++;
    if (flags != 0) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuInit", "flags must be 0"));
    if (!initialized) {
        device_count = (int)env_u64("FAKE_CUDA_DEVICES", 1);
        if (device_count < 0) device_count = 0;
        if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
        vmm_supported = (int)env_u64("FAKE_CUDA_VMM", 1);
        total_bytes = env_u64("FAKE_CUDA_TOTAL_MB", 1024) << 20;
        granularity = env_u64("FAKE_CUDA_GRANULARITY", 2ull << 20);
        event_lag = (int)env_u64("FAKE_CUDA_EVENT_LAG", 0);
        atexit(write_report);
        initialized = 1;
    }
    LEAVE(CUDA_SUCCESS);
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; return CUDA_SUCCESS;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuDeviceGetCount(int *count) {
    ENTER("cuDeviceGetCount");
    if (!count) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount", "null pointer"));
    *count = device_count;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    ENTER("cuDeviceGet");
    if (ordinal < 0 || ordinal >= device_count) LEAVE(refuse(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet", "no such ordinal"));
    *device = ordinal;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
    ENTER("cuDeviceGetAttribute");
    if (device < 0 || device >= device_count) LEAVE(refuse(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGetAttribute", "no such device"));
    *value = attribute == ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? vmm_supported : 0;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) {
    ENTER("cuDeviceTotalMem_v2");
    if (device < 0 || device >= device_count) LEAVE(refuse(CUDA_ERROR_INVALID_DEVICE, "cuDeviceTotalMem_v2", "no such device"));
    *bytes = (size_t)total_bytes;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
    ENTER("cuDevicePrimaryCtxRetain");
    if (device < 0 || device >= device_count) LEAVE(refuse(CUDA_ERROR_INVALID_DEVICE, "cuDevicePrimaryCtxRetain", "no such device"));
    contexts[device].retains++;
    *context = (CUcontext)&contexts[device];
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    ENTER("cuDevicePrimaryCtxRelease_v2");
    if (device < 0 || device >= device_count) LEAVE(refuse(CUDA_ERROR_INVALID_DEVICE, "cuDevicePrimaryCtxRelease_v2", "no such device"));
    if (contexts[device].retains <= 0) LEAVE(refuse(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease_v2", "released more often than retained"));
    contexts[device].retains--;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxGetCurrent(CUcontext *context) {
    ENTER("cuCtxGetCurrent");
    *context = current_context;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxSetCurrent(CUcontext context) {
    ENTER("cuCtxSetCurrent");
    if (context != NULL) {
        int known = 0;
        for (int d = 0; d < device_count; d++) known |= context == (CUcontext)&contexts[d] && contexts[d].retains > 0;
        if (!known) LEAVE(refuse(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent", "not a live context"));
    }
    current_context = context;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxSynchronize(void) {
    ENTER("cuCtxSynchronize");
    NEED_CONTEXT("cuCtxSynchronize", device);
    (void)device;
    LEAVE(CUDA_SUCCESS);
}

static int valid_stream(CUstream stream) {
    /* 0: legacy default, 1: CU_STREAM_LEGACY, 2: CU_STREAM_PER_THREAD. */
    return (uintptr_t)stream <= 2;
}

CUresult cuStreamSynchronize(CUstream stream) {
    ENTER("cuStreamSynchronize");
    NEED_CONTEXT("cuStreamSynchronize", device);
    (void)device;
    if (!valid_stream(stream)) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize", "unknown stream"));
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    ENTER("cuMemGetInfo_v2");
    NEED_CONTEXT("cuMemGetInfo_v2", device);
    *free_bytes = (size_t)(total_bytes - used_bytes[device]);
    *total = (size_t)total_bytes;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
    ENTER("cuMemAlloc_v2");
    NEED_CONTEXT("cuMemAlloc_v2", device);
    if (size == 0) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2", "size 0"));
    if (n_allocations == MAX_ITEMS) LEAVE(refuse(CUDA_ERROR_NOT_SUPPORTED, "cuMemAlloc_v2", "fake driver's table is full"));
    /* The driver hands out whole 2 MiB pages. */
    unsigned long long charged = round_up(size, 2ull << 20);
    CUresult result = charge(device, charged);
    if (result != CUDA_SUCCESS) LEAVE(result);
    struct allocation *a = &allocations[n_allocations++];
    a->ptr = next_alloc_addr;
    a->size = charged;
    a->device = device;
    a->live = 1;
    next_alloc_addr += charged;
    *ptr = a->ptr;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
    ENTER("cuMemFree_v2");
    NEED_CONTEXT("cuMemFree_v2", device);
    (void)device;
    for (int i = 0; i < n_allocations; i++) {
        struct allocation *a = &allocations[i];
        if (a->live && a->ptr == ptr) {
            a->live = 0;
            used_bytes[a->device] -= a->size;
            LEAVE(CUDA_SUCCESS);
        }
    }
    LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2", "not a live cuMemAlloc pointer"));
}

static const char *check_prop(const CUmemAllocationProp *prop) {
    if (!prop) return "null property";
    if (prop->type != ALLOCATION_TYPE_PINNED) return "type is not CU_MEM_ALLOCATION_TYPE_PINNED";
    if (prop->location.type != LOCATION_TYPE_DEVICE) return "location is not a device";
    if (prop->location.id < 0 || prop->location.id >= device_count) return "location names no device";
    return NULL;
}

CUresult cuMemGetAllocationGranularity(size_t *out, const CUmemAllocationProp *prop, int option) {
    ENTER("cuMemGetAllocationGranularity");
    const char *bad = check_prop(prop);
    if (bad) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemGetAllocationGranularity", bad));
    if (option != 0 && option != 1) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemGetAllocationGranularity", "unknown option"));
    if (!vmm_supported) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    *out = (size_t)granularity;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    ENTER("cuMemAddressReserve");
    (void)addr; /* a hint; the fake ignores it, as the driver may */
    if (!vmm_supported) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    if (flags != 0) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve", "flags must be 0"));
    if (size == 0 || size % granularity) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve", "size is not a multiple of the granularity"));
    if (alignment && (alignment & (alignment - 1))) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve", "alignment is not a power of two"));
    if (n_reservations == MAX_ITEMS) LEAVE(refuse(CUDA_ERROR_NOT_SUPPORTED, "cuMemAddressReserve", "fake driver's table is full"));
    unsigned long long align = alignment > granularity ? alignment : granularity;
    unsigned long long base = round_up(next_reserve_addr, align);
    struct reservation *r = &reservations[n_reservations++];
    r->ptr = base;
    r->size = size;
    r->live = 1;
    /* A gap after each range, so a map past its end finds no reservation. */
    next_reserve_addr = base + size + granularity;
    *ptr = base;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    ENTER("cuMemAddressFree");
    for (int i = 0; i < n_reservations; i++) {
        struct reservation *r = &reservations[i];
        if (!r->live || r->ptr != ptr) continue;
        if (r->size != size) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree", "size differs from the reservation's"));
        for (int m = 0; m < n_mappings; m++) {
            if (mappings[m].live && mappings[m].ptr >= ptr && mappings[m].ptr < ptr + size)
                LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree", "pages are still mapped in the range"));
        }
        r->live = 0;
        LEAVE(CUDA_SUCCESS);
    }
    LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree", "not the start of a live reservation"));
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
    ENTER("cuMemCreate");
    const char *bad = check_prop(prop);
    if (bad) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemCreate", bad));
    if (!vmm_supported) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    if (flags != 0) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemCreate", "flags must be 0"));
    if (size == 0 || size % granularity) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemCreate", "size is not a multiple of the granularity"));
    if (n_handles == MAX_ITEMS) LEAVE(refuse(CUDA_ERROR_NOT_SUPPORTED, "cuMemCreate", "fake driver's table is full"));
    CUresult result = charge(prop->location.id, size);
    if (result != CUDA_SUCCESS) LEAVE(result);
    struct handle *h = &handles[n_handles++];
    h->size = size;
    h->device = prop->location.id;
    h->mappings = 0;
    h->released = 0;
    h->live = 1;
    *out = (CUmemGenericAllocationHandle)n_handles;
    LEAVE(CUDA_SUCCESS);
}

static struct handle *find_handle(CUmemGenericAllocationHandle id) {
    if (id == 0 || id > (unsigned long long)n_handles) return NULL;
    struct handle *h = &handles[id - 1];
    return h->live ? h : NULL;
}

/* Frees a handle's memory once it is released and mapped nowhere. */
static void settle(struct handle *h) {
    if (h->live && h->released && h->mappings == 0) {
        h->live = 0;
        used_bytes[h->device] -= h->size;
    }
}

CUresult cuMemRelease(CUmemGenericAllocationHandle id) {
    ENTER("cuMemRelease");
    struct handle *h = find_handle(id);
    if (!h || h->released) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemRelease", "not a live, unreleased handle"));
    h->released = 1;
    settle(h);
    LEAVE(CUDA_SUCCESS);
}

static struct reservation *reservation_holding(CUdeviceptr ptr, unsigned long long size) {
    for (int i = 0; i < n_reservations; i++) {
        struct reservation *r = &reservations[i];
        if (r->live && ptr >= r->ptr && ptr + size <= r->ptr + r->size) return r;
    }
    return NULL;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle id, unsigned long long flags) {
    ENTER("cuMemMap");
    if (flags != 0 || offset != 0) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap", "offset and flags must be 0"));
    struct handle *h = find_handle(id);
    if (!h || h->released) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuMemMap", "not a live, unreleased handle"));
    if (size == 0 || size % granularity || ptr % granularity) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap", "address or size off the granularity"));
    if (size > h->size) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap", "size exceeds the handle's"));
    if (!reservation_holding(ptr, size)) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap", "range is not inside one reservation"));
    for (int m = 0; m < n_mappings; m++) {
        struct mapping *o = &mappings[m];
        if (o->live && ptr < o->ptr + o->size && o->ptr < ptr + size)
            LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap", "range overlaps a mapping"));
    }
    if (n_mappings == MAX_ITEMS) LEAVE(refuse(CUDA_ERROR_NOT_SUPPORTED, "cuMemMap", "fake driver's table is full"));
    struct mapping *m = &mappings[n_mappings++];
    m->ptr = ptr;
    m->size = size;
    m->handle = id;
    m->live = 1;
    h->mappings++;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    ENTER("cuMemSetAccess");
    if (!desc || count == 0) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess", "no access descriptor"));
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != LOCATION_TYPE_DEVICE || desc[i].location.id < 0 || desc[i].location.id >= device_count)
            LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess", "descriptor names no device"));
        if (desc[i].flags != ACCESS_READWRITE && desc[i].flags != 0 && desc[i].flags != 1)
            LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess", "unknown access flags"));
    }
    /* Every byte of the range must be mapped. */
    unsigned long long covered = 0;
    for (int m = 0; m < n_mappings; m++) {
        struct mapping *o = &mappings[m];
        if (o->live && o->ptr >= ptr && o->ptr + o->size <= ptr + size) covered += o->size;
    }
    if (size == 0 || covered != size) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess", "range is not wholly mapped"));
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    ENTER("cuMemUnmap");
    for (int i = 0; i < n_mappings; i++) {
        struct mapping *m = &mappings[i];
        if (!m->live || m->ptr != ptr) continue;
        /* The whole range one cuMemMap mapped, no more, no less. */
        if (m->size != size) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap", "range is not exactly one mapping"));
        m->live = 0;
        struct handle *h = &handles[m->handle - 1];
        h->mappings--;
        settle(h);
        LEAVE(CUDA_SUCCESS);
    }
    LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap", "no mapping starts there"));
}

/* Event handles are small integers dressed as pointers, never dereferenced. */
static struct event *find_event(CUevent handle) {
    uintptr_t id = (uintptr_t)handle;
    if (id < 0x1000 || (id - 0x1000) % 16 || (id - 0x1000) / 16 >= (uintptr_t)n_events) return NULL;
    struct event *e = &events[(id - 0x1000) / 16];
    return e->live ? e : NULL;
}

CUresult cuEventCreate(CUevent *out, unsigned int flags) {
    ENTER("cuEventCreate");
    NEED_CONTEXT("cuEventCreate", device);
    if (flags & ~0xfu) LEAVE(refuse(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "unknown flags"));
    if (n_events == MAX_ITEMS) LEAVE(refuse(CUDA_ERROR_NOT_SUPPORTED, "cuEventCreate", "fake driver's table is full"));
    struct event *e = &events[n_events];
    e->device = device;
    e->live = 1;
    e->recorded = 0;
    e->lag = 0;
    *out = (CUevent)(uintptr_t)(0x1000 + 16 * n_events);
    n_events++;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventRecord(CUevent handle, CUstream stream) {
    ENTER("cuEventRecord");
    NEED_CONTEXT("cuEventRecord", device);
    struct event *e = find_event(handle);
    if (!e) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord", "not a live event"));
    if (e->device != device) LEAVE(refuse(CUDA_ERROR_INVALID_CONTEXT, "cuEventRecord", "event of another context"));
    if (!valid_stream(stream)) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord", "unknown stream"));
    e->recorded = 1;
    e->lag = event_lag;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventQuery(CUevent handle) {
    ENTER("cuEventQuery");
    NEED_CONTEXT("cuEventQuery", device);
    (void)device;
    struct event *e = find_event(handle);
    if (!e) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventQuery", "not a live event"));
    if (e->lag > 0) {
        e->lag--;
        LEAVE(CUDA_ERROR_NOT_READY);
    }
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventSynchronize(CUevent handle) {
    ENTER("cuEventSynchronize");
    NEED_CONTEXT("cuEventSynchronize", device);
    (void)device;
    struct event *e = find_event(handle);
    if (!e) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize", "not a live event"));
    e->lag = 0;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventDestroy_v2(CUevent handle) {
    ENTER("cuEventDestroy_v2");
    NEED_CONTEXT("cuEventDestroy_v2", device);
    (void)device;
    struct event *e = find_event(handle);
    if (!e) LEAVE(refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy_v2", "not a live event"));
    e->live = 0;
    LEAVE(CUDA_SUCCESS);
}
