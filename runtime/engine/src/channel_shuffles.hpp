// channel_shuffles.hpp: between c vectors of 16 values, one per channel, and the channels-last
// row [16, c] they make (c vectors), c < 16 (internal header). Kernels that compute channel
// planes and read or write channels-last rows use it: the one-input-channel convolution
// (conv_one_channel.cpp) and the average pool from planes (ops_pool_planes.cpp).
#pragma once

#include <algorithm>
#include <immintrin.h>
#include <memory>

namespace xs::engine::detail {

// Row lane q = 16 v + l of row vector v is value q / c of channel q % c. One two-source permute
// per pair of sources (index: the lane in the source, plus 16 for the pair's second), blended by
// pairs.
struct Shuffles {
  static constexpr int kLanes = 16;
  alignas(64) int toRow[kLanes][kLanes];    // [v][l] from channel vectors
  alignas(64) int fromRow[kLanes][kLanes];  // [o][l] from row vectors
  __mmask16 toRowPair[kLanes][kLanes / 2], fromRowPair[kLanes][kLanes / 2];
  explicit Shuffles(int c) {
    std::fill(&toRowPair[0][0], &toRowPair[0][0] + kLanes * kLanes / 2, __mmask16(0));
    std::fill(&fromRowPair[0][0], &fromRowPair[0][0] + kLanes * kLanes / 2, __mmask16(0));
    for (int v = 0; v < c; ++v)
      for (int l = 0; l < kLanes; ++l) {
        const int q = v * kLanes + l, ch = q % c;  // row lane q from channel ch, value q / c
        toRow[v][l] = q / c + (ch % 2) * kLanes;
        toRowPair[v][ch / 2] = static_cast<__mmask16>(toRowPair[v][ch / 2] | (1u << l));
        const int p = l * c + v;  // channel v's value l: row lane p
        fromRow[v][l] = p % kLanes + (p / kLanes % 2) * kLanes;
        fromRowPair[v][p / kLanes / 2] = static_cast<__mmask16>(fromRowPair[v][p / kLanes / 2] | (1u << l));
      }
  }
};

// The tables for c channels, built once a thread (a pool fused into a convolution asks once
// an image).
inline const Shuffles& shufflesFor(int c) {
  static thread_local std::unique_ptr<Shuffles> tables[Shuffles::kLanes];
  if (!tables[c]) tables[c] = std::make_unique<Shuffles>(c);
  return *tables[c];
}

// The n sources src[0..n) gathered by one of Shuffles' indexes and its pair masks: row vector v
// from the channel vectors (toRow[v], toRowPair[v]), or channel o from the row vectors
// (fromRow[o], fromRowPair[o]).
__attribute__((target("avx512f"))) inline __m512 gatherPairs(const __m512* src, int n, const int* index,
                                                              const __mmask16* pairs) {
  const __m512i idx = _mm512_load_si512(index);
  __m512 out = _mm512_permutex2var_ps(src[0], idx, src[n > 1 ? 1 : 0]);
  for (int j = 1; 2 * j < n; ++j)
    out = _mm512_mask_blend_ps(pairs[j], out, _mm512_permutex2var_ps(src[2 * j], idx, src[std::min(2 * j + 1, n - 1)]));
  return out;
}

}  // namespace xs::engine::detail
