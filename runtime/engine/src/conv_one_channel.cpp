// conv_one_channel.cpp: convolutions of one input channel into fewer than 16 channels-last
// output channels, stride 1 (LeNet-5's first layer, 1 -> 6). oneDNN vectorises such a layer over
// its output channels and fills 6 of 16 lanes (32 GFLOP/s, docs/engine.md). Here a vector is 16
// pixels of one output row and one channel, read from xp, the image with its padding:
//
//   y[oy][ox][o] = b[o] + sum over taps (ky, kx) of xp[oy + ky][ox + kx] * w[o][ky][kx]
//   dw[o][ky][kx] = sum over lanes l of s[o][ky][kx][l]
//   s[o][ky][kx][l] = sum over images, rows oy and blocks of 16 pixels ox = 16 blk + l of
//                     dyT[oy][blk][o][l] * xp[oy + ky][ox + kx]
//
// so one load of xp per tap serves every channel. Channels last, the forward's channels
// interleave into the row [ow, oc] on the way out, and the weight gradient reads dy
// de-interleaved, dyT (zeros past ow); it keeps s per lane until the end. Before an average pool
// that takes planes (g.planes: LeNet-5's), y and dy are NCHW: the forward stores its vectors as
// they are (the pool interleaves a quarter of the values, ops_pool_planes.cpp), and the weight
// sums' first pass copies dy's plane rows into dyT. With that pool fused in (g.pool, ops.hpp's
// PlanesPool), the forward pools its tiles from their registers (or one image's planes from a
// buffer) and the backward takes the pool's gradient image by image. (The row [ow, oc] as the vector instead, over
// an image with each pixel repeated oc times, loads across cache lines at every tap: 0.7
// multiply-adds a cycle, 1.3x slower over LeNet-5's step.) Each sum runs in the order written with fused
// multiply-adds, the same in the AVX-512 kernels and the portable loops (tested bit for bit).
// Emulated bf16 rounds dy and w once per call, and x as it copies each image into xp. Native
// bf16 on vdpbf16ps takes the sums in pairs instead (conv_one_channel_bf16.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>

#include "xspawn/error.hpp"
#include "channel_shuffles.hpp"
#include "conv_one_channel.hpp"
#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "pool_windows.hpp"

namespace xs::engine::detail {
using namespace one_channel;
namespace {

// Image x [h, w] -> xp: the image's pixels into the rows, whose zeros (fillPadding, once a
// call) the images share.
void fillPadding(float* xp, const Rows& r) { std::fill(xp, xp + static_cast<std::size_t>(r.xpRows) * r.xpRow, 0.f); }

// round: emulated bf16's rounding of x, in the copy (no pass of its own).
void padImagePortable(float* xp, const float* x, const ConvGeom& g, const Rows& r, bool round) {
  for (int iy = 0; iy < g.h; ++iy) {
    float* to = xp + static_cast<std::size_t>(iy + g.pad) * r.xpRow + g.pad;
    const float* from = x + static_cast<std::size_t>(iy) * g.w;
    if (round) roundToBf16(from, to, g.w);
    else std::memcpy(to, from, g.w * sizeof(float));
  }
}

// Short rows (LeNet-5's 28 pixels) as masked vectors: no call a row.
template <bool kRound>
__attribute__((target("avx512f"))) void padImageAvx512(float* xp, const float* x, const ConvGeom& g, const Rows& r) {
  for (int iy = 0; iy < g.h; ++iy) {
    float* to = xp + static_cast<std::size_t>(iy + g.pad) * r.xpRow + g.pad;
    const float* from = x + static_cast<std::size_t>(iy) * g.w;
    for (int j = 0; j < g.w; j += kLanes) {
      __m512 v = _mm512_maskz_loadu_ps(firstLanes(g.w - j), from + j);
      if constexpr (kRound) v = roundBf16(v);
      _mm512_mask_storeu_ps(to + j, firstLanes(g.w - j), v);
    }
  }
}

// ---- forward -------------------------------------------------------------------------------

void forwardPortable(float* y, const float* xp, const float* w, const float* b, const Rows& r) {
  for (int oy = 0; oy < r.oh; ++oy)
    for (int ox = 0; ox < r.ow; ++ox)
      for (int o = 0; o < r.oc; ++o) {
        float acc = b ? b[o] : 0.f;
        for (int ky = 0; ky < r.kh; ++ky)
          for (int kx = 0; kx < r.kw; ++kx)
            acc = std::fma(*r.xp(xp, oy + ky, 0, ox + kx), w[o * r.taps() + ky * r.kw + kx], acc);
        y[r.at(oy, ox, o)] = acc;
      }
}

// acc[i][j][o] = bias + the taps of R rows (xp at rows[i]) x NB blocks (from blk0) x OC channels:
// each tap one load of x a row and block, each weight one broadcast for all of them. KW: the
// kernel's width as a constant (its tap row unrolled, offsets as constants), or 0 for r.kw.
template <int OC, int R, int NB, int KW>
__attribute__((target("avx512f"))) inline void tapSums(__m512 (&acc)[R][NB][OC], const float* const (&rows)[R],
                                                       const float* w, const float* b, const Rows& r, int blk0) {
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j)
#pragma GCC unroll 16
      for (int o = 0; o < OC; ++o) acc[i][j][o] = _mm512_set1_ps(b ? b[o] : 0.f);
  const int kw = KW ? KW : r.kw, taps = r.kh * kw;
  for (int ky = 0; ky < r.kh; ++ky)
#pragma GCC unroll 8
    for (int kx = 0; kx < kw; ++kx) {
      __m512 xv[R][NB];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j)
          xv[i][j] = _mm512_loadu_ps(rows[i] + static_cast<std::size_t>(ky) * r.xpRow + (blk0 + j) * kLanes + kx);
#pragma GCC unroll 16
      for (int o = 0; o < OC; ++o) {
        const __m512 wv = _mm512_set1_ps(w[o * taps + ky * kw + kx]);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
          for (int j = 0; j < NB; ++j) acc[i][j][o] = _mm512_fmadd_ps(xv[i][j], wv, acc[i][j][o]);
      }
    }
}

// Rows oy0.. (R of them; those past oh run on a clamped row and are dropped) of block blk.
template <int OC, int R, bool kPlanes, int KW>
__attribute__((target("avx512f"))) void forwardTile(float* y, const float* xp, const float* w, const float* b,
                                                    const Rows& r, const Shuffles& sh, int oy0, int blk) {
  const float* rows[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) rows[i] = r.xp(xp, std::min(oy0 + i, r.oh - 1), 0, 0);
  __m512 acc[R][1][OC];  // one block
  tapSums<OC, R, 1, KW>(acc, rows, w, b, r, blk);
  storeTile<OC, R, kPlanes>(y, acc, r, sh, oy0, blk);
}

// Rows of R at a time: R * OC accumulators, at most 24, and R loads of x a tap.
template <int OC, bool kPlanes, int KW>
__attribute__((target("avx512f"))) void forwardAvx512(float* y, const float* xp, const float* w, const float* b,
                                                      const Rows& r, const Shuffles& sh) {
  constexpr int R = OC <= 6 ? 4 : OC <= 8 ? 3 : OC <= 12 ? 2 : 1;
  for (int oy = 0; oy < r.oh; oy += R)
    for (int blk = 0; blk < r.blocks; ++blk) forwardTile<OC, R, kPlanes, KW>(y, xp, w, b, r, sh, oy, blk);
}

using Forward = void (*)(float*, const float*, const float*, const float*, const Rows&, const Shuffles&);

// 5 taps wide (LeNet-5's) unrolled, others at run time.
template <std::size_t... I>
Forward forwardKernel(int oc, bool planes, int kw, std::index_sequence<I...>) {
  static constexpr Forward kTable[2][2][sizeof...(I)] = {
      {{&forwardAvx512<static_cast<int>(I) + 1, false, 0>...}, {&forwardAvx512<static_cast<int>(I) + 1, false, 5>...}},
      {{&forwardAvx512<static_cast<int>(I) + 1, true, 0>...}, {&forwardAvx512<static_cast<int>(I) + 1, true, 5>...}}};
  return kTable[planes][kw == 5][oc - 1];
}

// With the pool fused in (g.pool): rows oy0 and oy0 + 1 (one row of windows) of both blocks,
// 4 * OC sums, pooled from the registers into the pool's output and ReLU masks, as the pool
// would from the planes (pool_windows.hpp): the planes are never stored. Rows of 17 to 32
// pixels that the windows cover, OC <= 6, 5 taps wide.
template <int OC, bool kRelu, bool kRound>
__attribute__((target("avx512f"))) void pooledTile(const PlanesPool& pool, int n, const float* xp, const float* w,
                                                   const float* b, const Rows& r, const Shuffles& sh, int oy0) {
  const float* rows[2] = {r.xp(xp, oy0, 0, 0), r.xp(xp, oy0 + 1, 0, 0)};
  __m512 acc[2][2][OC];
  tapSums<OC, 2, 2, 5>(acc, rows, w, b, r, 0);
  poolTile<OC, kRelu, kRound>(pool, n, acc, r, sh, oy0);
}

using PooledTile = void (*)(const PlanesPool&, int, const float*, const float*, const float*, const Rows&,
                            const Shuffles&, int);

template <bool kRelu, bool kRound, std::size_t... I>
PooledTile pooledTileKernel(int oc, std::index_sequence<I...>) {
  static constexpr PooledTile kTable[] = {&pooledTile<static_cast<int>(I) + 1, kRelu, kRound>...};
  return kTable[oc - 1];
}

// The pooled tile's kernel for g, or null where it does not apply.
PooledTile pooledKernel(const ConvGeom& g, const Rows& r) {
  if (!pooledTilesApply(g, r)) return nullptr;
  PooledTile k = nullptr;
  withFlags(g.pool->f.relu, g.pool->f.roundY,
            [&](auto relu, auto round) { k = pooledTileKernel<relu, round>(r.oc, std::make_index_sequence<6>()); });
  return k;
}

// ---- backward: weights and bias -------------------------------------------------------------

// dy (either layout) -> dyT; bsum [oc][16] += dyT per lane.
void deinterleavePortable(float* dyT, float* bsum, const float* dy, const Rows& r) {
  for (int oy = 0; oy < r.oh; ++oy)
    for (int blk = 0; blk < r.blocks; ++blk)
      for (int o = 0; o < r.oc; ++o)
        for (int l = 0; l < kLanes; ++l) {
          const int ox = blk * kLanes + l;
          const float v = ox < r.ow ? dy[r.at(oy, ox, o)] : 0.f;
          dyT[r.dyT(oy, blk, o) + l] = v;
          bsum[o * kLanes + l] += v;
        }
}

template <int OC>
__attribute__((target("avx512f"))) void deinterleaveAvx512(float* dyT, float* bsum, const float* dy, const Rows& r,
                                                            const Shuffles& sh) {
  __m512 bias[OC];
#pragma GCC unroll 16
  for (int o = 0; o < OC; ++o) bias[o] = _mm512_load_ps(bsum + o * kLanes);
  for (int oy = 0; oy < r.oh; ++oy)
    for (int blk = 0; blk < r.blocks; ++blk) {
      const float* from = dy + (static_cast<std::size_t>(oy) * r.ow + blk * kLanes) * OC;
      const int valid = r.valid(blk);
      __m512 src[OC];
#pragma GCC unroll 16
      for (int v = 0; v < OC; ++v)
        src[v] = v * kLanes < valid ? _mm512_maskz_loadu_ps(firstLanes(valid - v * kLanes), from + v * kLanes)
                                    : _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int o = 0; o < OC; ++o) {
        const __m512 d = gatherPairs(src, OC, sh.fromRow[o], sh.fromRowPair[o]);
        _mm512_store_ps(dyT + r.dyT(oy, blk, o), d);
        bias[o] = _mm512_add_ps(bias[o], d);
      }
    }
#pragma GCC unroll 16
  for (int o = 0; o < OC; ++o) _mm512_store_ps(bsum + o * kLanes, bias[o]);
}

using Deinterleave = void (*)(float*, float*, const float*, const Rows&, const Shuffles&);

template <std::size_t... I>
Deinterleave deinterleaveKernel(int oc, std::index_sequence<I...>) {
  static constexpr Deinterleave kTable[] = {&deinterleaveAvx512<static_cast<int>(I) + 1>...};
  return kTable[oc - 1];
}

// s [oc][taps][16] += the image's products, per lane.
void weightSumsPortable(float* s, const float* dyT, const float* xp, const Rows& r) {
  for (int oy = 0; oy < r.oh; ++oy)
    for (int blk = 0; blk < r.blocks; ++blk)
      for (int o = 0; o < r.oc; ++o)
        for (int t = 0; t < r.taps(); ++t) {
          const float* d = dyT + r.dyT(oy, blk, o);
          const float* x = r.xp(xp, oy + t / r.kw, blk, t % r.kw);
          float* to = s + (static_cast<std::size_t>(o) * r.taps() + t) * kLanes;
          for (int l = 0; l < kLanes; ++l) to[l] = std::fma(d[l], x[l], to[l]);
        }
}

// Taps K0.. (KN of them) of tap row ky and channels o0.. (G of them): G x KN sums in registers
// over the image's rows, each of dy's G vectors and x's KN vectors loaded once an iteration.
// kFill (NCHW dy, the first pass over each channel): dy's vectors come from its planes (+0 past
// ow), and go to dyT for the passes after and into bsum's lanes, in the de-interleave's order.
template <int K0, int KN, int G, bool kFill>
__attribute__((target("avx512f"))) void weightCols(float* s, float* dyT, const float* planes, float* bsum,
                                                   const float* xp, const Rows& r, int ky, int o0) {
  auto at = [&](int g, int k) {
    return s + (static_cast<std::size_t>(o0 + g) * r.taps() + ky * r.kw + K0 + k) * kLanes;
  };
  __m512 acc[G][KN], bias[G];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
    for (int k = 0; k < KN; ++k) acc[g][k] = _mm512_load_ps(at(g, k));
    if constexpr (kFill) bias[g] = _mm512_load_ps(bsum + (o0 + g) * kLanes);
  }
  const std::size_t plane = static_cast<std::size_t>(r.oh) * r.ow;
  for (int oy = 0; oy < r.oh; ++oy)
    for (int blk = 0; blk < r.blocks; ++blk) {
      __m512 d[G];
      const __mmask16 m = firstLanes(r.pixels(blk));
      const float* from = kFill ? planes + o0 * plane + static_cast<std::size_t>(oy) * r.ow + blk * kLanes : nullptr;
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        if constexpr (kFill) {
          d[g] = _mm512_maskz_loadu_ps(m, from + g * plane);
          _mm512_store_ps(dyT + r.dyT(oy, blk, o0 + g), d[g]);
          bias[g] = _mm512_add_ps(bias[g], d[g]);
        } else {
          d[g] = _mm512_load_ps(dyT + r.dyT(oy, blk, o0 + g));
        }
        asm("" : "+v"(d[g]));  // kept in a register: GCC would fold the load into every FMA
      }
#pragma GCC unroll 16
      for (int k = 0; k < KN; ++k) {
        const __m512 xv = _mm512_loadu_ps(r.xp(xp, oy + ky, blk, K0 + k));
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) acc[g][k] = _mm512_fmadd_ps(d[g], xv, acc[g][k]);
      }
    }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
    for (int k = 0; k < KN; ++k) _mm512_store_ps(at(g, k), acc[g][k]);
    if constexpr (kFill) _mm512_store_ps(bsum + (o0 + g) * kLanes, bias[g]);
  }
}

// A tap row's taps 3 at a time and up to 6 channels (G x 3 sums, G of dy, one of x: 25
// registers of 32; 31 with the fill's bias sums). (4 channels x 5 taps, loading x twice for
// LeNet-5's 6 channels: 0.97x.) planes: NCHW dy, filled into dyT by tap row 0's first pass.
template <int KW, int G>
void weightGroup(float* s, float* dyT, const float* planes, float* bsum, const float* xp, const Rows& r, int ky,
                 int o0) {
  if (planes && ky == 0) weightCols<0, std::min(KW, 3), G, true>(s, dyT, planes, bsum, xp, r, ky, o0);
  else weightCols<0, std::min(KW, 3), G, false>(s, dyT, planes, bsum, xp, r, ky, o0);
  if constexpr (KW > 3) weightCols<3, KW - 3, G, false>(s, dyT, planes, bsum, xp, r, ky, o0);
}

template <int KW>
void weightSumsAvx512(float* s, float* dyT, const float* planes, float* bsum, const float* xp, const Rows& r) {
  eachGroup(r, [&](int ky, int o, auto G) { weightGroup<KW, G>(s, dyT, planes, bsum, xp, r, ky, o); });
}

}  // namespace

bool one_channel::vectorKernels() { return cpuHasAvx512() && !oneChannelPortableSlot(); }

void one_channel::padImage(float* xp, const float* x, const ConvGeom& g, const Rows& r, bool round) {
  if (vectorKernels() && round) padImageAvx512<true>(xp, x, g, r);
  else if (vectorKernels()) padImageAvx512<false>(xp, x, g, r);
  else padImagePortable(xp, x, g, r, round);
}

bool one_channel::pooledTilesApply(const ConvGeom& g, const Rows& r) {
  if (!g.pool || !cpuHasAvx512() || oneChannelPortableSlot() || avgPoolPlanesPortableSlot()) return false;
  const PoolGeom& p = g.pool->g;
  return r.oc <= 6 && r.kw == 5 && r.blocks == 2 && p.h == 2 * p.oh() && p.w == 2 * p.ow();
}

bool& oneChannelPortableSlot() {
  static bool portable = false;
  return portable;
}

bool useOneChannelConv(const ConvGeom& g) {
  return g.c == 1 && g.stride == 1 && (g.dstNhwc || g.planes) && g.oc < 16 && !g.dyBlocked && !g.dxBlocked &&
         !g.dyBf16 && g.oh() > 0 && g.ow() > 0;
}

void conv2dForwardOneChannel(Device& dev, float* y, const float* x, const float* w, const float* b,
                             const ConvGeom& g) {
  const Rows r(g);
  float* xp = detail::scratch(dev, kPaddedSlot, r.xpCount());
  fillPadding(xp, r);
  if (narrowBf16(dev) && vectorKernels()) return forwardPairs(dev, y, x, w, b, g, r, xp);
  const bool roundX = bf16Products(dev) && !g.xRounded;  // in padImage's copy
  if (bf16Products(dev) && !g.wRounded)
    w = roundedScratch(dev, kWeightSlot, w, static_cast<std::size_t>(g.oc) * r.taps());
  const Shuffles& sh = shufflesFor(g.oc);
  const Forward kernel =
      vectorKernels() ? forwardKernel(g.oc, r.planes, r.kw, std::make_index_sequence<kLanes - 1>()) : nullptr;
  const std::size_t image = static_cast<std::size_t>(r.oh) * r.ow * r.oc;
  // A fused pool (g.pool): pooled from the tiles' registers (pooledKernel), or each image's
  // planes go to one buffer, pooled before the next image.
  if (const PooledTile pooled = pooledKernel(g, r)) {
    for (int n = 0; n < g.n; ++n) {
      padImage(xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r, roundX);
      for (int oy = 0; oy < r.oh; oy += 2) pooled(*g.pool, n, xp, w, b, r, sh, oy);
    }
    return;
  }
  float* planes = g.pool ? detail::scratch(dev, kImageSlot, image) : nullptr;
  for (int n = 0; n < g.n; ++n) {
    padImage(xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r, roundX);
    float* yn = planes ? planes : y + n * image;
    if (kernel) kernel(yn, xp, w, b, r, sh);
    else forwardPortable(yn, xp, w, b, r);
    if (planes) avgPoolPlanesForwardImage(*g.pool, n, planes);
  }
}

void conv2dBackwardOneChannel(Device& dev, float* dw, float* db, const float* dy, const float* x,
                              const ConvGeom& g) {
  const Rows r(g);
  const std::size_t sumCount = static_cast<std::size_t>(r.oc) * (r.taps() + 1) * kLanes;
  float* s = detail::scratch(dev, kSumSlot, sumCount);  // 64-byte aligned, as every scratch slot
  float* bsum = s + static_cast<std::size_t>(r.oc) * r.taps() * kLanes;
  std::fill(s, s + sumCount, 0.f);
  float* dyT = detail::scratch(dev, kDySlot, r.dyT(r.oh, 0, 0));
  float* xp = detail::scratch(dev, kPaddedSlot, r.xpCount());
  fillPadding(xp, r);
  const std::size_t image = static_cast<std::size_t>(r.oh) * r.ow * r.oc;
  const bool roundX = bf16Products(dev) && !g.xRounded;  // in padImage's copy
  // A fused pool (g.pool) spreads each image's gradient, rounded as the convolution would round
  // it (g.pool->g.dxRounded): straight into dyT with the bias's lane sums (toBlocks: no planes,
  // no fill), or into one buffer of planes.
  XS_CHECK(!g.pool || !bf16Products(dev) || g.pool->g.dxRounded, ShapeError,
           "conv2d with a fused pool: in bf16 the pool must round the planes' gradient");
  if (bf16Products(dev) && !g.dyRounded && !g.pool) dy = roundedScratch(dev, kRoundedDySlot, dy, g.n * image);
  const bool vecSums = vectorKernels() && (r.kw == 3 || r.kw == 5);
  const Shuffles& sh = shufflesFor(g.oc);
  const bool fill = vecSums && r.planes;  // NCHW dy: the sums' first pass copies it into dyT
  const Deinterleave deinterleave =
      vectorKernels() && !r.planes ? deinterleaveKernel(g.oc, std::make_index_sequence<kLanes - 1>()) : nullptr;
  const bool toBlocks = g.pool && fill && avgPoolPlanesToBlocksApply(*g.pool);
  float* planes = g.pool && !toBlocks ? detail::scratch(dev, kImageSlot, image) : nullptr;
  // Native bf16 on vdpbf16ps: the sums over pairs of dyT's rows, dyT whole before them.
  const bool pairs = weightPairsApply(dev, r);
  const PairScratch words = pairs ? weightPairScratch(dev, g, r) : PairScratch{};
  for (int n = 0; n < g.n; ++n) {
    if (toBlocks && pairs) avgPoolPlanesBackwardToPairs(words.dy, bsum, *g.pool, n);  // dyPairs' words
    else if (toBlocks) avgPoolPlanesBackwardToBlocks(dyT, bsum, *g.pool, n);
    else if (planes) avgPoolPlanesBackwardImage(planes, *g.pool, n);
    const float* dyn = planes ? planes : toBlocks ? nullptr : dy + n * image;
    if (deinterleave) deinterleave(dyT, bsum, dyn, r, sh);
    else if (!fill) deinterleavePortable(dyT, bsum, dyn, r);
    else if (pairs && dyn) planesToBlocks(dyT, bsum, dyn, r);  // what the fp32 sums' first pass fills
    padImage(xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r, roundX);
    if (pairs) weightSumsPairs(s, toBlocks ? nullptr : dyT, xp, r, words);
    else if (vecSums && r.kw == 3) weightSumsAvx512<3>(s, dyT, fill ? dyn : nullptr, bsum, xp, r);
    else if (vecSums) weightSumsAvx512<5>(s, dyT, fill ? dyn : nullptr, bsum, xp, r);
    else weightSumsPortable(s, dyT, xp, r);
  }
  // Each sum's lanes in order.
  for (int o = 0; o < r.oc; ++o)
    for (int t = 0; t <= r.taps(); ++t) {
      if (t == r.taps() && !db) break;
      const float* lanes = t < r.taps() ? s + (static_cast<std::size_t>(o) * r.taps() + t) * kLanes : bsum + o * kLanes;
      float sum = 0.f;
      for (int l = 0; l < kLanes; ++l) sum += lanes[l];
      float& to = t < r.taps() ? dw[o * r.taps() + t] : db[o];
      to = g.overwriteGrads ? sum : to + sum;
    }
}

}  // namespace xs::engine::detail
