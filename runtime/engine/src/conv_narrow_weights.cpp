// conv_narrow_weights.cpp: the weight and bias gradients of a channels-last, stride-1
// convolution from fewer than 16 input channels into at most 16 outputs (LeNet-5's conv 2: 6
// channels into 16), the output channels as the vector. With the runs of kw * c values a tap row
// reads ((kx, ci) flatten like a row's (ix, ci)), every output pixel adds its dy vector times
// each value of its runs:
//
//   s[ky][j][o] = sum over images, rows oy and pixels ox, in that order, of
//                 dy[oy][ox][o] * xp[oy + ky][ox * c + j]          (j = kx * c + ci)
//   dw[o][ci][ky][kx] (+)= s[ky][kx * c + ci][o],   db[o] (+)= sum of dy[oy][ox][o] in that order
//
// with xp the padded channels-last image. A pass holds up to 30 sums of one tap row in registers
// (LeNet-5's whole run; two passes of 15 ran 1.04x slower) and streams the image's pixels: one
// load of dy a pixel, and x broadcast as each multiply-add's operand. Each sum runs from zero with
// fused multiply-adds in the order written, the same in the AVX-512 kernels and the portable
// loops (tested bit for bit). Emulated bf16 rounds x and dy
// once per call, unless they come rounded.
#include <algorithm>
#include <cmath>
#include <immintrin.h>

#include "conv_onednn.hpp"
#include "gemm.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxSums = 30;  // sums a pass: with dy's vector, 31 registers (x: the FMAs' operand)
// Scratch slots: the GEMM paths' and the other narrow convolutions', which do not run meanwhile.
constexpr int kSumSlot = 1, kPaddedSlot = 2, kRoundedXSlot = 4, kRoundedDySlot = 5;

// The geometry (NarrowRuns) and the sums s [kh][run][16], then the bias's [16].
struct Runs : NarrowRuns {
  using NarrowRuns::NarrowRuns;
  std::size_t sumCount() const { return (static_cast<std::size_t>(kh) * run + 1) * kLanes; }  // + the bias's
  float* sums(float* s, int ky, int j) const { return s + (static_cast<std::size_t>(ky) * run + j) * kLanes; }
};

// One image: sums j0.. (count of them) of tap row ky, and the bias's with `bias`.
void passPortable(float* s, const float* dy, const float* xp, const Runs& r, int ky, int j0, int count, bool bias) {
  for (int oy = 0; oy < r.oh; ++oy)
    for (int ox = 0; ox < r.ow; ++ox) {
      const float* d = dy + (static_cast<std::size_t>(oy) * r.ow + ox) * r.oc;
      const float* x = xp + static_cast<std::size_t>(oy + ky) * r.xpRow + ox * r.c + j0;
      for (int j = 0; j < count; ++j) {
        float* to = r.sums(s, ky, j0 + j);
        for (int o = 0; o < r.oc; ++o) to[o] = std::fma(d[o], x[j], to[o]);
      }
      if (bias)
        for (int o = 0; o < r.oc; ++o) r.sums(s, r.kh, 0)[o] += d[o];
    }
}

// The same, J sums (and the bias's, kBias) in registers.
template <int J, bool kBias>
__attribute__((target("avx512f"))) void passAvx512(float* s, const float* dy, const float* xp, const Runs& r, int ky,
                                                   int j0) {
  const __mmask16 lanes = firstLanes(r.oc);
  const int oh = r.oh, ow = r.ow, oc = r.oc, c = r.c;
  __m512 acc[J], bias = _mm512_setzero_ps();
#pragma GCC unroll 32
  for (int j = 0; j < J; ++j) acc[j] = _mm512_load_ps(r.sums(s, ky, j0 + j));
  if constexpr (kBias) bias = _mm512_load_ps(r.sums(s, r.kh, 0));
  for (int oy = 0; oy < oh; ++oy) {
    const float* d = dy + static_cast<std::size_t>(oy) * ow * oc;
    const float* x = xp + static_cast<std::size_t>(oy + ky) * r.xpRow + j0;
    for (int ox = 0; ox < ow; ++ox, d += oc, x += c) {
      __m512 dv = _mm512_maskz_loadu_ps(lanes, d);
      asm("" : "+v"(dv));  // one load for its multiply-adds: GCC would fold it into each
#pragma GCC unroll 32
      for (int j = 0; j < J; ++j) acc[j] = _mm512_fmadd_ps(dv, _mm512_set1_ps(x[j]), acc[j]);
      if constexpr (kBias) bias = _mm512_add_ps(bias, dv);
    }
  }
#pragma GCC unroll 32
  for (int j = 0; j < J; ++j) _mm512_store_ps(r.sums(s, ky, j0 + j), acc[j]);
  if constexpr (kBias) _mm512_store_ps(r.sums(s, r.kh, 0), bias);
}

using Pass = void (*)(float*, const float*, const float*, const Runs&, int, int);

template <bool kBias, std::size_t... I>
Pass passKernel(int count, std::index_sequence<I...>) {
  static constexpr Pass kTable[] = {&passAvx512<static_cast<int>(I) + 1, kBias>...};
  return kTable[count - 1];
}

// One image: each tap row's run in passes of up to kMaxSums sums, as even as they come; the
// bias's sums with the first.
void imagePasses(float* s, const float* dy, const float* xp, const Runs& r, bool vector, bool bias) {
  const int passes = (r.run + kMaxSums - 1) / kMaxSums;
  for (int ky = 0; ky < r.kh; ++ky)
    for (int pi = 0, j = 0; pi < passes; ++pi) {
      const int count = (r.run - j) / (passes - pi);
      const bool withBias = bias && ky == 0 && pi == 0;
      if (!vector) passPortable(s, dy, xp, r, ky, j, count, withBias);
      else if (withBias) passKernel<true>(count, std::make_index_sequence<kMaxSums>())(s, dy, xp, r, ky, j);
      else passKernel<false>(count, std::make_index_sequence<kMaxSums>())(s, dy, xp, r, ky, j);
      j += count;
    }
}

}  // namespace

bool& narrowWeightsPortableSlot() {
  static bool portable = false;
  return portable;
}

bool useNarrowWeightGradient(const ConvGeom& g) {
  return g.c < 16 && g.oc <= 16 && g.stride == 1 && g.srcNhwc && g.dstNhwc && !g.dyBlocked && !g.dyBf16 &&
         g.oh() > 0 && g.ow() > 0;
}

void conv2dWeightGradientNarrow(Device& dev, float* dw, float* db, const float* dy, const float* x,
                                const ConvGeom& g) {
  const Runs r(g);
  const bool emulated = bf16Products(dev);
  const std::size_t image = static_cast<std::size_t>(g.h) * g.w * g.c;
  const std::size_t dyImage = static_cast<std::size_t>(r.oh) * r.ow * r.oc;
  if (emulated && !g.xRounded) x = roundedScratch(dev, kRoundedXSlot, x, image * g.n);
  if (emulated && !g.dyRounded) dy = roundedScratch(dev, kRoundedDySlot, dy, dyImage * g.n);
  float* s = dev.scratch(kSumSlot, r.sumCount());  // 64-byte aligned, as every scratch slot
  std::fill(s, s + r.sumCount(), 0.f);
  const PaddedImages padded(dev, kPaddedSlot, g);
  const bool vector = cpuHasAvx512() && !narrowWeightsPortableSlot();
  for (int n = 0; n < g.n; ++n) imagePasses(s, dy + n * dyImage, padded.image(x, n), r, vector, db != nullptr);
  for (int o = 0; o < r.oc; ++o) {
    for (int ci = 0; ci < r.c; ++ci)
      for (int ky = 0; ky < r.kh; ++ky)
        for (int kx = 0; kx < r.kw; ++kx) {
          const float v = r.sums(s, ky, kx * r.c + ci)[o];
          float& to = dw[((static_cast<std::size_t>(o) * r.c + ci) * r.kh + ky) * r.kw + kx];
          to = g.overwriteGrads ? v : to + v;
        }
    if (db) db[o] = g.overwriteGrads ? r.sums(s, r.kh, 0)[o] : db[o] + r.sums(s, r.kh, 0)[o];
  }
}

}  // namespace xs::engine::detail
