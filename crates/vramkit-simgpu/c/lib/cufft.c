/*
 * cuFFT: plans are numbered handles; a plan needs no work area (the real
 * size depends on the transform and the card, and is not simulated).
 */
#include "../stub.h"

static int next_plan;
STUB_EXPORT int cufftCreate(int *plan) { *plan = __atomic_add_fetch(&next_plan, 1, __ATOMIC_RELAXED); return 0; }
STUB_EXPORT int cufftXtMakePlanMany(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
                                    int itype, long long *onembed, long long ostride, long long odist, int otype,
                                    long long batch, size_t *work, int etype) {
  *work = 0;
  return 0;
}
STUB_EXPORT int cufftGetVersion(int *v) { *v = SIMGPU_CUDA_MAJOR >= 13 ? 12000 : 11300; return 0; }
