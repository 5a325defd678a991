// ops_pool.cpp: max-pool and adaptive average-pool (NCHW), forward and backward; the shared checks.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "xspawn/error.hpp"
#include "ops.hpp"

namespace xs::engine {

void checkPool(const PoolGeom& g, const char* op) {
  XS_CHECK(g.n > 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.k > 0 && g.stride > 0 && g.pad >= 0,
           ShapeError, std::string(op) + ": every size must be positive (padding non-negative)");
  XS_CHECK(g.pad * 2 <= g.k, ShapeError, std::string(op) + ": padding must be at most half the kernel");
  XS_CHECK(g.oh() > 0 && g.ow() > 0, ShapeError,
           std::string(op) + ": window " + std::to_string(g.k) + " is larger than the input " +
               std::to_string(g.h) + "x" + std::to_string(g.w) + ": use a larger image");
}

namespace {
// Unpadded windows: one output row at a time, vectorised across the row.
__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolRows(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), s = g.stride;
  for (std::size_t pl = 0; pl < static_cast<std::size_t>(g.n) * g.c; ++pl) {
    const float* in = x + pl * g.h * g.w;
    for (int oy = 0; oy < oh; ++oy) {
      float* best = y + (pl * oh + oy) * ow;
      std::int32_t* bi = argmax + (pl * oh + oy) * ow;
      for (int ox = 0; ox < ow; ++ox) {
        best[ox] = -std::numeric_limits<float>::infinity();
        bi[ox] = oy * s * g.w + ox * s;
      }
      for (int ky = 0; ky < g.k; ++ky)
        for (int kx = 0; kx < g.k; ++kx) {
          const int row = (oy * s + ky) * g.w + kx;
          const float* r = in + row;
#pragma omp simd
          for (int ox = 0; ox < ow; ++ox) {
            float v = r[ox * s], b = best[ox];
            bool take = (v > b) | (v != v);
            best[ox] = take ? v : b;
            bi[ox] = take ? row + ox * s : bi[ox];
          }
        }
    }
  }
}

// KxK windows without padding, K fixed at compile time: the candidates stay in registers, one
// pass per output row, vectorised across the row.
template <int K>
__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolSmall(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), s = g.stride, w = g.w;
  for (std::size_t pl = 0; pl < static_cast<std::size_t>(g.n) * g.c; ++pl)
    for (int oy = 0; oy < oh; ++oy) {
      const int base = oy * s * w;
      const float* r = x + pl * g.h * w + base;
      float* out = y + (pl * oh + oy) * ow;
      std::int32_t* am = argmax + (pl * oh + oy) * ow;
#pragma omp simd
      for (int ox = 0; ox < ow; ++ox) {
        const int i = ox * s;
        float m = r[i];
        int k = i;  // scan order as PyTorch: a later value wins if greater or NaN
#pragma GCC unroll 4
        for (int ky = 0; ky < K; ++ky)
#pragma GCC unroll 4
          for (int kx = 0; kx < K; ++kx) {  // (0, 0) compares with itself: no change
            const int at = ky * w + i + kx;
            const float v = r[at];
            const bool t = (v > m) | (v != v);
            m = t ? v : m;
            k = t ? at : k;
          }
        out[ox] = m;
        am[ox] = base + k;
      }
    }
}
}  // namespace

void maxPool2dForward(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g) {
  checkPool(g, "max-pool");
  XS_CHECK(!g.nhwc, ShapeError, "max-pool: a channels-last geometry takes maxPoolNhwcForward");
  XS_CHECK(!g.xBlocked, ShapeError, "max-pool: input in channel blocks takes maxPoolNhwcForward");
  if (g.pad == 0 && g.k == 2) {
    maxPoolSmall<2>(y, argmax, x, g);
    return;
  }
  if (g.pad == 0 && g.k == 3) {
    maxPoolSmall<3>(y, argmax, x, g);
    return;
  }
  if (g.pad == 0) {
    maxPoolRows(y, argmax, x, g);
    return;
  }
  const int oh = g.oh(), ow = g.ow();
  for (std::size_t pl = 0; pl < static_cast<std::size_t>(g.n) * g.c; ++pl) {
    const float* in = x + pl * g.h * g.w;
    float* out = y + pl * oh * ow;
    std::int32_t* am = argmax + pl * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        int y1 = std::min(y0 + g.k, g.h), x1 = std::min(x0 + g.k, g.w);
        y0 = std::max(y0, 0);
        x0 = std::max(x0, 0);
        float best = -std::numeric_limits<float>::infinity();
        int bi = y0 * g.w + x0;
        for (int iy = y0; iy < y1; ++iy)
          for (int ix = x0; ix < x1; ++ix) {  // branch-free: the winner is data-dependent
            float v = in[iy * g.w + ix];
            bool take = (v > best) | (v != v);
            best = take ? v : best;
            bi = take ? iy * g.w + ix : bi;
          }
        out[oy * ow + ox] = best;
        am[oy * ow + ox] = bi;
      }
  }
}

void maxPool2dBackward(float* dx, const float* dy, const std::int32_t* argmax, const PoolGeom& g,
                       const float* relu) {
  XS_CHECK(!g.nhwc, ShapeError, "max-pool: a channels-last geometry takes maxPoolNhwcBackward");
  XS_CHECK(!(g.dyBlocked || g.dxBlocked || g.dxRounded), ShapeError,
           "max-pool: gradients in channel blocks of 16 or rounded to bf16 need the channels-last kernel "
           "(maxPoolNhwcBackward), got NCHW");
  const std::size_t plane = static_cast<std::size_t>(g.oh()) * g.ow();
  std::memset(dx, 0, static_cast<std::size_t>(g.n) * g.c * g.h * g.w * sizeof(float));
  for (std::size_t pl = 0; pl < static_cast<std::size_t>(g.n) * g.c; ++pl) {
    float* d = dx + pl * g.h * g.w;
    for (std::size_t i = 0, o = pl * plane; i < plane; ++i, ++o)
      if (!relu || relu[o] > 0.f) d[argmax[o]] += dy[o];
  }
}

namespace {
// The input rows (or columns) [begin, end) of each of `out` adaptive windows over `in`: PyTorch's
// floor(i * in / out) to ceil((i + 1) * in / out), computed once per call instead of per plane.
struct Spans {
  std::vector<int> begin, end;
  Spans(int in, int out) : begin(out), end(out) {
    for (int i = 0; i < out; ++i) begin[i] = (i * in) / out, end[i] = ((i + 1) * in + out - 1) / out;
  }
};
}  // namespace

void adaptiveAvgPool2dForward(float* y, const float* x, int n, int c, int h, int w, int oh, int ow) {
  // x [n, c, h, w] -> y [n, c, oh, ow]
  XS_CHECK(n > 0 && c > 0 && h > 0 && w > 0 && oh > 0 && ow > 0, ShapeError,
           "adaptive average-pool: every size must be positive");
  const std::size_t planes = static_cast<std::size_t>(n) * c;
  if (h == 1 && w == 1) {
    // Every window is the one input value (AlexNet below 67x67: 1x1 -> 6x6): (0 + x) / 1, which
    // is 0 + x in every bit (-0 becomes +0, a NaN comes out quiet), copied to each output.
    for (std::size_t pl = 0; pl < planes; ++pl) std::fill_n(y + pl * oh * ow, oh * ow, 0.f + x[pl]);
    return;
  }
  const Spans rows(h, oh), cols(w, ow);
  for (std::size_t pl = 0; pl < planes; ++pl) {
    const float* in = x + pl * h * w;
    float* out = y + pl * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const int y0 = rows.begin[oy], y1 = rows.end[oy], x0 = cols.begin[ox], x1 = cols.end[ox];
        float s = 0.f;
        for (int iy = y0; iy < y1; ++iy)
          for (int ix = x0; ix < x1; ++ix) s += in[iy * w + ix];
        out[oy * ow + ox] = s / static_cast<float>((y1 - y0) * (x1 - x0));
      }
  }
}

void adaptiveAvgPool2dBackward(float* dx, const float* dy, int n, int c, int h, int w, int oh,
                               int ow) {
  // dy [n, c, oh, ow] -> dx [n, c, h, w]: each window's share added to its inputs, in window order
  const std::size_t planes = static_cast<std::size_t>(n) * c;
  if (h == 1 && w == 1) {
    // Each input's gradient: 0 + dy[0] / 1 + dy[1] / 1 + ... in window order, the divisions
    // exact; 16 planes at a time, each plane's sum still in its own order.
    const std::size_t windows = static_cast<std::size_t>(oh) * ow;
    for (std::size_t p0 = 0; p0 < planes; p0 += 16) {
      const std::size_t m = std::min<std::size_t>(16, planes - p0);
      float sum[16] = {};
      for (std::size_t i = 0; i < windows; ++i)
        for (std::size_t j = 0; j < m; ++j) sum[j] += dy[(p0 + j) * windows + i];
      std::copy_n(sum, m, dx + p0);
    }
    return;
  }
  const Spans rows(h, oh), cols(w, ow);
  std::memset(dx, 0, planes * h * w * sizeof(float));
  for (std::size_t pl = 0; pl < planes; ++pl) {
    float* d = dx + pl * h * w;
    const float* up = dy + pl * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const int y0 = rows.begin[oy], y1 = rows.end[oy], x0 = cols.begin[ox], x1 = cols.end[ox];
        const float v = up[oy * ow + ox] / static_cast<float>((y1 - y0) * (x1 - x0));
        for (int iy = y0; iy < y1; ++iy)
          for (int ix = x0; ix < x1; ++ix) d[iy * w + ix] += v;
      }
  }
}

}  // namespace xs::engine
