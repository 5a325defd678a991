// pool_max2x2.hpp: one vector of 16 channels of a 2x2 max-pool window on AVX-512 (internal
// header): the scan order, the tie rule and the epilogue of the channels-last max-pool
// (ops_pool_nhwc.cpp), and its backward's pick and gradient, shared by the pool's own passes and
// by the convolution that pools its sums in registers and spreads the pool's gradient itself
// (conv_one_channel_wide_bf16.cpp, conv_wide_weights_bf16.cpp), so that both give the same bits.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernel_util.hpp"
#include "ops.hpp"

namespace xs::engine {

// Where a later pixel v wins over the best so far: greater, or NaN.
__attribute__((target("avx512f"))) inline __mmask16 laterWins(__m512 v, __m512 best) {
  return static_cast<__mmask16>(_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
}

// The window's pixels p[0..3] in scan order (row-major: offsets 0 to 3) -> its 16 pooled values
// at y and their window codes at code: the first pixel is the start, a later one wins where
// laterWins; then E's ReLU (max(0, v): NaN and -0 give +0) and rounding, and the pass bit
// (kPoolPasses) where the value is above zero (every lane without a ReLU).
template <PoolEpilogue E>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void maxPool2x2Vector(float* y, std::uint16_t* code,
                                                                                const __m512 (&p)[4]) {
  __m512 best = p[0];
  __m512i at = _mm512_setzero_si512();
#pragma GCC unroll 3
  for (int i = 1; i < 4; ++i) {
    const __mmask16 t = laterWins(p[i], best);
    best = _mm512_mask_mov_ps(best, t, p[i]);
    at = _mm512_mask_mov_epi32(at, t, _mm512_set1_epi32(i));
  }
  if constexpr (E != PoolEpilogue::kNone) {
    best = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_setzero_ps(), best, _CMP_LT_OQ), best);
    if constexpr (E == PoolEpilogue::kReluRoundedToBf16) best = roundBf16(best);
    // The value's bits above zero: relu's output is +0 or positive, never NaN.
    const __mmask16 pass = _mm512_cmpgt_epi32_mask(_mm512_castps_si512(best), _mm512_setzero_si512());
    at = _mm512_mask_or_epi32(at, pass, at, _mm512_set1_epi32(kPoolPasses));
  } else {
    at = _mm512_or_si512(at, _mm512_set1_epi32(kPoolPasses));
  }
  _mm512_storeu_ps(y, best);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(code), _mm512_maskz_cvtepi32_epi16(kAllLanes, at));
}

// The backward's side: the lanes whose window (16 codes) picked pixel `offset` (0-3) and passes
// dy to it; and a window's gradient from its dy, 0 + dy (a -0 gradient turns +0), rounded to
// bf16 with kRound.
__attribute__((target("avx512bw,avx512vl"))) inline __mmask16 maxPool2x2Picks(__m256i codes, int offset) {
  return _mm256_cmpeq_epi16_mask(codes, _mm256_set1_epi16(static_cast<short>(offset | kPoolPasses)));
}
template <bool kRound>
__attribute__((target("avx512f"))) inline __m512 maxPoolGradient(const float* dy) {
  const __m512 grad = _mm512_add_ps(_mm512_setzero_ps(), _mm512_loadu_ps(dy));
  if constexpr (kRound) return roundBf16(grad);
  return grad;
}

}  // namespace xs::engine
