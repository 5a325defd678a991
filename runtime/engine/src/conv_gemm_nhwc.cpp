// conv_gemm_nhwc.cpp: conv2d on channels-last activations as matrix products: the rows of
// x [n, h, w, c] gathered into patches col [n*oh*ow, kh*kw*c], then one GEMM per pass with the
// weights in [oc, kh, kw, c] order; y [n*oh*ow, oc] is the NHWC output itself. Used for small
// feature maps, where measured faster than oneDNN's direct kernels (docs/engine.md).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "conv_onednn.hpp"
#include "xspawn/error.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"

namespace xs::engine::detail {
namespace {

// Scratch slots (0-2 and 6-7 are free while this path runs; 3-5 belong to the GEMM).
constexpr int kColSlot = 0, kWeightSlot = 1, kDcolSlot = 2, kDwSlot = 6, kDySlot = 7;

}  // namespace

int& maxPixelsSlot() {
  static int v = [] {
    const char* env = std::getenv("XS_ENGINE_NHWC_GEMM_PIXELS");
    return env && *env ? std::atoi(env) : 16;
  }();
  return v;
}

namespace {

// Images per chunk: the patch matrix stays below 12 Mi floats (larger GEMMs measured faster).
int chunkImages(const ConvGeom& g) {
  std::size_t perImage = static_cast<std::size_t>(g.oh()) * g.ow() * g.kh * g.kw * g.c;
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{12} << 20) / std::max<std::size_t>(perImage, 1), 1,
                                                  static_cast<std::size_t>(g.n)));
}

// x images [n0, n0+nb) -> col [nb*oh*ow, kh*kw*c], as float32 (rounded to bf16 values when
// `round`: emulated bf16's operand, made in the gather's own pass) or as bf16 bits
template <class T>
void im2colNhwc(T* col, const float* x, const ConvGeom& g, int n0, int nb, bool round = false) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::size_t K = static_cast<std::size_t>(g.kh) * g.kw * c;
  for (int im = 0; im < nb; ++im) {
    const float* img = x + static_cast<std::size_t>(n0 + im) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        T* row = col + ((static_cast<std::size_t>(im) * oh + oy) * ow + ox) * K;
        for (int ky = 0; ky < g.kh; ++ky) {
          const int iy = oy * g.stride - g.pad + ky;
          for (int kx = 0; kx < g.kw; ++kx, row += c) {
            const int ix = ox * g.stride - g.pad + kx;
            const float* src = img + (static_cast<std::size_t>(iy) * g.w + ix) * c;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) std::memset(row, 0, c * sizeof(T));  // +0 either way
            else if constexpr (std::is_same_v<T, float>) {
              if (round) roundToBf16(src, row, c);
              else std::memcpy(row, src, c * sizeof(float));
            } else {
              floatsToBf16(src, row, c);
            }
          }
        }
      }
  }
}

// The patches of images [n0, n0+nb) as the GEMM's operand: bf16 bits when the bf16 matmul reads
// them directly (one pass instead of gathering float32 and rounding a copy), else float32,
// rounded to bf16 values in emulated bf16 (unless x is bf16 values already).
struct Patches {
  const void* data;
  bool bf16;
};
Patches patches(Device& dev, const float* x, const ConvGeom& g, int n0, int nb) {
  const std::size_t n = static_cast<std::size_t>(nb) * g.oh() * g.ow() * g.kh * g.kw * g.c;
  if (bf16Matmul(dev)) {
    auto* col = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kColSlot, (n + 1) / 2));
    im2colNhwc(col, x, g, n0, nb);
    return {col, true};
  }
  float* col = detail::scratch(dev, kColSlot, n);
  im2colNhwc(col, x, g, n0, nb, emulatesBf16(dev) && !g.xRounded);
  return {col, false};
}

// c [M, N] (+)= op(a) [M, K] * op(b) [K, N], with a or b possibly bf16 patches (dense). In
// emulated bf16 every operand reaching here is bf16 values already (patches(), weightsOhwi(),
// dy rounded once per chunk), so the GEMM does not round copies of them again.
void product(Device& dev, bool ta, bool tb, int M, int N, int K, Patches a, int lda, Patches b, int ldb,
             float beta, float* c, int ldc) {
  if ((a.bf16 || b.bf16) && gemmBf16(dev, ta, tb, M, N, K, a.data, a.bf16, lda, b.data, b.bf16, ldb, beta, c, ldc))
    return;
  if (emulatesBf16(dev)) {
    gemmOfRounded(dev, ta, tb, M, N, K, static_cast<const float*>(a.data), lda, static_cast<const float*>(b.data), ldb,
                  beta, c, ldc);
    return;
  }
  XS_CHECK(!a.bf16 && !b.bf16, BackendError, "no bf16 matmul for a " + std::to_string(M) + "x" +
                                                 std::to_string(N) + "x" + std::to_string(K) +
                                                 " convolution product: set XS_ENGINE_NHWC_GEMM_PIXELS=0");
  gemm(dev, ta, tb, M, N, K, static_cast<const float*>(a.data), lda, static_cast<const float*>(b.data), ldb, beta,
       c, ldc);
}

// dcol [nb*oh*ow, kh*kw*c] -> dx images [n0, n0+nb) += (zeroed by the caller)
__attribute__((target_clones("avx512f", "avx2", "default")))
void col2imNhwc(float* dx, const float* dcol, const ConvGeom& g, int n0, int nb) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::size_t K = static_cast<std::size_t>(g.kh) * g.kw * c;
  for (int im = 0; im < nb; ++im) {
    float* img = dx + static_cast<std::size_t>(n0 + im) * g.h * g.w * c;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const float* row = dcol + ((static_cast<std::size_t>(im) * oh + oy) * ow + ox) * K;
        for (int ky = 0; ky < g.kh; ++ky) {
          const int iy = oy * g.stride - g.pad + ky;
          for (int kx = 0; kx < g.kw; ++kx, row += c) {
            const int ix = ox * g.stride - g.pad + kx;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            float* d = img + (static_cast<std::size_t>(iy) * g.w + ix) * c;
#pragma omp simd
            for (int k = 0; k < c; ++k) d[k] += row[k];
          }
        }
      }
  }
}

// The weights' two orders, [oc, c, kh*kw] (the store's) and [oc, kh*kw, c] (the patches'): per
// output channel a [c, khw] <-> [khw, c] transpose, vectorised along c (strided loads or stores
// of one tap). Rounded to bf16 values on the way to the patches' order when Round.
template <bool Round>
__attribute__((target_clones("avx512f", "avx2", "default")))
void tapsToOhwi(float* wt, const float* w, int oc, int c, int khw) {
  for (int o = 0; o < oc; ++o)
    for (int k = 0; k < khw; ++k) {
      float* t = wt + (static_cast<std::size_t>(o) * khw + k) * c;
      const float* s = w + static_cast<std::size_t>(o) * c * khw + k;
#pragma omp simd
      for (int ci = 0; ci < c; ++ci) {
        const float v = s[static_cast<std::size_t>(ci) * khw];
        t[ci] = Round ? roundToBf16(v) : v;
      }
    }
}

// dw [oc, c, kh*kw] = or += wt [oc, kh*kw, c]
template <bool Add>
__attribute__((target_clones("avx512f", "avx2", "default")))
void tapsFromOhwi(float* dw, const float* wt, int oc, int c, int khw) {
  for (int o = 0; o < oc; ++o)
    for (int k = 0; k < khw; ++k) {
      const float* t = wt + (static_cast<std::size_t>(o) * khw + k) * c;
      float* s = dw + static_cast<std::size_t>(o) * c * khw + k;
#pragma omp simd
      for (int ci = 0; ci < c; ++ci) {
        float& v = s[static_cast<std::size_t>(ci) * khw];
        v = Add ? v + t[ci] : t[ci];
      }
    }
}

// w [oc, c, kh, kw] -> wt [oc, kh, kw, c], rounded to bf16 values in emulated bf16 (unless w is
// the store's rounded mirror already)
float* weightsOhwi(Device& dev, const float* w, const ConvGeom& g) {
  float* wt = detail::scratch(dev, kWeightSlot, static_cast<std::size_t>(g.oc) * g.c * g.kh * g.kw);
  (emulatesBf16(dev) && !g.wRounded ? tapsToOhwi<true> : tapsToOhwi<false>)(wt, w, g.oc, g.c, g.kh * g.kw);
  return wt;
}

// db [oc] += the sums over rows of dy [rows, oc]: bf16 bits (native bf16: as oneDNN's bf16
// backward-weights sums it, dy as the products read it), or float32 (emulated bf16: rounded
// already).
void biasGradient(float* db, Patches dy, int rows, int oc) {
  if (!dy.bf16) {
    const auto* v = static_cast<const float*>(dy.data);
    for (int r = 0; r < rows; ++r) accumulate(db, v + static_cast<std::size_t>(r) * oc, oc);
    return;
  }
  const auto* bits = static_cast<const std::uint16_t*>(dy.data);
  for (int r = 0; r < rows; ++r) {
    const std::uint16_t* row = bits + static_cast<std::size_t>(r) * oc;
#pragma omp simd
    for (int o = 0; o < oc; ++o) db[o] += bf16BitsToFloat(row[o]);
  }
}

}  // namespace

bool useNhwcGemm(const ConvGeom& g) {
  return g.srcNhwc && g.dstNhwc && g.oh() * g.ow() <= maxPixelsSlot();
}

bool useNhwcGemmWeightGradient(const Device& dev, const ConvGeom& g) {
  return bf16Matmul(dev) && oneDnnRunsAmx() && g.srcNhwc && g.dstNhwc && !useNhwcGemm(g) &&
         g.oh() * g.ow() <= 4 * maxPixelsSlot();
}

void conv2dForwardGemmNhwc(Device& dev, float* y, const float* x, const float* w, const float* b,
                           const ConvGeom& g) {
  const int ohw = g.oh() * g.ow(), K = g.kh * g.kw * g.c, nbMax = chunkImages(g);
  const float* wt = weightsOhwi(dev, w, g);
  for (int n0 = 0; n0 < g.n; n0 += nbMax) {
    const int nb = std::min(nbMax, g.n - n0), rows = nb * ohw;
    Patches col = patches(dev, x, g, n0, nb);
    float* yc = y + static_cast<std::size_t>(n0) * ohw * g.oc;
    if (b)
      for (int r = 0; r < rows; ++r) std::memcpy(yc + static_cast<std::size_t>(r) * g.oc, b, g.oc * sizeof(float));
    // yc [rows, oc] (+)= col [rows, K] * wt^T [K, oc]
    product(dev, false, true, rows, g.oc, K, col, K, Patches{wt, false}, K, b ? 1.f : 0.f, yc, g.oc);
  }
}

void conv2dBackwardGemmNhwc(Device& dev, float* dx, float* dw, float* db, const float* dy,
                            const float* x, const float* w, const ConvGeom& g) {
  const int ohw = g.oh() * g.ow(), K = g.kh * g.kw * g.c, khw = g.kh * g.kw, nbMax = chunkImages(g);
  const float* wt = dx ? weightsOhwi(dev, w, g) : nullptr;
  float* dwt = detail::scratch(dev, kDwSlot, static_cast<std::size_t>(g.oc) * K);
  if (dx) std::memset(dx, 0, static_cast<std::size_t>(g.n) * g.h * g.w * g.c * sizeof(float));
  if (db && g.overwriteGrads) std::memset(db, 0, static_cast<std::size_t>(g.oc) * sizeof(float));
  for (int n0 = 0; n0 < g.n; n0 += nbMax) {
    const int nb = std::min(nbMax, g.n - n0), rows = nb * ohw;
    const std::size_t at = static_cast<std::size_t>(n0) * ohw * g.oc;
    Patches col = patches(dev, x, g, n0, nb);
    Patches dyc{g.dyBf16 ? static_cast<const void*>(reinterpret_cast<const std::uint16_t*>(dy) + at) : dy + at,
                g.dyBf16};
    const std::size_t dyCount = std::size_t{1} * rows * g.oc;
    if (emulatesBf16(dev) && !g.dyRounded)
      dyc.data = roundedScratch(dev, kDySlot, static_cast<const float*>(dyc.data), dyCount);
    if (col.bf16 && !dyc.bf16) {  // native: dy's bits once, for both products and the bias
      auto* bits = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kDySlot, (dyCount + 1) / 2));
      floatsToBf16(static_cast<const float*>(dyc.data), bits, dyCount);
      dyc = Patches{bits, true};
    }
    if (db) biasGradient(db, dyc, rows, g.oc);
    // dwt [oc, K] (+)= dyc^T [oc, rows] * col [rows, K]
    product(dev, true, false, g.oc, K, rows, dyc, g.oc, col, K, n0 == 0 ? 0.f : 1.f, dwt, K);
    if (!dx) continue;
    // dcol [rows, K] = dyc [rows, oc] * wt [oc, K]
    float* dcol = detail::scratch(dev, kDcolSlot, static_cast<std::size_t>(rows) * K);
    product(dev, false, false, rows, K, g.oc, dyc, g.oc, Patches{wt, false}, K, 0.f, dcol, K);
    col2imNhwc(dx, dcol, g, n0, nb);
  }
  // dw [oc, c, kh, kw] (+)= dwt [oc, kh, kw, c]
  (g.overwriteGrads ? tapsFromOhwi<false> : tapsFromOhwi<true>)(dw, dwt, g.oc, g.c, khw);
}

}  // namespace xs::engine::detail

namespace xs::engine {
void setNhwcGemmMaxPixels(int pixels) { detail::maxPixelsSlot() = pixels; }
}  // namespace xs::engine
