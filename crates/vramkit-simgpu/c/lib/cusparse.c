/*
 * cuSPARSE: the creators hand out objects through their first argument,
 * and every buffer-size query torch makes answers 0 (size_query.h), as does
 * the size of a sparse matrix. Sparse products themselves are generated
 * no-ops.
 */
#include "../stub.h"
#include "size_query.h"

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

SIZE_QUERY(cusparseCbsrsm2_bufferSize, int, 14)
SIZE_QUERY(cusparseCbsrsv2_bufferSize, int, 12)
SIZE_QUERY(cusparseCcsrgeam2_bufferSizeExt, int64_t, 20)
SIZE_QUERY(cusparseDbsrsm2_bufferSize, int, 14)
SIZE_QUERY(cusparseDbsrsv2_bufferSize, int, 12)
SIZE_QUERY(cusparseDcsrgeam2_bufferSizeExt, int64_t, 20)
SIZE_QUERY(cusparseSDDMM_bufferSize, int64_t, 11)
SIZE_QUERY(cusparseSbsrsm2_bufferSize, int, 14)
SIZE_QUERY(cusparseSbsrsv2_bufferSize, int, 12)
SIZE_QUERY(cusparseScsrgeam2_bufferSizeExt, int64_t, 20)
SIZE_QUERY(cusparseSpGEMM_compute, int64_t, 12)
SIZE_QUERY(cusparseSpGEMM_workEstimation, int64_t, 12)
SIZE_QUERY(cusparseSpMM_bufferSize, int64_t, 11)
SIZE_QUERY(cusparseSpMV_bufferSize, int64_t, 10)
SIZE_QUERY(cusparseSpMatGetSize, int64_t, 2, 3, 4)
SIZE_QUERY(cusparseSpSM_bufferSize, int64_t, 11)
SIZE_QUERY(cusparseSpSV_bufferSize, int64_t, 10)
SIZE_QUERY(cusparseXcoosort_bufferSizeExt, int64_t, 7)
SIZE_QUERY(cusparseXcsrsort_bufferSizeExt, int64_t, 7)
SIZE_QUERY(cusparseZbsrsm2_bufferSize, int, 14)
SIZE_QUERY(cusparseZbsrsv2_bufferSize, int, 12)
SIZE_QUERY(cusparseZcsrgeam2_bufferSizeExt, int64_t, 20)
