/*
 * cuSOLVER: the creators hand out objects through their first argument.
 * Buffer-size queries are generated no-ops (linear algebra is not
 * simulated).
 */
#include "../stub.h"

#define CREATOR(name) STUB_EXPORT int name(void **out) { *out = simgpu_object(16); return 0; }
CREATOR(cusolverDnCreate)
CREATOR(cusolverDnCreateParams)
CREATOR(cusolverDnCreateSyevjInfo)
CREATOR(cusolverDnCreateGesvdjInfo)
#undef CREATOR
