// conv_narrow_forward.cpp: the forward of a channels-last, stride-1 convolution from fewer than
// 16 input channels into at most 16 outputs (LeNet-5's conv 2: 6 channels into 16). oneDNN's
// direct kernel runs it at about 67% of the core's peak; here each output pixel is one row of a
// small GEMM over the runs of kw * c values its tap rows read (channels last, (kx, ci) flatten
// like a row's (ix, ci)):
//
//   y[oy][ox][o] = b[o] + sum over ky, then j = kx * c + ci, of
//                  xp[oy + ky][ox * c + j] * wt[ky][j][o]
//
// with xp the padded channels-last image and wt the weights with the output channels last (one
// vector, zeros past oc). A block of P pixels of a row shares each weight vector's load: P + 1
// loads for P multiply-adds, against oneDNN's blocking. Each sum runs in the order written with
// fused multiply-adds, the same in the AVX-512 kernels and the portable loops (tested bit for
// bit). Emulated bf16 rounds x once per call and w as it builds wt.
//
// Native bf16 on vdpbf16ps (narrowBf16, c even) takes the input channels in pairs (ci, ci + 1):
// x's padded channels-last bits read as 32-bit words, one a pixel and pair, are broadcast against
// wp [kh][kw][c / 2][16], each lane a pair of weights; the sums run over ky, then the pairs, then
// kx, each pair's ci + 1 first (vdpbf16ps adds its high half's product first).
#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <utility>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxBlock = 14;  // pixels a block: accumulators, a weight and broadcasts in 32 registers
// Scratch slots: the GEMM paths' and the other narrow convolutions', which do not run meanwhile.
constexpr int kWeightSlot = 1, kPaddedSlot = 2, kRoundedXSlot = 4, kBitsSlot = 3;

// The geometry (NarrowRuns) and the size of wt.
struct Taps : NarrowRuns {
  using NarrowRuns::NarrowRuns;
  std::size_t wtCount() const { return static_cast<std::size_t>(kh) * run * kLanes; }
};

// w [oc, c, kh, kw] -> wt [kh][run][16]: wt[ky][kx * c + ci][o] = w[o][ci][ky][kx].
void tapColumns(float* wt, const float* w, const ConvGeom& g, const Taps& t, bool round) {
  std::fill(wt, wt + t.wtCount(), 0.f);
  for (int o = 0; o < t.oc; ++o)
    for (int ci = 0; ci < t.c; ++ci)
      for (int ky = 0; ky < t.kh; ++ky)
        for (int kx = 0; kx < g.kw; ++kx) {
          const float v = w[((static_cast<std::size_t>(o) * t.c + ci) * t.kh + ky) * g.kw + kx];
          wt[(static_cast<std::size_t>(ky) * t.run + kx * t.c + ci) * kLanes + o] = round ? roundToBf16(v) : v;
        }
}

// Pixels ox0.. (count of them) of row oy: xr the padded image at (oy, ox0), y at (oy, ox0).
void blockPortable(float* y, const float* xr, const float* wt, const float* b, int count, const Taps& t) {
  for (int p = 0; p < count; ++p)
    for (int o = 0; o < t.oc; ++o) {
      float acc = b ? b[o] : 0.f;
      for (int ky = 0; ky < t.kh; ++ky)
        for (int ci = 0; ci < t.c; ++ci)
          for (int kx = 0; kx < t.kw; ++kx)
            acc = std::fma(xr[static_cast<std::size_t>(ky) * t.xpRow + (p + kx) * t.c + ci],
                           wt[(static_cast<std::size_t>(ky) * t.run + kx * t.c + ci) * kLanes + o], acc);
      y[static_cast<std::size_t>(p) * t.oc + o] = acc;
    }
}

// The same, P pixels' sums in registers. For each (ky, ci), the KW weight vectors stay in
// registers and each of the block's P + KW - 1 input pixels is broadcast once for the up to KW
// pixels whose taps it meets: P + 2 KW - 1 loads for P KW multiply-adds.
template <int P, int KW>
__attribute__((target("avx512f"))) void blockAvx512(float* y, const float* xr, const float* wt, const float* b,
                                                    const Taps& t) {
  const __mmask16 lanes = firstLanes(t.oc);
  const int c = t.c, run = t.run, kh = t.kh;
  const std::size_t xpRow = t.xpRow;
  const __m512 bias = b ? _mm512_maskz_loadu_ps(lanes, b) : _mm512_setzero_ps();
  __m512 acc[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (int ky = 0; ky < kh; ++ky)
    for (int ci = 0; ci < c; ++ci) {
      const float* x = xr + ky * xpRow + ci;
      const float* wk = wt + (static_cast<std::size_t>(ky) * run + ci) * kLanes;
      __m512 w[KW];
#pragma GCC unroll 16
      for (int kx = 0; kx < KW; ++kx) {
        w[kx] = _mm512_load_ps(wk + kx * c * kLanes);
        asm("" : "+v"(w[kx]));  // one load for its multiply-adds: GCC would fold it into each
      }
#pragma GCC unroll 32
      for (int q = 0; q < P + KW - 1; ++q) {
        const __m512 v = _mm512_set1_ps(x[q * c]);
#pragma GCC unroll 16
        for (int kx = KW - 1; kx >= 0; --kx)  // pixel q - kx, from the oldest sum's next term
          if (q - kx >= 0 && q - kx < P) acc[q - kx] = _mm512_fmadd_ps(v, w[kx], acc[q - kx]);
      }
    }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) _mm512_mask_storeu_ps(y + p * t.oc, lanes, acc[p]);
}

using Block = void (*)(float*, const float*, const float*, const float*, const Taps&);

template <int KW, std::size_t... I>
Block blockKernel(int p, std::index_sequence<I...>) {
  static constexpr Block kTable[] = {&blockAvx512<static_cast<int>(I) + 1, KW>...};
  return kTable[p - 1];
}

// Blocks a row: of up to kMaxBlock pixels, as even as they come.
int blocksOf(const Taps& t) { return (t.ow + kMaxBlock - 1) / kMaxBlock; }

// f(oy, rows, ox, count) for an image's rows, `rows` of them at once (at most rowsAtOnce), in
// blocksOf(t) blocks.
template <class F>
void eachBlock(const Taps& t, int rowsAtOnce, F f) {
  const int blocks = blocksOf(t);
  for (int oy = 0; oy < t.oh; oy += rowsAtOnce)
    for (int bi = 0, ox = 0; bi < blocks; ++bi) {
      const int count = (t.ow - ox) / (blocks - bi);
      f(oy, std::min(rowsAtOnce, t.oh - oy), ox, count);
      ox += count;
    }
}

void imageRows(float* y, const float* xp, const float* wt, const float* b, const Taps& t, bool vector) {
  eachBlock(t, 1, [&](int oy, int, int ox, int count) {
    float* yo = y + (static_cast<std::size_t>(oy) * t.ow + ox) * t.oc;
    const float* xr = xp + static_cast<std::size_t>(oy) * t.xpRow + ox * t.c;
    if (vector && t.kw == 3) blockKernel<3>(count, std::make_index_sequence<kMaxBlock>())(yo, xr, wt, b, t);
    else if (vector) blockKernel<5>(count, std::make_index_sequence<kMaxBlock>())(yo, xr, wt, b, t);
    else blockPortable(yo, xr, wt, b, count, t);
  });
}

// Native bf16: the geometry in pairs of input channels, cq of them; padded rows of xqRow words.
struct Pairs : Taps {
  int cq, xqRow;
  explicit Pairs(const ConvGeom& g) : Taps(g), cq(g.c / 2), xqRow((g.w + 2 * g.pad) * (g.c / 2)) {}
  std::size_t wpCount() const { return static_cast<std::size_t>(kh) * kw * cq * kLanes; }
};

// w [oc, c, kh, kw] -> wp [kh][kw][cq][16] words: (w[o][2q][ky][kx], w[o][2q + 1][ky][kx]) in
// lane o, zeros past oc.
void pairColumns(std::uint32_t* wp, const float* w, const Pairs& t) {
  std::fill(wp, wp + t.wpCount(), 0u);
  auto at = [&](int o, int ci, int ky, int kx) {
    return toBf16Bits(w[((static_cast<std::size_t>(o) * t.c + ci) * t.kh + ky) * t.kw + kx]);
  };
  for (int o = 0; o < t.oc; ++o)
    for (int ky = 0; ky < t.kh; ++ky)
      for (int kx = 0; kx < t.kw; ++kx)
        for (int q = 0; q < t.cq; ++q)
          wp[((static_cast<std::size_t>(ky) * t.kw + kx) * t.cq + q) * kLanes + o] =
              at(o, 2 * q, ky, kx) | static_cast<std::uint32_t>(at(o, 2 * q + 1, ky, kx)) << 16;
}

// The fused pool's outputs for a pair of rows (ConvGeom::nhwcPool): y at the pool's row, mask at
// the convolution's row oy (null without the ReLU).
struct PoolOut {
  float* y;
  std::uint16_t* mask;
  bool relu, round;
};

// Rows oy, oy + 1 of P pixels (acc) pooled by 2x2 windows as avgPool2dForward's tiled windows
// sum them: each value relu'd (x > 0 ? x : +0, its lanes' bits into the mask), from +0 over the
// window's rows, then columns, times 1/4 (a power of two: the quotient's bits), rounded.
template <int P>
XS_DPBF16 inline void poolRows(const __m512 (&acc)[2][P], const PoolOut& out, const Pairs& t) {
  const __mmask16 lanes = firstLanes(t.oc);
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int win = 0; win < P / 2; ++win) {
    __m512 s = zero;
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j)
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        __m512 v = acc[j][2 * win + i];
        if (out.relu) {
          const __mmask16 pos = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ);
          out.mask[j * t.ow + 2 * win + i] = pos;
          v = _mm512_maskz_mov_ps(pos, v);
        }
        s = _mm512_add_ps(s, v);
      }
    s = _mm512_mul_ps(s, _mm512_set1_ps(0.25f));
    if (out.round) s = roundBf16(s);
    _mm512_mask_storeu_ps(out.y + win * t.oc, lanes, s);
  }
}

// blockAvx512 over pairs for R rows (oy, oy + 1): xr the padded image's bits at (oy, ox0), read
// a word (two channels) at a time; y at (oy, ox0). Two rows share each weight load and give 2P
// chains of vdpbf16ps to hide its latency behind (one row's P = 10 left LeNet-5's conv 2 at
// 76-79% of the peak).
// With pool (two rows, P even), the rows are pooled instead of stored (poolRows).
template <int P, int KW, int R>
XS_DPBF16 void pairBlock(float* y, const std::uint16_t* xr, const std::uint32_t* wp, const float* b, const Pairs& t,
                         const PoolOut* pool) {
  const __mmask16 lanes = firstLanes(t.oc);
  const int cq = t.cq, kh = t.kh;
  const std::size_t xqRow = t.xqRow, yRow = static_cast<std::size_t>(t.ow) * t.oc;
  const __m512 bias = b ? _mm512_maskz_loadu_ps(lanes, b) : _mm512_setzero_ps();
  __m512 acc[R][P];
#pragma GCC unroll 2
  for (int j = 0; j < R; ++j)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[j][p] = bias;
  for (int ky = 0; ky < kh; ++ky)
    for (int q = 0; q < cq; ++q) {
      const std::uint16_t* x = xr + 2 * (ky * xqRow + q);
      const std::uint32_t* wk = wp + (static_cast<std::size_t>(ky) * KW * cq + q) * kLanes;
      __m512i w[KW];
#pragma GCC unroll 16
      for (int kx = 0; kx < KW; ++kx) {
        w[kx] = _mm512_load_si512(wk + kx * cq * kLanes);
        asm("" : "+v"(w[kx]));  // one load for its multiply-adds, as in blockAvx512
      }
#pragma GCC unroll 2
      for (int j = 0; j < R; ++j)
#pragma GCC unroll 32
        for (int i = 0; i < P + KW - 1; ++i) {
          const __m512i v = _mm512_set1_epi32(static_cast<int>(wordAt(x + 2 * (j * xqRow + i * cq))));
#pragma GCC unroll 16
          for (int kx = KW - 1; kx >= 0; --kx)
            if (i - kx >= 0 && i - kx < P)
              acc[j][i - kx] = _mm512_dpbf16_ps(acc[j][i - kx], (__m512bh)v, (__m512bh)w[kx]);
        }
    }
  if constexpr (R == 2 && P % 2 == 0)
    if (pool) return poolRows<P>(acc, *pool, t);
#pragma GCC unroll 2
  for (int j = 0; j < R; ++j)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) _mm512_mask_storeu_ps(y + j * yRow + p * t.oc, lanes, acc[j][p]);
}

using PairBlock = void (*)(float*, const std::uint16_t*, const std::uint32_t*, const float*, const Pairs&,
                           const PoolOut*);

// Two rows at once where their accumulators, the KW weights and a broadcast fit 32 registers.
constexpr int kMaxPairedBlock = 12;

template <int KW, std::size_t... I>
PairBlock pairBlockKernel(int p, int rows, std::index_sequence<I...>) {
  static constexpr PairBlock kTable[2][sizeof...(I)] = {
      {&pairBlock<static_cast<int>(I) + 1, KW, 1>...},
      {&pairBlock<std::min(static_cast<int>(I) + 1, kMaxPairedBlock), KW, 2>...}};
  return kTable[rows - 1][p - 1];
}

void forwardOnPairs(Device& dev, float* y, const float* x, const float* w, const float* b, const ConvGeom& g) {
  const Pairs t(g);
  auto* wp = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kWeightSlot, t.wpCount()));  // 64-byte aligned
  pairColumns(wp, w, t);
  const PaddedImages<std::uint16_t> padded(dev, kBitsSlot, g);
  const bool paired = (t.ow + blocksOf(t) - 1) / blocksOf(t) <= kMaxPairedBlock;  // every block's count
  const NhwcPool* pool = g.nhwcPool;  // one block of two rows a window row (narrowPoolsNhwc)
  for (int n = 0; n < g.n; ++n) {
    const std::uint16_t* xq = padded.image(x, n);
    float* yn = pool ? nullptr : y + static_cast<std::size_t>(n) * t.oh * t.ow * t.oc;  // pooled: no y
    eachBlock(t, paired ? 2 : 1, [&](int oy, int rows, int ox, int count) {
      float* yo = pool ? nullptr : yn + (static_cast<std::size_t>(oy) * t.ow + ox) * t.oc;
      const std::uint16_t* xr = xq + 2 * (static_cast<std::size_t>(oy) * t.xqRow + ox * t.cq);
      PoolOut out{};
      if (pool)
        out = {pool->y + ((static_cast<std::size_t>(n) * t.oh + oy) / 2 * t.ow / 2) * t.oc,
               pool->f.relu ? pool->mask + (static_cast<std::size_t>(n) * t.oh + oy) * t.ow : nullptr, pool->f.relu,
               pool->f.roundY};
      const PoolOut* po = pool ? &out : nullptr;
      if (t.kw == 3) pairBlockKernel<3>(count, rows, std::make_index_sequence<kMaxBlock>())(yo, xr, wp, b, t, po);
      else pairBlockKernel<5>(count, rows, std::make_index_sequence<kMaxBlock>())(yo, xr, wp, b, t, po);
    });
  }
}

}  // namespace

bool narrowBf16(const Device& dev) { return nativeBf16(dev) && dpbf16Kernels(); }

bool& narrowForwardPortableSlot() {
  static bool portable = false;
  return portable;
}

bool useNarrowForward(const ConvGeom& g) {
  return g.c < 16 && g.oc <= 16 && g.stride == 1 && g.srcNhwc && g.dstNhwc && g.oh() > 0 && g.ow() > 0;
}

bool narrowForwardVectorized(const ConvGeom& g) { return cpuHasAvx512() && (g.kw == 3 || g.kw == 5); }

bool narrowPoolsNhwc(const Device& dev, const ConvGeom& g) {
  const int oh = g.oh(), ow = g.ow();
  return narrowBf16(dev) && useNarrowForward(g) && g.c % 2 == 0 && narrowForwardVectorized(g) &&
         !narrowForwardPortableSlot() && oh % 2 == 0 && ow % 2 == 0 && ow <= kMaxPairedBlock;
}

void conv2dForwardNarrow(Device& dev, float* y, const float* x, const float* w, const float* b, const ConvGeom& g) {
  if (narrowBf16(dev) && g.c % 2 == 0 && narrowForwardVectorized(g) && !narrowForwardPortableSlot())
    return forwardOnPairs(dev, y, x, w, b, g);
  const Taps t(g);
  const bool emulated = bf16Products(dev);
  const std::size_t image = static_cast<std::size_t>(g.h) * g.w * g.c;
  if (emulated && !g.xRounded) x = roundedScratch(dev, kRoundedXSlot, x, image * g.n);
  float* wt = detail::scratch(dev, kWeightSlot, t.wtCount());  // 64-byte aligned, as every scratch slot
  tapColumns(wt, w, g, t, emulated && !g.wRounded);
  const PaddedImages padded(dev, kPaddedSlot, g);
  const bool vector = narrowForwardVectorized(g) && !narrowForwardPortableSlot();
  for (int n = 0; n < g.n; ++n)
    imageRows(y + static_cast<std::size_t>(n) * t.oh * t.ow * t.oc, padded.image(x, n), wt, b, t, vector);
}

}  // namespace xs::engine::detail
