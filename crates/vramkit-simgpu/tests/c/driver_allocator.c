/*
 * A CUDAPluggableAllocator that allocates with the CUDA driver API, opened
 * by name as cudarc opens it (dlopen("libcuda.so")): what vramkit's own
 * allocator does under vramkit.torch.enable(). Tensors then live at
 * addresses the runtime never handed out itself; its copies must still
 * treat them as device memory.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

typedef int (*init_fn)(unsigned);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);

static alloc_fn mem_alloc;
static free_fn mem_free;
static unsigned long long allocations;

static void *symbol(void *lib, const char *name) {
  void *f = dlsym(lib, name);
  if (!f) { fprintf(stderr, "driver_allocator: no %s\n", name); abort(); }
  return f;
}

static void load(void) {
  void *lib = dlopen("libcuda.so", RTLD_NOW);
  if (!lib) { fprintf(stderr, "driver_allocator: %s\n", dlerror()); abort(); }
  void *context = NULL;
  if (((init_fn)symbol(lib, "cuInit"))(0) || ((retain_fn)symbol(lib, "cuDevicePrimaryCtxRetain"))(&context, 0) ||
      ((set_fn)symbol(lib, "cuCtxSetCurrent"))(context)) abort();
  mem_alloc = (alloc_fn)symbol(lib, "cuMemAlloc_v2");
  mem_free = (free_fn)symbol(lib, "cuMemFree_v2");
}

void *driver_alloc(ssize_t size, int device, void *stream) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  (void)device; (void)stream;
  pthread_once(&once, load);
  unsigned long long p = 0;
  if (mem_alloc(&p, (size_t)size) != 0) return NULL;
  __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
  return (void *)p;
}

void driver_free(void *p, ssize_t size, int device, void *stream) {
  (void)size; (void)device; (void)stream;
  mem_free((unsigned long long)p);
}

unsigned long long driver_allocations(void) { return allocations; }
