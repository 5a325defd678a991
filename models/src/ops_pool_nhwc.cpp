// ops_pool_nhwc.cpp: max-pool on channels-last activations [n, h, w, c], vectorised along the
// contiguous channels; same window scan order and tie rule as the NCHW kernels (PyTorch's).
#include <algorithm>
#include <cstring>
#include <limits>

#include "xspawn/engine/ops.hpp"

namespace xs::engine::detail {

__attribute__((target_clones("avx512f", "avx2", "default")))
void maxPoolNhwcForward(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const std::size_t o = ((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * c;
        float* best = y + o;
        std::int32_t* bi = argmax + o;
        int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        const int y1 = std::min(y0 + g.k, g.h), x1 = std::min(x0 + g.k, g.w);
        y0 = std::max(y0, 0);
        x0 = std::max(x0, 0);
        const std::int32_t first = y0 * g.w + x0;
        for (int k = 0; k < c; ++k) best[k] = -std::numeric_limits<float>::infinity(), bi[k] = first;
        for (int iy = y0; iy < y1; ++iy)
          for (int ix = x0; ix < x1; ++ix) {
            const std::int32_t at = iy * g.w + ix;
            const float* p = x + (static_cast<std::size_t>(n) * g.h * g.w + at) * c;
#pragma omp simd
            for (int k = 0; k < c; ++k) {  // a later value wins if greater or NaN
              const float v = p[k], b = best[k];
              const bool take = (v > b) | (v != v);
              best[k] = take ? v : b;
              bi[k] = take ? at : bi[k];
            }
          }
      }
}

void maxPoolNhwcBackward(float* dx, const float* dy, const std::int32_t* argmax, const PoolGeom& g,
                         const float* relu) {
  const std::size_t plane = static_cast<std::size_t>(g.oh()) * g.ow(), c = g.c;
  std::memset(dx, 0, static_cast<std::size_t>(g.n) * g.h * g.w * c * sizeof(float));
  for (int n = 0; n < g.n; ++n) {
    float* d = dx + static_cast<std::size_t>(n) * g.h * g.w * c;
    for (std::size_t p = 0; p < plane; ++p) {
      const std::size_t o = (static_cast<std::size_t>(n) * plane + p) * c;
      if (relu) {  // the fused ReLU's backward: only where the pooled output is positive
        for (std::size_t k = 0; k < c; ++k)
          d[static_cast<std::size_t>(argmax[o + k]) * c + k] += relu[o + k] > 0.f ? dy[o + k] : 0.f;
      } else {
        for (std::size_t k = 0; k < c; ++k) d[static_cast<std::size_t>(argmax[o + k]) * c + k] += dy[o + k];
      }
    }
  }
}

}  // namespace xs::engine::detail
