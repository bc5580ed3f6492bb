/*
 * cuDNN, enough for PyTorch to take its cuDNN paths as on a GPU: the
 * version (FAKECUDA_CUDNN_VERSION, else the newest the major's torch wheels
 * pin), handles, legacy descriptors that answer back what was set, v7
 * algorithm queries that return one deterministic algorithm, and the
 * backend (graph) API that cudnn_frontend drives for convolutions and
 * attention, answered per descriptor type and attribute.
 *
 * Workspace and reserve sizes are 0 (but an RNN's reserve, see
 * cudnn_rnn.c): the real ones depend on the engine the library picks on a
 * given card, which is not simulated. Compute calls are generated no-ops.
 */
#include "../stub.h"

#if SIMGPU_CUDA_MAJOR >= 13
#define DEFAULT_VERSION 92600 /* cuDNN 9.26.0 (torch 2.15.0+cu132) */
#define CUDART 13020
#else
#define DEFAULT_VERSION 91002 /* cuDNN 9.10.2 (torch 2.8.0+cu128) */
#define CUDART 12080
#endif

static size_t version(void) {
  const char *v = getenv("FAKECUDA_CUDNN_VERSION");
  return v && *v ? strtoull(v, NULL, 10) : DEFAULT_VERSION;
}
STUB_EXPORT size_t cudnnGetVersion(void) { return version(); }
STUB_EXPORT size_t cudnnGetMaxDeviceVersion(void) { return 1000; }
STUB_EXPORT size_t cudnnGetCudartVersion(void) { return CUDART; }
STUB_EXPORT int cudnnGetProperty(int type, int *value) {
  size_t v = version();
  *value = (int)(type == 0 ? v / 10000 : type == 1 ? v / 100 % 100 : v % 100);
  return 0;
}
STUB_EXPORT const char *cudnnGetErrorString(int status) { return status == 0 ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_INTERNAL_ERROR (simulated)"; }
STUB_EXPORT void cudnnGetLastErrorString(char *message, size_t max) { if (max) message[0] = 0; }

/* What cuDNN was asked to run (graph executions and legacy convolutions),
 * for a test to tell that PyTorch took its cuDNN path. */
static unsigned long long executions;
static void count_execution(void) { __atomic_add_fetch(&executions, 1, __ATOMIC_RELAXED); }
STUB_EXPORT unsigned long long vramkit_simgpu_cudnn_executions(void) { return __atomic_load_n(&executions, __ATOMIC_RELAXED); }
STUB_EXPORT int cudnnConvolutionForward(void) { count_execution(); return 0; }
STUB_EXPORT int cudnnConvolutionBackwardData(void) { count_execution(); return 0; }
STUB_EXPORT int cudnnConvolutionBackwardFilter(void) { count_execution(); return 0; }

typedef struct { void *stream; } Handle;
STUB_EXPORT int cudnnCreate(Handle **h) { *h = simgpu_object(sizeof(Handle)); return 0; }
STUB_EXPORT int cudnnDestroy(Handle *h) { free(h); return 0; }
STUB_EXPORT int cudnnSetStream(Handle *h, void *stream) { h->stream = stream; return 0; }
STUB_EXPORT int cudnnGetStream(Handle *h, void **stream) { *stream = h->stream; return 0; }

/* ---- legacy descriptors ------------------------------------------------ */
#define MAX_DIMS 8
typedef struct { int data_type, format, nb_dims, dims[MAX_DIMS], strides[MAX_DIMS]; } Legacy;

#define CREATE_DESTROY(kind)                                                   \
  STUB_EXPORT int cudnnCreate##kind(Legacy **d) { *d = simgpu_object(sizeof(Legacy)); return 0; } \
  STUB_EXPORT int cudnnDestroy##kind(Legacy *d) { free(d); return 0; }
CREATE_DESTROY(TensorDescriptor)
CREATE_DESTROY(FilterDescriptor)
CREATE_DESTROY(ConvolutionDescriptor)
CREATE_DESTROY(ActivationDescriptor)
CREATE_DESTROY(PoolingDescriptor)
CREATE_DESTROY(DropoutDescriptor)
CREATE_DESTROY(CTCLossDescriptor)
CREATE_DESTROY(SpatialTransformerDescriptor)
#undef CREATE_DESTROY

static void keep_dims(Legacy *d, int n, const int *dims, const int *strides) {
  d->nb_dims = n < MAX_DIMS ? n : MAX_DIMS;
  for (int i = 0; i < d->nb_dims; i++) {
    d->dims[i] = dims[i];
    d->strides[i] = strides ? strides[i] : 0;
  }
}
static void give_dims(const Legacy *d, int requested, int *n, int *dims, int *strides) {
  *n = d->nb_dims;
  for (int i = 0; i < d->nb_dims && i < requested; i++) {
    if (dims) dims[i] = d->dims[i];
    if (strides) strides[i] = d->strides[i];
  }
}
STUB_EXPORT int cudnnSetTensorNdDescriptor(Legacy *d, int type, int n, const int *dims, const int *strides) {
  d->data_type = type;
  keep_dims(d, n, dims, strides);
  return 0;
}
STUB_EXPORT int cudnnGetTensorNdDescriptor(const Legacy *d, int requested, int *type, int *n, int *dims, int *strides) {
  *type = d->data_type;
  give_dims(d, requested, n, dims, strides);
  return 0;
}
STUB_EXPORT int cudnnSetFilterNdDescriptor(Legacy *d, int type, int format, int n, const int *dims) {
  d->data_type = type;
  d->format = format;
  keep_dims(d, n, dims, NULL);
  return 0;
}
STUB_EXPORT int cudnnGetFilterNdDescriptor(const Legacy *d, int requested, int *type, int *format, int *n, int *dims) {
  *type = d->data_type;
  *format = d->format;
  give_dims(d, requested, n, dims, NULL);
  return 0;
}

/* ---- sizes PyTorch allocates: all 0 (see the top) ---------------------- */
#define SIZE_QUERY(name, params, out) \
  STUB_EXPORT int name params { *(out) = 0; return 0; }
SIZE_QUERY(cudnnGetConvolutionForwardWorkspaceSize, (void *h, void *x, void *w, void *c, void *y, int algo, size_t *s), s)
SIZE_QUERY(cudnnGetConvolutionBackwardDataWorkspaceSize, (void *h, void *w, void *dy, void *c, void *dx, int algo, size_t *s), s)
SIZE_QUERY(cudnnGetConvolutionBackwardFilterWorkspaceSize, (void *h, void *x, void *dy, void *c, void *dw, int algo, size_t *s), s)
SIZE_QUERY(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize,
           (void *h, int mode, int ops, void *x, void *z, void *y, void *bn, void *act, size_t *s), s)
SIZE_QUERY(cudnnGetBatchNormalizationBackwardExWorkspaceSize,
           (void *h, int mode, int ops, void *x, void *y, void *dy, void *dz, void *dx, void *dbn, void *act, size_t *s), s)
SIZE_QUERY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize, (void *h, int mode, int ops, void *act, void *x, size_t *s), s)
SIZE_QUERY(cudnnDropoutGetStatesSize, (void *h, size_t *s), s)
SIZE_QUERY(cudnnDropoutGetReserveSpaceSize, (void *x, size_t *s), s)
SIZE_QUERY(cudnnGetCTCLossWorkspaceSize,
           (void *h, void *probs, void *grads, const int *labels, const int *label_lengths, const int *input_lengths, int algo,
            void *ctc, size_t *s), s)
SIZE_QUERY(cudnnGetCTCLossWorkspaceSize_v8, (void *h, int algo, void *ctc, void *probs, void *grads, size_t *s), s)
#undef SIZE_QUERY

/* ---- v7 algorithm queries: one deterministic algorithm ------------------ */
/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout. */
typedef struct { int algo, status; float time; size_t memory; int determinism, math_type, reserved[3]; } AlgoPerf;
static int one_algorithm(int requested, int *returned, AlgoPerf *perf) {
  *returned = requested > 0 ? 1 : 0;
  if (requested > 0) {
    memset(perf, 0, sizeof *perf);
    perf->algo = 1;         /* IMPLICIT_PRECOMP_GEMM / ALGO_1: exist for every layout */
    perf->time = 0.01f;
    perf->determinism = 1;  /* CUDNN_DETERMINISTIC */
    perf->math_type = 1;    /* CUDNN_TENSOR_OP_MATH */
  }
  return 0;
}
STUB_EXPORT int cudnnGetConvolutionForwardAlgorithm_v7(void *h, void *x, void *w, void *c, void *y, int requested,
                                                       int *returned, AlgoPerf *perf) {
  return one_algorithm(requested, returned, perf);
}
STUB_EXPORT int cudnnGetConvolutionBackwardDataAlgorithm_v7(void *h, void *w, void *dy, void *c, void *dx, int requested,
                                                            int *returned, AlgoPerf *perf) {
  return one_algorithm(requested, returned, perf);
}
STUB_EXPORT int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void *h, void *x, void *dy, void *c, void *dw, int requested,
                                                              int *returned, AlgoPerf *perf) {
  return one_algorithm(requested, returned, perf);
}
#define FIND(name)                                                                                            \
  STUB_EXPORT int name(void *h, void *a, void *pa, void *b, void *pb, void *c, void *d, void *pd, int requested, \
                       int *returned, AlgoPerf *perf, void *ws, size_t ws_bytes) {                           \
    return one_algorithm(requested, returned, perf);                                                          \
  }
FIND(cudnnFindConvolutionForwardAlgorithmEx)
FIND(cudnnFindConvolutionBackwardDataAlgorithmEx)
FIND(cudnnFindConvolutionBackwardFilterAlgorithmEx)
#undef FIND

#include "cudnn_backend.c"
#include "cudnn_rnn.c"
