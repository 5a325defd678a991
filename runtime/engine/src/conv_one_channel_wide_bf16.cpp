// conv_one_channel_wide_bf16.cpp: native bf16's forward of a stride-1 convolution from one input
// channel into blocks of 16 outputs (the convnet's conv 1: 1 -> 32, 5x5), on vdpbf16ps, written
// in oneDNN's blocks of 16 channels ([n][oc/16][oh][ow][16] float32) as its kernel would, for the
// max-pool after it. oneDNN 2.6's bf16 kernel ran that layer at 35-45% of the peak. The pairs
// are taps along a row (kx, kx + 1); an odd width's last tap is alone, its word's high half zero
// in the weights and in x (a value outside the window must not meet the zero: 0 * inf is a NaN):
//
//   xb[r][ix]        = xp[r][ix] as bf16 bits (PaddedImages)    the padded image
//   wv[b][ky][q][o]  = (w[16 b + o][ky][2 q], w[16 b + o][ky][2 q + 1] or 0)
//   y[b][oy][ox][o]  = bias[16 b + o], then + wv[b][ky][q][o] . (xb[oy + ky][ox + 2 q], xb[..][ox + 2 q + 1])
//                      over ky and pairs q in that order ((xb[..][ox + 2 q], 0) for a last tap alone)
//
// with a . b vdpbf16ps's pair product (the high halves' first): two neighbouring values of xb are
// the word a product reads, broadcast from memory as it lies. A tile holds G blocks of 16 outputs
// for P pixels of a row in registers (G * P sums, G weight words a pair, x broadcast). With the
// 2x2 max-pool of stride 2 after it fused in (ConvGeom::nhwcPool with codes: the convnet's conv
// 1, ReLU and pool 1), a tile makes the same sums for two rows and pools them in registers
// (pool_max2x2.hpp, the pool's own step): y is never written, nor read back by the pool.
#include <algorithm>
#include <immintrin.h>
#include <utility>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "kernel_util.hpp"
#include "pool_max2x2.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
// A tile's pixels at most, with G = 2 blocks: 24 sums, 2 weight words and x's broadcast in 27
// registers.
constexpr int kMaxPixels = 12;
// Scratch slots (oneDNN's scratchpad is slot 3, unused on this path).
constexpr int kImageSlot = 4, kWeightSlot = 5;

struct Geometry {
  int blocks, oh, ow, kh, kw, pairs, xpRow;
  bool single;  // an odd width: the last pair is its last tap alone
  explicit Geometry(const ConvGeom& g)
      : blocks(g.oc / kLanes), oh(g.oh()), ow(g.ow()), kh(g.kh), kw(g.kw), pairs((g.kw + 1) / 2),
        xpRow(g.w + 2 * g.pad), single(g.kw % 2 != 0) {}
};

// w [oc][1][kh][kw] -> wv [blocks][kh][pairs][16] words, rounded; an odd width's last pair (w, 0).
void weightWords(std::uint32_t* wv, const float* w, const Geometry& q) {
  for (int b = 0; b < q.blocks; ++b)
    for (int ky = 0; ky < q.kh; ++ky)
      for (int p = 0; p < q.pairs; ++p)
        for (int o = 0; o < kLanes; ++o, ++wv) {
          const float* row = w + (static_cast<std::size_t>(b * kLanes + o) * q.kh + ky) * q.kw;
          const std::uint32_t hi = 2 * p + 1 < q.kw ? bf16RoundedBits(row[2 * p + 1]) : 0u;
          *wv = (bf16RoundedBits(row[2 * p]) >> 16) | (hi & 0xffff0000u);
        }
}

// The sums of blocks b0 .. b0 + G - 1 for P pixels from (oy, ox) of one image.
template <int G, int P>
XS_DPBF16 [[gnu::always_inline]] inline void sums(__m512 (&acc)[G][P], const std::uint16_t* xb, const std::uint32_t* wv,
                                                  const float* bias, const Geometry& q, int b0, int oy, int ox) {
#pragma GCC unroll 4
  for (int gi = 0; gi < G; ++gi) {
    const __m512 start = bias ? _mm512_loadu_ps(bias + (b0 + gi) * kLanes) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[gi][p] = start;
  }
  const std::size_t blockWords = static_cast<std::size_t>(q.kh) * q.pairs * kLanes;
  const std::uint32_t* wb = wv + b0 * blockWords;
  const int full = q.kw / 2;
  for (int ky = 0; ky < q.kh; ++ky) {  // each pair: the weights' words of G blocks times pixel p's x
    const std::uint16_t* row = xb + static_cast<std::size_t>(oy + ky) * q.xpRow + ox;
    for (int pq = 0; pq < full; ++pq, wb += kLanes)
      dpbf16Tile(acc, wb, blockWords, [row, pq](int p) { return wordAt(row + 2 * pq + p); });
    if (q.single) {  // the last tap's value alone in its word
      const std::uint16_t* last = row + q.kw - 1;
      dpbf16Tile(acc, wb, blockWords, [last](int p) { return std::uint32_t{last[p]}; });
      wb += kLanes;
    }
  }
}

// Blocks b0 .. b0 + G - 1 of P pixels from (oy, ox) of one image, stored in y's blocks.
template <int G, int P>
XS_DPBF16 void tile(float* y, const std::uint16_t* xb, const std::uint32_t* wv, const float* bias, const Geometry& q,
                    int b0, int oy, int ox) {
  __m512 acc[G][P];
  sums<G, P>(acc, xb, wv, bias, q, b0, oy, ox);
  const std::size_t plane = static_cast<std::size_t>(q.oh) * q.ow * kLanes;
#pragma GCC unroll 4
  for (int gi = 0; gi < G; ++gi) {
    float* to = y + (b0 + gi) * plane + (static_cast<std::size_t>(oy) * q.ow + ox) * kLanes;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(to + p * kLanes, acc[gi][p]);
  }
}

// The same for output rows oy and oy + 1 (oy even) and P pixels from ox (even), pooled by the 2x2
// max-pool of stride 2 after the convolution (NhwcPool::codes) into its output and codes at
// image `image` (channels last, q.blocks * 16 channels): the upper row's sums wait on the stack
// while the lower row's are made; the convolution's output is never stored.
template <int G, int P, PoolEpilogue E>
XS_DPBF16 void poolTile(const NhwcPool& pool, const std::uint16_t* xb, const std::uint32_t* wv, const float* bias,
                        const Geometry& q, std::size_t image, int b0, int oy, int ox) {
  static_assert(P % 2 == 0);
  __m512 upper[G][P], lower[G][P];
  sums<G, P>(upper, xb, wv, bias, q, b0, oy, ox);
  sums<G, P>(lower, xb, wv, bias, q, b0, oy + 1, ox);
  const int pw = q.ow / 2, oc = q.blocks * kLanes;
  const std::size_t first = (image * (q.oh / 2) + oy / 2) * pw + ox / 2;  // the tile's first pooled pixel
#pragma GCC unroll 4
  for (int gi = 0; gi < G; ++gi)
#pragma GCC unroll 8
    for (int j = 0; j < P / 2; ++j) {
      const std::size_t at = (first + j) * oc + (b0 + gi) * kLanes;
      const __m512 window[4] = {upper[gi][2 * j], upper[gi][2 * j + 1], lower[gi][2 * j], lower[gi][2 * j + 1]};
      maxPool2x2Vector<E>(pool.y + at, pool.codes + at, window);
    }
}

using Tile = void (*)(float*, const std::uint16_t*, const std::uint32_t*, const float*, const Geometry&, int, int,
                      int);

template <int G, std::size_t... I>
Tile tileOf(int pixels, std::index_sequence<I...>) {
  static constexpr Tile kTable[] = {&tile<G, static_cast<int>(I) + 1>...};
  return kTable[pixels - 1];
}

using PoolTile = void (*)(const NhwcPool&, const std::uint16_t*, const std::uint32_t*, const float*, const Geometry&,
                          std::size_t, int, int, int);

// The pooled tiles of 2, 4, .. 2 * sizeof...(I) pixels.
template <int G, PoolEpilogue E, std::size_t... I>
PoolTile poolTileOf(int pixels, std::index_sequence<I...>) {
  static constexpr PoolTile kTable[] = {&poolTile<G, 2 * (static_cast<int>(I) + 1), E>...};
  return kTable[pixels / 2 - 1];
}
template <int G>
PoolTile poolTileOf(int pixels, const AvgPoolFusion& f) {
  constexpr auto kPairs = std::make_index_sequence<kMaxPixels / 2>();
  switch (maxPoolEpilogue(f)) {
    case PoolEpilogue::kReluRoundedToBf16: return poolTileOf<G, PoolEpilogue::kReluRoundedToBf16>(pixels, kPairs);
    case PoolEpilogue::kRelu: return poolTileOf<G, PoolEpilogue::kRelu>(pixels, kPairs);
    case PoolEpilogue::kNone: break;
  }
  return poolTileOf<G, PoolEpilogue::kNone>(pixels, kPairs);
}

// The forward with the max-pool fused in: rows in pairs (an odd height's last row is no pool's),
// each pair's pooled pixels in tiles of at most kMaxPixels / 2, as even as they come.
void pooledForward(const NhwcPool& pool, const PaddedImages<std::uint16_t>& padded, const float* x,
                   const std::uint32_t* wv, const float* b, const Geometry& q, int n, int G) {
  const int pw = q.ow / 2, tiles = (pw + kMaxPixels / 2 - 1) / (kMaxPixels / 2);
  for (int i = 0; i < n; ++i) {
    const std::uint16_t* xb = padded.image(x, i);
    for (int oy = 0; oy + 1 < q.oh; oy += 2)
      for (int t = 0, px = 0; t < tiles; ++t) {
        const int pairs = (pw - px) / (tiles - t);
        const PoolTile run = G == 2 ? poolTileOf<2>(2 * pairs, pool.f) : poolTileOf<1>(2 * pairs, pool.f);
        for (int b0 = 0; b0 < q.blocks; b0 += G) run(pool, xb, wv, b, q, i, b0, oy, 2 * px);
        px += pairs;
      }
  }
}

}  // namespace

bool useOneChannelWideBf16(const Device& dev, const ConvGeom& g) {
  return narrowBf16(dev) && g.c == 1 && g.stride == 1 && g.oc % kLanes == 0 && g.oh() > 0 && g.ow() > 0;
}

void conv2dForwardOneChannelWideBf16(Device& dev, float* yBlocks, const float* x, const float* w, const float* b,
                                     const ConvGeom& g) {
  const Geometry q(g);
  auto* wv = reinterpret_cast<std::uint32_t*>(
      detail::scratch(dev, kWeightSlot, static_cast<std::size_t>(q.blocks) * q.kh * q.pairs * kLanes));
  weightWords(wv, w, q);
  // A pair's word stays in its row: (ow - 1) + kw - 1 < xpRow.
  const PaddedImages<std::uint16_t> padded(dev, kImageSlot, g);
  const int G = q.blocks % 2 == 0 ? 2 : 1;
  if (g.nhwcPool) return pooledForward(*g.nhwcPool, padded, x, wv, b, q, g.n, G);
  // The row's pixels in tiles of at most kMaxPixels, as even as they come.
  const int tiles = (q.ow + kMaxPixels - 1) / kMaxPixels;
  const std::size_t yImage = static_cast<std::size_t>(q.blocks) * q.oh * q.ow * kLanes;
  for (int n = 0; n < g.n; ++n) {
    const std::uint16_t* xb = padded.image(x, n);
    float* yn = yBlocks + n * yImage;
    for (int oy = 0; oy < q.oh; ++oy)
      for (int t = 0, ox = 0; t < tiles; ++t) {
        const int pixels = (q.ow - ox) / (tiles - t);
        const Tile run = G == 2 ? tileOf<2>(pixels, std::make_index_sequence<kMaxPixels>())
                                : tileOf<1>(pixels, std::make_index_sequence<kMaxPixels>());
        for (int b0 = 0; b0 < q.blocks; b0 += G) run(yn, xb, wv, b, q, b0, oy, ox);
        ox += pixels;
      }
  }
}

}  // namespace xs::engine::detail
