// malloc+free pairs on the cache-hit path, timed in C++ so that no Python
// call sits inside the loop. scripts/gpu/bench_torch.py compiles this file
// on the GPU machine with torch.utils.cpp_extension.load_inline (which puts
// `#include <torch/extension.h>` first and binds the two functions below).
//
//   time_torch(size, pairs)        c10::cuda::CUDACachingAllocator::
//                                  raw_alloc_with_stream / raw_delete: the
//                                  allocator PyTorch has installed in this
//                                  process (its own, or a pluggable one)
//   time_vramkit(lib, size, pairs) vramkit_malloc / vramkit_free from
//                                  libvramkit_capi.so opened with dlopen:
//                                  vramkit alone, not installed into PyTorch
//
// Both use the current device and its current stream, and return
// nanoseconds per pair, averaged over `pairs` pairs after one pair that
// puts the block in the cache.

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <dlfcn.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace malloc_pair {

using Clock = std::chrono::steady_clock;
using MallocFn = void* (*)(size_t, int, void*);
using FreeFn = void (*)(void*, size_t, int, void*);

struct Vramkit {
  std::string path;
  MallocFn malloc_fn = nullptr;
  FreeFn free_fn = nullptr;
};

// The library is opened once per process and kept open.
inline const Vramkit& vramkit(const std::string& path) {
  static Vramkit loaded;
  if (loaded.malloc_fn != nullptr) {
    if (loaded.path != path) {
      throw std::runtime_error("time_vramkit: " + loaded.path + " is already loaded");
    }
    return loaded;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("dlopen " + path + ": " + (why ? why : "unknown error"));
  }
  auto m = reinterpret_cast<MallocFn>(dlsym(handle, "vramkit_malloc"));
  auto f = reinterpret_cast<FreeFn>(dlsym(handle, "vramkit_free"));
  if (m == nullptr || f == nullptr) {
    throw std::runtime_error(path + " does not export vramkit_malloc and vramkit_free");
  }
  loaded.path = path;
  loaded.malloc_fn = m;
  loaded.free_fn = f;
  return loaded;
}

inline double per_pair(Clock::time_point start, Clock::time_point end, int64_t pairs) {
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(pairs);
}

}  // namespace malloc_pair

double time_torch(int64_t size, int64_t pairs) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  if (size <= 0 || pairs <= 0) {
    throw std::invalid_argument("time_torch: size and pairs must be positive");
  }
  const auto bytes = static_cast<size_t>(size);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  alloc::raw_delete(alloc::raw_alloc_with_stream(bytes, stream));
  const auto start = malloc_pair::Clock::now();
  for (int64_t i = 0; i < pairs; ++i) {
    void* p = alloc::raw_alloc_with_stream(bytes, stream);
    alloc::raw_delete(p);
  }
  return malloc_pair::per_pair(start, malloc_pair::Clock::now(), pairs);
}

double time_vramkit(std::string lib, int64_t size, int64_t pairs) {
  if (size <= 0 || pairs <= 0) {
    throw std::invalid_argument("time_vramkit: size and pairs must be positive");
  }
  const auto& v = malloc_pair::vramkit(lib);
  const auto bytes = static_cast<size_t>(size);
  const int device = static_cast<int>(c10::cuda::current_device());
  void* stream = static_cast<void*>(c10::cuda::getCurrentCUDAStream().stream());
  void* first = v.malloc_fn(bytes, device, stream);
  if (first == nullptr) {
    throw std::runtime_error("vramkit_malloc returned NULL (see stderr)");
  }
  v.free_fn(first, bytes, device, stream);
  const auto start = malloc_pair::Clock::now();
  for (int64_t i = 0; i < pairs; ++i) {
    void* p = v.malloc_fn(bytes, device, stream);
    v.free_fn(p, bytes, device, stream);
  }
  return malloc_pair::per_pair(start, malloc_pair::Clock::now(), pairs);
}
