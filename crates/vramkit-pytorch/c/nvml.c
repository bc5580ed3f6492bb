/*
 * NVML for the fake CUDA runtime, linked into the same library (the build
 * names it libnvidia-ml.so.1 too, so PyTorch's dlopen finds this device).
 * NVML initialises and finds the device; the running processes are this
 * one, using what the fake device has handed out (plus FAKECUDA_CONTEXT
 * bytes of non-PyTorch memory, default 0), which PyTorch prints in its
 * out-of-memory message; it answers "not supported" to the questions about
 * NVLink and fabric, so expandable segments see no fabric access (as on a
 * single PCIe GPU).
 */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define EXPORT __attribute__((visibility("default")))
#define NVML_ERROR_INSUFFICIENT_SIZE 7

unsigned long long fakecuda_used(void);

/* The leading fields of every nvmlProcessInfo version. */
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } ProcessInfo;
#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3

EXPORT int nvmlInit_v2(void) { return NVML_SUCCESS; }
EXPORT int nvmlInit(void) { return NVML_SUCCESS; }
EXPORT int nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *id, void **dev) { (void)id; *dev = (void *)0x1; return NVML_SUCCESS; }
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev) { (void)index; *dev = (void *)0x1; return NVML_SUCCESS; }
EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void *d, unsigned l, int *t) { (void)d; (void)l; (void)t; return NVML_ERROR_NOT_SUPPORTED; }
EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *d, unsigned l, void *p) { (void)d; (void)l; (void)p; return NVML_ERROR_NOT_SUPPORTED; }
EXPORT int nvmlDeviceGetComputeRunningProcesses(void *d, unsigned *n, void *p) {
  (void)d;
  if (*n < 1) { *n = 1; return NVML_ERROR_INSUFFICIENT_SIZE; }
  const char *c = getenv("FAKECUDA_CONTEXT");
  ProcessInfo *info = p;
  info->pid = (unsigned int)getpid();
  info->usedGpuMemory = fakecuda_used() + (c && *c ? strtoull(c, NULL, 10) : 0);
  *n = 1;
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *n, void *p) { return nvmlDeviceGetComputeRunningProcesses(d, n, p); }
EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(void *d, unsigned *n, void *p) { return nvmlDeviceGetComputeRunningProcesses(d, n, p); }
EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = CUDART_VERSION; return NVML_SUCCESS; }
EXPORT int nvmlSystemGetCudaDriverVersion(int *v) { *v = CUDART_VERSION; return NVML_SUCCESS; }
/* A fabric query succeeds and says the GPU is in no fabric: status
 * NVML_SUCCESS, state NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0). torch 2.13
 * and 2.14 check that the call succeeds. Only the fields every version of
 * nvmlGpuFabricInfoV_t has are written (version is the caller's). */
EXPORT int nvmlDeviceGetGpuFabricInfoV(void *d, void *info) {
  (void)d;
  memset((char *)info + 4, 0, 32);
  return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetGpuFabricInfo(void *d, void *info) { (void)d; (void)info; return NVML_ERROR_NOT_SUPPORTED; }
EXPORT const char *nvmlErrorString(int r) { return r == NVML_SUCCESS ? "Success" : "Not Supported"; }
