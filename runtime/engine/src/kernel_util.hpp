// kernel_util.hpp: helpers the pooling kernels share (internal header): the bf16 rounding of a
// vector, and the dispatch of two fused steps' flags to template instantiations.
#pragma once

#include <immintrin.h>

#include <type_traits>

#include "gemm.hpp"

namespace xs::engine {

// Every lane, for the maskz_ forms of max and permutexvar (GCC 12 warns on the plain ones'
// undefined source).
constexpr __mmask16 kAllLanes = 0xffff;

// 16 lanes rounded to bf16 by the one rounding rule (gemm.hpp's roundToBf16), which this loop
// vectorises.
__attribute__((target("avx512f"))) inline __m512 roundBf16(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
#pragma omp simd
  for (int j = 0; j < 16; ++j) t[j] = roundToBf16(t[j]);
  return _mm512_load_ps(t);
}

// run(relu, round) with each flag as a compile-time constant (std::bool_constant), so that a
// kernel instantiation for the four combinations is picked once a call.
template <class Run>
void withFlags(bool relu, bool round, Run run) {
  if (relu && round) run(std::true_type{}, std::true_type{});
  else if (relu) run(std::true_type{}, std::false_type{});
  else if (round) run(std::false_type{}, std::true_type{});
  else run(std::false_type{}, std::false_type{});
}

}  // namespace xs::engine
