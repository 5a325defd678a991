// ops_pool_nhwc.cpp: max-pool on channels-last activations [n, h, w, c] (the forward's input
// also in blocks of 16 channels, as a oneDNN convolution writes it), vectorised along the
// contiguous channels; same window scan order and tie rule as the NCHW kernels (PyTorch's), and
// the same bits. Each output keeps a 16-bit window code (ops.hpp) instead of a plane index, and
// the forward applies the fused ReLU (and bf16 rounding) itself, so the backward reads neither
// the pooled values nor 32-bit indices. The 2x2 windows (the convnet's three pools) run on
// AVX-512 intrinsics where the CPU has them: the forward from x in blocks
// (maxPool2x2Blocked512) and the backward (maxPool2x2Backward512).
#include <algorithm>
#include <bit>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <type_traits>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "ops.hpp"
#include "pool_max2x2.hpp"

namespace xs::engine {

// Clones for the widest ISA found at run time. The codes are 16-bit lanes: AVX-512 without BW
// (AVX512F alone) has no 16-bit vector operations, and the loops go scalar there, so the
// AVX-512 clone asks for x86-64-v4 (F, BW, CD, DQ, VL); other CPUs take the AVX2 one.
#define XS_POOL_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))

namespace {

constexpr int kBlock = 16;  // channels whose best value and index stay in registers

// The pooled value as stored (reluLoop's and reluRoundedToBf16's bits) and its code's pass bit.
template <PoolEpilogue E>
[[gnu::always_inline]] inline float finish(float v) {
  if constexpr (E == PoolEpilogue::kNone) return v;
  v = std::max(0.f, v);  // (0 < v) ? v : 0, reluLoop's v > 0 ? v : 0 (NaN and -0 give +0)
  if constexpr (E == PoolEpilogue::kReluRoundedToBf16) v = roundToBf16(v);
  return v;
}
template <PoolEpilogue E>
[[gnu::always_inline]] inline std::int32_t passes(float y) {
  if constexpr (E == PoolEpilogue::kNone) return kPoolPasses;
  // y is relu's: +0 or positive, never NaN, so y > 0 is its bits > 0. An integer compare: with
  // a float one the 2x2 loop does not vectorise (GCC 12: "control flow in loop").
  else return static_cast<std::int32_t>(std::bit_cast<std::int32_t>(y) > 0) << 15;
}
static_assert(kPoolPasses == 1 << 15);

// Channels [0, L) of one window of one image (rows of w pixels, c floats apart): the best value
// and its offset. With L fixed, the running best lives in registers across the window; a later
// value wins if greater or NaN.
template <int L, PoolEpilogue E>
[[gnu::always_inline]] inline void windowMax(float* y, std::uint16_t* code, const float* img, int c, int w, int k,
                                             const PoolWindow& win) {
  float best[L];
  std::uint16_t at[L];
  for (int j = 0; j < L; ++j) {
    best[j] = -std::numeric_limits<float>::infinity();
    at[j] = static_cast<std::uint16_t>(win.offset(win.y0, win.x0, k));
  }
  for (int iy = win.y0; iy < win.y1; ++iy)
    for (int ix = win.x0; ix < win.x1; ++ix) {
      const auto here = static_cast<std::uint16_t>(win.offset(iy, ix, k));
      const float* p = img + (static_cast<std::size_t>(iy) * w + ix) * c;
#pragma omp simd
      for (int j = 0; j < L; ++j) {
        const bool take = (p[j] > best[j]) | (p[j] != p[j]);
        best[j] = take ? p[j] : best[j];
        at[j] = take ? here : at[j];
      }
    }
  for (int j = 0; j < L; ++j) {
    best[j] = finish<E>(best[j]);
    at[j] = static_cast<std::uint16_t>(at[j] | passes<E>(best[j]));
  }
  // Whole-block copies: element-wise stores from the spilled block stall on store forwarding.
  std::memcpy(y, best, sizeof best);
  std::memcpy(code, at, sizeof at);
}

// 2x2 windows without padding (the convnet's three pools), stride S: the four pixels of a window
// at fixed offsets 0, 1, 2, 3, the scan over them unrolled and the channel loop vectorised whole.
// The same scan order and tie rule as windowMax: the first pixel is the start (a -inf there
// stays with it as the -inf start would), a later one wins if greater or NaN. P = 0: x channels
// last (pixels c floats apart); P = 16: x in blocks of 16 channels ([n, c/16, h, w, 16], pixels
// 16 floats apart), taken block by block.
template <int S, PoolEpilogue E, int P>
[[gnu::always_inline]] inline void maxPool2x2Forward(float* __restrict y, std::uint16_t* __restrict code,
                                                     const float* __restrict x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c, ps = P > 0 ? P : c;
  const std::size_t row = static_cast<std::size_t>(g.w) * ps, hw = static_cast<std::size_t>(g.h) * g.w;
  for (int n = 0; n < g.n; ++n)
    for (int j = 0; j < c; j += ps) {  // one block of all c channels when channels last
      const float* img = x + static_cast<std::size_t>(n) * hw * c + (P > 0 ? j * hw : 0);
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          const std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c + j;
          const float* p0 = img + (static_cast<std::size_t>(oy) * S * g.w + static_cast<std::size_t>(ox) * S) * ps;
          const float* p1 = p0 + row;
#pragma omp simd
          for (int k = 0; k < ps; ++k) {
            float best = p0[k];
            std::int32_t at = 0;  // 32-bit lanes as the floats', narrowed at the store (vectorises)
            const float v1 = p0[ps + k], v2 = p1[k], v3 = p1[ps + k];
            const bool t1 = (v1 > best) | (v1 != v1);
            best = t1 ? v1 : best;
            at = t1 ? 1 : at;
            const bool t2 = (v2 > best) | (v2 != v2);
            best = t2 ? v2 : best;
            at = t2 ? 2 : at;
            const bool t3 = (v3 > best) | (v3 != v3);
            best = finish<E>(t3 ? v3 : best);
            y[o + k] = best;
            code[o + k] = static_cast<std::uint16_t>((t3 ? 3 : at) | passes<E>(best));
          }
        }
    }
}

// maxPool2x2Forward with x in blocks of 16 channels, written for AVX-512 (BW for the codes'
// narrowing store): one vector a window, its best value and pixel in registers, the tie rule
// as one compare of each later pixel (greater, or NaN) and the epilogue as finish<E>'s and
// passes<E>'s, so the same bits (maxPool2x2Vector, pool_max2x2.hpp). GCC vectorised the loop
// above at 256 bits with its masks spread over k-registers: the convnet's three pools (batch
// 16, bf16's epilogue) took 54, 63 and 20 µs a step that way, 30, 32 and 11 µs this way (Zen 5).
template <int S, PoolEpilogue E>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void maxPool2x2Blocked512(float* __restrict y,
                                                                              std::uint16_t* __restrict code,
                                                                              const float* __restrict x,
                                                                              const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c, w = g.w;
  const std::size_t row = static_cast<std::size_t>(w) * kBlock, hw = static_cast<std::size_t>(g.h) * w;
  for (int n = 0; n < g.n; ++n)
    for (int j = 0; j < c; j += kBlock) {
      const float* img = x + static_cast<std::size_t>(n) * hw * c + j * hw;
      for (int oy = 0; oy < oh; ++oy) {
        const float* r0 = img + static_cast<std::size_t>(oy) * S * row;
        std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow) * c + j;
        for (int ox = 0; ox < ow; ++ox, o += c) {
          const float* p0 = r0 + static_cast<std::size_t>(ox) * S * kBlock;
          const __m512 px[4] = {_mm512_loadu_ps(p0), _mm512_loadu_ps(p0 + kBlock), _mm512_loadu_ps(p0 + row),
                                _mm512_loadu_ps(p0 + row + kBlock)};  // offsets 0-3
          maxPool2x2Vector<E>(y + o, code + o, px);
        }
      }
    }
}

// Where channel j of pixel p of image n sits in a tensor of c channels and hw pixels per image
// (x, dy or dx): channels last ([n, hw, c]) or in blocks of 16 channels ([n, c/16, hw, 16],
// oneDNN's nChw16c, which the oneDNN convolutions next to a pool read and write without a reorder).
struct ChannelLayout {
  bool blocked;
  int c;
  std::size_t hw;
  std::size_t at(int n, int j, std::size_t p) const {
    const std::size_t image = static_cast<std::size_t>(n) * c * hw;
    return blocked ? image + (static_cast<std::size_t>(j) / 16 * hw + p) * 16 + j % 16 : image + p * c + j;
  }
  std::size_t pixel() const { return blocked ? 16 : static_cast<std::size_t>(c); }  // between pixels
};

template <PoolEpilogue E>
[[gnu::always_inline]] inline void poolForward(float* y, std::uint16_t* code, const float* x, const PoolGeom& g) {
  if (g.k == 2 && g.pad == 0 && g.stride == 2) {
    return g.xBlocked ? maxPool2x2Forward<2, E, kBlock>(y, code, x, g) : maxPool2x2Forward<2, E, 0>(y, code, x, g);
  }
  if (g.k == 2 && g.pad == 0 && g.stride == 1) {
    return g.xBlocked ? maxPool2x2Forward<1, E, kBlock>(y, code, x, g) : maxPool2x2Forward<1, E, 0>(y, code, x, g);
  }
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const ChannelLayout in{g.xBlocked, c, static_cast<std::size_t>(g.h) * g.w};
  const int ps = static_cast<int>(in.pixel());
  // Blocked x: block by block, each read in order; channels last: pixel by pixel, all channels.
  const int blocks = in.blocked ? c / kBlock : 1, perPixel = in.blocked ? kBlock : c;
  for (int n = 0; n < g.n; ++n)
    for (int b = 0; b < blocks; ++b)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          const std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c + b * kBlock;
          const PoolWindow win(oy, ox, g);
          int j = 0;
          for (; j + kBlock <= perPixel; j += kBlock)
            windowMax<kBlock, E>(y + o + j, code + o + j, x + in.at(n, b * kBlock + j, 0), ps, g.w, g.k, win);
          for (; j < perPixel; ++j)  // channels last only (blocked x has whole blocks)
            windowMax<1, E>(y + o + j, code + o + j, x + in.at(n, b * kBlock + j, 0), ps, g.w, g.k, win);
        }
}

XS_POOL_CLONES
void poolForwardPlain(float* y, std::uint16_t* code, const float* x, const PoolGeom& g) {
  poolForward<PoolEpilogue::kNone>(y, code, x, g);
}
XS_POOL_CLONES
void poolForwardRelu(float* y, std::uint16_t* code, const float* x, const PoolGeom& g) {
  poolForward<PoolEpilogue::kRelu>(y, code, x, g);
}
XS_POOL_CLONES
void poolForwardReluRounded(float* y, std::uint16_t* code, const float* x, const PoolGeom& g) {
  poolForward<PoolEpilogue::kReluRoundedToBf16>(y, code, x, g);
}

// The 2x2 blocked pools by maxPool2x2Blocked512 where the CPU has AVX-512 BW: true if it ran.
bool poolForwardBlocked512(float* y, std::uint16_t* code, const float* x, const PoolGeom& g, PoolEpilogue e) {
  if (!g.xBlocked || g.k != 2 || g.pad != 0 || (g.stride != 1 && g.stride != 2) || !cpuHasAvx512Bw()) return false;
  auto run = [&](auto s) {
    constexpr int S = decltype(s)::value;
    switch (e) {
      case PoolEpilogue::kNone: return maxPool2x2Blocked512<S, PoolEpilogue::kNone>(y, code, x, g);
      case PoolEpilogue::kRelu: return maxPool2x2Blocked512<S, PoolEpilogue::kRelu>(y, code, x, g);
      case PoolEpilogue::kReluRoundedToBf16:
        return maxPool2x2Blocked512<S, PoolEpilogue::kReluRoundedToBf16>(y, code, x, g);
    }
  };
  if (g.stride == 1) run(std::integral_constant<int, 1>{});
  else run(std::integral_constant<int, 2>{});
  return true;
}


// Channels [0, L) of one window: dy goes to the pixel its code picked if the code passes, +0 to
// the others. kTiled (windows tile the input: k == stride, no padding) writes each pixel once;
// otherwise the window adds, called in ascending window order on zeros, whole vectors instead of
// one indexed store per channel. Either way the bits are a scatter's into zeros: 0 + dy turns a
// -0 gradient into +0 as that does, and adding +0 leaves a sum as it is (it starts at +0 and is
// never -0 from there). kRound (tiled only) writes each gradient rounded to bf16.
// dx0: this image's channel j0 at pixel 0; ps: between pixels.
template <int L, bool kTiled, bool kRound>
[[gnu::always_inline]] inline void windowGrad(float* dx0, std::size_t ps, const float* dy, const std::uint16_t* code,
                                              int w, int k, const PoolWindow& win) {
  float grad[L];  // once per window, floats only: it stays in registers
#pragma omp simd
  for (int j = 0; j < L; ++j) {
    grad[j] = 0.f + dy[j];
    if constexpr (kRound) grad[j] = roundToBf16(grad[j]);
  }
  for (int iy = win.y0; iy < win.y1; ++iy)
    for (int ix = win.x0; ix < win.x1; ++ix) {
      // One compare per lane: a code that passes and picked this pixel equals exactly this.
      const std::int32_t picked = win.offset(iy, ix, k) | kPoolPasses;
      float* d = dx0 + (static_cast<std::size_t>(iy) * w + ix) * ps;
#pragma omp simd
      for (int j = 0; j < L; ++j) {
        const float v = code[j] == picked ? grad[j] : 0.f;
        if constexpr (kTiled) d[j] = v;
        else d[j] += v;
      }
    }
}

// Calls fn(iy, ix) for the pixels of tiling windows (stride = size) that no whole window
// covers, the rows and columns past the last one: their gradient is zero.
template <class Fn>
[[gnu::always_inline]] inline void forUncoveredPixels(const PoolGeom& g, Fn fn) {
  const int rows = g.oh() * g.k, cols = g.ow() * g.k;
  for (int iy = 0; iy < g.h; ++iy)
    for (int ix = iy < rows ? cols : 0; ix < g.w; ++ix) fn(iy, ix);
}

template <bool kTiled, bool kRound>
[[gnu::always_inline]] inline void poolGrad(float* dx, const float* dy, const std::uint16_t* code, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const ChannelLayout in{g.dxBlocked, c, static_cast<std::size_t>(g.h) * g.w};
  const ChannelLayout out{g.dyBlocked, c, static_cast<std::size_t>(oh) * ow};
  if constexpr (!kTiled) std::memset(dx, 0, g.n * in.hw * c * sizeof(float));
  for (int n = 0; n < g.n; ++n) {
    if constexpr (kTiled)
      forUncoveredPixels(g, [&](int iy, int ix) {
        for (int j = 0; j < c; j += g.dxBlocked ? kBlock : c)
          std::memset(dx + in.at(n, j, static_cast<std::size_t>(iy) * g.w + ix), 0,
                      (g.dxBlocked ? kBlock : c) * sizeof(float));
      });
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t p = static_cast<std::size_t>(oy) * ow + ox, o = (n * out.hw + p) * c;
        const PoolWindow win(oy, ox, g);
        int j = 0;
        for (; j + kBlock <= c; j += kBlock)
          windowGrad<kBlock, kTiled, kRound>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), code + o + j,
                                             g.w, g.k, win);
        for (; j < c; ++j)
          windowGrad<1, kTiled, kRound>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), code + o + j, g.w,
                                        g.k, win);
      }
  }
}

// poolGrad's 2x2 windows without padding (stride S, channels in whole blocks of 16), written for
// AVX-512 BW: a window's 16 codes as one 256-bit vector, each pixel's pick one compare of 16-bit
// lanes. Stride 2 (tiling) stores each pixel's gradient or +0 once, as kTiled does. Stride 1
// (overlapping) sums each dx pixel's gradients from the windows over it, in the ascending
// window order of the scatter it replaces, from +0 with masked adds: adding +0 for a window
// that did not pick the pixel leaves the sum's bits as they are (it is never -0), so the same
// bits, with dx written once instead of zeroed and then added to four times.
// A window's gradient and picks: maxPoolGradient and maxPool2x2Picks (pool_max2x2.hpp).
template <int S, bool kRound>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void maxPool2x2Backward512(float* dx, const float* dy,
                                                                               const std::uint16_t* code,
                                                                               const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c, h = g.h, w = g.w;
  const ChannelLayout in{g.dxBlocked, c, static_cast<std::size_t>(h) * w};
  const ChannelLayout out{g.dyBlocked, c, static_cast<std::size_t>(oh) * ow};
  const std::size_t xs = in.pixel(), ys = out.pixel();
  const __m512 zero = _mm512_setzero_ps();
  for (int n = 0; n < g.n; ++n)
    for (int j = 0; j < c; j += kBlock) {
      float* d = dx + in.at(n, j, 0);
      const float* t = dy + out.at(n, j, 0);
      const std::uint16_t* k = code + static_cast<std::size_t>(n) * oh * ow * c + j;
      if constexpr (S == 2) {
        for (int oy = 0; oy < oh; ++oy)
          for (int ox = 0; ox < ow; ++ox) {
            const std::size_t p = static_cast<std::size_t>(oy) * ow + ox;
            const __m512 grad = maxPoolGradient<kRound>(t + p * ys);
            const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + p * c));
            for (int i = 0; i < 4; ++i) {
              const std::size_t at = (static_cast<std::size_t>(2 * oy + i / 2) * w + 2 * ox + i % 2) * xs;
              _mm512_storeu_ps(d + at, _mm512_maskz_mov_ps(maxPool2x2Picks(codes, i), grad));
            }
          }
        forUncoveredPixels(
            g, [&](int iy, int ix) __attribute__((target("avx512f"))) { _mm512_storeu_ps(d + (static_cast<std::size_t>(iy) * w + ix) * xs, zero); });
      } else {
        for (int iy = 0; iy < h; ++iy)
          for (int ix = 0; ix < w; ++ix) {
            __m512 sum = zero;
            // windows (iy - 1, ix - 1), (iy - 1, ix), (iy, ix - 1), (iy, ix): the pixel's offset
            // in each 3, 2, 1, 0
            for (int i = 0; i < 4; ++i) {
              const int oy = iy - 1 + i / 2, ox = ix - 1 + i % 2;
              if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
              const std::size_t p = static_cast<std::size_t>(oy) * ow + ox;
              const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + p * c));
              sum = _mm512_mask_add_ps(sum, maxPool2x2Picks(codes, 3 - i), sum, maxPoolGradient<false>(t + p * ys));
            }
            _mm512_storeu_ps(d + (static_cast<std::size_t>(iy) * w + ix) * xs, sum);
          }
      }
    }
}

// The 2x2 pools' backward by maxPool2x2Backward512 where the CPU has AVX-512 BW: true if it ran.
bool poolBackward512(float* dx, const float* dy, const std::uint16_t* code, const PoolGeom& g) {
  if (g.k != 2 || g.pad != 0 || (g.stride != 1 && g.stride != 2) || g.c % kBlock != 0 || !cpuHasAvx512Bw())
    return false;
  if (g.stride == 1) maxPool2x2Backward512<1, false>(dx, dy, code, g);
  else if (g.dxRounded) maxPool2x2Backward512<2, true>(dx, dy, code, g);
  else maxPool2x2Backward512<2, false>(dx, dy, code, g);
  return true;
}

XS_POOL_CLONES
void poolBackward(float* dx, const float* dy, const std::uint16_t* code, const PoolGeom& g) {
  if (g.tiles() && g.dxRounded) poolGrad<true, true>(dx, dy, code, g);
  else if (g.tiles()) poolGrad<true, false>(dx, dy, code, g);
  else poolGrad<false, false>(dx, dy, code, g);
}

void checkNhwcPool(const PoolGeom& g) {
  checkPool(g, "max-pool (channels last)");
  XS_CHECK(g.nhwc, ShapeError, "max-pool: an NCHW geometry takes maxPool2dForward / maxPool2dBackward");
  XS_CHECK(g.k <= kMaxNhwcPoolWindow, ShapeError,
           "max-pool (channels last): window " + std::to_string(g.k) + " is wider than " +
               std::to_string(kMaxNhwcPoolWindow) + ", whose offsets fit in a window code: pool it in NCHW");
}

}  // namespace

void maxPoolNhwcForward(float* y, std::uint16_t* code, const float* x, const PoolGeom& g, PoolEpilogue e) {
  // x [n, h, w, c] or [n, c/16, h, w, 16] -> y, code [n, oh, ow, c]
  checkNhwcPool(g);
  XS_CHECK(!g.xBlocked || g.c % 16 == 0, ShapeError,
           "max-pool: x in channel blocks of 16 needs a multiple of 16 channels, got " + std::to_string(g.c));
  if (poolForwardBlocked512(y, code, x, g, e)) return;
  switch (e) {
    case PoolEpilogue::kNone: return poolForwardPlain(y, code, x, g);
    case PoolEpilogue::kRelu: return poolForwardRelu(y, code, x, g);
    case PoolEpilogue::kReluRoundedToBf16: return poolForwardReluRounded(y, code, x, g);
  }
}

void maxPoolNhwcBackward(float* dx, const float* dy, const std::uint16_t* code, const PoolGeom& g) {
  // dy [n, oh, ow, c] or [n, c/16, oh, ow, 16], code [n, oh, ow, c] -> dx [n, h, w, c] or [n, c/16, h, w, 16]
  checkNhwcPool(g);
  XS_CHECK(!(g.dyBlocked || g.dxBlocked) || g.c % 16 == 0, ShapeError,
           "max-pool: gradients in channel blocks of 16 need a multiple of 16 channels, got " + std::to_string(g.c));
  XS_CHECK(!g.dxRounded || g.tiles(), ShapeError,
           "max-pool: a bf16-rounded dx needs windows that tile the input (window = stride, no padding)");
  if (!poolBackward512(dx, dy, code, g)) poolBackward(dx, dy, code, g);
}

}  // namespace xs::engine
