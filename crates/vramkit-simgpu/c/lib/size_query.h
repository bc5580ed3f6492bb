/*
 * Size queries of cuSOLVER and cuSPARSE: each writes the workspace a call
 * needs through an out-parameter that PyTorch then allocates, so a stub
 * that leaves it unset makes PyTorch ask for gigabytes of garbage. The
 * simulated size is 0 (linear algebra and sparse work are not simulated).
 *
 * Every parameter of these functions is of the integer class (pointers,
 * ints, enums, 64-bit counts), so on x86-64 the k-th argument is where a
 * function of twenty integer parameters finds its k-th; positions and
 * types come from NVIDIA's headers (as cudarc's bindings reproduce them).
 */
#include <stdint.h>

#define SIZE_QUERY_PARAMS                                                                                   \
  uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t a4, uintptr_t a5, uintptr_t a6, uintptr_t a7,          \
      uintptr_t a8, uintptr_t a9, uintptr_t a10, uintptr_t a11, uintptr_t a12, uintptr_t a13, uintptr_t a14, \
      uintptr_t a15, uintptr_t a16, uintptr_t a17, uintptr_t a18, uintptr_t a19, uintptr_t a20

/* `name` answers 0, as `type`, through its arguments at the 1-based
 * positions given. */
#define SIZE_QUERY(name, type, ...)                                                                        \
  STUB_EXPORT int name(SIZE_QUERY_PARAMS) {                                                                \
    uintptr_t arg[] = {0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20}; \
    int at[] = {__VA_ARGS__};                                                                              \
    for (size_t i = 0; i < sizeof at / sizeof *at; i++)                                                    \
      if (arg[at[i]]) *(type *)arg[at[i]] = 0;                                                             \
    return 0;                                                                                              \
  }
