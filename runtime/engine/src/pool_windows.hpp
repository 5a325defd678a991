// pool_windows.hpp: the 2x2 average pool's windows from channel planes, row by row (internal
// header). The pool from planes (ops_pool_planes.cpp) loads each row's pixels; the one-channel
// convolution with the pool fused in (conv_one_channel.cpp) hands them over from its
// registers. Both then sum, scale and interleave the same way: the same bits.
#pragma once

#include <cstdint>
#include <immintrin.h>

#include "channel_shuffles.hpp"
#include "kernel_util.hpp"

namespace xs::engine::detail {

// Lane indexes: a window's left and right pixels among 32 (two vectors), and the pixels 0..15
// and 16..31 from their windows.
struct PoolLanes {
  static constexpr int kLanes = 16;
  alignas(64) int left[kLanes], right[kLanes], low[kLanes], high[kLanes];
  PoolLanes() {
    for (int l = 0; l < kLanes; ++l) left[l] = 2 * l, right[l] = 2 * l + 1, low[l] = l / 2, high[l] = 8 + l / 2;
  }
};

inline const PoolLanes& poolLanes() {
  static const PoolLanes lanes;
  return lanes;
}

// One input row of 16 windows, pixels a (0..15) and b (16..31), zeros past the row, added to the
// windows' sums s: left pixels, then right. With kRelu, x > 0 ? x : +0 first (NaN and -0 give
// +0), and the row's mask bits to bits[0] and bits[1].
template <bool kRelu>
__attribute__((target("avx512f"))) inline __m512 addWindowRow(__m512 s, __m512 a, __m512 b, std::uint16_t* bits,
                                                               __m512i left, __m512i right) {
  if constexpr (kRelu) {
    const __m512 zero = _mm512_setzero_ps();
    const __mmask16 pa = _mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ), pb = _mm512_cmp_ps_mask(b, zero, _CMP_GT_OQ);
    a = _mm512_maskz_mov_ps(pa, a), b = _mm512_maskz_mov_ps(pb, b);
    bits[0] = pa, bits[1] = pb;
  }
  s = _mm512_add_ps(s, _mm512_permutex2var_ps(a, left, b));
  return _mm512_add_ps(s, _mm512_permutex2var_ps(a, right, b));
}

// The C channels' window sums / 4 (a power of two: exact), rounded to bf16 with kRound, stored
// interleaved as `valid` values of the channels-last row [windows, C] at out.
template <int C, bool kRound>
__attribute__((target("avx512f"))) inline void storeWindows(float* out, __m512 (&win)[C], int valid,
                                                             const Shuffles& sh) {
  constexpr int kLanes = 16;
#pragma GCC unroll 16
  for (int ch = 0; ch < C; ++ch) {
    win[ch] = _mm512_mul_ps(win[ch], _mm512_set1_ps(0.25f));
    if constexpr (kRound) win[ch] = roundBf16(win[ch]);
  }
#pragma GCC unroll 16
  for (int v = 0; v < C; ++v)
    if (v * kLanes < valid)
      _mm512_mask_storeu_ps(out + v * kLanes, firstLanes(valid - v * kLanes),
                            gatherPairs(win, C, sh.toRow[v], sh.toRowPair[v]));
}

}  // namespace xs::engine::detail
