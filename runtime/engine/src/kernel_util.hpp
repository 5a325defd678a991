// kernel_util.hpp: helpers the kernels share (internal header): the bf16 rounding of a vector,
// vdpbf16ps's words of two bf16 values, and the dispatch of two fused steps' flags to template
// instantiations; a 16 x 16 transpose of floats in registers.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gemm.hpp"

namespace xs::engine {

// Every lane, for the maskz_ forms of max and permutexvar (GCC 12 warns on the plain ones'
// undefined source).
constexpr __mmask16 kAllLanes = 0xffff;

// 16 lanes rounded to bf16 by the one rounding rule (gemm.hpp's bf16RoundedBits, written out in
// registers): ties to even; a NaN stays a NaN, made quiet.
__attribute__((target("avx512f"))) inline __m512 roundBf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(kAllLanes, u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i bits = _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The target of our kernels on vdpbf16ps (every CPU with AVX512-BF16 has the rest).
#define XS_DPBF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// vdpbf16ps's operand: 16 words of two bf16 values, lo's lanes rounded in the low halves and
// hi's in the high ones (vdpbf16ps adds the high halves' product first).
__attribute__((target("avx512f"))) inline __m512i pairWords(__m512 lo, __m512 hi) {
  return _mm512_or_si512(_mm512_maskz_srli_epi32(kAllLanes, _mm512_castps_si512(roundBf16(lo)), 16),
                         _mm512_castps_si512(roundBf16(hi)));
}

// The same of values that are bf16 already (their low halves zero, as a rounding producer
// leaves them): no rounding to do.
template <bool kRounded>
__attribute__((target("avx512f"))) inline __m512i pairWordsOf(__m512 lo, __m512 hi) {
  if constexpr (!kRounded)
    return pairWords(lo, hi);
  else
    return _mm512_or_si512(_mm512_maskz_srli_epi32(kAllLanes, _mm512_castps_si512(lo), 16), _mm512_castps_si512(hi));
}

// One step of a register tile on vdpbf16ps: G vectors of words, a + gi * stride (each loaded once),
// times J words broadcast, word(j): acc[gi][j] += a_gi . word(j), the high halves' product first.
template <int G, int J, class Word>
XS_DPBF16 inline void dpbf16Tile(__m512 (&acc)[G][J], const std::uint32_t* a, std::size_t stride, Word word) {
  __m512i av[G];
#pragma GCC unroll 4
  for (int gi = 0; gi < G; ++gi) {
    av[gi] = _mm512_load_si512(a + gi * stride);
    asm("" : "+v"(av[gi]));  // one load for its products: GCC would fold it into each
  }
#pragma GCC unroll 32
  for (int j = 0; j < J; ++j) {
    const __m512i xv = _mm512_set1_epi32(static_cast<int>(word(j)));
#pragma GCC unroll 4
    for (int gi = 0; gi < G; ++gi) acc[gi][j] = _mm512_dpbf16_ps(acc[gi][j], (__m512bh)av[gi], (__m512bh)xv);
  }
}

// The word of the two bf16 values at p (p[0] in the low half), for bits written as 16-bit
// values: read through memcpy, which the compiler makes one load.
inline std::uint32_t wordAt(const std::uint16_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// The side of transpose16's square: the lanes of a float vector.
constexpr int kTransposeSide = 16;

// The index vectors of transpose16's rounds (s = 8, 4, 2, 1): lane l of row i (bit s of i clear)
// keeps its own value where bit s of l is clear and takes row i + s's lane l - s where it is set;
// row i + s takes row i's lane l + s where that bit is clear and keeps its own where it is set.
struct TransposeLanes {
  alignas(64) int low[4][kTransposeSide], high[4][kTransposeSide];
  constexpr TransposeLanes() : low{}, high{} {
    for (int k = 0; k < 4; ++k) {
      const int s = 8 >> k;
      for (int l = 0; l < kTransposeSide; ++l) {
        low[k][l] = (l & s) ? kTransposeSide + l - s : l;
        high[k][l] = (l & s) ? kTransposeSide + l : l + s;
      }
    }
  }
};
inline constexpr TransposeLanes kTransposeLanes;

// 16 x 16 floats transposed in registers: four rounds of swapping off-diagonal blocks of s x s.
__attribute__((target("avx512f"))) inline void transpose16(__m512 (&r)[kTransposeSide]) {
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const int s = 8 >> k;
    const __m512i low = _mm512_load_si512(kTransposeLanes.low[k]), high = _mm512_load_si512(kTransposeLanes.high[k]);
#pragma GCC unroll 16
    for (int i = 0; i < kTransposeSide; ++i)
      if ((i & s) == 0) {
        const __m512 a = r[i], b = r[i + s];
        r[i] = _mm512_permutex2var_ps(a, low, b);
        r[i + s] = _mm512_permutex2var_ps(a, high, b);
      }
  }
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
