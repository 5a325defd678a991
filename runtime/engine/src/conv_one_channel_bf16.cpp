// conv_one_channel_bf16.cpp: native bf16 for the one-channel convolution (LeNet-5's conv 1,
// conv_one_channel.cpp) on vdpbf16ps (narrowBf16), which adds the products of a pair of bf16
// values into each float lane, the pair's high half first: twice the FMA units' multiply-adds
// where it runs at their rate (AMD Zen 4). The tiles are conv_one_channel.cpp's, 16 pixels of a
// row a vector; their operands are 32-bit words of two bf16 values, laid out from xp, the padded
// image, once an image:
//
//   forward: a tile's taps in pairs, 16 pixels' words against the pair's weights broadcast. The
//     taps pair along their rows, ((ky, kx), (ky, kx + 1)) from xp's horizontal pairs H; an odd
//     width's last column down it, ((ky, kw - 1), (ky + 1, kw - 1)) from its vertical pairs V;
//     an odd height's last tap alone, from S (high halves zero). LeNet-5's 25 taps take 13 steps.
//     Each output sums from the bias over the steps in that order, each pair's second tap first.
//   weight gradient: the output rows in pairs (oy, oy + 1), dyT's two rows interleaved against
//     V's words at each tap: each lane's sum over images, row pairs and blocks, row oy + 1 first.
//     The bias's lane sums stay the fp32 path's (sums of dy, no products); the lanes add up as
//     there.
#include <algorithm>
#include <cstdint>
#include <immintrin.h>
#include <utility>

#include "conv_one_channel.hpp"
#include "device_internals.hpp"
#include "kernel_util.hpp"

namespace xs::engine::detail::one_channel {
namespace {

// xp's words in one of three layouts: H (xp[i], xp[i + 1]), V (xp[i], xp[i + xpRow]; zeros
// past xp's last row) or S (xp[i], 0), i a value's place in xp, which holds bf16 values
// (padImage rounds them). Only the image's padded width (in whole vectors) is written: past it
// xp is zeros, and so are the words the caller filled once.
enum Layout { kH, kV, kS };

XS_DPBF16 void layOut(std::uint32_t* words, const float* xp, const Rows& r, int width, Layout layout) {
  const int apart = layout == kH ? 1 : r.xpRow;
  for (int row = 0; row < r.xpRows; ++row)
    for (int c = 0; c < width; c += kLanes) {
      const std::size_t i = static_cast<std::size_t>(row) * r.xpRow + c;
      const bool zeros = layout == kS || (layout == kV && row + 1 == r.xpRows);
      const __m512 hi = zeros ? _mm512_setzero_ps() : _mm512_loadu_ps(xp + i + apart);
      _mm512_storeu_si512(words + i, pairWordsOf<true>(_mm512_loadu_ps(xp + i), hi));
    }
}

// The padded width in whole vectors: what layOut writes (within xpRow, 32 past the width).
int layoutWidth(const ConvGeom& g) { return (g.w + 2 * g.pad + kLanes - 1) / kLanes * kLanes; }

// The forward's steps: each one's offset into the layouts (layout * xpCount + ky * xpRow + kx)
// and its oc weight words [step][oc], in wp; at most one a tap.
struct Steps {
  int* at;
  std::uint32_t* wp;
  int count = 0;
  bool vertical = false, single = false;  // the layouts beyond H that the steps read
  static std::size_t words(const Rows& r) { return static_cast<std::size_t>(r.taps()) * (r.oc + 1); }
};

// In scratch of Steps::words(r): wp, then the offsets.
Steps tapSteps(std::uint32_t* scratch, const float* w, const Rows& r) {
  Steps s{reinterpret_cast<int*>(scratch + static_cast<std::size_t>(r.taps()) * r.oc), scratch};
  std::uint32_t* wp = s.wp;
  auto bits = [&](int o, int ky, int kx) -> std::uint32_t {
    return ky < r.kh ? toBf16Bits(w[(static_cast<std::size_t>(o) * r.kh + ky) * r.kw + kx]) : 0u;
  };
  auto add = [&](Layout layout, int ky, int kx, int ky2, int kx2) {
    s.at[s.count++] = static_cast<int>(layout * r.xpCount()) + ky * r.xpRow + kx;
    for (int o = 0; o < r.oc; ++o) *wp++ = bits(o, ky, kx) | bits(o, ky2, kx2) << 16;
  };
  for (int ky = 0; ky < r.kh; ++ky)
    for (int kx = 0; kx + 1 < r.kw; kx += 2) add(kH, ky, kx, ky, kx + 1);
  if (r.kw % 2) {
    for (int ky = 0; ky + 1 < r.kh; ky += 2) add(kV, ky, r.kw - 1, ky + 1, r.kw - 1);
    if (r.kh % 2) add(kS, r.kh - 1, r.kw - 1, r.kh, 0);  // ky2 past the taps: a zero weight
    s.vertical = r.kh > 1;
    s.single = r.kh % 2;
  }
  return s;
}

// The words and steps a tile reads.
struct Taps {
  const std::uint32_t* words;
  const int* at;
  int steps;
  const std::uint32_t* wp;
};

// tapSums over the steps: acc[i][j][o] = bias + R rows (words at rows[i]) x NB blocks (from
// blk0) x OC channels, each step one load of words a row and block, each weight word one
// broadcast for all of them.
template <int OC, int R, int NB>
XS_DPBF16 inline void pairSums(__m512 (&acc)[R][NB][OC], const std::uint32_t* const (&rows)[R], const Taps& t,
                               const float* b, int blk0) {
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
      for (int o = 0; o < OC; ++o) acc[i][j][o] = _mm512_set1_ps(b ? b[o] : 0.f);
  for (int s = 0; s < t.steps; ++s) {
    __m512i xv[R][NB];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) xv[i][j] = _mm512_loadu_si512(rows[i] + t.at[s] + (blk0 + j) * kLanes);
#pragma GCC unroll 16
    for (int o = 0; o < OC; ++o) {
      const __m512i wv = _mm512_set1_epi32(static_cast<int>(t.wp[s * OC + o]));
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j) acc[i][j][o] = _mm512_dpbf16_ps(acc[i][j][o], (__m512bh)xv[i][j], (__m512bh)wv);
    }
  }
}

// forwardAvx512 over the steps: rows R at a time (R * OC accumulators, at most 24).
template <int OC, bool kPlanes>
XS_DPBF16 void pairImage(float* y, const Taps& t, const float* b, const Rows& r, const Shuffles& sh) {
  constexpr int R = OC <= 6 ? 4 : OC <= 8 ? 3 : OC <= 12 ? 2 : 1;
  for (int oy = 0; oy < r.oh; oy += R)
    for (int blk = 0; blk < r.blocks; ++blk) {
      const std::uint32_t* rows[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) rows[i] = t.words + static_cast<std::size_t>(std::min(oy + i, r.oh - 1)) * r.xpRow;
      __m512 acc[R][1][OC];
      pairSums<OC, R, 1>(acc, rows, t, b, blk);
      storeTile<OC, R, kPlanes>(y, acc, r, sh, oy, blk);
    }
}

using PairImage = void (*)(float*, const Taps&, const float*, const Rows&, const Shuffles&);

template <std::size_t... I>
PairImage pairImageKernel(int oc, bool planes, std::index_sequence<I...>) {
  static constexpr PairImage kTable[2][sizeof...(I)] = {{&pairImage<static_cast<int>(I) + 1, false>...},
                                                         {&pairImage<static_cast<int>(I) + 1, true>...}};
  return kTable[planes][oc - 1];
}

// pooledTile over the steps: rows oy0 and oy0 + 1 of both blocks, pooled from the registers.
template <int OC, bool kRelu, bool kRound>
XS_DPBF16 void pooledPairTile(const PlanesPool& pool, int n, const Taps& t, const float* b, const Rows& r,
                              const Shuffles& sh, int oy0) {
  const std::uint32_t* rows[2] = {t.words + static_cast<std::size_t>(oy0) * r.xpRow,
                                  t.words + static_cast<std::size_t>(oy0 + 1) * r.xpRow};
  __m512 acc[2][2][OC];
  pairSums<OC, 2, 2>(acc, rows, t, b, 0);
  poolTile<OC, kRelu, kRound>(pool, n, acc, r, sh, oy0);
}

using PooledPairTile = void (*)(const PlanesPool&, int, const Taps&, const float*, const Rows&, const Shuffles&, int);

template <bool kRelu, bool kRound, std::size_t... I>
PooledPairTile pooledPairKernel(int oc, std::index_sequence<I...>) {
  static constexpr PooledPairTile kTable[] = {&pooledPairTile<static_cast<int>(I) + 1, kRelu, kRound>...};
  return kTable[oc - 1];
}

PooledPairTile pooledPairs(const ConvGeom& g, const Rows& r) {
  if (!pooledTilesApply(g, r)) return nullptr;
  PooledPairTile k = nullptr;
  withFlags(g.pool->f.relu, g.pool->f.roundY,
            [&](auto relu, auto round) { k = pooledPairKernel<relu, round>(r.oc, std::make_index_sequence<6>()); });
  return k;
}

// weightCols over the row pairs: taps K0.. (KN of them) of tap row ky and channels o0.. (G of
// them), dq dyT's pairs [(oh + 1) / 2][blocks][oc][16] and xv V's words, then S's: an odd last
// output row pairs with no row of dy, so it takes its x alone (a zero against the zero dy: a
// non-finite x in the next row would make 0 * x a NaN).
// NB: r.blocks as a constant (LeNet-5's 2: the blocks' loop unrolled, no loop of two turns a row
// pair), or 0 for any.
template <int K0, int KN, int G, int NB>
XS_DPBF16 void pairCols(float* s, const std::uint32_t* dq, const std::uint32_t* xv, const Rows& r, int ky, int o0) {
  auto at = [&](int g, int k) {
    return s + (static_cast<std::size_t>(o0 + g) * r.taps() + ky * r.kw + K0 + k) * kLanes;
  };
  __m512 acc[G][KN];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 16
    for (int k = 0; k < KN; ++k) acc[g][k] = _mm512_load_ps(at(g, k));
  const int pairs = (r.oh + 1) / 2;
  for (int q = 0; q < pairs; ++q) {
    const std::size_t layout = 2 * q + 1 < r.oh ? 0 : r.xpCount();  // an odd last row: S
    const std::uint32_t* row = xv + layout + static_cast<std::size_t>(2 * q + ky) * r.xpRow;
    const int blocks = NB ? NB : r.blocks;
#pragma GCC unroll 2
    for (int blk = 0; blk < blocks; ++blk) {
      __m512i d[G];
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        d[g] = _mm512_load_si512(dq + ((static_cast<std::size_t>(q) * r.blocks + blk) * r.oc + o0 + g) * kLanes);
        asm("" : "+v"(d[g]));  // kept in a register, as in weightCols
      }
#pragma GCC unroll 16
      for (int k = 0; k < KN; ++k) {
        const __m512i x = _mm512_loadu_si512(row + blk * kLanes + K0 + k);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) acc[g][k] = _mm512_dpbf16_ps(acc[g][k], (__m512bh)d[g], (__m512bh)x);
      }
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 16
    for (int k = 0; k < KN; ++k) _mm512_store_ps(at(g, k), acc[g][k]);
}

// dyT [oh][blocks][oc][16] -> dq: (dyT row 2 q, row 2 q + 1) words, zeros past oh. dyT holds
// bf16 values: the backward rounds dy, or the pool before it rounds its gradient.
XS_DPBF16 void dyPairs(std::uint32_t* dq, const float* dyT, const Rows& r) {
  for (int oy = 0; oy < r.oh; oy += 2)
    for (int blk = 0; blk < r.blocks; ++blk)
      for (int o = 0; o < r.oc; ++o, dq += kLanes) {
        const __m512 hi = oy + 1 < r.oh ? _mm512_load_ps(dyT + r.dyT(oy + 1, blk, o)) : _mm512_setzero_ps();
        _mm512_store_si512(dq, pairWordsOf<true>(_mm512_load_ps(dyT + r.dyT(oy, blk, o)), hi));
      }
}

// A tap row's taps 3 at a time, as weightGroup's.
template <int KW>
void pairSumsOfImage(float* s, const PairScratch& p, const Rows& r) {
  auto sums = [&](auto NB) {
    eachGroup(r, [&](int ky, int o, auto G) {
      pairCols<0, std::min(KW, 3), G, NB>(s, p.dy, p.x, r, ky, o);
      if constexpr (KW > 3) pairCols<3, KW - 3, G, NB>(s, p.dy, p.x, r, ky, o);
    });
  };
  if (r.blocks == 2) sums(std::integral_constant<int, 2>{});
  else sums(std::integral_constant<int, 0>{});
}

}  // namespace

void forwardPairs(Device& dev, float* y, const float* x, const float* w, const float* b, const ConvGeom& g,
                  const Rows& r, float* xp) {
  const Steps steps = tapSteps(reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kWeightSlot, Steps::words(r))), w, r);
  const int layouts = steps.single ? 3 : steps.vertical ? 2 : 1;  // H, then V, then S
  auto* words = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kPairSlot, 3 * r.xpCount()));
  std::fill(words, words + layouts * r.xpCount(), 0u);
  const int width = layoutWidth(g);
  const Taps taps{words, steps.at, steps.count, steps.wp};
  const Shuffles& sh = shufflesFor(g.oc);
  const PooledPairTile pooled = pooledPairs(g, r);
  const PairImage kernel = pooled ? nullptr : pairImageKernel(g.oc, r.planes, std::make_index_sequence<kLanes - 1>());
  const std::size_t image = static_cast<std::size_t>(r.oh) * r.ow * r.oc;
  float* planes = g.pool && !pooled ? detail::scratch(dev, kImageSlot, image) : nullptr;
  for (int n = 0; n < g.n; ++n) {
    padImage(xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r, !g.xRounded);
    layOut(words, xp, r, width, kH);
    if (steps.vertical) layOut(words + r.xpCount(), xp, r, width, kV);
    if (steps.single) layOut(words + 2 * r.xpCount(), xp, r, width, kS);
    if (pooled) {
      for (int oy = 0; oy < r.oh; oy += 2) pooled(*g.pool, n, taps, b, r, sh, oy);
      continue;
    }
    kernel(planes ? planes : y + n * image, taps, b, r, sh);
    if (planes) avgPoolPlanesForwardImage(*g.pool, n, planes);
  }
}

bool weightPairsApply(const Device& dev, const Rows& r) {
  return narrowBf16(dev) && vectorKernels() && (r.kw == 3 || r.kw == 5);
}

PairScratch weightPairScratch(Device& dev, const ConvGeom& g, const Rows& r) {
  const std::size_t dq = static_cast<std::size_t>((r.oh + 1) / 2) * r.blocks * r.oc * kLanes;
  auto* x = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kPairSlot, 2 * r.xpCount()));  // V, then S
  std::fill(x, x + 2 * r.xpCount(), 0u);
  return {reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kDyPairSlot, dq)), x, layoutWidth(g)};
}

void weightSumsPairs(float* s, const float* dyT, const float* xp, const Rows& r, const PairScratch& p) {
  if (dyT) dyPairs(p.dy, dyT, r);
  layOut(p.x, xp, r, p.width, kV);
  if (r.oh % 2) layOut(p.x + r.xpCount(), xp, r, p.width, kS);
  if (r.kw == 3) pairSumsOfImage<3>(s, p, r);
  else pairSumsOfImage<5>(s, p, r);
}

__attribute__((target("avx512f"))) void planesToBlocks(float* dyT, float* bsum, const float* planes, const Rows& r) {
  const std::size_t plane = static_cast<std::size_t>(r.oh) * r.ow;
  for (int oy = 0; oy < r.oh; ++oy)
    for (int blk = 0; blk < r.blocks; ++blk)
      for (int o = 0; o < r.oc; ++o) {
        const __m512 d = _mm512_maskz_loadu_ps(firstLanes(r.pixels(blk)),
                                               planes + o * plane + static_cast<std::size_t>(oy) * r.ow + blk * kLanes);
        _mm512_store_ps(dyT + r.dyT(oy, blk, o), d);
        _mm512_store_ps(bsum + o * kLanes, _mm512_add_ps(_mm512_load_ps(bsum + o * kLanes), d));
      }
}

}  // namespace xs::engine::detail::one_channel
