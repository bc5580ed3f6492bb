/*
 * CUPTI, which the profiler (Kineto) starts: a version and result strings;
 * activity buffers stay empty, so a profile shows no GPU activity.
 */
#include "../stub.h"

STUB_EXPORT int cuptiGetVersion(uint32_t *v) { *v = SIMGPU_CUDA_MAJOR >= 13 ? 130000 : 120000; return 0; }
STUB_EXPORT int cuptiGetResultString(int result, const char **s) { *s = result == 0 ? "CUPTI_SUCCESS" : "CUPTI_ERROR_UNKNOWN"; return 0; }
STUB_EXPORT int cuptiActivityGetNumDroppedRecords(void *context, uint32_t stream, size_t *dropped) {
  *dropped = 0;
  return 0;
}
STUB_EXPORT int cuptiSubscribe(void **subscriber, void *callback, void *data) {
  *subscriber = simgpu_object(16);
  return 0;
}
STUB_EXPORT int cuptiGetCallbackName(int domain, uint32_t id, const char **name) { *name = "simulated"; return 0; }
