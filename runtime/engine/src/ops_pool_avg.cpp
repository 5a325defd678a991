// ops_pool_avg.cpp: the average pool, NCHW or channels last, with a ReLU before it and bf16
// rounding of its output or gradient fused in. Every layout and path sums a window's pixels in
// the same order (rows, then columns, from +0) and divides once, so all give the same bits as
// the separate ReLU, pool and rounding passes. Channels last, AVX-512 takes a whole window's
// channels per vector, the last ones masked (LeNet-5's 16), or for 2x2 windows that tile and at
// most 8 channels 16 / c windows a vector (LeNet-5's 6: two windows).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "ops.hpp"

namespace xs::engine {

namespace {

// One output window clipped to the input (PoolWindow), and its divisor, which counts the
// padding (PyTorch's count_include_pad).
struct AvgWindow : PoolWindow {
  float div;
  bool pow2;  // div a power of two: multiplying by 1 / div gives the quotient's bits
  AvgWindow(const PoolGeom& g, int oy, int ox) : PoolWindow(oy, ox, g) {
    const int count = (std::min(wy + g.k, g.h + g.pad) - wy) * (std::min(wx + g.k, g.w + g.pad) - wx);
    div = static_cast<float>(count);
    pow2 = std::has_single_bit(static_cast<unsigned>(count));
  }
};

inline float relu(float v) { return v > 0.f ? v : 0.f; }  // reluForward's: NaN and -0 give +0

// dx = relu's backward (x > 0, else +0) and rounding, as the separate passes would apply them to
// a pool's gradient in dx: one pass over dx after windows that overlap or pad.
void finishGradient(float* dx, std::size_t count, const float* reluInput, bool round) {
  if (reluInput && round) reluBackwardRoundedToBf16(dx, dx, reluInput, count);  // x > 0 iff relu(x) > 0
  else if (reluInput) reluBackward(dx, dx, reluInput, count);
  else if (round) roundToBf16(dx, dx, count);
}

// ---- NCHW: one plane at a time ----------------------------------------------------------------

void nchwForward(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  const int oh = g.oh(), ow = g.ow();
  for (std::size_t pl = 0; pl < static_cast<std::size_t>(g.n) * g.c; ++pl) {
    const float* in = x + pl * g.h * g.w;
    float* out = y + pl * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win(g, oy, ox);
        float s = 0.f;
        for (int iy = win.y0; iy < win.y1; ++iy)
          for (int ix = win.x0; ix < win.x1; ++ix) s += f.relu ? relu(in[iy * g.w + ix]) : in[iy * g.w + ix];
        out[oy * ow + ox] = f.roundY ? roundToBf16(s / win.div) : s / win.div;
      }
  }
}

void nchwBackward(float* dx, const float* dy, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow();
  std::memset(dx, 0, static_cast<std::size_t>(g.n) * g.c * g.h * g.w * sizeof(float));
  for (std::size_t pl = 0; pl < static_cast<std::size_t>(g.n) * g.c; ++pl) {
    float* d = dx + pl * g.h * g.w;
    const float* up = dy + pl * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win(g, oy, ox);
        const float v = up[oy * ow + ox] / win.div;
        for (int iy = win.y0; iy < win.y1; ++iy)
          for (int ix = win.x0; ix < win.x1; ++ix) d[iy * g.w + ix] += v;
      }
  }
}

// ---- channels last, portable: 16 channels at a time in a local sum ----------------------------

constexpr int kLanes = 16;

void nhwcForwardLoops(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  for (int n = 0; n < g.n; ++n) {
    const float* img = x + static_cast<std::size_t>(n) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win(g, oy, ox);
        float* out = y + ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        for (int j = 0; j < c; j += kLanes) {
          const int lanes = std::min(kLanes, c - j);
          float s[kLanes] = {};
          for (int iy = win.y0; iy < win.y1; ++iy)
            for (int ix = win.x0; ix < win.x1; ++ix) {
              const float* p = img + (static_cast<std::size_t>(iy) * g.w + ix) * c + j;
              for (int l = 0; l < lanes; ++l) s[l] += f.relu ? relu(p[l]) : p[l];
            }
          for (int l = 0; l < lanes; ++l) out[j + l] = f.roundY ? roundToBf16(s[l] / win.div) : s[l] / win.div;
        }
      }
  }
}

// Adds each window's dy / div into dx (zeroed first), windows in the NCHW kernel's order.
void nhwcBackwardLoops(float* dx, const float* dy, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  std::memset(dx, 0, static_cast<std::size_t>(g.n) * g.h * g.w * c * sizeof(float));
  for (int n = 0; n < g.n; ++n) {
    float* img = dx + static_cast<std::size_t>(n) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win(g, oy, ox);
        const float* up = dy + ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        for (int iy = win.y0; iy < win.y1; ++iy)
          for (int ix = win.x0; ix < win.x1; ++ix) {
            float* d = img + (static_cast<std::size_t>(iy) * g.w + ix) * c;
            for (int j = 0; j < c; ++j) d[j] += up[j] / win.div;
          }
      }
  }
}

// ---- channels last, AVX-512: a window's channels in vectors of 16, the last one masked ---------

#define XS_AVX512 __attribute__((target("avx512f")))

// s / div with the division's bits (a multiply where div is a power of two).
XS_AVX512 inline __m512 quotient(__m512 s, const AvgWindow& win) {
  return win.pow2 ? _mm512_mul_ps(s, _mm512_set1_ps(1.f / win.div)) : _mm512_div_ps(s, _mm512_set1_ps(win.div));
}

// K: 0, or the window of a pool whose windows tile the input (k == stride == K, no padding),
// whose loops then unroll, with one divisor for all.
template <int K>
inline AvgWindow windowAt(const PoolGeom& g, int oy, int ox) {
  return AvgWindow(g, K ? 0 : oy, K ? 0 : ox);
}
template <int K>
inline int origin(int o, int clipped) {
  return K ? o * K : clipped;
}

template <int K, bool kRelu, bool kRound>
XS_AVX512 void forwardAvx512(float* y, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const __m512 zero = _mm512_setzero_ps();
  for (int n = 0; n < g.n; ++n) {
    const float* img = x + static_cast<std::size_t>(n) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win = windowAt<K>(g, oy, ox);
        const int y0 = origin<K>(oy, win.y0), y1 = K ? y0 + K : win.y1;
        const int x0 = origin<K>(ox, win.x0), x1 = K ? x0 + K : win.x1;
        float* out = y + ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        for (int j = 0; j < c; j += kLanes) {
          const __mmask16 m = firstLanes(c - j);
          __m512 s = zero;
          for (int iy = y0; iy < y1; ++iy)
            for (int ix = x0; ix < x1; ++ix) {
              __m512 v = _mm512_maskz_loadu_ps(m, img + (static_cast<std::size_t>(iy) * g.w + ix) * c + j);
              // v > 0 ? v : +0
              if constexpr (kRelu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
              s = _mm512_add_ps(s, v);
            }
          __m512 r = quotient(s, win);
          if constexpr (kRound) r = roundBf16(r);
          _mm512_mask_storeu_ps(out + j, m, r);
        }
      }
  }
}

// Windows that tile one image's dx: +0 into the rows and columns past the last whole window.
void zeroUncovered(float* dx, const PoolGeom& g) {
  if (g.oh() * g.k == g.h && g.ow() * g.k == g.w) return;
  const std::size_t row = static_cast<std::size_t>(g.w) * g.c;
  for (int iy = 0; iy < g.h; ++iy) {
    const int from = iy < g.oh() * g.k ? g.ow() * g.k : 0;
    std::memset(dx + iy * row + static_cast<std::size_t>(from) * g.c, 0, (g.w - from) * g.c * sizeof(float));
  }
}

// Windows that tile the input: each pixel takes its window's 0 + dy / div once, or +0 where the
// fused ReLU's input was not positive, rounded if asked; pixels no window covers take +0.
template <int K, bool kRelu, bool kRound>
XS_AVX512 void tiledBackwardAvx512(float* dx, const float* dy, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::size_t row = static_cast<std::size_t>(g.w) * c;
  const __m512 zero = _mm512_setzero_ps();
  for (int n = 0; n < g.n; ++n) {
    const std::size_t image = static_cast<std::size_t>(n) * g.h * row;
    zeroUncovered(dx + image, g);
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win = windowAt<K>(g, oy, ox);
        const int y0 = origin<K>(oy, win.y0), y1 = K ? y0 + K : win.y1;
        const int x0 = origin<K>(ox, win.x0), x1 = K ? x0 + K : win.x1;
        const float* up = dy + ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        for (int j = 0; j < c; j += kLanes) {
          const __mmask16 m = firstLanes(c - j);
          __m512 grad = _mm512_add_ps(zero, quotient(_mm512_maskz_loadu_ps(m, up + j), win));
          if constexpr (kRound) grad = roundBf16(grad);  // before the mask: round(+0) is +0
          for (int iy = y0; iy < y1; ++iy)
            for (int ix = x0; ix < x1; ++ix) {
              const std::size_t p = image + iy * row + static_cast<std::size_t>(ix) * c + j;
              __m512 v = grad;
              if constexpr (kRelu)
                v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, x + p), zero, _CMP_GT_OQ),
                                        grad);
              _mm512_mask_storeu_ps(dx + p, m, v);
            }
        }
      }
  }
}

// Windows that overlap or pad: each adds its dy / div into dx (zeroed first).
XS_AVX512 void addBackwardAvx512(float* dx, const float* dy, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::size_t row = static_cast<std::size_t>(g.w) * c;
  std::memset(dx, 0, static_cast<std::size_t>(g.n) * g.h * row * sizeof(float));
  for (int n = 0; n < g.n; ++n) {
    float* img = dx + static_cast<std::size_t>(n) * g.h * row;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const AvgWindow win(g, oy, ox);
        const float* up = dy + ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        for (int j = 0; j < c; j += kLanes) {
          const __mmask16 m = firstLanes(c - j);
          const __m512 grad = quotient(_mm512_maskz_loadu_ps(m, up + j), win);
          for (int iy = win.y0; iy < win.y1; ++iy)
            for (int ix = win.x0; ix < win.x1; ++ix) {
              float* d = img + iy * row + static_cast<std::size_t>(ix) * c + j;
              _mm512_mask_storeu_ps(d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d), grad));
            }
        }
      }
  }
}

// ---- channels last, AVX-512, 2x2 windows that tile and c <= 8: several windows a vector -------
//
// A vector holds P = 16 / c windows' channels; their 2P pixels of an input row (2Pc <= 32 floats)
// are two vectors, which two-source permutes split into the windows' left and right pixels, summed
// in the order above. LeNet-5's first pool (6 channels): 12 lanes of 16 where one window a vector
// fills 6.
struct Packed {
  int per;  // windows a vector, P
  alignas(64) int left[kLanes], right[kLanes], spread[2][kLanes];
  explicit Packed(int c) : per(kLanes / c) {
    for (int l = 0; l < kLanes; ++l) {
      const int win = std::min(l / c, per - 1), ch = l % c;  // lanes past P c: any index
      left[l] = 2 * win * c + ch;
      right[l] = left[l] + c;
      for (int half = 0; half < 2; ++half) {  // row float f from window f / c / 2's lane
        const int f = half * kLanes + l;
        spread[half][l] = std::min(f / c / 2, per - 1) * c + f % c;
      }
    }
  }
};

// Masks of the two vectors that hold a row's first `floats` floats.
inline std::pair<__mmask16, __mmask16> rowMasks(int floats) {
  return {firstLanes(floats), floats > kLanes ? firstLanes(floats - kLanes) : __mmask16(0)};
}

template <bool kRelu, bool kRound>
XS_AVX512 void packedForwardAvx512(float* y, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::size_t row = static_cast<std::size_t>(g.w) * c;
  const Packed pk(c);
  const __m512 quarter = _mm512_set1_ps(0.25f);  // / 4, a power of two: quotient()'s multiply
  const __m512i left = _mm512_load_si512(pk.left), right = _mm512_load_si512(pk.right);
  const __m512 zero = _mm512_setzero_ps();
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy) {
      const float* top = x + (static_cast<std::size_t>(n) * g.h + 2 * oy) * row;
      float* out = y + (static_cast<std::size_t>(n) * oh + oy) * ow * c;
      for (int ox = 0; ox < ow; ox += pk.per) {
        const int floats = std::min(pk.per, ow - ox) * c;
        const auto [m0, m1] = rowMasks(2 * floats);
        __m512 s = zero;
        for (int ky = 0; ky < 2; ++ky) {
          const float* in = top + ky * row + 2 * ox * c;
          __m512 a = _mm512_maskz_loadu_ps(m0, in), b = _mm512_maskz_loadu_ps(m1, in + kLanes);
          if constexpr (kRelu)  // NaN and -0 give +0
            a = _mm512_maskz_max_ps(kAllLanes, a, zero), b = _mm512_maskz_max_ps(kAllLanes, b, zero);
          s = _mm512_add_ps(s, _mm512_permutex2var_ps(a, left, b));
          s = _mm512_add_ps(s, _mm512_permutex2var_ps(a, right, b));
        }
        __m512 r = _mm512_mul_ps(s, quarter);
        if constexpr (kRound) r = roundBf16(r);
        _mm512_mask_storeu_ps(out + ox * c, firstLanes(floats), r);
      }
    }
}

template <bool kRelu, bool kRound>
XS_AVX512 void packedBackwardAvx512(float* dx, const float* dy, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::size_t row = static_cast<std::size_t>(g.w) * c;
  const Packed pk(c);
  const __m512 quarter = _mm512_set1_ps(0.25f);  // / 4, a power of two: quotient()'s multiply
  const __m512i spread0 = _mm512_load_si512(pk.spread[0]), spread1 = _mm512_load_si512(pk.spread[1]);
  const __m512 zero = _mm512_setzero_ps();
  for (int n = 0; n < g.n; ++n) {
    const std::size_t image = static_cast<std::size_t>(n) * g.h * row;
    zeroUncovered(dx + image, g);
    for (int oy = 0; oy < oh; ++oy) {
      const std::size_t top = image + 2 * oy * row;
      const float* up = dy + (static_cast<std::size_t>(n) * oh + oy) * ow * c;
      for (int ox = 0; ox < ow; ox += pk.per) {
        const int floats = std::min(pk.per, ow - ox) * c;
        const auto [m0, m1] = rowMasks(2 * floats);
        const __m512 up16 = _mm512_maskz_loadu_ps(firstLanes(floats), up + ox * c);
        __m512 grad = _mm512_add_ps(zero, _mm512_mul_ps(up16, quarter));
        if constexpr (kRound) grad = roundBf16(grad);
        const __m512 g0 = _mm512_maskz_permutexvar_ps(kAllLanes, spread0, grad);
        const __m512 g1 = _mm512_maskz_permutexvar_ps(kAllLanes, spread1, grad);
        for (int ky = 0; ky < 2; ++ky) {
          const std::size_t p = top + ky * row + 2 * ox * c;
          __m512 v0 = g0, v1 = g1;
          if constexpr (kRelu) {
            v0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m0, x + p), zero, _CMP_GT_OQ), g0);
            v1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m1, x + p + kLanes), zero, _CMP_GT_OQ),
                                     g1);
          }
          _mm512_mask_storeu_ps(dx + p, m0, v0);
          _mm512_mask_storeu_ps(dx + p + kLanes, m1, v1);
        }
      }
    }
  }
}

#undef XS_AVX512

// Where the packed kernels apply: 2x2 windows that tile, at least two of them a vector.
bool packs(const PoolGeom& g) { return g.tiles() && g.k == 2 && g.c <= kLanes / 2; }

void nhwcForwardAvx512(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  withFlags(f.relu, f.roundY, [&](auto relu, auto round) {
    if (packs(g)) packedForwardAvx512<relu, round>(y, x, g);  // LeNet-5's first
    else if (g.tiles() && g.k == 2) forwardAvx512<2, relu, round>(y, x, g);  // LeNet-5's second
    else forwardAvx512<0, relu, round>(y, x, g);
  });
}

void nhwcBackwardAvx512(float* dx, const float* dy, const PoolGeom& g, const float* reluInput) {
  if (!g.tiles()) {
    addBackwardAvx512(dx, dy, g);
    return finishGradient(dx, static_cast<std::size_t>(g.n) * g.h * g.w * g.c, reluInput, g.dxRounded);
  }
  withFlags(reluInput != nullptr, g.dxRounded, [&](auto relu, auto round) {
    if (packs(g)) packedBackwardAvx512<relu, round>(dx, dy, reluInput, g);
    else if (g.k == 2) tiledBackwardAvx512<2, relu, round>(dx, dy, reluInput, g);
    else tiledBackwardAvx512<0, relu, round>(dx, dy, reluInput, g);
  });
}

void checkAvgPool(const PoolGeom& g) {
  checkPool(g, "average-pool");
  XS_CHECK(!(g.dyBlocked || g.dxBlocked || g.xBlocked), ShapeError,
           "average-pool: tensors in channel blocks of 16 are a max-pool's; the average pool takes them "
           "channels last (g.nhwc) or NCHW");
}
void checkPortable(const PoolGeom& g) {
  checkAvgPool(g);
  XS_CHECK(g.nhwc, ShapeError, "average-pool: the portable loops are the channels-last ones: set g.nhwc");
}

}  // namespace

void avgPool2dForward(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  checkAvgPool(g);
  if (!g.nhwc) nchwForward(y, x, g, f);
  else if (cpuHasAvx512()) nhwcForwardAvx512(y, x, g, f);
  else nhwcForwardLoops(y, x, g, f);
}

void avgPool2dBackward(float* dx, const float* dy, const PoolGeom& g, const float* reluInput) {
  checkAvgPool(g);
  if (g.nhwc && cpuHasAvx512()) return nhwcBackwardAvx512(dx, dy, g, reluInput);
  if (g.nhwc) nhwcBackwardLoops(dx, dy, g);
  else nchwBackward(dx, dy, g);
  finishGradient(dx, static_cast<std::size_t>(g.n) * g.c * g.h * g.w, reluInput, g.dxRounded);
}

void avgPoolNhwcForwardPortable(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f) {
  checkPortable(g);
  nhwcForwardLoops(y, x, g, f);
}

void avgPoolNhwcBackwardPortable(float* dx, const float* dy, const PoolGeom& g, const float* reluInput) {
  checkPortable(g);
  nhwcBackwardLoops(dx, dy, g);
  finishGradient(dx, static_cast<std::size_t>(g.n) * g.c * g.h * g.w, reluInput, g.dxRounded);
}

}  // namespace xs::engine
