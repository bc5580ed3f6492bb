/*
 * cuSPARSE: the creators hand out objects through their first argument.
 * Buffer-size queries are generated no-ops (sparse work is not simulated).
 */
#include "../stub.h"

#define CREATOR(name) STUB_EXPORT int name(void **out) { *out = simgpu_object(16); return 0; }
CREATOR(cusparseCreate)
CREATOR(cusparseCreateMatDescr)
CREATOR(cusparseCreateCsr)
CREATOR(cusparseCreateCoo)
CREATOR(cusparseCreateDnMat)
CREATOR(cusparseCreateDnVec)
CREATOR(cusparseCreateBsrsm2Info)
CREATOR(cusparseCreateBsrsv2Info)
CREATOR(cusparseSpGEMM_createDescr)
CREATOR(cusparseSpSM_createDescr)
CREATOR(cusparseSpSV_createDescr)
#undef CREATOR
STUB_EXPORT const char *cusparseGetErrorString(int status) { return status == 0 ? "CUSPARSE_STATUS_SUCCESS" : "simulated cuSPARSE error"; }
