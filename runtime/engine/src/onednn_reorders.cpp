// onednn_reorders.cpp: the convolutions' frequent layout changes on AVX-512 (onednn_reorders.hpp).
// The weights' blocks of 16 x 16 channels (a few KB with their taps, in L1) change layout by
// 16 x 16 transposes in registers; a bf16 pair's two halves are two rows converted and
// interleaved. Activations move 16 channels of a pixel at a time.
#include "onednn_reorders.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gemm.hpp"
#include "kernel_util.hpp"

namespace xs::engine::detail {
namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int kBlock = 16;

// 16 float lanes to bf16 bits by vcvtneps2bf16.
XS_DPBF16 inline __m256i bf16Bits(__m512 v) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  __m256i bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

// The same, each in the low half of its 32-bit lane.
XS_DPBF16 inline __m512i bf16Lanes(__m512 v) {
  return _mm512_maskz_cvtepu16_epi32(kAllLanes, bf16Bits(v));
}

// A block of w [oc][ic][taps] (16 output channels from o0, 16 input channels from i0), its rows
// of 16 * taps floats (input channel, then tap) transposed 16 columns at a time: st row
// i * taps + t holds w[o0 + lane][i0 + i][t].
__attribute__((target("avx512f"))) void transposeBlock(float* st, const float* w, int ic, int taps, int o0, int i0) {
  const std::size_t ocStride = static_cast<std::size_t>(ic) * taps;
  const float* rows = w + o0 * ocStride + static_cast<std::size_t>(i0) * taps;
  __m512 r[kBlock];
  for (int q = 0; q < taps; ++q) {
    for (int o = 0; o < kBlock; ++o) r[o] = _mm512_loadu_ps(rows + o * ocStride + q * kBlock);
    transpose16(r);
    for (int l = 0; l < kBlock; ++l) _mm512_storeu_ps(st + (q * kBlock + l) * kBlock, r[l]);
  }
}

// The word of two float vectors' lanes in bf16: lo's in the low half. (Not kernel_util.hpp's
// pairWords: its rounding keeps denormals, which oneDNN's conversion makes zeros.)
XS_DPBF16 inline __m512i pairOf(__m512 lo, __m512 hi) {
  return _mm512_or_si512(bf16Lanes(lo), _mm512_maskz_slli_epi32(kAllLanes, bf16Lanes(hi), 16));
}

// w [oc][ic][taps] -> [oc/16][ic/16][taps][8][16] words: in each block, word (v, lane) holds the
// pair (2v, 2v + 1) along one dimension (its first in the low half) at `lane` along the other.
// pairsOverIc: pairs of input channels, lanes the output channels (ABcd8b16a2b), straight from
// the transposed block; otherwise the reverse (ABcd8a16b2a), each tap's 16 rows of it transposed
// back. No gathers: on Zen 5 they took 1.2 cycles a value, these shuffles about a third of that.
// st: kBlock * kBlock * taps floats of staging.
XS_DPBF16 void weightPairs(std::uint32_t* dst, float* st, const float* w, int oc, int ic, int taps,
                           bool pairsOverIc) {
  for (int o0 = 0; o0 < oc; o0 += kBlock)
    for (int i0 = 0; i0 < ic; i0 += kBlock) {
      transposeBlock(st, w, ic, taps, o0, i0);
      const auto row = [&](int i, int t) { return st + (static_cast<std::size_t>(i) * taps + t) * kBlock; };
      for (int t = 0; t < taps; ++t) {
        __m512 r[kBlock];
        for (int i = 0; i < kBlock; ++i) r[i] = _mm512_loadu_ps(row(i, t));  // [input channel][output channel]
        if (!pairsOverIc) transpose16(r);                                     // [output channel][input channel]
        for (int v = 0; v < kBlock / 2; ++v, dst += kBlock) _mm512_storeu_si512(dst, pairOf(r[2 * v], r[2 * v + 1]));
      }
    }
}

// Weight gradients [oc/16][ic/16][taps][16 ic][16 oc] (float32) -> dw [oc][ic][taps]: each block
// read in transposeBlock's row order (input channel, then tap) and transposed back 16 rows at a
// time into 16 columns of each output channel's row.
__attribute__((target("avx512f"))) void gradBlocksToPlain(float* dw, const float* g, int oc, int ic, int taps) {
  const std::size_t ocStride = static_cast<std::size_t>(ic) * taps;
  const std::size_t block = static_cast<std::size_t>(kBlock) * kBlock * taps;
  for (int o0 = 0; o0 < oc; o0 += kBlock)
    for (int i0 = 0; i0 < ic; i0 += kBlock, g += block) {
      float* rows = dw + o0 * ocStride + static_cast<std::size_t>(i0) * taps;
      __m512 r[kBlock];
      for (int q = 0; q < taps; ++q) {
        for (int l = 0; l < kBlock; ++l) {
          const int i = (q * kBlock + l) / taps, t = (q * kBlock + l) % taps;
          r[l] = _mm512_loadu_ps(g + (t * kBlock + i) * kBlock);
        }
        transpose16(r);
        for (int o = 0; o < kBlock; ++o) _mm512_storeu_ps(rows + o * ocStride + q * kBlock, r[o]);
      }
    }
}

// Activations [n][pixels][c] (channels last) -> [n][c/16][pixels][16] (channel blocks), float32 or
// bf16, pixel by pixel: one stream read, c / 16 written.
template <class Out>
XS_DPBF16 void blockPixels(Out* dst, const float* x, int n, int c, std::size_t pixels) {
  const int blocks = c / kBlock;
  const std::size_t image = pixels * c;
  for (int i = 0; i < n; ++i)
    for (std::size_t p = 0; p < pixels; ++p) {
      const float* in = x + i * image + p * c;
      Out* out = dst + i * image + p * kBlock;
      for (int b = 0; b < blocks; ++b, out += pixels * kBlock) {
        const __m512 v = _mm512_loadu_ps(in + b * kBlock);
        if constexpr (std::is_same_v<Out, float>) _mm512_storeu_ps(out, v);
        else _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bf16Bits(v));
      }
    }
}

bool is(const memory::desc& d, const memory::dims& dims, dt type, tag t) { return d == memory::desc(dims, type, t); }

}  // namespace

OwnReorder OwnReorder::between(const memory::desc& from, const memory::desc& to) {
  // oneDNN converts with vcvtneps2bf16 only where it runs at least avx512_core_bf16 (a lower
  // ONEDNN_MAX_CPU_ISA emulates the conversion): ours matches it there only.
  static const bool bf16 = cpuHasAvx512Bw() && cpuHasBf16() && oneDnnRunsAvx512Bf16();
  OwnReorder r;
  if (!bf16 || from.data.ndims != 4 || to.dims() != from.dims()) return r;
  const memory::dims dims = from.dims();
  if (dims[1] % kBlock != 0) return r;
  r.a_ = static_cast<int>(dims[0]), r.b_ = static_cast<int>(dims[1]);
  r.taps_ = static_cast<int>(dims[2] * dims[3]);
  const bool blocks = dims[0] % kBlock == 0;  // weights: whole blocks of output channels too
  const dt toType = to.data_type();
  if (is(from, dims, dt::f32, tag::acdb) && is(to, dims, toType, tag::aBcd16b) &&
      (toType == dt::f32 || toType == dt::bf16))
    r.kind_ = toType == dt::f32 ? kNhwcToBlocks : kNhwcToBf16Blocks;
  else if (blocks && is(from, dims, dt::f32, tag::abcd) && is(to, dims, dt::bf16, tag::ABcd8b16a2b))
    r.kind_ = kPairsOverIc;
  else if (blocks && is(from, dims, dt::f32, tag::abcd) && is(to, dims, dt::bf16, tag::ABcd8a16b2a))
    r.kind_ = kPairsOverOc;
  else if (blocks && is(from, dims, dt::f32, tag::ABcd16b16a) && is(to, dims, dt::f32, tag::abcd))
    r.kind_ = kGradBlocksToPlain;
  if (r.kind_ == kPairsOverIc || r.kind_ == kPairsOverOc)
    r.stage_.resize(static_cast<std::size_t>(kBlock) * kBlock * r.taps_);  // once, not a call
  return r;
}

void OwnReorder::operator()(const void* src, void* dst) const {
  const auto* f = static_cast<const float*>(src);
  const auto pixels = static_cast<std::size_t>(taps_);
  switch (kind_) {
    case kNone: break;
    case kNhwcToBlocks: return blockPixels(static_cast<float*>(dst), f, a_, b_, pixels);
    case kNhwcToBf16Blocks: return blockPixels(static_cast<std::uint16_t*>(dst), f, a_, b_, pixels);
    case kPairsOverIc: return weightPairs(static_cast<std::uint32_t*>(dst), stage_.data(), f, a_, b_, taps_, true);
    case kPairsOverOc: return weightPairs(static_cast<std::uint32_t*>(dst), stage_.data(), f, a_, b_, taps_, false);
    case kGradBlocksToPlain: return gradBlocksToPlain(static_cast<float*>(dst), f, a_, b_, taps_);
  }
}

}  // namespace xs::engine::detail
