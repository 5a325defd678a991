// conv_wide_weights_bf16.cpp: native bf16's weight and bias gradients of a stride-1 convolution
// whose output channels come in blocks of 16 and input channels in blocks of 16 or one (the
// convnet's three layers, AlexNet's 5 x 5 one, ResNet-18's of 64 and 128 channels), on vdpbf16ps,
// where oneDNN 2.6's bf16 kernel ran at 53-66% of the peak. x and dy come as oneDNN's weight pass
// reads them: bf16 bits in blocks of 16 channels ([n][c/16][h][w][16]); for one input channel
// (whose weight gradient oneDNN ran in fp32 on rounded copies) x float32 [n][h][w] and dy float32
// blocks, rounded as they are laid out. The pairs are images (2 np, 2 np + 1), which wastes no
// products on odd maps (pairs of output rows would on the convnet's 11 x 11 and AlexNet's 7 x 7):
//
//   dq[np][b][oy][ox][o] = (dy[2 np][oy][ox][16 b + o], dy[2 np + 1][oy][ox][16 b + o])
//   xq[np][r][ix][ci]    = (xp[2 np][r][ix][ci], xp[2 np + 1][r][ix][ci])
//   s[b][ky][j][o]       = sum over image pairs np, rows oy and pixels ox, in that order, of
//                          dq[np][b][oy][ox][o] . xq[np][oy + ky][ox * c + j]    (j = kx * c + ci)
//   dw[16 b + o][ci][ky][kx] = s[b][ky][kx * c + ci][o]
//   db[16 b + o] = sum of dq[np][b][oy][ox][o] . (1, 1) in that order
//
// with xp the padded channels-last image (a tap row's kw * c values are one run of a row), and
// a . b vdpbf16ps's pair product (the high halves' first). An odd batch's last image pairs with
// zeros, in dy and in x (a non-finite x there would make 0 * x a NaN). A pass holds G blocks of
// 16 outputs times J values of a run in registers (G * J sums, G words of dy loaded once a pixel,
// x broadcast as each product's operand) and streams a chunk of image pairs. The sums are dw
// itself in oneDNN's blocks of 16 x 16 (ABcd16b16a: [oc/16][c/16][kh][kw][16 ci][16 o]), or for
// one channel its blocks of 16 outputs (Acdb16a: [oc/16][kh][kw][16 o]), which its weight pass
// writes too and our reorder takes to the plain layout. With the max-pool after a one-channel
// convolution fused in (ConvGeom::nhwcPool with codes), dq's words come from the pool's gradient
// and window codes as its backward would spread them (PooledDy): no float dy.
#include <algorithm>
#include <cstdlib>
#include <immintrin.h>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "kernel_util.hpp"
#include "pool_max2x2.hpp"
#include "xspawn/error.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
// A chunk's words of dy and x: about a quarter of a 1 MiB L2 (the sums take up to as much).
constexpr std::size_t kChunkBytes = 256 * 1024;
// Scratch slots (oneDNN's scratchpad is slot 3; its staging lives in tensors of its own).
constexpr int kDyWordSlot = 4, kXWordSlot = 5;

struct Geometry {
  int n, c, oc, blocks, h, w, pad, oh, ow, kh, kw;
  int pairs;       // (n + 1) / 2
  int xpRows;      // h + 2 pad
  int xpRow;       // words of a padded row: (w + 2 pad) * c
  int run;         // kw * c
  std::size_t dqPair, xqPair;  // words an image pair
  explicit Geometry(const ConvGeom& g)
      : n(g.n), c(g.c), oc(g.oc), blocks(g.oc / kLanes), h(g.h), w(g.w), pad(g.pad), oh(g.oh()), ow(g.ow()),
        kh(g.kh), kw(g.kw), pairs((g.n + 1) / 2), xpRows(g.h + 2 * g.pad), xpRow((g.w + 2 * g.pad) * g.c),
        run(kw * c), dqPair(static_cast<std::size_t>(blocks) * oh * ow * kLanes),
        xqPair(static_cast<std::size_t>(xpRows) * xpRow) {}
  // The 16 sums of block b, tap row ky, run value j = kx * c + ci, in dw's blocks.
  float* sums(float* dw, int b, int ky, int j) const {
    if (c == 1) return dw + ((static_cast<std::size_t>(b) * kh + ky) * kw + j) * kLanes;
    const int kx = j / c, ci = j % c;
    const std::size_t tile = ((static_cast<std::size_t>(b) * (c / kLanes) + ci / kLanes) * kh + ky) * kw + kx;
    return dw + (tile * kLanes + ci % kLanes) * kLanes;
  }
};

// 16 bf16 values as the low halves of 16 words.
XS_DPBF16 inline __m512i widen(const std::uint16_t* p) {
  return _mm512_maskz_cvtepu16_epi32(kAllLanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 16 values of dy's blocks as the low halves of 16 words: bf16 bits as they are, float32 rounded.
template <class T>
XS_DPBF16 inline __m512i lowHalves(const T* p) {
  if constexpr (std::is_same_v<T, float>)
    return _mm512_maskz_srli_epi32(kAllLanes, _mm512_castps_si512(roundBf16(_mm512_loadu_ps(p))), 16);
  else
    return widen(p);
}

// Images 2 np and 2 np + 1 (zeros past the batch) of dy's blocks -> dq's pair, and with db the
// bias's sums (16 a block, from zero at pair 0) += each word's pair, the high half first.
template <class T>
XS_DPBF16 void dyWords(std::uint32_t* dq, float* db, const T* dy, int np, const Geometry& q) {
  const __m512i ones = _mm512_set1_epi32(0x3f803f80);  // bf16 1.0 in both halves
  const std::size_t plane = static_cast<std::size_t>(q.oh) * q.ow * kLanes, image = q.blocks * plane;
  const bool hasHi = 2 * np + 1 < q.n;
  for (int b = 0; b < q.blocks; ++b) {
    const T* lo = dy + 2 * np * image + b * plane;
    __m512 sums = db && np > 0 ? _mm512_loadu_ps(db + b * kLanes) : _mm512_setzero_ps();
    for (std::size_t p = 0; p < plane; p += kLanes, dq += kLanes) {
      const __m512i hi =
          hasHi ? _mm512_maskz_slli_epi32(kAllLanes, lowHalves(lo + image + p), 16) : _mm512_setzero_si512();
      const __m512i words = _mm512_or_si512(lowHalves(lo + p), hi);
      _mm512_store_si512(dq, words);
      if (db) sums = _mm512_dpbf16_ps(sums, (__m512bh)words, (__m512bh)ones);
    }
    if (db) _mm512_storeu_ps(db + b * kLanes, sums);
  }
}

// The max-pool after the convolution fused in (ConvGeom::nhwcPool with codes, one input
// channel), read as its backward reads it: window (py, px) of block b of image i gives its 16
// codes and its gradient, 0 + dy rounded (maxPoolNhwcBackward with dx rounded).
struct PooledDy {
  const NhwcPool& pool;
  bool dyBlocked;  // the pool's dy in blocks of 16 channels
  int ph, pw, oc;
  std::size_t pixels() const { return static_cast<std::size_t>(ph) * pw; }
  XS_DPBF16 __m256i codes(int i, int b, std::size_t p) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pool.codes + (i * pixels() + p) * oc + b * kLanes));
  }
  XS_DPBF16 __m512 gradient(int i, int b, std::size_t p) const {
    const std::size_t d = dyBlocked ? ((static_cast<std::size_t>(i) * (oc / kLanes) + b) * pixels() + p) * kLanes
                                    : (i * pixels() + p) * oc + b * kLanes;
    return maxPoolGradient<true>(pool.dy + d);
  }
};

// dyWords<float> for the fused max-pool: the words of the float dy the pool's backward would
// have written (each pixel its window's gradient where the window picked it and passes dy, +0
// elsewhere and past the last whole window), window by window without it; then db's sums over
// the words in dyWords' order (pixels row by row). The gradient is rounded already: its bits'
// high half is the word's half.
XS_DPBF16 void pooledDyWords(std::uint32_t* dq, float* db, const PooledDy& dy, int np, const Geometry& q) {
  const __m512i ones = _mm512_set1_epi32(0x3f803f80);  // bf16 1.0 in both halves
  const __m512i zero = _mm512_setzero_si512();
  const bool hasHi = 2 * np + 1 < q.n;
  const std::size_t row = static_cast<std::size_t>(q.ow) * kLanes, plane = q.oh * row;
  for (int b = 0; b < q.blocks; ++b, dq += plane) {
    for (int py = 0; py < dy.ph; ++py) {
      std::uint32_t* rows[2] = {dq + 2 * py * row, dq + (2 * py + 1) * row};
      for (int px = 0; px < dy.pw; ++px) {
        const std::size_t p = static_cast<std::size_t>(py) * dy.pw + px;
        const __m512i lo = _mm512_maskz_srli_epi32(kAllLanes, _mm512_castps_si512(dy.gradient(2 * np, b, p)), 16);
        const __m512i hi = hasHi ? _mm512_castps_si512(dy.gradient(2 * np + 1, b, p)) : zero;
        const __m256i codesLo = dy.codes(2 * np, b, p);
        const __m256i codesHi = hasHi ? dy.codes(2 * np + 1, b, p) : _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int at = 0; at < 4; ++at) {  // the window's pixels: (2 py + at / 2, 2 px + at % 2)
          const __m512i words = _mm512_or_si512(_mm512_maskz_mov_epi32(maxPool2x2Picks(codesLo, at), lo),
                                                _mm512_maskz_mov_epi32(maxPool2x2Picks(codesHi, at), hi));
          _mm512_store_si512(rows[at / 2] + (2 * px + at % 2) * kLanes, words);
        }
      }
      if (q.ow % 2) {  // the last column is no window's
        _mm512_store_si512(rows[0] + (q.ow - 1) * kLanes, zero);
        _mm512_store_si512(rows[1] + (q.ow - 1) * kLanes, zero);
      }
    }
    if (q.oh % 2) std::fill(dq + (q.oh - 1) * row, dq + plane, 0u);  // the last row is no window's
    if (!db) continue;
    __m512 sums = np > 0 ? _mm512_loadu_ps(db + b * kLanes) : _mm512_setzero_ps();
    for (std::size_t i = 0; i < plane; i += kLanes)
      sums = _mm512_dpbf16_ps(sums, (__m512bh)_mm512_load_si512(dq + i), (__m512bh)ones);
    _mm512_storeu_ps(db + b * kLanes, sums);
  }
}

// Images 2 np and 2 np + 1 (zeros past the batch) of x's blocks -> xq's pair, [xpRows][xpRow]
// words of the padded channels-last images, zeros in the padding.
XS_DPBF16 void xWords(std::uint32_t* xq, const std::uint16_t* x, int np, const Geometry& q) {
  const int cb = q.c / kLanes;
  const std::size_t plane = static_cast<std::size_t>(q.h) * q.w * kLanes, image = cb * plane;
  const bool hasHi = 2 * np + 1 < q.n;
  const std::size_t border = static_cast<std::size_t>(q.pad) * q.xpRow, side = static_cast<std::size_t>(q.pad) * q.c;
  std::fill(xq, xq + border, 0u);
  std::uint32_t* to = xq + border;
  for (int iy = 0; iy < q.h; ++iy) {
    std::fill(to, to + side, 0u);
    to += side;
    const std::uint16_t* lo = x + 2 * np * image + static_cast<std::size_t>(iy) * q.w * kLanes;
    for (int iw = 0; iw < q.w; ++iw)
      for (int b = 0; b < cb; ++b, to += kLanes) {
        const std::size_t at = b * plane + static_cast<std::size_t>(iw) * kLanes;
        const __m512i hi =
            hasHi ? _mm512_maskz_slli_epi32(kAllLanes, widen(lo + image + at), 16) : _mm512_setzero_si512();
        _mm512_store_si512(to, _mm512_or_si512(widen(lo + at), hi));
      }
    std::fill(to, to + side, 0u);
    to += side;
  }
  std::fill(to, to + border, 0u);
}

// One input channel: images 2 np and 2 np + 1 (zeros past the batch) of x [n][h][w] float32 ->
// xq's pair, [xpRows][xpRow] words of the padded images, rounded, zeros in the padding.
XS_DPBF16 void xWordsOneChannel(std::uint32_t* xq, const float* x, int np, const Geometry& q) {
  const std::size_t image = static_cast<std::size_t>(q.h) * q.w;
  const bool hasHi = 2 * np + 1 < q.n;
  std::fill(xq, xq + q.xqPair, 0u);
  for (int iy = 0; iy < q.h; ++iy) {
    const float* lo = x + 2 * np * image + static_cast<std::size_t>(iy) * q.w;
    std::uint32_t* to = xq + static_cast<std::size_t>(iy + q.pad) * q.xpRow + q.pad;
    for (int ix = 0; ix < q.w; ix += kLanes) {
      const __mmask16 m = firstLanes(q.w - ix);
      const __m512 hi = hasHi ? _mm512_maskz_loadu_ps(m, lo + image + ix) : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(to + ix, m, pairWords(_mm512_maskz_loadu_ps(m, lo + ix), hi));
    }
  }
}

// The sums of blocks b0 .. b0 + G - 1, tap row ky, run values j0 .. j0 + J - 1, over the
// chunk's `pairs` image pairs of words; from zero in the first chunk.
template <int G, int J>
XS_DPBF16 void pass(float* s, const std::uint32_t* dq, const std::uint32_t* xq, int pairs, const Geometry& q,
                    int b0, int ky, int j0, bool first) {
  __m512 acc[G][J];
#pragma GCC unroll 32
  for (int gi = 0; gi < G; ++gi)
#pragma GCC unroll 32
    for (int j = 0; j < J; ++j)
      acc[gi][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(q.sums(s, b0 + gi, ky, j0 + j));
  const std::size_t blockWords = static_cast<std::size_t>(q.oh) * q.ow * kLanes;
  for (int np = 0; np < pairs; ++np) {
    const std::uint32_t* d = dq + np * q.dqPair + b0 * blockWords;
    const std::uint32_t* xn = xq + np * q.xqPair + j0;
    for (int oy = 0; oy < q.oh; ++oy) {
      const std::uint32_t* x = xn + static_cast<std::size_t>(oy + ky) * q.xpRow;
      for (int ox = 0; ox < q.ow; ++ox, d += kLanes, x += q.c)
        dpbf16Tile(acc, d, blockWords, [x](int j) { return x[j]; });
    }
  }
#pragma GCC unroll 32
  for (int gi = 0; gi < G; ++gi)
#pragma GCC unroll 32
    for (int j = 0; j < J; ++j) _mm512_store_ps(q.sums(s, b0 + gi, ky, j0 + j), acc[gi][j]);
}

using Pass = void (*)(float*, const std::uint32_t*, const std::uint32_t*, int, const Geometry&, int, int, int, bool);

template <int G, std::size_t... I>
Pass passOf(int count, std::index_sequence<I...>) {
  static constexpr Pass kTable[] = {&pass<G, static_cast<int>(I) + 1>...};
  return kTable[count - 1];
}

// J values a pass at most with G blocks: G * J sums, G words of dy and x's broadcast in 32
// registers (one more spills a sum to the stack every pixel).
constexpr int maxValues(int G) { return (31 - G) / G; }

// G blocks a pass: 4 where the blocks divide by 4, else 2 or 1; the run split into passes of at
// most maxValues(G) values, as evenly as it comes.
void chunkSums(float* s, const std::uint32_t* dq, const std::uint32_t* xq, int pairs, const Geometry& q, bool first) {
  const int G = q.blocks % 4 == 0 ? 4 : q.blocks % 2 == 0 ? 2 : 1, maxJ = maxValues(G);
  const int passes = (q.run + maxJ - 1) / maxJ;
  for (int b0 = 0; b0 < q.blocks; b0 += G)
    for (int ky = 0; ky < q.kh; ++ky)
      for (int pi = 0, j = 0; pi < passes; ++pi) {
        const int count = (q.run - j) / (passes - pi);
        const Pass p = G == 4   ? passOf<4>(count, std::make_index_sequence<maxValues(4)>())
                       : G == 2 ? passOf<2>(count, std::make_index_sequence<maxValues(2)>())
                                : passOf<1>(count, std::make_index_sequence<maxValues(1)>());
        p(s, dq, xq, pairs, q, b0, ky, j, first);
        j += count;
      }
}

}  // namespace

bool& wideBf16Slot() {
  static bool on = [] {
    const char* env = std::getenv("XS_ENGINE_WIDE_BF16");
    if (!env || !*env) return true;
    const std::string v(env);
    XS_CHECK(v == "0" || v == "1", UsageError,
             "XS_ENGINE_WIDE_BF16=" + v + ": use 1 (our vdpbf16ps kernels for the wide convolutions' bf16 passes) or 0 "
             "(oneDNN's)");
    return v == "1";
  }();
  return on;
}

bool useWideWeightGradientBf16(const Device& dev, const ConvGeom& g) {
  // dw's sums in at most 1.5 MiB: each chunk of image pairs reads and writes them all, which on
  // larger layers (AlexNet 224's 3 x 3 ones, 2.4-3.5 MB) cost more than oneDNN's kernel loses.
  constexpr std::size_t kMaxSumBytes = 3 << 19;
  const std::size_t sumBytes = static_cast<std::size_t>(g.oc) * g.c * g.kh * g.kw * sizeof(float);
  return narrowBf16(dev) && g.stride == 1 && (g.c % kLanes == 0 || g.c == 1) && g.oc % kLanes == 0 && g.oh() > 0 &&
         g.ow() > 0 && sumBytes <= kMaxSumBytes;
}

void conv2dWeightGradientWideBf16(Device& dev, float* dwBlocks, float* db, const void* dy, const void* x,
                                  const ConvGeom& g) {
  const Geometry q(g);
  const std::size_t pairBytes = (q.dqPair + q.xqPair) * sizeof(std::uint32_t);
  const int chunk = static_cast<int>(std::clamp<std::size_t>(kChunkBytes / pairBytes, 1, q.pairs));
  auto* dq = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kDyWordSlot, q.dqPair * chunk));
  auto* xq = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kXWordSlot, q.xqPair * chunk));
  std::optional<PooledDy> pooled;
  if (g.nhwcPool) pooled.emplace(PooledDy{*g.nhwcPool, g.dyBlocked, q.oh / 2, q.ow / 2, q.oc});
  for (int p0 = 0; p0 < q.pairs; p0 += chunk) {
    const int pairs = std::min(chunk, q.pairs - p0);
    for (int i = 0; i < pairs; ++i) {
      if (q.c == 1) {
        if (pooled) pooledDyWords(dq + i * q.dqPair, db, *pooled, p0 + i, q);
        else dyWords(dq + i * q.dqPair, db, static_cast<const float*>(dy), p0 + i, q);
        xWordsOneChannel(xq + i * q.xqPair, static_cast<const float*>(x), p0 + i, q);
      } else {
        dyWords(dq + i * q.dqPair, db, static_cast<const std::uint16_t*>(dy), p0 + i, q);
        xWords(xq + i * q.xqPair, static_cast<const std::uint16_t*>(x), p0 + i, q);
      }
    }
    chunkSums(dwBlocks, dq, xq, pairs, q, p0 == 0);
  }
}

}  // namespace xs::engine::detail
