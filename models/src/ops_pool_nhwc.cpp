// ops_pool_nhwc.cpp: max-pool on channels-last activations [n, h, w, c], vectorised along the
// contiguous channels; same window scan order and tie rule as the NCHW kernels (PyTorch's), and
// the same bits.
#include <algorithm>
#include <cstring>
#include <limits>

#include "xspawn/engine/ops.hpp"

namespace xs::engine::detail {

namespace {

constexpr int kBlock = 16;  // channels whose best value and index stay in registers

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

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolNhwcForward(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g) {
  // x [n, h, w, c] -> y, argmax [n, oh, ow, c]
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  for (int n = 0; n < g.n; ++n) {
    const float* img = x + static_cast<std::size_t>(n) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        const int y0 = std::max(oy * g.stride - g.pad, 0), y1 = std::min(oy * g.stride - g.pad + g.k, g.h);
        const int x0 = std::max(ox * g.stride - g.pad, 0), x1 = std::min(ox * g.stride - g.pad + g.k, g.w);
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

// Channels [0, L) of window (oy, ox) when windows tile the input (k == stride, no padding): each
// of its k x k pixels gets dy where the window picked it (with relu, only if the pooled output is
// positive), +0 elsewhere. Written as 0 + dy, the bits are those of a scatter into zeros (which
// turns a -0 gradient into +0). dx0: this image's channel j0 at pixel 0; ps: between pixels.
template <int L, bool kRelu>
[[gnu::always_inline]] inline void tileGrad(float* dx0, std::size_t ps, const float* dy, const std::int32_t* argmax,
                                            const float* relu, int w, int k, int oy, int ox) {
  float grad[L];
  std::int32_t at[L];
#pragma omp simd
  for (int j = 0; j < L; ++j) {
    grad[j] = !kRelu || relu[j] > 0.f ? 0.f + dy[j] : 0.f;
    at[j] = argmax[j];
  }
  for (int wy = 0; wy < k; ++wy)
    for (int wx = 0; wx < k; ++wx) {
      const std::int32_t here = (oy * k + wy) * w + ox * k + wx;
      float* d = dx0 + static_cast<std::size_t>(here) * ps;
#pragma omp simd
      for (int j = 0; j < L; ++j) d[j] = at[j] == here ? grad[j] : 0.f;
    }
}

template <bool kRelu>
[[gnu::always_inline]] inline void tiledGrad(float* dx, const float* dy, const std::int32_t* argmax,
                                             const float* relu, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const GradLayout in{g.dxBlocked, c, static_cast<std::size_t>(g.h) * g.w};
  const GradLayout out{g.dyBlocked, c, static_cast<std::size_t>(oh) * ow};
  for (int n = 0; n < g.n; ++n) {
    // Rows and columns past the last whole window belong to none: zero.
    for (int iy = 0; iy < g.h; ++iy)
      for (int ix = iy < oh * g.k ? ow * g.k : 0; ix < g.w; ++ix)
        for (int j = 0; j < c; j += g.dxBlocked ? kBlock : c)
          std::memset(dx + in.at(n, j, static_cast<std::size_t>(iy) * g.w + ix), 0,
                      (g.dxBlocked ? kBlock : c) * sizeof(float));
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t p = static_cast<std::size_t>(oy) * ow + ox, o = (n * out.hw + p) * c;
        const float* r = kRelu ? relu + o : nullptr;
        int j = 0;
        for (; j + kBlock <= c; j += kBlock)
          tileGrad<kBlock, kRelu>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), argmax + o + j,
                                  kRelu ? r + j : nullptr, g.w, g.k, oy, ox);
        for (; j < c; ++j)
          tileGrad<1, kRelu>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), argmax + o + j,
                             kRelu ? r + j : nullptr, g.w, g.k, oy, ox);
      }
  }
}

// Channels [0, L) of window (oy, ox) when windows overlap or are padded: its dy added to each of
// its pixels where it picked that pixel, +0 elsewhere. Called in ascending window order on zeros,
// the sums are those of a scatter (adding +0 leaves them as they are: they start at +0 and are
// never -0 from there), and the adds are whole vectors instead of one indexed store per channel.
template <int L, bool kRelu>
[[gnu::always_inline]] inline void windowGrad(float* dx0, std::size_t ps, const float* dy, const std::int32_t* argmax,
                                              const float* relu, int w, int y0, int y1, int x0, int x1) {
  float grad[L];
  std::int32_t at[L];
#pragma omp simd
  for (int j = 0; j < L; ++j) {
    grad[j] = !kRelu || relu[j] > 0.f ? dy[j] : 0.f;
    at[j] = argmax[j];
  }
  for (int iy = y0; iy < y1; ++iy)
    for (int ix = x0; ix < x1; ++ix) {
      const std::int32_t here = iy * w + ix;
      float* d = dx0 + static_cast<std::size_t>(here) * ps;
#pragma omp simd
      for (int j = 0; j < L; ++j) d[j] += at[j] == here ? grad[j] : 0.f;
    }
}

template <bool kRelu>
[[gnu::always_inline]] inline void overlapGrad(float* dx, const float* dy, const std::int32_t* argmax,
                                               const float* relu, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const GradLayout in{g.dxBlocked, c, static_cast<std::size_t>(g.h) * g.w};
  const GradLayout out{g.dyBlocked, c, static_cast<std::size_t>(oh) * ow};
  std::memset(dx, 0, g.n * in.hw * c * sizeof(float));
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t p = static_cast<std::size_t>(oy) * ow + ox, o = (n * out.hw + p) * c;
        const float* r = kRelu ? relu + o : nullptr;
        const int y0 = std::max(oy * g.stride - g.pad, 0), y1 = std::min(oy * g.stride - g.pad + g.k, g.h);
        const int x0 = std::max(ox * g.stride - g.pad, 0), x1 = std::min(ox * g.stride - g.pad + g.k, g.w);
        int j = 0;
        for (; j + kBlock <= c; j += kBlock)
          windowGrad<kBlock, kRelu>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), argmax + o + j,
                                    kRelu ? r + j : nullptr, g.w, y0, y1, x0, x1);
        for (; j < c; ++j)
          windowGrad<1, kRelu>(dx + in.at(n, j, 0), in.pixel(), dy + out.at(n, j, p), argmax + o + j,
                               kRelu ? r + j : nullptr, g.w, y0, y1, x0, x1);
      }
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolNhwcBackward(float* dx, const float* dy, const std::int32_t* argmax, const PoolGeom& g,
                         const float* relu) {
  // dy [n, oh, ow, c] or [n, c/16, oh, ow, 16], argmax (and relu) [n, oh, ow, c]
  //   -> dx [n, h, w, c] or [n, c/16, h, w, 16]
  const bool tiled = g.k == g.stride && g.pad == 0;
  if (tiled && relu) tiledGrad<true>(dx, dy, argmax, relu, g);
  else if (tiled) tiledGrad<false>(dx, dy, argmax, nullptr, g);
  else if (relu) overlapGrad<true>(dx, dy, argmax, relu, g);
  else overlapGrad<false>(dx, dy, argmax, nullptr, g);
}

}  // namespace xs::engine::detail
