/*
 * NCCL for a world of one process on one GPU: communicators exist, know
 * their rank and size, and every collective is a generated no-op (the data
 * of one rank is already the result). Multi-process jobs are not simulated.
 */
#include "../stub.h"

#if SIMGPU_CUDA_MAJOR >= 13
#define VERSION 23007 /* NCCL 2.30.7: major * 10000 + minor * 100 + patch */
#else
#define VERSION 22703 /* NCCL 2.27.3 */
#endif

typedef struct { int ranks, rank; } Comm;
/* ncclUniqueId is passed by value: 128 bytes on the stack. */
typedef struct { char internal[128]; } UniqueId;

STUB_EXPORT int ncclGetVersion(int *v) { *v = VERSION; return 0; }
STUB_EXPORT const char *ncclGetErrorString(int result) { return result == 0 ? "no error" : "simulated NCCL error"; }
STUB_EXPORT const char *ncclGetLastError(Comm *c) { return ""; }
STUB_EXPORT int ncclGetUniqueId(UniqueId *id) { memset(id, 0, sizeof *id); return 0; }
static Comm *comm(int ranks, int rank) {
  Comm *c = simgpu_object(sizeof(Comm));
  c->ranks = ranks;
  c->rank = rank;
  return c;
}
STUB_EXPORT int ncclCommInitRank(Comm **c, int ranks, UniqueId id, int rank) { *c = comm(ranks, rank); return 0; }
STUB_EXPORT int ncclCommInitRankConfig(Comm **c, int ranks, UniqueId id, int rank, void *config) {
  *c = comm(ranks, rank);
  return 0;
}
STUB_EXPORT int ncclCommInitAll(Comm **comms, int n, const int *devices) {
  for (int i = 0; i < n; i++) comms[i] = comm(n, i);
  return 0;
}
STUB_EXPORT int ncclCommSplit(Comm *c, int color, int key, Comm **out, void *config) {
  *out = comm(1, 0);
  return 0;
}
STUB_EXPORT int ncclCommCount(const Comm *c, int *n) { *n = c->ranks; return 0; }
STUB_EXPORT int ncclCommUserRank(const Comm *c, int *rank) { *rank = c->rank; return 0; }
STUB_EXPORT int ncclCommGetAsyncError(Comm *c, int *error) { *error = 0; return 0; }
STUB_EXPORT int ncclCommDestroy(Comm *c) { free(c); return 0; }
STUB_EXPORT int ncclCommAbort(Comm *c) { free(c); return 0; }
