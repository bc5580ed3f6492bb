/*
 * cuBLAS: handles that remember what PyTorch sets (stream, workspace, math
 * and pointer modes) and answer it back; the version of the major's
 * release. Every BLAS call itself is a generated no-op.
 */
#include "../stub.h"

#if SIMGPU_CUDA_MAJOR >= 13
#define VERSION 130200 /* cuBLAS 13.2.0: major * 10000 + minor * 100 + patch */
#else
#define VERSION 120804 /* cuBLAS 12.8.4, what torch 2.8 and 2.10 pin */
#endif

typedef struct { void *stream; void *workspace; size_t workspace_bytes; int math_mode, pointer_mode, sm_count; } Handle;

STUB_EXPORT int cublasCreate_v2(Handle **h) { *h = simgpu_object(sizeof(Handle)); return 0; }
STUB_EXPORT int cublasDestroy_v2(Handle *h) { free(h); return 0; }
STUB_EXPORT int cublasGetVersion_v2(Handle *h, int *version) { *version = VERSION; return 0; }
STUB_EXPORT int cublasGetProperty(int type, int *value) {
  *value = type == 0 ? VERSION / 10000 : type == 1 ? VERSION / 100 % 100 : VERSION % 100;
  return 0;
}
STUB_EXPORT size_t cublasGetCudartVersion(void) { return (size_t)SIMGPU_CUDA_MAJOR * 1000; }
STUB_EXPORT int cublasSetStream_v2(Handle *h, void *stream) { h->stream = stream; return 0; }
STUB_EXPORT int cublasGetStream_v2(Handle *h, void **stream) { *stream = h->stream; return 0; }
STUB_EXPORT int cublasSetWorkspace_v2(Handle *h, void *workspace, size_t bytes) {
  h->workspace = workspace;
  h->workspace_bytes = bytes;
  return 0;
}
STUB_EXPORT int cublasSetMathMode(Handle *h, int mode) { h->math_mode = mode; return 0; }
STUB_EXPORT int cublasGetMathMode(Handle *h, int *mode) { *mode = h->math_mode; return 0; }
STUB_EXPORT int cublasSetPointerMode_v2(Handle *h, int mode) { h->pointer_mode = mode; return 0; }
STUB_EXPORT int cublasGetPointerMode_v2(Handle *h, int *mode) { *mode = h->pointer_mode; return 0; }
STUB_EXPORT int cublasSetSmCountTarget(Handle *h, int n) { h->sm_count = n; return 0; }
STUB_EXPORT int cublasGetSmCountTarget(Handle *h, int *n) { *n = h->sm_count; return 0; }
STUB_EXPORT const char *cublasGetStatusString(int status) { return status == 0 ? "the operation completed successfully" : "simulated cuBLAS error"; }
STUB_EXPORT const char *cublasGetStatusName(int status) { return status == 0 ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INTERNAL_ERROR"; }
