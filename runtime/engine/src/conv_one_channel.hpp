// conv_one_channel.hpp: what the one-channel convolution's fp32 kernels (conv_one_channel.cpp)
// and its native-bf16 kernels on vdpbf16ps (conv_one_channel_bf16.cpp) share (internal header):
// the geometry, the padded image, and a tile's two ways out of its registers (stored, or pooled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <immintrin.h>
#include <type_traits>

#include "channel_shuffles.hpp"
#include "conv_onednn.hpp"
#include "gemm.hpp"
#include "pool_windows.hpp"

namespace xs::engine::detail::one_channel {

constexpr int kLanes = 16;
// Scratch slots: the GEMM paths' (conv_gemm_nhwc.cpp and gemm()'s rounded copies), which do
// not run at the same time. kPairSlot, kDyPairSlot: native bf16's words.
constexpr int kDyPairSlot = 0, kWeightSlot = 1, kDySlot = 2, kImageSlot = 3, kPairSlot = 4, kRoundedDySlot = 5,
              kSumSlot = 6, kPaddedSlot = 7;

// The geometry: xp [h + 2 pad][xpRow], rows of w + 2 pad pixels and then zeros, so that a vector
// read from any block's tap stays in its row; blocks of 16 pixels per output row.
struct Rows {
  int oc, oh, ow, kh, kw, blocks, xpRow, xpRows;
  bool planes;  // y and dy NCHW, not channels last
  explicit Rows(const ConvGeom& g)
      : oc(g.oc), oh(g.oh()), ow(g.ow()), kh(g.kh), kw(g.kw), blocks((ow + kLanes - 1) / kLanes),
        xpRow(g.w + 2 * g.pad + 2 * kLanes), xpRows(g.h + 2 * g.pad), planes(!g.dstNhwc) {}
  int taps() const { return kh * kw; }
  std::size_t xpCount() const { return static_cast<std::size_t>(xpRows) * xpRow; }
  const float* xp(const float* base, int row, int blk, int kx) const {
    return base + static_cast<std::size_t>(row) * xpRow + blk * kLanes + kx;
  }
  // dyT's vector of (oy, blk, o).
  std::size_t dyT(int oy, int blk, int o) const {
    return ((static_cast<std::size_t>(oy) * blocks + blk) * oc + o) * kLanes;
  }
  // Values of block blk's row [16 pixels, oc].
  int valid(int blk) const { return std::min(kLanes, ow - blk * kLanes) * oc; }
  // Pixels of block blk: its lanes in a plane's row.
  int pixels(int blk) const { return std::min(kLanes, ow - blk * kLanes); }
  // y's or dy's value (oy, ox, o) in one image, in their layout.
  std::size_t at(int oy, int ox, int o) const {
    return planes ? (static_cast<std::size_t>(o) * oh + oy) * ow + ox
                  : (static_cast<std::size_t>(oy) * ow + ox) * oc + o;
  }
};

// Whether this CPU runs the AVX-512 kernels (and the tests have not asked for the portable loops).
bool vectorKernels();
// Image x [h, w] -> xp's rows (its zeros written once a call); round: emulated bf16's rounding
// of x, in the copy.
void padImage(float* xp, const float* x, const ConvGeom& g, const Rows& r, bool round);
// Whether the forward pools its tiles from their registers (g.pool): rows of 17 to 32 pixels that
// the 2x2 windows cover, at most 6 channels, 5 taps wide, AVX-512.
bool pooledTilesApply(const ConvGeom& g, const Rows& r);

// f(std::integral_constant<int, G>) for G = size, 1 to 6: groups of channels as a constant.
template <class F>
void withGroup(int size, F f) {
  switch (size) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    default: f(std::integral_constant<int, 6>{}); break;
  }
}

// f(ky, o0, G) for each tap row ky and group of G channels from o0: at most 6 a group (the weight
// sums' registers), the groups as even as they come.
template <class F>
void eachGroup(const Rows& r, F f) {
  constexpr int kMaxGroup = 6;
  const int groups = (r.oc + kMaxGroup - 1) / kMaxGroup;
  for (int ky = 0; ky < r.kh; ++ky)
    for (int gi = 0, o = 0; gi < groups; ++gi) {
      const int size = (r.oc - o) / (groups - gi);
      withGroup(size, [&](auto G) { f(ky, o, G); });
      o += size;
    }
}

// A tile's sums of R rows from oy0 (those past oh dropped) and block blk stored: as planes
// (kPlanes), or interleaved into the channels-last rows [ow, OC].
template <int OC, int R, bool kPlanes>
__attribute__((target("avx512f"), always_inline)) inline void storeTile(float* y, const __m512 (&acc)[R][1][OC],
                                                                        const Rows& r, const Shuffles& sh, int oy0,
                                                                        int blk) {
  if constexpr (kPlanes) {
    const __mmask16 m = firstLanes(r.pixels(blk));
    const std::size_t plane = static_cast<std::size_t>(r.oh) * r.ow;
    for (int i = 0; i < R && oy0 + i < r.oh; ++i) {
      float* to = y + static_cast<std::size_t>(oy0 + i) * r.ow + blk * kLanes;
#pragma GCC unroll 16
      for (int o = 0; o < OC; ++o) _mm512_mask_storeu_ps(to + o * plane, m, acc[i][0][o]);
    }
    return;
  }
  const int valid = r.valid(blk);
  for (int i = 0; i < R && oy0 + i < r.oh; ++i) {
    float* to = y + (static_cast<std::size_t>(oy0 + i) * r.ow + blk * kLanes) * OC;
    for (int v = 0; v < OC && v * kLanes < valid; ++v)
      _mm512_mask_storeu_ps(to + v * kLanes, firstLanes(valid - v * kLanes),
                            gatherPairs(acc[i][0], OC, sh.toRow[v], sh.toRowPair[v]));
  }
}

// A pooled tile's sums, rows oy0 and oy0 + 1 (one row of windows) of both blocks, pooled into
// the pool's output and ReLU masks as the pool would from the planes (pool_windows.hpp).
template <int OC, bool kRelu, bool kRound>
__attribute__((target("avx512f"), always_inline)) inline void poolTile(const PlanesPool& pool, int n,
                                                                       const __m512 (&acc)[2][2][OC], const Rows& r,
                                                                       const Shuffles& sh, int oy0) {
  const int wins = pool.g.ow();
  const __mmask16 m0 = firstLanes(2 * wins), m1 = firstLanes(2 * wins - kLanes);
  const PoolLanes& ln = poolLanes();
  const __m512i left = _mm512_load_si512(ln.left), right = _mm512_load_si512(ln.right);
  // The masks' words [n][c][h][2] (one block of windows a row), as the pool lays them out.
  std::uint16_t* bits = kRelu ? pool.mask + (static_cast<std::size_t>(n) * OC * r.oh + oy0) * 2 : nullptr;
  __m512 win[OC];
#pragma GCC unroll 16
  for (int o = 0; o < OC; ++o) {
    win[o] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)
      win[o] = addWindowRow<kRelu>(win[o], _mm512_maskz_mov_ps(m0, acc[i][0][o]), _mm512_maskz_mov_ps(m1, acc[i][1][o]),
                                   kRelu ? bits + (static_cast<std::size_t>(o) * r.oh + i) * 2 : nullptr, left, right);
  }
  float* out = pool.y + (static_cast<std::size_t>(n) * pool.g.oh() + oy0 / 2) * wins * OC;
  storeWindows<OC, kRound>(out, win, wins * OC, sh);
}

// Native bf16 (narrowBf16, conv_one_channel_bf16.cpp). The forward of every image, pooled or not
// as the fp32 forward would (xp: a scratch of r.xpCount() floats, its zeros written):
void forwardPairs(Device& dev, float* y, const float* x, const float* w, const float* b, const ConvGeom& g,
                  const Rows& r, float* xp);
// Whether the weight sums take pairs on dev (the AVX-512 kernels' tap widths, 3 and 5).
bool weightPairsApply(const Device& dev, const Rows& r);
// One image's weight sums s [oc][taps][16] += over pairs of dyT's rows, xp its padded image;
// pairs: kDyPairSlot's and kPairSlot's scratch, from weightPairScratch once a call. dyT null:
// pairs.dy holds the rows' pair words already (avgPoolPlanesBackwardToPairs).
struct PairScratch {
  std::uint32_t *dy, *x;
  int width;  // of x's rows that the image's words fill
};
PairScratch weightPairScratch(Device& dev, const ConvGeom& g, const Rows& r);
void weightSumsPairs(float* s, const float* dyT, const float* xp, const Rows& r, const PairScratch& pairs);
// One image's dy planes [oc][oh][ow] -> dyT, bsum [oc][16] += each vector: the fp32 sums' fill
// (weightCols), in its order, for the pairs.
void planesToBlocks(float* dyT, float* bsum, const float* planes, const Rows& r);

}  // namespace xs::engine::detail::one_channel
