// The PyTorch harness: drives PyTorch's own CUDA caching allocator
// (libc10_cuda.so from a torch wheel) on vramkit's fake CUDA runtime, from a
// program of operations on stdin, and reports what PyTorch did.
//
// Built once per torch release with -DVK_TORCH=<major*100+minor> against that
// release's headers. Settings come from PYTORCH_CUDA_ALLOC_CONF, as in
// PyTorch; the fake device's capacity from FAKECUDA_TOTAL.
//
// Program (one operation a line; blank lines and lines starting '#' ignored):
//   m ID SIZE STREAM   malloc SIZE bytes on stream STREAM (0: the default
//                      stream; 1, 2, ...: side streams from PyTorch's pool)
//   f ID               free it
//   r ID STREAM        record_stream(ID, STREAM)
//   c                  complete every recorded event (FAKECUDA_EVENTS=manual)
//   e                  torch.cuda.empty_cache()
//   x FRACTION         torch.cuda.set_per_process_memory_fraction(FRACTION)
//   g CONF             torch.cuda.memory._set_allocator_settings(CONF)
//   b POOL STREAM      begin allocating to private pool (0, POOL) from STREAM
//   n POOL             end allocating to pool (0, POOL)
//   d POOL             release pool (0, POOL)
//   k                  torch.cuda.reset_peak_memory_stats()
//   s PATH             write the snapshot (torch.cuda.memory._snapshot()'s
//                      shape, as JSON) to PATH
//   p                  print memory_stats() (flattened keys, as Python's)
//   t N SIZE           time N cache-hit malloc+free pairs of SIZE bytes
//
// Output, one JSON object a line on stdout:
//   {"line": L, "oom": "<PyTorch's OutOfMemoryError text>"}   a malloc that raised
//   {"line": L, "stats": {...}}                               for p
//   {"line": L, "pair_ns": X, "size": S, "pairs": N}          for t
//   {"line": L, "error": "..."}                               any other error
//   {"line": L, "stream": I, "handle": H}                     side stream I is cudaStream_t H
// History is recorded from the start (state context only, every entry kept)
// unless VK_HISTORY=0.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#if VK_TORCH >= 204
#include <c10/cuda/CUDAAllocatorConfig.h>
#endif
#if VK_TORCH >= 209
#include <c10/core/AllocatorConfig.h>
#endif
#if VK_TORCH >= 211
#include <c10/cuda/PeerToPeerAccess.h>
#endif

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

// What libtorch_cuda registers at start-up (not in the installed headers):
// whether a device has a CUDA context. The fake device always has one.
namespace c10::cuda::_internal {
C10_CUDA_API void setHasPrimaryContext(bool (*func)(c10::DeviceIndex));
}

namespace cca = c10::cuda::CUDACachingAllocator;
using TraceEntry = cca::TraceEntry;

extern "C" void fakecuda_complete_events(void);

static std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += (char)c;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c < 0x20) {
      char b[8];
      snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += (char)c;
    }
  }
  return o + "\"";
}

static const char* action_name(TraceEntry::Action a) {
  switch (a) {
    case TraceEntry::ALLOC: return "alloc";
    case TraceEntry::FREE_REQUESTED: return "free_requested";
    case TraceEntry::FREE_COMPLETED: return "free_completed";
    case TraceEntry::SEGMENT_ALLOC: return "segment_alloc";
    case TraceEntry::SEGMENT_FREE: return "segment_free";
    case TraceEntry::SEGMENT_MAP: return "segment_map";
    case TraceEntry::SEGMENT_UNMAP: return "segment_unmap";
    case TraceEntry::SNAPSHOT: return "snapshot";
    case TraceEntry::OOM: return "oom";
    default: return "user_defined";
  }
}

template <typename P>
static long long stream_value(P s) { return (long long)(intptr_t)s; }

// The snapshot as torch.cuda.memory._snapshot() returns it (keys as the
// release's Python layer writes them), as JSON.
static void write_snapshot(const std::string& path) {
  auto snap = cca::snapshot();
  std::ofstream out(path);
  out << "{\"segments\": [";
  bool first = true;
  for (auto& seg : snap.segments) {
    out << (first ? "" : ", ");
    first = false;
    out << "{\"device\": " << (int)seg.device << ", \"address\": " << seg.address
        << ", \"total_size\": " << seg.total_size << ", \"allocated_size\": " << seg.allocated_size
        << ", \"active_size\": " << seg.active_size << ", \"requested_size\": " << seg.requested_size
        << ", \"stream\": " << stream_value(seg.stream) << ", \"segment_type\": \""
        << (seg.is_large ? "large" : "small") << "\", \"segment_pool_id\": ["
        << seg.owner_private_pool_id.first << ", " << seg.owner_private_pool_id.second << "]"
        << ", \"is_expandable\": " << (seg.is_expandable ? "true" : "false") << ", \"frames\": [], \"blocks\": [";
    size_t addr = seg.address;
    bool fb = true;
    for (auto& b : seg.blocks) {
      out << (fb ? "" : ", ");
      fb = false;
      const char* state = b.allocated ? "active_allocated" : (b.active ? "active_pending_free" : "inactive");
      out << "{\"address\": " << addr << ", \"size\": " << b.size << ", \"requested_size\": " << b.requested_size
          << ", \"state\": \"" << state << "\", \"frames\": []}";
      addr += b.size;
    }
    out << "]}";
  }
  out << "], \"device_traces\": [";
  bool fd = true;
  for (auto& trace : snap.device_traces) {
    out << (fd ? "" : ", ") << "[";
    fd = false;
    bool fe = true;
    for (auto& te : trace) {
      out << (fe ? "" : ", ");
      fe = false;
      // As torch/csrc/cuda/memory_snapshot.cpp writes an entry: no
      // `frames` key without a recorded context (none is recorded here).
      out << "{\"action\": \"" << action_name(te.action_) << "\", "
          << (te.action_ == TraceEntry::OOM ? "\"device_free\": " : "\"addr\": ") << te.addr_
          << ", \"size\": " << te.size_ << ", \"stream\": " << stream_value(te.stream_)
#if VK_TORCH >= 208
          << ", \"compile_context\": " << json_str(te.compile_context_)
#endif
#if VK_TORCH >= 210
          << ", \"user_metadata\": " << json_str(te.user_metadata_)
#endif
#if VK_TORCH >= 215
          << ", \"internal_metadata\": " << json_str(te.internal_metadata_)
#endif
          << ", \"time_us\": " << (long long)te.time_.t_ << "}";
    }
    out << "]";
  }
  out << "]";
#if VK_TORCH >= 204
  auto& c = snap.config_metadata;
  out << ", \"allocator_settings\": {\"PYTORCH_CUDA_ALLOC_CONF\": " << json_str(c.last_allocator_settings)
      << ", \"max_split_size\": " << (long long)c.max_split_size
      << ", \"garbage_collection_threshold\": " << c.garbage_collection_threshold
      << ", \"expandable_segments\": " << (c.expandable_segments ? "true" : "false")
      << ", \"pinned_num_register_threads\": " << c.pinned_num_register_threads
      << ", \"release_lock_on_cudamalloc\": " << (c.release_lock_on_malloc ? "true" : "false")
      << ", \"pinned_use_cuda_host_register\": " << (c.pinned_use_host_register ? "true" : "false")
#if VK_TORCH >= 209
      << ", \"graph_capture_record_stream_reuse\": " << (c.graph_capture_record_stream_reuse ? "true" : "false")
#endif
#if VK_TORCH >= 213
      << ", \"max_round_threshold\": " << (long long)c.max_round_threshold
      << ", \"max_cached_size\": " << (long long)c.max_cached_size
#endif
      << ", \"roundup_power2_divisions\": {";
  size_t interval = 1;
  for (size_t i = 0; i < c.roundup_power2_divisions.size(); i++) {
    out << (i ? ", " : "") << "\"" << interval << "\": " << c.roundup_power2_divisions[i];
    interval *= 2;
  }
  out << "}}";
#endif
#if VK_TORCH >= 206
  out << ", \"external_annotations\": []";
#endif
  out << "}\n";
}

template <typename Stat>
static void put_stat(std::ostringstream& o, bool& first, const std::string& name, const Stat& s) {
  for (auto [k, v] : {std::pair<const char*, int64_t>{"allocated", s.allocated}, {"current", s.current},
                      {"freed", s.freed}, {"peak", s.peak}}) {
    o << (first ? "" : ", ") << "\"" << name << "." << k << "\": " << v;
    first = false;
  }
}

template <typename Stats>
static std::string stats_json(const Stats& st) {
  std::ostringstream o;
  bool first = true;
  auto array = [&](const char* name, const auto& a) {
    const char* types[] = {"all", "small_pool", "large_pool"};
    for (int i = 0; i < 3; i++) put_stat(o, first, std::string(name) + "." + types[i], a[i]);
  };
  auto scalar = [&](const char* name, int64_t v) {
    o << (first ? "" : ", ") << "\"" << name << "\": " << v;
    first = false;
  };
  array("active", st.active);
  array("active_bytes", st.active_bytes);
  array("allocated_bytes", st.allocated_bytes);
  array("allocation", st.allocation);
  array("inactive_split", st.inactive_split);
  array("inactive_split_bytes", st.inactive_split_bytes);
  scalar("max_split_size", st.max_split_size);
  scalar("num_alloc_retries", st.num_alloc_retries);
#if VK_TORCH >= 202
  scalar("num_device_alloc", st.num_device_alloc);
  scalar("num_device_free", st.num_device_free);
#endif
#if VK_TORCH >= 213
  scalar("num_oom_rejections", st.num_oom_rejections);
#endif
  scalar("num_ooms", st.num_ooms);
#if VK_TORCH >= 202
  scalar("num_sync_all_streams", st.num_sync_all_streams);
#endif
  put_stat(o, first, "oversize_allocations", st.oversize_allocations);
  put_stat(o, first, "oversize_segments", st.oversize_segments);
  array("requested_bytes", st.requested_bytes);
  array("reserved_bytes", st.reserved_bytes);
  array("segment", st.segment);
  return "{" + o.str() + "}";
}

static std::shared_ptr<c10::GatheredContext> no_context() { return nullptr; }

static void set_allocator_settings(const std::string& conf) {
#if VK_TORCH >= 209
  c10::CachingAllocator::setAllocatorSettings(conf);
#else
  cca::setAllocatorSettings(conf);
#endif
}

int main() {
  c10::cuda::_internal::setHasPrimaryContext([](c10::DeviceIndex) { return true; });
#if VK_TORCH >= 211
  c10::cuda::detail::init_p2p_access_cache(1);
#endif
  cca::init(1);
  const char* hist = getenv("VK_HISTORY");
  if (!hist || std::string(hist) != "0") {
#if VK_TORCH >= 211
    cca::recordHistory(true, no_context, SIZE_MAX / 2, cca::RecordContext::STATE, false, {});
#elif VK_TORCH >= 208
    cca::recordHistory(true, no_context, SIZE_MAX / 2, cca::RecordContext::STATE, false);
#else
    cca::recordHistory(true, no_context, SIZE_MAX / 2, cca::RecordContext::STATE);
#endif
  }
  std::vector<c10::cuda::CUDAStream> streams;
  streams.push_back(c10::cuda::getDefaultCUDAStream(0));
  std::unordered_map<long long, void*> live;
  std::string line;
  long long lineno = 0;
  auto stream_of = [&](int i) {
    while ((int)streams.size() <= i) {
      streams.push_back(c10::cuda::getStreamFromPool(false, 0));
      printf("{\"line\": %lld, \"stream\": %zu, \"handle\": %lld}\n", lineno, streams.size() - 1,
             stream_value(streams.back().stream()));
    }
    return streams[i];
  };
  auto report_error = [&](const std::string& what) {
    printf("{\"line\": %lld, \"error\": %s}\n", lineno, json_str(what).c_str());
  };
  while (std::getline(std::cin, line)) {
    lineno++;
    std::istringstream in(line);
    std::string op;
    if (!(in >> op) || op[0] == '#') continue;
    try {
      if (op == "m") {
        long long id;
        size_t size;
        int s;
        in >> id >> size >> s;
        try {
          live[id] = cca::raw_alloc_with_stream(size, stream_of(s).stream());
        } catch (const c10::OutOfMemoryError& e) {
          printf("{\"line\": %lld, \"oom\": %s}\n", lineno, json_str(e.what_without_backtrace()).c_str());
        }
      } else if (op == "f") {
        long long id;
        in >> id;
        auto it = live.find(id);
        if (it != live.end()) {
          cca::raw_delete(it->second);
          live.erase(it);
        }
      } else if (op == "r") {
        long long id;
        int s;
        in >> id >> s;
        auto it = live.find(id);
        if (it != live.end()) {
          // recordStream acts only on memory whose deleter is the
          // allocator's own; the context is released, not freed, after.
          c10::DataPtr dp(it->second, it->second, cca::get()->raw_deleter(), c10::Device(c10::DeviceType::CUDA, 0));
          cca::recordStream(dp, stream_of(s));
          dp.release_context();
        }
      } else if (op == "c") {
        fakecuda_complete_events();
      } else if (op == "e") {
        cca::emptyCache();
      } else if (op == "x") {
        double f;
        in >> f;
        cca::setMemoryFraction(f, 0);
      } else if (op == "g") {
        std::string conf;
        std::getline(in >> std::ws, conf);
        set_allocator_settings(conf);
      } else if (op == "b") {
        unsigned long long pool;
        int s;
        in >> pool >> s;
        cudaStream_t want = stream_of(s).stream();
#if VK_TORCH >= 204
        cca::beginAllocateToPool(0, {0, pool}, [want](cudaStream_t st) { return st == want; });
#else
        cca::beginAllocateStreamToPool(0, want, {0, pool});
#endif
      } else if (op == "n") {
        unsigned long long pool;
        in >> pool;
#if VK_TORCH >= 204
        cca::endAllocateToPool(0, {0, pool});
#else
        (void)pool;
        cca::endAllocateStreamToPool(0, stream_of(0).stream());
#endif
      } else if (op == "d") {
        unsigned long long pool;
        in >> pool;
        cca::releasePool(0, {0, pool});
      } else if (op == "k") {
        cca::resetPeakStats(0);
      } else if (op == "s") {
        std::string path;
        in >> path;
        write_snapshot(path);
      } else if (op == "p") {
        printf("{\"line\": %lld, \"stats\": %s}\n", lineno, stats_json(cca::getDeviceStats(0)).c_str());
      } else if (op == "t") {
        long long n;
        size_t size;
        in >> n >> size;
        auto st = stream_of(0).stream();
        void* p = cca::raw_alloc_with_stream(size, st);
        cca::raw_delete(p);
        auto t0 = std::chrono::steady_clock::now();
        for (long long i = 0; i < n; i++) {
          void* q = cca::raw_alloc_with_stream(size, st);
          cca::raw_delete(q);
        }
        auto t1 = std::chrono::steady_clock::now();
        double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / (double)n;
        printf("{\"line\": %lld, \"pair_ns\": %.2f, \"size\": %zu, \"pairs\": %lld}\n", lineno, ns, size, n);
      } else {
        report_error("unknown operation '" + op + "'");
      }
    } catch (const c10::Error& e) {
      report_error(e.what_without_backtrace());
    } catch (const std::exception& e) {
      report_error(e.what());
    }
    fflush(stdout);
  }
  return 0;
}
