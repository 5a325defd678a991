// onednn_context.hpp: the process's oneDNN CPU engine and each thread's in-order stream
// (internal header).
#pragma once

#include <omp.h>

#include <dnnl.hpp>

namespace xs::engine::detail {

// One CPU engine per process (primitives are bound to it); one in-order stream per thread.
inline dnnl::engine& oneDnnEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct OneDnnContext {
  dnnl::engine& eng = oneDnnEngine();
  dnnl::stream stream{eng};
};

// The context, with oneDNN's OpenMP pool held to one thread on the calling thread (the
// setting is per thread, and the engine may run on another thread than the Device's creator).
inline OneDnnContext& oneDnnContext() {
  thread_local OneDnnContext c;
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  return c;
}

}  // namespace xs::engine::detail
