/*
 * NVRTC: PyTorch compiles some kernels at run time (the jiterator, custom
 * kernels) and loads the result with the driver. Compilation succeeds and
 * yields an empty image; the version is the major's.
 */
#include "../stub.h"

STUB_EXPORT int nvrtcVersion(int *major, int *minor) {
  *major = SIMGPU_CUDA_MAJOR;
  *minor = SIMGPU_CUDA_MAJOR >= 13 ? 2 : 8;
  return 0;
}
STUB_EXPORT const char *nvrtcGetErrorString(int result) { return result == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR_INTERNAL_ERROR (simulated)"; }
STUB_EXPORT int nvrtcCreateProgram(void **p, const char *src, const char *name, int n, const char *const *headers,
                                   const char *const *includes) {
  *p = simgpu_object(16);
  return 0;
}
STUB_EXPORT int nvrtcDestroyProgram(void **p) { free(*p); *p = NULL; return 0; }
STUB_EXPORT int nvrtcCompileProgram(void *p, int n, const char *const *options) { return 0; }
/* Sizes count the terminating NUL the getters write. */
#define OUTPUT(size_fn, get_fn)                                                       \
  STUB_EXPORT int size_fn(void *p, size_t *size) { *size = 1; return 0; }   \
  STUB_EXPORT int get_fn(void *p, char *out) { out[0] = 0; return 0; }
OUTPUT(nvrtcGetPTXSize, nvrtcGetPTX)
OUTPUT(nvrtcGetCUBINSize, nvrtcGetCUBIN)
OUTPUT(nvrtcGetProgramLogSize, nvrtcGetProgramLog)
#undef OUTPUT
STUB_EXPORT int nvrtcGetLoweredName(void *p, const char *name, const char **lowered) { *lowered = name; return 0; }
