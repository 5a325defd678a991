// ops_pool_planes.cpp: the 2x2 average pool that tiles, from channel planes to channels last:
// x [n, c, h, w] -> y [n, oh, ow, c], c < 16, with the ReLU before it and bf16 rounding of y or
// dx fused in. A convolution of one input channel computes its output as channel planes
// (conv_one_channel.cpp, LeNet-5's first layer); the pool reads them as they are and
// interleaves its quarter of the values into the channels-last rows the next convolution reads.
// Its backward spreads dy back into planes, which that convolution's weight gradient reads as
// they are. The ReLU's mask goes to the backward as bits, one per pixel: it reads 1/32 of x's
// bytes. A window sums as ops_pool_avg.cpp's do (rows, then columns, from +0, times 1/4), so
// the bits are those of the separate ReLU, pool and rounding passes.
#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <utility>

#include "xspawn/error.hpp"
#include "channel_shuffles.hpp"
#include "pool_windows.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "ops.hpp"

namespace xs::engine {

namespace {

using detail::gatherPairs;
using detail::Shuffles;
constexpr int kLanes = 16;

// A window block is 16 output windows of one row; it reads 32 pixels of two input rows, two
// vectors each, whose masks are two uint16 a row: mask [n, c, h, 2 blocks].
struct Planes {
  int c, h, w, oh, ow, blocks;
  int blocks16;  // blocks of 16 input pixels a row
  explicit Planes(const PoolGeom& g)
      : c(g.c), h(g.h), w(g.w), oh(g.oh()), ow(g.ow()), blocks((g.ow() + kLanes - 1) / kLanes),
        blocks16((g.w + kLanes - 1) / kLanes) {}
  template <class T>  // float or const float
  T* pixel(T* x, int n, int ch, int iy, int ix) const {
    return x + ((static_cast<std::size_t>(n) * c + ch) * h + iy) * w + ix;
  }
  std::size_t maskAt(int n, int ch, int iy, int ix) const {
    return ((static_cast<std::size_t>(n) * c + ch) * h + iy) * 2 * blocks + ix / kLanes;
  }
  std::size_t yAt(int n, int oy, int ox) const { return ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c; }
  int windows(int blk) const { return std::min(kLanes, ow - blk * kLanes); }
};

// Pixels no window covers (odd h or w): +0.
void zeroUncovered(float* dx, const Planes& p, int n) {
  for (int ch = 0; ch < p.c; ++ch)
    for (int iy = 0; iy < p.h; ++iy) {
      const int from = iy < 2 * p.oh ? 2 * p.ow : 0;
      std::fill(p.pixel(dx, n, ch, iy, from), p.pixel(dx, n, ch, iy, p.w), 0.f);
    }
}

void forwardLoops(float* y, std::uint16_t* mask, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  const Planes p(g);
  if (f.relu) std::fill(mask, mask + avgPoolPlanesMasks(g), std::uint16_t{0});
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < p.oh; ++oy)
      for (int ox = 0; ox < p.ow; ++ox)
        for (int ch = 0; ch < p.c; ++ch) {
          float s = 0.f;
          for (int iy = 2 * oy; iy < 2 * oy + 2; ++iy)
            for (int ix = 2 * ox; ix < 2 * ox + 2; ++ix) {
              float v = *p.pixel(x, n, ch, iy, ix);
              if (f.relu && v > 0.f) mask[p.maskAt(n, ch, iy, ix)] |= static_cast<std::uint16_t>(1u << (ix % kLanes));
              else if (f.relu) v = 0.f;  // NaN and -0 give +0
              s += v;
            }
          y[p.yAt(n, oy, ox) + ch] = f.roundY ? roundToBf16(s / 4.f) : s / 4.f;
        }
}

void backwardLoops(float* dx, const float* dy, const std::uint16_t* mask, const PoolGeom& g) {
  const Planes p(g);
  for (int n = 0; n < g.n; ++n) {
    zeroUncovered(dx, p, n);
    for (int oy = 0; oy < p.oh; ++oy)
      for (int ox = 0; ox < p.ow; ++ox)
        for (int ch = 0; ch < p.c; ++ch) {
          float q = 0.f + dy[p.yAt(n, oy, ox) + ch] / 4.f;
          if (g.dxRounded) q = roundToBf16(q);
          for (int iy = 2 * oy; iy < 2 * oy + 2; ++iy)
            for (int ix = 2 * ox; ix < 2 * ox + 2; ++ix) {
              const bool pass = !mask || (mask[p.maskAt(n, ch, iy, ix)] >> (ix % kLanes) & 1u);
              *p.pixel(dx, n, ch, iy, ix) = pass ? q : 0.f;
            }
        }
  }
}

#define XS_AVX512 __attribute__((target("avx512f")))

using Lanes = detail::PoolLanes;

// One image's strides: between its planes (or their gradient) and its ReLU mask words.
struct Image {
  std::size_t plane;  // floats between two channels' planes
  std::size_t bits;   // mask words between two channels
  int rowBits;        // mask words between two rows (2 blocks of 16 windows)
  explicit Image(const Planes& p)
      : plane(static_cast<std::size_t>(p.h) * p.w), bits(static_cast<std::size_t>(p.h) * 2 * p.blocks),
        rowBits(2 * p.blocks) {}
};

// Block blk of row oy of one image: each of the C channels' 16 windows from its planes' two
// rows, then interleaved. C a constant: the windows stay in registers and the addresses are
// strides (the scalar work had been half the pass).
template <int C, bool kRelu, bool kRound>
XS_AVX512 void forwardBlock(float* y, std::uint16_t* mask, const float* x, const Planes& p, const Image& im,
                            const Shuffles& sh, const Lanes& ln, int oy, int blk) {
  const int wins = p.windows(blk);
  const __mmask16 m0 = firstLanes(2 * wins), m1 = wins > 8 ? firstLanes(2 * wins - kLanes) : 0;
  const __m512i left = _mm512_load_si512(ln.left), right = _mm512_load_si512(ln.right);
  const float* rows = x + static_cast<std::size_t>(2 * oy) * p.w + 2 * kLanes * blk;
  std::uint16_t* bits = mask + static_cast<std::size_t>(2 * oy) * im.rowBits + 2 * blk;
  __m512 win[C];
#pragma GCC unroll 16
  for (int ch = 0; ch < C; ++ch) {
    win[ch] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int ky = 0; ky < 2; ++ky) {
      const float* row = rows + ch * im.plane + ky * p.w;
      win[ch] = detail::addWindowRow<kRelu>(win[ch], _mm512_maskz_loadu_ps(m0, row),
                                            _mm512_maskz_loadu_ps(m1, row + kLanes),
                                            kRelu ? bits + ch * im.bits + ky * im.rowBits : nullptr, left, right);
    }
  }
  detail::storeWindows<C, kRound>(y + static_cast<std::size_t>(oy) * p.ow * C + blk * kLanes * C, win, wins * C, sh);
}

// dy's row of `valid` values [windows, C] from up as C vectors (zeros past), and channel ch's
// window gradients from them: d / 4 (from +0, so -0 gives +0), rounded to bf16 with kRound.
template <int C>
XS_AVX512 void loadRow(__m512 (&rows)[C], const float* up, int valid) {
#pragma GCC unroll 16
  for (int v = 0; v < C; ++v)
    rows[v] = v * kLanes < valid ? _mm512_maskz_loadu_ps(firstLanes(valid - v * kLanes), up + v * kLanes)
                                 : _mm512_setzero_ps();
}
template <int C, bool kRound>
XS_AVX512 __m512 windowGrad(const __m512 (&rows)[C], const Shuffles& sh, int ch) {
  const __m512 d = gatherPairs(rows, C, sh.fromRow[ch], sh.fromRowPair[ch]);
  __m512 grad = _mm512_add_ps(_mm512_setzero_ps(), _mm512_mul_ps(d, _mm512_set1_ps(0.25f)));
  if constexpr (kRound) grad = roundBf16(grad);  // before the mask: round(+0) is +0
  return grad;
}

// Block blk of row oy of one image: dy's row de-interleaved into channels, each window's
// quotient spread to its four pixels (+0 where the ReLU's mask is clear).
template <int C, bool kRelu, bool kRound>
XS_AVX512 void backwardBlock(float* dx, const float* dy, const std::uint16_t* mask, const Planes& p,
                             const Image& im, const Shuffles& sh, const Lanes& ln, int oy, int blk) {
  const int wins = p.windows(blk);
  const __mmask16 m0 = firstLanes(2 * wins), m1 = wins > 8 ? firstLanes(2 * wins - kLanes) : 0;
  const __m512i low = _mm512_load_si512(ln.low), high = _mm512_load_si512(ln.high);
  __m512 rows[C];
  loadRow<C>(rows, dy + static_cast<std::size_t>(oy) * p.ow * C + blk * kLanes * C, wins * C);
  float* to = dx + static_cast<std::size_t>(2 * oy) * p.w + 2 * kLanes * blk;
  const std::uint16_t* bits = mask + static_cast<std::size_t>(2 * oy) * im.rowBits + 2 * blk;
#pragma GCC unroll 16
  for (int ch = 0; ch < C; ++ch) {
    const __m512 grad = windowGrad<C, kRound>(rows, sh, ch);
    const __m512 g0 = _mm512_maskz_permutexvar_ps(kAllLanes, low, grad), g1 = _mm512_maskz_permutexvar_ps(kAllLanes, high, grad);
#pragma GCC unroll 2
    for (int ky = 0; ky < 2; ++ky) {
      float* row = to + ch * im.plane + ky * p.w;
      __m512 v0 = g0, v1 = g1;
      if constexpr (kRelu) {
        const std::uint16_t* b = bits + ch * im.bits + ky * im.rowBits;
        v0 = _mm512_maskz_mov_ps(b[0], g0), v1 = _mm512_maskz_mov_ps(b[1], g1);
      }
      _mm512_mask_storeu_ps(row, m0, v0);
      _mm512_mask_storeu_ps(row + kLanes, m1, v1);
    }
  }
}

// One image's dy spread as backwardBlock does, but into the weight sums' layout dyT [h][2 blocks
// of 16 pixels][C][16] (zeros past w, every store a whole aligned vector), with each written
// vector added to its channel's lane sums (the bias gradient) in row order. One window block a
// row (w <= 32) and windows that cover the image: the rows come out in order. kPairs (native
// bf16, rounded values): a window row's two pixel rows go out as the words of the pair sums
// instead, dq [h / 2][blocks][C][16] = (row 2 oy, row 2 oy + 1) (dyPairs' layout), out = dq.
template <int C, bool kRelu, bool kRound, bool kPairs = false>
XS_AVX512 void backwardToBlocks(void* out, float* laneSums, const float* dy, const std::uint16_t* mask,
                                const Planes& p, const Image& im, const Shuffles& sh, const Lanes& ln) {
  static_assert(!kPairs || kRound, "pair words hold bf16 values");
  auto* dyT = static_cast<float*>(out);
  auto* dq = static_cast<std::uint32_t*>(out);
  __m512 top[2][C] = {};  // kPairs: a window row's top pixel row, per block, until its bottom one
  const int wins = p.windows(0);
  const __mmask16 m0 = firstLanes(2 * wins), m1 = wins > 8 ? firstLanes(2 * wins - kLanes) : 0;
  const __m512i low = _mm512_load_si512(ln.low), high = _mm512_load_si512(ln.high);
  const int valid = wins * C;
  // The geometry in locals: the vector stores through out may alias p's and im's fields, which
  // the compiler would read again after each one (LeNet-5's conv 1 backward 5% slower so).
  const int oh = p.oh, ow = p.ow, blocks16 = p.blocks16, rowBits = im.rowBits;
  const std::size_t chBits = im.bits;
  __m512 sums[C];
#pragma GCC unroll 16
  for (int ch = 0; ch < C; ++ch) sums[ch] = _mm512_load_ps(laneSums + ch * kLanes);
  for (int oy = 0; oy < oh; ++oy) {
    __m512 rows[C];
    loadRow<C>(rows, dy + static_cast<std::size_t>(oy) * ow * C, valid);
    __m512 g0[C], g1[C];
#pragma GCC unroll 16
    for (int ch = 0; ch < C; ++ch) {
      const __m512 grad = windowGrad<C, kRound>(rows, sh, ch);
      g0[ch] = _mm512_maskz_permutexvar_ps(m0, low, grad), g1[ch] = _mm512_maskz_permutexvar_ps(m1, high, grad);
    }
    // Block blk's vector v of channel ch in pixel row 2 oy + ky.
    auto put = [&](int ky, int blk, int ch, __m512 v) XS_AVX512 {
      const std::size_t at = (static_cast<std::size_t>(kPairs ? oy : 2 * oy + ky) * blocks16 + blk) * C + ch;
      if constexpr (!kPairs) _mm512_store_ps(dyT + at * kLanes, v);
      else if (ky == 0) top[blk][ch] = v;
      else _mm512_store_si512(dq + at * kLanes, pairWordsOf<true>(top[blk][ch], v));
    };
#pragma GCC unroll 2
    for (int ky = 0; ky < 2; ++ky) {
      const int iy = 2 * oy + ky;
#pragma GCC unroll 16
      for (int ch = 0; ch < C; ++ch) {
        __m512 v0 = g0[ch];
        if constexpr (kRelu) v0 = _mm512_maskz_mov_ps(mask[ch * chBits + iy * rowBits], v0);
        put(ky, 0, ch, v0);
        sums[ch] = _mm512_add_ps(sums[ch], v0);
      }
      if (blocks16 == 1) continue;
#pragma GCC unroll 16
      for (int ch = 0; ch < C; ++ch) {
        __m512 v1 = g1[ch];
        if constexpr (kRelu) v1 = _mm512_maskz_mov_ps(mask[ch * chBits + iy * rowBits + 1], v1);
        put(ky, 1, ch, v1);
        sums[ch] = _mm512_add_ps(sums[ch], v1);
      }
    }
  }
#pragma GCC unroll 16
  for (int ch = 0; ch < C; ++ch) _mm512_store_ps(laneSums + ch * kLanes, sums[ch]);
}

template <int C, bool kRelu, bool kRound>
XS_AVX512 void forwardAvx512(float* y, std::uint16_t* mask, const float* x, const PoolGeom& g) {
  const Planes p(g);
  const Image im(p);
  const Shuffles& sh = detail::shufflesFor(C);
  const Lanes& ln = detail::poolLanes();
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < p.oh; ++oy)
      for (int blk = 0; blk < p.blocks; ++blk)
        forwardBlock<C, kRelu, kRound>(y + p.yAt(n, 0, 0), mask ? mask + p.maskAt(n, 0, 0, 0) : nullptr,
                                       p.pixel(x, n, 0, 0, 0), p, im, sh, ln, oy, blk);
}

template <int C, bool kRelu, bool kRound>
XS_AVX512 void backwardAvx512(float* dx, const float* dy, const std::uint16_t* mask, const PoolGeom& g) {
  const Planes p(g);
  const Image im(p);
  const Shuffles& sh = detail::shufflesFor(C);
  const Lanes& ln = detail::poolLanes();
  const bool uncovered = 2 * p.oh != p.h || 2 * p.ow != p.w;
  for (int n = 0; n < g.n; ++n) {
    if (uncovered) zeroUncovered(dx, p, n);
    for (int oy = 0; oy < p.oh; ++oy)
      for (int blk = 0; blk < p.blocks; ++blk)
        backwardBlock<C, kRelu, kRound>(p.pixel(dx, n, 0, 0, 0), dy + p.yAt(n, 0, 0),
                                        mask ? mask + p.maskAt(n, 0, 0, 0) : nullptr, p, im, sh, ln, oy, blk);
  }
}

template <int C, bool kRelu, bool kRound, bool kPairs = false>
XS_AVX512 void toBlocksAvx512(void* out, float* laneSums, const float* dy, const std::uint16_t* mask,
                              const PoolGeom& g) {
  const Planes p(g);
  backwardToBlocks<C, kRelu, kRound, kPairs>(out, laneSums, dy, mask, p, Image(p), detail::shufflesFor(C),
                                             detail::poolLanes());
}

// The kernels for c channels (1..15).
template <bool kRelu, bool kRound, std::size_t... I>
auto forwardKernel(int c, std::index_sequence<I...>) {
  using Kernel = void (*)(float*, std::uint16_t*, const float*, const PoolGeom&);
  static constexpr Kernel kTable[] = {&forwardAvx512<static_cast<int>(I) + 1, kRelu, kRound>...};
  return kTable[c - 1];
}
template <bool kRelu, bool kRound, std::size_t... I>
auto toBlocksKernel(int c, std::index_sequence<I...>) {
  using Kernel = void (*)(void*, float*, const float*, const std::uint16_t*, const PoolGeom&);
  static constexpr Kernel kTable[] = {&toBlocksAvx512<static_cast<int>(I) + 1, kRelu, kRound>...};
  return kTable[c - 1];
}
template <bool kRelu, std::size_t... I>
auto toPairsKernel(int c, std::index_sequence<I...>) {
  using Kernel = void (*)(void*, float*, const float*, const std::uint16_t*, const PoolGeom&);
  static constexpr Kernel kTable[] = {&toBlocksAvx512<static_cast<int>(I) + 1, kRelu, true, true>...};
  return kTable[c - 1];
}
template <bool kRelu, bool kRound, std::size_t... I>
auto backwardKernel(int c, std::index_sequence<I...>) {
  using Kernel = void (*)(float*, const float*, const std::uint16_t*, const PoolGeom&);
  static constexpr Kernel kTable[] = {&backwardAvx512<static_cast<int>(I) + 1, kRelu, kRound>...};
  return kTable[c - 1];
}

#undef XS_AVX512

bool vectorKernels() { return cpuHasAvx512() && !avgPoolPlanesPortableSlot(); }

void check(const PoolGeom& g, bool masked) {
  checkPool(g, "average-pool");
  XS_CHECK(avgPoolPlanesApply(g), ShapeError,
           "average-pool from planes: needs 2x2 windows that tile, fewer than 16 channels and NCHW x (got " +
               std::to_string(g.k) + "x" + std::to_string(g.k) + " stride " + std::to_string(g.stride) + ", " +
               std::to_string(g.c) + " channels): ask avgPoolPlanesApply first");
  XS_CHECK(masked, ShapeError, "average-pool from planes: a fused ReLU needs the mask buffer (avgPoolPlanesMasks)");
}

}  // namespace

bool& avgPoolPlanesPortableSlot() {
  static bool portable = false;
  return portable;
}

bool avgPoolPlanesApply(const PoolGeom& g) {
  return g.tiles() && g.k == 2 && g.c < kLanes && !g.nhwc && !g.dyBlocked && !g.dxBlocked;
}

std::size_t avgPoolPlanesMasks(const PoolGeom& g) {
  return static_cast<std::size_t>(g.n) * g.c * g.h * 2 * ((g.ow() + kLanes - 1) / kLanes);
}

void avgPoolPlanesForward(float* y, std::uint16_t* mask, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  check(g, !f.relu || mask);
  if (!vectorKernels()) return forwardLoops(y, mask, x, g, f);
  withFlags(f.relu, f.roundY, [&](auto relu, auto round) {
    forwardKernel<relu, round>(g.c, std::make_index_sequence<kLanes - 1>())(y, mask, x, g);
  });
}

void avgPoolPlanesBackward(float* dx, const float* dy, const std::uint16_t* mask, const PoolGeom& g) {
  check(g, true);
  if (!vectorKernels()) return backwardLoops(dx, dy, mask, g);
  withFlags(mask != nullptr, g.dxRounded, [&](auto relu, auto round) {
    backwardKernel<relu, round>(g.c, std::make_index_sequence<kLanes - 1>())(dx, dy, mask, g);
  });
}

namespace {
// Image n of the batch as a batch of one.
PoolGeom oneImage(const PlanesPool& p) {
  PoolGeom g = p.g;
  g.n = 1;
  return g;
}
std::size_t imageMasks(const PlanesPool& p) { return avgPoolPlanesMasks(oneImage(p)); }
std::size_t imageOutputs(const PlanesPool& p) { return static_cast<std::size_t>(p.g.oh()) * p.g.ow() * p.g.c; }
}  // namespace

void avgPoolPlanesForwardImage(const PlanesPool& p, int n, const float* x) {
  avgPoolPlanesForward(p.y + n * imageOutputs(p), p.f.relu ? p.mask + n * imageMasks(p) : nullptr, x, oneImage(p),
                       p.f);
}

bool avgPoolPlanesToBlocksApply(const PlanesPool& p) {
  return vectorKernels() && p.g.w <= 2 * kLanes && p.g.w == 2 * p.g.ow() && p.g.h == 2 * p.g.oh();
}

void avgPoolPlanesBackwardToPairs(std::uint32_t* dq, float* laneSums, const PlanesPool& p, int n) {
  XS_CHECK(avgPoolPlanesToBlocksApply(p) && p.g.dxRounded, ShapeError,
           "average-pool into pair words: needs AVX-512, rows of at most 32 pixels that the windows cover, and dx "
           "rounded to bf16 (g.dxRounded)");
  const PoolGeom g = oneImage(p);
  withFlags(p.f.relu, true, [&](auto relu, auto) {
    toPairsKernel<relu>(g.c, std::make_index_sequence<kLanes - 1>())(
        dq, laneSums, p.dy + n * imageOutputs(p), p.f.relu ? p.mask + n * imageMasks(p) : nullptr, g);
  });
}

void avgPoolPlanesBackwardToBlocks(float* dyT, float* laneSums, const PlanesPool& p, int n) {
  XS_CHECK(avgPoolPlanesToBlocksApply(p), ShapeError,
           "average-pool into blocks: needs AVX-512, rows of at most 32 pixels that the windows cover");
  const PoolGeom g = oneImage(p);
  withFlags(p.f.relu, g.dxRounded, [&](auto relu, auto round) {
    toBlocksKernel<relu, round>(g.c, std::make_index_sequence<kLanes - 1>())(
        dyT, laneSums, p.dy + n * imageOutputs(p), p.f.relu ? p.mask + n * imageMasks(p) : nullptr, g);
  });
}

void avgPoolPlanesBackwardImage(float* dx, const PlanesPool& p, int n) {
  avgPoolPlanesBackward(dx, p.dy + n * imageOutputs(p), p.f.relu ? p.mask + n * imageMasks(p) : nullptr,
                        oneImage(p));
}

}  // namespace xs::engine
