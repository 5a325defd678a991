// ops_pool_nhwc.cpp: max-pool on channels-last activations [n, h, w, c], vectorised along the
// contiguous channels; same window scan order and tie rule as the NCHW kernels (PyTorch's), and
// the same bits.
#include <algorithm>
#include <cstring>
#include <limits>

#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine::detail {

namespace {

constexpr int kBlock = 16;  // channels whose best value and index stay in registers

// Rows (or columns) [lo, hi) of output window o, clipped to the input's size.
inline void windowSpan(int o, const PoolGeom& g, int size, int& lo, int& hi) {
  lo = std::max(o * g.stride - g.pad, 0);
  hi = std::min(o * g.stride - g.pad + g.k, size);
}

// Channels [0, L) of the window [y0, y1) x [x0, x1) of one image (rows of w pixels of c
// channels): the best value and its plane index. With L fixed, the running best lives in
// registers across the window; a later value wins if greater or NaN.
template <int L>
[[gnu::always_inline]] inline void windowMax(float* y, std::int32_t* argmax, const float* img, int c, int w,
                                             int y0, int y1, int x0, int x1) {
  float best[L];
  std::int32_t at[L];
  for (int k = 0; k < L; ++k) best[k] = -std::numeric_limits<float>::infinity(), at[k] = y0 * w + x0;
  for (int iy = y0; iy < y1; ++iy)
    for (int ix = x0; ix < x1; ++ix) {
      const std::int32_t here = iy * w + ix;
      const float* p = img + static_cast<std::size_t>(here) * c;
#pragma omp simd
      for (int k = 0; k < L; ++k) {
        const bool take = (p[k] > best[k]) | (p[k] != p[k]);
        best[k] = take ? p[k] : best[k];
        at[k] = take ? here : at[k];
      }
    }
  // Whole-block copies: element-wise stores from the spilled block stall on store forwarding.
  std::memcpy(y, best, sizeof best);
  std::memcpy(argmax, at, sizeof at);
}

// 2x2 windows without padding (the convnet's three pools), stride S: the four pixels of a window
// at fixed offsets, the scan over them unrolled and the channel loop vectorised whole. The same
// scan order and tie rule as windowMax: the first pixel is the start (a -inf there stays with it
// as the -inf start would), a later one wins if greater or NaN.
template <int S>
[[gnu::always_inline]] inline void maxPool2x2Forward(float* __restrict y, std::int32_t* __restrict argmax,
                                                     const float* __restrict x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c, w = g.w;
  const std::size_t row = static_cast<std::size_t>(w) * c;
  for (int n = 0; n < g.n; ++n) {
    const float* img = x + static_cast<std::size_t>(n) * g.h * row;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        const std::int32_t h0 = oy * S * w + ox * S;
        const float* p0 = img + static_cast<std::size_t>(h0) * c;
        const float* p1 = p0 + row;
#pragma omp simd
        for (int k = 0; k < c; ++k) {
          float best = p0[k];
          std::int32_t at = h0;
          const float v1 = p0[c + k], v2 = p1[k], v3 = p1[c + k];
          const bool t1 = (v1 > best) | (v1 != v1);
          best = t1 ? v1 : best;
          at = t1 ? h0 + 1 : at;
          const bool t2 = (v2 > best) | (v2 != v2);
          best = t2 ? v2 : best;
          at = t2 ? h0 + w : at;
          const bool t3 = (v3 > best) | (v3 != v3);
          y[o + k] = t3 ? v3 : best;
          argmax[o + k] = t3 ? h0 + w + 1 : at;
        }
      }
  }
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolNhwcForward(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g) {
  // x [n, h, w, c] -> y, argmax [n, oh, ow, c]
  if (g.k == 2 && g.pad == 0 && g.stride == 2) return maxPool2x2Forward<2>(y, argmax, x, g);
  if (g.k == 2 && g.pad == 0 && g.stride == 1) return maxPool2x2Forward<1>(y, argmax, x, g);
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  for (int n = 0; n < g.n; ++n) {
    const float* img = x + static_cast<std::size_t>(n) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        int y0, y1, x0, x1;
        windowSpan(oy, g, g.h, y0, y1);
        windowSpan(ox, g, g.w, x0, x1);
        int k0 = 0;
        for (; k0 + kBlock <= c; k0 += kBlock)
          windowMax<kBlock>(y + o + k0, argmax + o + k0, img + k0, c, g.w, y0, y1, x0, x1);
        for (; k0 < c; ++k0) windowMax<1>(y + o + k0, argmax + o + k0, img + k0, c, g.w, y0, y1, x0, x1);
      }
  }
}

namespace {

// Where channel j of pixel p of image n sits in a gradient of c channels and hw pixels per image:
// channels last ([n, hw, c]) or in blocks of 16 channels ([n, c/16, hw, 16], oneDNN's nChw16c,
// which the oneDNN convolutions next to a pool read and write without a reorder).
struct GradLayout {
  bool blocked;
  int c;
  std::size_t hw;
  std::size_t at(int n, int j, std::size_t p) const {
    const std::size_t image = static_cast<std::size_t>(n) * c * hw;
    return blocked ? image + (static_cast<std::size_t>(j) / 16 * hw + p) * 16 + j % 16 : image + p * c + j;
  }
  std::size_t pixel() const { return blocked ? 16 : static_cast<std::size_t>(c); }  // between pixels
};

// Channels [0, L) of one window, its pixels [y0, y1) x [x0, x1): dy goes to the pixel it picked
// (with relu, only if the pooled output is positive), +0 to the others. kTiled (windows tile the
// input: k == stride, no padding) writes each pixel once; otherwise the window adds, called in
// ascending window order on zeros, whole vectors instead of one indexed store per channel. Either
// way the bits are a scatter's into zeros: 0 + dy turns a -0 gradient into +0 as that does, and
// adding +0 leaves a sum as it is (it starts at +0 and is never -0 from there).
// kRound (tiled only) writes each gradient rounded to bf16.
// dx0: this image's channel j0 at pixel 0; ps: between pixels.
template <int L, bool kRelu, bool kTiled, bool kRound>
[[gnu::always_inline]] inline void windowGrad(float* dx0, std::size_t ps, const float* dy, const std::int32_t* argmax,
                                              const float* relu, int w, int y0, int y1, int x0, int x1) {
  float grad[L];
  std::int32_t at[L];
#pragma omp simd
  for (int j = 0; j < L; ++j) {
    grad[j] = !kRelu || relu[j] > 0.f ? 0.f + dy[j] : 0.f;
    if constexpr (kRound) grad[j] = roundToBf16(grad[j]);
    at[j] = argmax[j];
  }
  for (int iy = y0; iy < y1; ++iy)
    for (int ix = x0; ix < x1; ++ix) {
      const std::int32_t here = iy * w + ix;
      float* d = dx0 + static_cast<std::size_t>(here) * ps;
#pragma omp simd
      for (int j = 0; j < L; ++j) {
        const float v = at[j] == here ? grad[j] : 0.f;
        if constexpr (kTiled) d[j] = v;
        else d[j] += v;
      }
    }
}

template <bool kRelu, bool kTiled, bool kRound>
[[gnu::always_inline]] inline void poolGrad(float* dx, const float* dy, const std::int32_t* argmax,
                                            const float* relu, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const GradLayout in{g.dxBlocked, c, static_cast<std::size_t>(g.h) * g.w};
  const GradLayout out{g.dyBlocked, c, static_cast<std::size_t>(oh) * ow};
  if constexpr (!kTiled) std::memset(dx, 0, g.n * in.hw * c * sizeof(float));
  for (int n = 0; n < g.n; ++n) {
    if constexpr (kTiled)  // rows and columns past the last whole window belong to none: zero
      for (int iy = 0; iy < g.h; ++iy)
        for (int ix = iy < oh * g.k ? ow * g.k : 0; ix < g.w; ++ix)
          for (int j = 0; j < c; j += g.dxBlocked ? kBlock : c)
            std::memset(dx + in.at(n, j, static_cast<std::size_t>(iy) * g.w + ix), 0,
                        (g.dxBlocked ? kBlock : c) * sizeof(float));
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t p = static_cast<std::size_t>(oy) * ow + ox, o = (n * out.hw + p) * c;
        const float* r = kRelu ? relu + o : nullptr;
        int y0, y1, x0, x1;
        windowSpan(oy, g, g.h, y0, y1);
        windowSpan(ox, g, g.w, x0, x1);
        int j = 0;
        for (; j + kBlock <= c; j += kBlock)
          windowGrad<kBlock, kRelu, kTiled, kRound>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), argmax + o + j,
                                            kRelu ? r + j : nullptr, g.w, y0, y1, x0, x1);
        for (; j < c; ++j)
          windowGrad<1, kRelu, kTiled, kRound>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), argmax + o + j,
                                       kRelu ? r + j : nullptr, g.w, y0, y1, x0, x1);
      }
  }
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolNhwcBackward(float* dx, const float* dy, const std::int32_t* argmax, const PoolGeom& g,
                         const float* relu) {
  // dy [n, oh, ow, c] or [n, c/16, oh, ow, 16], argmax (and relu) [n, oh, ow, c]
  //   -> dx [n, h, w, c] or [n, c/16, h, w, 16]
  const bool tiled = g.tiles();
  if (tiled && g.dxRounded && relu) poolGrad<true, true, true>(dx, dy, argmax, relu, g);
  else if (tiled && g.dxRounded) poolGrad<false, true, true>(dx, dy, argmax, nullptr, g);
  else if (tiled && relu) poolGrad<true, true, false>(dx, dy, argmax, relu, g);
  else if (tiled) poolGrad<false, true, false>(dx, dy, argmax, nullptr, g);
  else if (relu) poolGrad<true, false, false>(dx, dy, argmax, relu, g);
  else poolGrad<false, false, false>(dx, dy, argmax, nullptr, g);
}

}  // namespace xs::engine::detail
