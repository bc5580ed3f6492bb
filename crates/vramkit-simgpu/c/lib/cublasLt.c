/*
 * cuBLASLt: descriptors, layouts and preferences are objects; the
 * heuristic offers exactly one algorithm, so PyTorch takes the cuBLASLt
 * path as on a GPU (and not its fallback). The algorithm needs no
 * workspace: which one the real library picks, and its workspace, depend
 * on the card and are not simulated (PyTorch's own workspace, which it
 * allocates through its allocator, is).
 */
#include "../stub.h"

#if SIMGPU_CUDA_MAJOR >= 13
#define VERSION 130200
#else
#define VERSION 120804
#endif

/* cublasLtMatmulHeuristicResult_t */
typedef struct {
  uint64_t algo[8];
  size_t workspace_bytes;
  int state;
  float waves;
  int reserved[4];
} HeuristicResult;

STUB_EXPORT size_t cublasLtGetVersion(void) { return VERSION; }
STUB_EXPORT size_t cublasLtGetCudartVersion(void) { return (size_t)SIMGPU_CUDA_MAJOR * 1000; }
STUB_EXPORT int cublasLtCreate(void **h) { *h = simgpu_object(16); return 0; }
STUB_EXPORT int cublasLtDestroy(void *h) { free(h); return 0; }
STUB_EXPORT int cublasLtMatmulDescCreate(void **d, int compute, int scale) { *d = simgpu_object(16); return 0; }
STUB_EXPORT int cublasLtMatmulDescDestroy(void *d) { free(d); return 0; }
STUB_EXPORT int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  *l = simgpu_object(16);
  return 0;
}
STUB_EXPORT int cublasLtMatrixLayoutDestroy(void *l) { free(l); return 0; }
STUB_EXPORT int cublasLtMatmulPreferenceCreate(void **p) { *p = simgpu_object(16); return 0; }
STUB_EXPORT int cublasLtMatmulPreferenceDestroy(void *p) { free(p); return 0; }

static void one_result(HeuristicResult *r) {
  memset(r, 0, sizeof *r);
  r->waves = 1.0f;
}
STUB_EXPORT int cublasLtMatmulAlgoGetHeuristic(void *h, void *op, void *a, void *b, void *c, void *d, void *pref,
                                               int requested, HeuristicResult *results, int *returned) {
  *returned = requested > 0 ? 1 : 0;
  if (requested > 0) one_result(&results[0]);
  return 0;
}
STUB_EXPORT int cublasLtMatmulAlgoCheck(void *h, void *op, void *a, void *b, void *c, void *d, const void *algo,
                                        HeuristicResult *result) {
  one_result(result);
  return 0;
}
STUB_EXPORT int cublasLtMatmulAlgoInit(void *h, int compute, int scale, int a, int b, int c, int d, int id, uint64_t *algo) {
  memset(algo, 0, 8 * sizeof *algo);
  return 0;
}
STUB_EXPORT int cublasLtMatmulAlgoConfigGetAttribute(const void *algo, int attribute, void *buf, size_t size, size_t *written) {
  if (buf) memset(buf, 0, size);
  if (written) *written = size;
  return 0;
}
STUB_EXPORT const char *cublasLtGetStatusString(int status) { return status == 0 ? "the operation completed successfully" : "simulated cuBLASLt error"; }
STUB_EXPORT const char *cublasLtGetStatusName(int status) { return status == 0 ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INTERNAL_ERROR"; }
