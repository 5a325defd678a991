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
// loops (tested bit for bit). Emulated bf16 rounds x and dy once per call, unless they come
// rounded.
//
// Native bf16 on vdpbf16ps (narrowBf16) takes the output rows in pairs (oy, oy + 1): dy's two
// rows interleaved into words, a vector of 16 outputs' pairs a pixel, against words of x's padded
// rows (r, r + 1) interleaved, broadcast. Each sum runs over images, row pairs and pixels, each
// pair's oy + 1 first (vdpbf16ps adds its high half's product first); an odd last row pairs with
// zeros. The bias's sums add the same words of dy times pairs of ones, as they are laid out.
#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <type_traits>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "xspawn/error.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxSums = 30;  // sums a pass: with dy's vector, 31 registers (x: the FMAs' operand)
// Scratch slots: the GEMM paths' and the other narrow convolutions', which do not run meanwhile.
constexpr int kSumSlot = 1, kPaddedSlot = 2, kRoundedXSlot = 4, kRoundedDySlot = 5, kDyPairSlot = 3,
              kRowPairSlot = 6;

// The geometry (NarrowRuns) and the sums s [kh][run][16], then the bias's [16].
struct Runs : NarrowRuns {
  int xpRows;  // the padded image's rows
  explicit Runs(const ConvGeom& g) : NarrowRuns(g), xpRows(g.h + 2 * g.pad) {}
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

// f(ky, j0, count, first) for each tap row's run in passes of up to kMaxSums sums, as even as
// they come; first: the image's first pass.
template <class F>
void eachPass(const Runs& r, F f) {
  const int passes = (r.run + kMaxSums - 1) / kMaxSums;
  for (int ky = 0; ky < r.kh; ++ky)
    for (int pi = 0, j = 0; pi < passes; ++pi) {
      const int count = (r.run - j) / (passes - pi);
      f(ky, j, count, ky == 0 && pi == 0);
      j += count;
    }
}

// fp32 and emulated bf16: every image's sums into s (zeroed), the bias's with the first pass.
void imageSums(Device& dev, float* s, bool bias, const float* dy, const float* x, const ConvGeom& g, const Runs& r) {
  const bool emulated = bf16Products(dev);
  const std::size_t image = static_cast<std::size_t>(g.h) * g.w * g.c;
  const std::size_t dyImage = static_cast<std::size_t>(r.oh) * r.ow * r.oc;
  if (emulated && !g.xRounded) x = roundedScratch(dev, kRoundedXSlot, x, image * g.n);
  if (emulated && !g.dyRounded) dy = roundedScratch(dev, kRoundedDySlot, dy, dyImage * g.n);
  const PaddedImages padded(dev, kPaddedSlot, g);
  const bool vector = cpuHasAvx512() && !narrowWeightsPortableSlot();
  for (int n = 0; n < g.n; ++n) {
    const float *dyn = dy + n * dyImage, *xp = padded.image(x, n);
    eachPass(r, [&](int ky, int j, int count, bool first) {
      const bool withBias = bias && first;
      if (!vector) passPortable(s, dyn, xp, r, ky, j, count, withBias);
      else if (withBias) passKernel<true>(count, std::make_index_sequence<kMaxSums>())(s, dyn, xp, r, ky, j);
      else passKernel<false>(count, std::make_index_sequence<kMaxSums>())(s, dyn, xp, r, ky, j);
    });
  }
}

// The word (d[o], row[o]) of 16 lanes (lanes: the oc that hold values; row null: zeros): floats
// rounded (or, kRounded, bf16 already), or bf16 bits (nhwcPoolGradBits) as they are.
template <bool kRounded, class T>
XS_DPBF16 inline __m512i rowPairWords(const T* d, const T* row, __mmask16 lanes) {
  if constexpr (std::is_same_v<T, float>) {
    const __m512 hi = row ? _mm512_maskz_loadu_ps(lanes, row) : _mm512_setzero_ps();
    return pairWordsOf<kRounded>(_mm512_maskz_loadu_ps(lanes, d), hi);
  } else {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, d));
    const __m512i hi = row ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, row)) : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
  }
}

// Native bf16: the image's dy [oh][ow][oc] -> dq [(oh + 1) / 2][ow][16] words (dy[2 rq][ox][o],
// dy[2 rq + 1][ox][o]), zeros past oc and oh; with bias, the bias's sums (16 lanes) += each
// word's pair of values, the high half (row 2 rq + 1) first. kRounded: dy holds bf16 values
// (g.dyRounded), and likewise x below; T: dy float, or its bf16 bits.
template <bool kRounded, class T>
XS_DPBF16 void dyRowPairs(std::uint32_t* dq, float* bias, const T* dy, const Runs& r) {
  const __mmask16 lanes = firstLanes(r.oc);
  const __m512i ones = _mm512_set1_epi32(0x3f803f80);  // bf16 1.0 in both halves
  __m512 sums = bias ? _mm512_load_ps(bias) : _mm512_setzero_ps();
  const std::size_t row = static_cast<std::size_t>(r.ow) * r.oc;
  for (int oy = 0; oy < r.oh; oy += 2)
    for (int ox = 0; ox < r.ow; ++ox, dq += kLanes) {
      const T* d = dy + oy * row + static_cast<std::size_t>(ox) * r.oc;
      const __m512i words = rowPairWords<kRounded>(d, oy + 1 < r.oh ? d + row : nullptr, lanes);
      _mm512_store_si512(dq, words);
      if (bias) sums = _mm512_dpbf16_ps(sums, (__m512bh)words, (__m512bh)ones);
    }
  if (bias) _mm512_store_ps(bias, sums);
}

// Native bf16: the image's x [h][w][c] -> xq [xpRows][xpRow] words (xp[r][j], xp[r + 1][j]) of
// the padded image xp (zeros past its last row); with an odd oh, then kh rows (xp[oh - 1 + ky][j],
// 0) for the last output row, which pairs with no row of dy: its x alone, so that the zero dy of
// its pair meets a zero (a non-finite x there would make 0 * x a NaN). The borders' zeros are
// written by the caller.
template <bool kRounded>
XS_DPBF16 void xRowPairs(std::uint32_t* xq, const float* x, const ConvGeom& g, const Runs& r) {
  const int width = g.w * g.c;
  auto rowAt = [&](int rp) {  // x's row of padded row rp, or null in the padding
    const int iy = rp - g.pad;
    return iy >= 0 && iy < g.h ? x + static_cast<std::size_t>(iy) * width : nullptr;
  };
  auto pairRow = [&](int to, const float* lo, const float* hi) XS_DPBF16 {
    std::uint32_t* words = xq + static_cast<std::size_t>(to) * r.xpRow + g.pad * g.c;
    for (int j = 0; j < width; j += kLanes) {
      const __mmask16 m = firstLanes(width - j);
      const __m512 a = lo ? _mm512_maskz_loadu_ps(m, lo + j) : _mm512_setzero_ps();
      const __m512 b = hi ? _mm512_maskz_loadu_ps(m, hi + j) : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(words + j, m, pairWordsOf<kRounded>(a, b));
    }
  };
  for (int rp = 0; rp < r.xpRows; ++rp) pairRow(rp, rowAt(rp), rowAt(rp + 1));
  for (int ky = 0; ky < r.kh && r.oh % 2; ++ky) pairRow(r.xpRows + ky, rowAt(r.oh - 1 + ky), nullptr);
}

// passAvx512 over the row pairs: J sums of tap row ky from j0, dq and xq the image's words.
template <int J>
XS_DPBF16 void pairPass(float* s, const std::uint32_t* dq, const std::uint32_t* xq, const Runs& r, int ky, int j0) {
  const int pairs = (r.oh + 1) / 2, ow = r.ow, c = r.c;
  __m512 acc[J];
#pragma GCC unroll 32
  for (int j = 0; j < J; ++j) acc[j] = _mm512_load_ps(r.sums(s, ky, j0 + j));
  for (int rq = 0; rq < pairs; ++rq) {
    const int row = 2 * rq + 1 < r.oh ? 2 * rq + ky : r.xpRows + ky;  // an odd last row: its x alone
    const std::uint32_t* x = xq + static_cast<std::size_t>(row) * r.xpRow + j0;
    for (int ox = 0; ox < ow; ++ox, dq += kLanes, x += c) {
      __m512i dv = _mm512_load_si512(dq);
      asm("" : "+v"(dv));  // one load for its products, as in passAvx512
#pragma GCC unroll 32
      for (int j = 0; j < J; ++j)
        acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)dv, (__m512bh)_mm512_set1_epi32(static_cast<int>(x[j])));
    }
  }
#pragma GCC unroll 32
  for (int j = 0; j < J; ++j) _mm512_store_ps(r.sums(s, ky, j0 + j), acc[j]);
}

using PairPass = void (*)(float*, const std::uint32_t*, const std::uint32_t*, const Runs&, int, int);

template <std::size_t... I>
PairPass pairPassKernel(int count, std::index_sequence<I...>) {
  static constexpr PairPass kTable[] = {&pairPass<static_cast<int>(I) + 1>...};
  return kTable[count - 1];
}

// Native bf16: every image's sums into s (zeroed), over the pairs of rows.
void pairSums(Device& dev, float* s, bool bias, const float* dy, const std::uint16_t* dyBits, const float* x,
              const ConvGeom& g, const Runs& r) {
  const std::size_t dqCount = static_cast<std::size_t>((r.oh + 1) / 2) * r.ow * kLanes;
  const std::size_t xqCount = static_cast<std::size_t>(r.xpRows + (r.oh % 2 ? r.kh : 0)) * r.xpRow;
  auto* dq = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kDyPairSlot, dqCount));
  auto* xq = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kRowPairSlot, xqCount));
  std::fill(xq, xq + xqCount, 0u);
  const std::size_t image = static_cast<std::size_t>(g.h) * g.w * g.c;
  const std::size_t dyImage = static_cast<std::size_t>(r.oh) * r.ow * r.oc;
  for (int n = 0; n < g.n; ++n) {
    float* biasSums = bias ? r.sums(s, r.kh, 0) : nullptr;
    if (dyBits) dyRowPairs<true>(dq, biasSums, dyBits + n * dyImage, r);
    else if (g.dyRounded) dyRowPairs<true>(dq, biasSums, dy + n * dyImage, r);
    else dyRowPairs<false>(dq, biasSums, dy + n * dyImage, r);
    if (g.xRounded) xRowPairs<true>(xq, x + n * image, g, r);
    else xRowPairs<false>(xq, x + n * image, g, r);
    eachPass(r, [&](int ky, int j, int count, bool) {
      pairPassKernel(count, std::make_index_sequence<kMaxSums>())(s, dq, xq, r, ky, j);
    });
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
                                const ConvGeom& g, const std::uint16_t* dyBits) {
  const Runs r(g);
  const bool pairs = narrowBf16(dev) && !narrowWeightsPortableSlot();
  XS_CHECK(!dyBits || pairs, ShapeError, "conv2d: dy as bf16 bits needs the native bf16 weight gradient");
  float* s = detail::scratch(dev, kSumSlot, r.sumCount());  // 64-byte aligned, as every scratch slot
  std::fill(s, s + r.sumCount(), 0.f);
  if (pairs) pairSums(dev, s, db != nullptr, dy, dyBits, x, g, r);
  else imageSums(dev, s, db != nullptr, dy, x, g, r);
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
