/*
 * What every library stub of the simulated GPU shares. Each library is one
 * shared object built from c/lib/<family>.c (the functions PyTorch reads an
 * out-parameter of, or depends on the behaviour of) plus a generated file
 * with a weak `return 0` for every other symbol torch imports from it
 * (symbols/cuda<major>.txt); the hand-written definitions win at link time.
 *
 * SIMGPU_CUDA_MAJOR is the CUDA major the stack is built for (12 or 13).
 * VRAMKIT_SIMGPU_TRACE=1 prints each generated stub the first time it is
 * called, and what the hand-written ones trace: the way to find a call
 * whose out-parameter PyTorch reads and no stub sets.
 */
#ifndef SIMGPU_STUB_H
#define SIMGPU_STUB_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SIMGPU_CUDA_MAJOR
#error "compile with -DSIMGPU_CUDA_MAJOR=12 or 13"
#endif

#define STUB_EXPORT __attribute__((visibility("default")))

static inline int simgpu_tracing(void) {
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("VRAMKIT_SIMGPU_TRACE");
    on = v && *v && strcmp(v, "0") != 0;
  }
  return on;
}

__attribute__((format(printf, 1, 2))) static inline void simgpu_trace(const char *format, ...) {
  if (!simgpu_tracing()) return;
  va_list args;
  va_start(args, format);
  fputs("simgpu: ", stderr);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
  va_end(args);
}

/* A fresh opaque object for a handle or descriptor: distinct, zeroed,
 * `size` bytes the stub may keep state in. */
static inline void *simgpu_object(size_t size) {
  void *o = calloc(1, size < 16 ? 16 : size);
  if (!o) {
    fputs("simgpu: out of host memory\n", stderr);
    abort();
  }
  return o;
}

#endif
