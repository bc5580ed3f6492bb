/*
 * The simulated GPU's description: the card preset, read from the
 * environment once, and every call that reports it (runtime properties and
 * attributes, the driver's attributes, NVML's driver version).
 *
 * vramkit-pytorch's cudart.c already reports a device, with a name, memory
 * and compute capability from FAKECUDA_NAME, FAKECUDA_TOTAL, FAKECUDA_MAJOR
 * and FAKECUDA_MINOR, and the rest fixed (132 SMs, 50 MiB of L2, ...). A
 * preset needs more, so runtime.c marks cudart.c's reporting functions weak
 * and these, in their own translation unit, win at link time, starting
 * from cudart.c's description. Same knobs, more of them (all set together
 * by vramkit-simgpu's Preset::env):
 *
 *   FAKECUDA_TOTAL, FAKECUDA_NAME, FAKECUDA_MAJOR, FAKECUDA_MINOR  as cudart.c
 *   FAKECUDA_SM_COUNT            streaming multiprocessors
 *   FAKECUDA_L2_BYTES            L2 cache
 *   FAKECUDA_BUS_WIDTH           memory bus, bits
 *   FAKECUDA_THREADS_PER_SM      resident threads per SM
 *   FAKECUDA_BLOCKS_PER_SM       resident blocks per SM
 *   FAKECUDA_SMEM_PER_SM         shared memory per SM, bytes
 *   FAKECUDA_SMEM_PER_BLOCK_OPTIN  shared memory a block may opt in to
 *   FAKECUDA_CLOCK_KHZ, FAKECUDA_MEMORY_CLOCK_KHZ
 *
 * PyTorch sizes real allocations from some of these: the cuBLAS workspace
 * from the compute capability, reduction staging buffers from the SM count
 * and threads per SM.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simgpu.h"

static struct simgpu_device device = {
  .total_bytes = 80ull << 30, .name = "vramkit simulated GPU", .cc_major = 9, .cc_minor = 0,
  .sm_count = 132, .l2_bytes = 50u << 20, .bus_width_bits = 5120, .threads_per_sm = 2048,
  .blocks_per_sm = 32, .smem_per_sm = 233472, .smem_per_block_optin = 232448,
  .clock_khz = 1980000, .memory_clock_khz = 2619000,
};

static void read_int(const char *name, int *into) {
  const char *v = getenv(name);
  if (v && *v) *into = atoi(v);
}

static void read_environment(void) {
  const char *v = getenv("FAKECUDA_TOTAL");
  if (v && *v) device.total_bytes = strtoull(v, NULL, 10);
  v = getenv("FAKECUDA_NAME");
  if (v && *v) snprintf(device.name, sizeof device.name, "%s", v);
  read_int("FAKECUDA_MAJOR", &device.cc_major);
  read_int("FAKECUDA_MINOR", &device.cc_minor);
  read_int("FAKECUDA_SM_COUNT", &device.sm_count);
  read_int("FAKECUDA_L2_BYTES", &device.l2_bytes);
  read_int("FAKECUDA_BUS_WIDTH", &device.bus_width_bits);
  read_int("FAKECUDA_THREADS_PER_SM", &device.threads_per_sm);
  read_int("FAKECUDA_BLOCKS_PER_SM", &device.blocks_per_sm);
  read_int("FAKECUDA_SMEM_PER_SM", &device.smem_per_sm);
  read_int("FAKECUDA_SMEM_PER_BLOCK_OPTIN", &device.smem_per_block_optin);
  read_int("FAKECUDA_CLOCK_KHZ", &device.clock_khz);
  read_int("FAKECUDA_MEMORY_CLOCK_KHZ", &device.memory_clock_khz);
}

const struct simgpu_device *simgpu_device(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_environment);
  return &device;
}

/* One table for both APIs: the runtime's cudaDevAttr* and the driver's
 * CU_DEVICE_ATTRIBUTE_* share their numbers. Unknown attributes read 0
 * (unsupported), as a cautious real driver would for a feature it lacks. */
int simgpu_attribute(int attribute) {
  const struct simgpu_device *d = simgpu_device();
  switch (attribute) {
    case 1: return 1024;                            /* max threads per block */
    case 2: case 3: return 1024;                    /* max block dim x, y */
    case 4: return 64;                              /* max block dim z */
    case 5: return 2147483647;                      /* max grid dim x */
    case 6: case 7: return 65535;                   /* max grid dim y, z */
    case 8: return 49152;                           /* shared memory per block */
    case 9: return 65536;                           /* constant memory */
    case 10: return 32;                             /* warp size */
    case 11: return 2147483647;                     /* max pitch */
    case 12: return 65536;                          /* registers per block */
    case 13: return d->clock_khz;
    case 14: return 512;                            /* texture alignment */
    case 15: return 1;                              /* gpu overlap */
    case 16: return d->sm_count;
    case 19: return 1;                              /* can map host memory */
    case 30: return 512;                            /* surface alignment */
    case 31: return 1;                              /* concurrent kernels */
    case 32: return 1;                              /* ECC enabled */
    case 33: return 1;                              /* PCI bus id */
    case 36: return d->memory_clock_khz;
    case 37: return d->bus_width_bits;
    case 38: return d->l2_bytes;
    case 39: return d->threads_per_sm;
    case 40: return 2;                              /* async engines */
    case 41: return 1;                              /* unified addressing */
    case 75: return d->cc_major;
    case 76: return d->cc_minor;
    case 78: return 1;                              /* stream priorities */
    case 79: case 80: return 1;                     /* L1 caches */
    case 81: return d->smem_per_sm;
    case 82: return 65536;                          /* registers per SM */
    case 83: return 1;                              /* managed memory */
    case 90: return 1;                              /* compute preemption */
    case 95: return 1;                              /* cooperative launch */
    case 97: return d->smem_per_block_optin;
    case 99: return 1;                              /* host register */
    case 102: return 1;                             /* virtual memory management */
    case 103: return 1;                             /* POSIX fd handles */
    case 106: return d->blocks_per_sm;
    default: return 0;
  }
}

/* cudart.c's device (name, memory, compute capability from the same
 * variables, the usual limits), with what the preset says beyond it. */
static cudaError_t properties(struct cudaDeviceProp *p, int ordinal) {
  cudaError_t e = simgpu_cudart_properties(p, ordinal);
  if (e != cudaSuccess) return e;
  const struct simgpu_device *d = simgpu_device();
  p->multiProcessorCount = d->sm_count;
  p->l2CacheSize = d->l2_bytes;
  p->persistingL2CacheMaxSize = d->l2_bytes * 3 / 4;
  p->memoryBusWidth = d->bus_width_bits;
  p->maxThreadsPerMultiProcessor = d->threads_per_sm;
  p->maxBlocksPerMultiProcessor = d->blocks_per_sm;
  p->sharedMemPerMultiprocessor = (size_t)d->smem_per_sm;
  p->sharedMemPerBlockOptin = (size_t)d->smem_per_block_optin;
  p->reservedSharedMemPerBlock = 1024;
  p->texturePitchAlignment = 32;
  p->surfaceAlignment = 512;
  p->ECCEnabled = 1;
  p->canMapHostMemory = 1;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1;
  p->computePreemptionSupported = 1;
  p->cooperativeLaunch = 1;
  p->hostRegisterSupported = 1;
  p->accessPolicyMaxWindowSize = 134213632;
  p->uuid.bytes[0] = 0x76;  /* "vk": a fixed, recognisable device UUID */
  p->uuid.bytes[1] = 0x6b;
#if CUDART_VERSION < 13000
  p->clockRate = d->clock_khz;
  p->memoryClockRate = d->memory_clock_khz;
  p->deviceOverlap = 1;
#endif
  return cudaSuccess;
}

#if CUDART_VERSION >= 13000
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int ordinal) { return properties(p, ordinal); }
#else
SIMGPU_API(cudaError_t, cudaGetDeviceProperties_v2, (struct cudaDeviceProp *p, int ordinal)) { return properties(p, ordinal); }
SIMGPU_API(cudaError_t, cudaGetDeviceProperties, (struct cudaDeviceProp *p, int ordinal)) { return properties(p, ordinal); }
#endif

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attribute, int ordinal) {
  if (ordinal != 0) return cudaErrorInvalidDevice;
  *value = simgpu_attribute((int)attribute);
  return cudaSuccess;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *value = simgpu_attribute((int)attribute);
  return CUDA_SUCCESS;
}

/* The driver reports the CUDA version it supports: the major's own. */
SIMGPU_API(int, nvmlSystemGetCudaDriverVersion, (int *version)) { *version = CUDART_VERSION; return 0; }
SIMGPU_API(int, nvmlSystemGetCudaDriverVersion_v2, (int *version)) { *version = CUDART_VERSION; return 0; }

/* ---- NVML's view of the same device (nvml.c has init and processes) --- */
unsigned long long fakecuda_used(void);
typedef struct { unsigned long long total, free, used; } NvmlMemory;

SIMGPU_API(int, nvmlDeviceGetCount_v2, (unsigned *n)) { *n = 1; return 0; }
SIMGPU_API(int, nvmlDeviceGetIndex, (void *dev, unsigned *index)) { (void)dev; *index = 0; return 0; }
SIMGPU_API(int, nvmlDeviceGetName, (void *dev, char *name, unsigned len)) {
  (void)dev;
  snprintf(name, len, "%s", simgpu_device()->name);
  return 0;
}
SIMGPU_API(int, nvmlDeviceGetUUID, (void *dev, char *uuid, unsigned len)) {
  (void)dev;
  snprintf(uuid, len, "GPU-766b0000-0000-0000-0000-000000000000");
  return 0;
}
SIMGPU_API(int, nvmlDeviceGetMemoryInfo, (void *dev, NvmlMemory *m)) {
  (void)dev;
  m->total = simgpu_device()->total_bytes;
  m->used = fakecuda_used();
  m->free = m->total > m->used ? m->total - m->used : 0;
  return 0;
}
SIMGPU_API(int, nvmlDeviceGetCudaComputeCapability, (void *dev, int *major, int *minor)) {
  (void)dev;
  *major = simgpu_device()->cc_major;
  *minor = simgpu_device()->cc_minor;
  return 0;
}
