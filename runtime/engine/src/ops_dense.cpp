// ops_dense.cpp: conv2d (our kernels, oneDNN's primitives, or im2col over a chunk of images
// and one GEMM per chunk) and the layout transposes; the linear layer is ops_linear.cpp's.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "conv_onednn.hpp"
#include "xspawn/error.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "ops.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

namespace {
ConvBackend& convSlot() {
  static ConvBackend b = [] {
    const char* env = std::getenv("XS_ENGINE_CONV");
    return env && *env ? parseConvBackend(env) : ConvBackend::kOneDnn;
  }();
  return b;
}
}  // namespace

const char* convBackendName(ConvBackend b) { return b == ConvBackend::kOneDnn ? "onednn" : "im2col"; }

ConvBackend parseConvBackend(const std::string& name) {
  if (name == "onednn") return ConvBackend::kOneDnn;
  if (name == "im2col") return ConvBackend::kIm2col;
  XS_THROW(UsageError, "unknown convolution backend '" + name + "': use onednn or im2col");
}

ConvBackend convBackend() { return convSlot(); }
void setConvBackend(ConvBackend b) { convSlot() = b; }

namespace {
bool& winogradSlot() {
  static bool on = [] {
    const char* env = std::getenv("XS_ENGINE_WINOGRAD");
    if (!env || !*env) return true;
    XS_CHECK(std::string(env) == "0" || std::string(env) == "1", UsageError,
             "XS_ENGINE_WINOGRAD=" + std::string(env) + ": use 1 (Winograd backward passes) or 0 (direct)");
    return std::string(env) == "1";
  }();
  return on;
}
}  // namespace

bool convWinograd() { return winogradSlot(); }
void setConvWinograd(bool on) { winogradSlot() = on; }

LayoutPolicy parseLayoutPolicy(const std::string& name) {
  if (name == "auto") return LayoutPolicy::kAuto;
  if (name == "nchw") return LayoutPolicy::kNchw;
  if (name == "nhwc") return LayoutPolicy::kNhwc;
  XS_THROW(UsageError, "unknown layout '" + name + "': use auto, nchw or nhwc");
}

namespace {
LayoutPolicy& layoutSlot() {
  static LayoutPolicy p = [] {
    const char* env = std::getenv("XS_ENGINE_LAYOUT");
    return env && *env ? parseLayoutPolicy(env) : LayoutPolicy::kAuto;
  }();
  return p;
}
}  // namespace

void setLayoutPolicy(LayoutPolicy p) { layoutSlot() = p; }

Layout preferredLayout(const Device&) {
  return layoutSlot() == LayoutPolicy::kNchw ? Layout::kNchw : Layout::kNhwc;
}

namespace {
// Without AVX-512: in 16 x 16 tiles that keep both sides in cache; a small image (LeNet-5's
// 25 x 16 at its flatten) in one tile.
void transposeImagesScalar(float* __restrict dst, const float* __restrict src, int n, int rows, int cols) {
  const std::size_t plane = static_cast<std::size_t>(rows) * cols;
  const int tile = plane <= 1024 ? std::max(rows, cols) : 16;
  for (int i = 0; i < n; ++i) {
    const float* s = src + i * plane;
    float* d = dst + i * plane;
    for (int r0 = 0; r0 < rows; r0 += tile)
      for (int c0 = 0; c0 < cols; c0 += tile) {
        const int r1 = std::min(rows, r0 + tile), c1 = std::min(cols, c0 + tile);
        for (int r = r0; r < r1; ++r)
          for (int c = c0; c < c1; ++c)
            d[static_cast<std::size_t>(c) * rows + r] = s[static_cast<std::size_t>(r) * cols + c];
      }
  }
}

// A block of at most 16 x 16 (`rows` rows of `cols` floats, src's rows `srcStride` apart) into
// dst's `cols` rows of `rows` floats (`dstStride` apart), by one transpose in registers. Masked
// loads and stores touch no float outside the block (a partial block at an image's edge).
__attribute__((target("avx512f"))) inline void transposeBlock(float* dst, std::size_t dstStride, const float* src,
                                                              std::size_t srcStride, int rows, int cols) {
  __m512 r[kTransposeSide];
  for (int i = 0; i < kTransposeSide; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(firstLanes(cols), src + i * srcStride) : _mm512_setzero_ps();
  transpose16(r);
  for (int j = 0; j < cols; ++j) _mm512_mask_storeu_ps(dst + j * dstStride, firstLanes(rows), r[j]);
}

// transposeImagesScalar's result in blocks of 16 x 16 (the same floats moved: the same bits).
__attribute__((target("avx512f"))) void transposeImagesAvx512(float* __restrict dst, const float* __restrict src, int n,
                                                              int rows, int cols) {
  const std::size_t plane = static_cast<std::size_t>(rows) * cols;
  for (int i = 0; i < n; ++i) {
    const float* s = src + i * plane;
    float* d = dst + i * plane;
    for (int r0 = 0; r0 < rows; r0 += kTransposeSide)
      for (int c0 = 0; c0 < cols; c0 += kTransposeSide)
        transposeBlock(d + static_cast<std::size_t>(c0) * rows + r0, rows, s + static_cast<std::size_t>(r0) * cols + c0,
                       cols, std::min(kTransposeSide, rows - r0), std::min(kTransposeSide, cols - c0));
  }
}

// Per image, src [rows, cols] -> dst [cols, rows]. A row or a column: a copy.
void transposeImages(float* dst, const float* src, int n, int rows, int cols) {
  if (rows == 1 || cols == 1)
    std::memcpy(dst, src, static_cast<std::size_t>(n) * rows * cols * sizeof(float));
  else if (cpuHasAvx512())
    transposeImagesAvx512(dst, src, n, rows, cols);
  else
    transposeImagesScalar(dst, src, n, rows, cols);
}
}  // namespace

void nchwToNhwc(float* dst, const float* src, int n, int c, int hw) { transposeImages(dst, src, n, c, hw); }
void nhwcToNchw(float* dst, const float* src, int n, int c, int hw) { transposeImages(dst, src, n, hw, c); }

namespace {

// Images per GEMM: enough columns to keep the matrix unit busy, bounded scratch.
int chunkImages(const ConvGeom& g) {
  std::size_t ohw = static_cast<std::size_t>(g.oh()) * g.ow();
  std::size_t ckk = static_cast<std::size_t>(g.c) * g.kh * g.kw;
  std::size_t want = std::max<std::size_t>(1, (256 + ohw - 1) / ohw);
  std::size_t cap = std::max<std::size_t>(1, (std::size_t{8} << 20) / std::max<std::size_t>(1, ckk * ohw));
  return static_cast<int>(std::min<std::size_t>({want, cap, static_cast<std::size_t>(g.n)}));
}

bool isPointwise(const ConvGeom& g) { return g.kh == 1 && g.kw == 1 && g.stride == 1 && g.pad == 0; }

// x images [n0, n0+nb) -> col [c*kh*kw, nb*oh*ow]
void im2col(float* col, const float* x, const ConvGeom& g, int n0, int nb) {
  const int oh = g.oh(), ow = g.ow(), ohw = oh * ow;
  const std::size_t cols = static_cast<std::size_t>(nb) * ohw;
  for (int ci = 0; ci < g.c; ++ci)
    for (int ki = 0; ki < g.kh; ++ki)
      for (int kj = 0; kj < g.kw; ++kj) {
        float* row = col + ((static_cast<std::size_t>(ci) * g.kh + ki) * g.kw + kj) * cols;
        for (int im = 0; im < nb; ++im) {
          const float* plane = x + (static_cast<std::size_t>(n0 + im) * g.c + ci) * g.h * g.w;
          float* out = row + static_cast<std::size_t>(im) * ohw;
          for (int oy = 0; oy < oh; ++oy) {
            int iy = oy * g.stride - g.pad + ki;
            float* o = out + oy * ow;
            if (iy < 0 || iy >= g.h) {
              std::memset(o, 0, ow * sizeof(float));
              continue;
            }
            const float* src = plane + static_cast<std::size_t>(iy) * g.w;
            if (g.stride == 1) {
              int lo = std::min(ow, std::max(0, g.pad - kj)), hi = std::min(ow, g.w + g.pad - kj);
              for (int ox = 0; ox < lo; ++ox) o[ox] = 0.f;
              if (hi > lo) std::memcpy(o + lo, src + lo - g.pad + kj, (hi - lo) * sizeof(float));
              for (int ox = std::max(lo, hi); ox < ow; ++ox) o[ox] = 0.f;
            } else {
              for (int ox = 0; ox < ow; ++ox) {
                int ix = ox * g.stride - g.pad + kj;
                o[ox] = (ix >= 0 && ix < g.w) ? src[ix] : 0.f;
              }
            }
          }
        }
      }
}

// col [c*kh*kw, nb*oh*ow] -> dx images [n0, n0+nb) += (dx zeroed by the caller)
void col2im(float* dx, const float* col, const ConvGeom& g, int n0, int nb) {
  const int oh = g.oh(), ow = g.ow(), ohw = oh * ow;
  const std::size_t cols = static_cast<std::size_t>(nb) * ohw;
  for (int ci = 0; ci < g.c; ++ci)
    for (int ki = 0; ki < g.kh; ++ki)
      for (int kj = 0; kj < g.kw; ++kj) {
        const float* row = col + ((static_cast<std::size_t>(ci) * g.kh + ki) * g.kw + kj) * cols;
        for (int im = 0; im < nb; ++im) {
          float* plane = dx + (static_cast<std::size_t>(n0 + im) * g.c + ci) * g.h * g.w;
          const float* in = row + static_cast<std::size_t>(im) * ohw;
          for (int oy = 0; oy < oh; ++oy) {
            int iy = oy * g.stride - g.pad + ki;
            if (iy < 0 || iy >= g.h) continue;
            float* dst = plane + static_cast<std::size_t>(iy) * g.w;
            const float* s = in + oy * ow;
            // Output columns whose input column ox * stride - pad + kj lies inside the row.
            int lo = std::max(0, (g.pad - kj + g.stride - 1) / g.stride);
            int hi = std::min(ow, (g.w + g.pad - kj + g.stride - 1) / g.stride);
            if (g.stride == 1) {
              float* d = dst - g.pad + kj;
              for (int ox = lo; ox < hi; ++ox) d[ox] += s[ox];
            } else {
              for (int ox = lo; ox < hi; ++ox) dst[ox * g.stride - g.pad + kj] += s[ox];
            }
          }
        }
      }
}

void checkGeom(const ConvGeom& g) {
  XS_CHECK(g.n > 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.oc > 0 && g.kh > 0 && g.kw > 0 &&
               g.stride > 0 && g.pad >= 0,
           ShapeError, "conv2d: every size must be positive (padding non-negative)");
  XS_CHECK(g.oh() > 0 && g.ow() > 0, ShapeError,
           "conv2d: kernel " + std::to_string(g.kh) + "x" + std::to_string(g.kw) +
               " is larger than the padded input " + std::to_string(g.h) + "x" + std::to_string(g.w) +
               ": use a larger image or more padding");
}

}  // namespace

namespace {
constexpr int kLayoutSlotA = 6, kLayoutSlotB = 7;  // Device scratch for NHWC <-> NCHW staging

// An NCHW view of x: x itself, or a converted copy in scratch slot.
const float* asNchw(Device& dev, int slot, const float* x, bool nhwc, int n, int c, int hw) {
  if (!nhwc) return x;
  float* t = detail::scratch(dev, slot, static_cast<std::size_t>(n) * c * hw);
  nhwcToNchw(t, x, n, c, hw);
  return t;
}
}  // namespace

namespace {
// Our kernels for narrow convolutions run only where their AVX-512 kernels do: elsewhere their
// portable loops lose to oneDNN's. The one-channel forward and weight gradient:
bool oneChannel(const ConvGeom& g) {
  return convBackend() == ConvBackend::kOneDnn && cpuHasAvx512() && detail::useOneChannelConv(g);
}
// The narrow forward (no copy of x kept for the backward then):
bool narrowForward(const ConvGeom& g) {
  return convBackend() == ConvBackend::kOneDnn && !oneChannel(g) &&
         !detail::useNhwcGemm(g) && detail::useNarrowForward(g) && detail::narrowForwardVectorized(g);
}
// The narrow weight and bias gradients:
bool narrowWeights(const ConvGeom& g) {
  return convBackend() == ConvBackend::kOneDnn && cpuHasAvx512() && !detail::useNhwcGemm(g) &&
         !oneChannel(g) && detail::useNarrowWeightGradient(g);
}
// The narrow input gradient:
bool narrowData(const ConvGeom& g) {
  return convBackend() == ConvBackend::kOneDnn && cpuHasAvx512() && !detail::useNhwcGemm(g) &&
         detail::useNarrowDataGradient(g);
}
}  // namespace

bool conv2dPoolsNhwc(Device& dev, const ConvGeom& g, const PoolGeom& p) {
  return g.srcNhwc && g.dstNhwc && !g.dstBlocked && !g.pool && narrowForward(g) && narrowData(g) &&
         narrowWeights(g) && detail::narrowPoolsNhwc(dev, g) && g.oc % 2 == 0 && !detail::narrowDataPortableSlot() &&
         !detail::narrowWeightsPortableSlot() && p.k == 2 && p.tiles() && p.c == g.oc && p.h == g.oh() &&
         p.w == g.ow() && !p.dyBlocked && !p.dxBlocked && !p.xBlocked;
}

std::size_t conv2dPoolMasks(const ConvGeom& g) { return static_cast<std::size_t>(g.n) * g.oh() * g.ow(); }

bool conv2dMaxPoolsNhwc(Device& dev, const ConvGeom& g, const PoolGeom& p, bool bias) {
  return g.srcNhwc && g.dstNhwc && !g.pool && g.c == 1 && p.k == 2 && p.stride == 2 && p.pad == 0 &&
         p.c == g.oc && p.h == g.oh() && p.w == g.ow() && !p.dxBlocked && cpuHasAvx512Bw() &&
         conv2dWritesBlocked16(dev, g, bias) && detail::conv2dOneChannelWideOnOurs(dev, g, bias);
}

void conv2dForward(Device& dev, float* y, const float* x, const float* w, const float* b,
                   const ConvGeom& g) {
  checkGeom(g);
  XS_CHECK(!g.pool || oneChannel(g), ShapeError,
           "conv2d: a fused pool needs the one-channel kernels (ask conv2dWritesPlanes first)");
  if (g.nhwcPool && g.nhwcPool->codes) {  // y is the max-pool's (NhwcPool::codes)
    XS_CHECK(detail::conv2dOneChannelWideOnOurs(dev, g, b != nullptr) && g.nhwcPool->y, ShapeError,
             "conv2d: a fused max-pool needs the native bf16 one-channel kernel (ask conv2dMaxPoolsNhwc first) "
             "and the pool's output and codes");
    detail::conv2dForwardOneChannelWideBf16(dev, nullptr, x, w, b, g);
    return;
  }
  if (g.nhwcPool) {  // y is the pool's (NhwcPool)
    XS_CHECK(narrowForward(g) && detail::narrowPoolsNhwc(dev, g), ShapeError,
             "conv2d: a fused channels-last pool needs the native bf16 narrow kernels (ask conv2dPoolsNhwc first)");
    XS_CHECK(g.nhwcPool->y && (!g.nhwcPool->f.relu || g.nhwcPool->mask), ShapeError,
             "conv2d with a fused pool: give the pool's output and, with its ReLU, the mask's conv2dPoolMasks words");
    detail::conv2dForwardNarrow(dev, nullptr, x, w, b, g);
    return;
  }
  if (g.dstBlocked) {  // only oneDNN's primitives write it (conv2dWritesBlocked16)
    XS_CHECK(conv2dWritesBlocked16(dev, g, b != nullptr) && detail::conv2dForwardOneDnn(dev, y, x, w, b, g),
             ShapeError,
             "conv2d: this convolution does not write y in channel blocks: ask conv2dWritesBlocked16 first");
    return;
  }
  if (oneChannel(g)) {
    detail::conv2dForwardOneChannel(dev, y, x, w, b, g);
    return;
  }
  if (convBackend() == ConvBackend::kOneDnn && detail::useNhwcGemm(g)) {
    detail::conv2dForwardGemmNhwc(dev, y, x, w, b, g);
    return;
  }
  if (narrowForward(g)) {
    detail::conv2dForwardNarrow(dev, y, x, w, b, g);
    return;
  }
  if (convBackend() == ConvBackend::kOneDnn && detail::conv2dForwardOneDnn(dev, y, x, w, b, g)) return;
  if (g.srcNhwc || g.dstNhwc) {  // im2col runs on NCHW: convert around it
    ConvGeom p = g;
    p.srcNhwc = p.dstNhwc = false;
    const int ohw = g.oh() * g.ow();
    float* yc = g.dstNhwc ? detail::scratch(dev, kLayoutSlotB, static_cast<std::size_t>(g.n) * g.oc * ohw) : y;
    conv2dForward(dev, yc, asNchw(dev, kLayoutSlotA, x, g.srcNhwc, g.n, g.c, g.h * g.w), w, b, p);
    if (g.dstNhwc) nchwToNhwc(y, yc, g.n, g.oc, ohw);
    return;
  }
  const int ohw = g.oh() * g.ow(), ckk = g.c * g.kh * g.kw;
  const int nbMax = chunkImages(g);
  for (int n0 = 0; n0 < g.n; n0 += nbMax) {
    int nb = std::min(nbMax, g.n - n0);
    int cols = nb * ohw;
    const float* col;
    if (nb == 1 && isPointwise(g)) col = x + static_cast<std::size_t>(n0) * g.c * ohw;
    else {
      float* c = detail::scratch(dev, 0, static_cast<std::size_t>(ckk) * cols);
      im2col(c, x, g, n0, nb);
      col = c;
    }
    // yc [oc, nb*ohw] = w [oc, ckk] * col [ckk, nb*ohw]
    float* yc = nb == 1 ? y + static_cast<std::size_t>(n0) * g.oc * ohw
                        : detail::scratch(dev, 1, static_cast<std::size_t>(g.oc) * cols);
    gemm(dev, false, false, g.oc, cols, ckk, w, ckk, col, cols, 0.f, yc, cols);
    for (int im = 0; im < nb; ++im)
      for (int o = 0; o < g.oc; ++o) {
        float* dst = y + (static_cast<std::size_t>(n0 + im) * g.oc + o) * ohw;
        const float* src = yc + static_cast<std::size_t>(o) * cols + static_cast<std::size_t>(im) * ohw;
        float bias = b ? b[o] : 0.f;
        if (dst != src) for (int p = 0; p < ohw; ++p) dst[p] = src[p] + bias;
        else if (b) for (int p = 0; p < ohw; ++p) dst[p] += bias;
      }
  }
}

namespace {
bool& blockedGradientsSlot() {
  static bool on = true;
  return on;
}

// Channel blocks are on, and g's passes run on oneDNN's primitives rather than as GEMMs.
bool blocksOnOneDnn(const ConvGeom& g) {
  return blockedGradientsSlot() && convBackend() == ConvBackend::kOneDnn && !detail::useNhwcGemm(g);
}
}  // namespace

void setBlockedGradients(bool on) { blockedGradientsSlot() = on; }

bool conv2dGradsBlocked16(Device& dev, const ConvGeom& g, bool bias, bool dx) {
  return blocksOnOneDnn(g) && !g.dyBf16 && detail::conv2dGradsBlocked16OneDnn(dev, g, bias, dx);
}

bool conv2dDxBlocked16(Device& dev, const ConvGeom& g, bool bias) {
  return blocksOnOneDnn(g) && !narrowData(g) && !detail::useNhwcGemmWeightGradient(dev, g) &&
         detail::conv2dDxBlocked16OneDnn(dev, g, bias);
}

bool conv2dWritesBlocked16(Device& dev, const ConvGeom& g, bool bias) {
  return blocksOnOneDnn(g) && !oneChannel(g) && !narrowForward(g) && detail::conv2dWritesBlocked16OneDnn(dev, g, bias);
}

bool conv2dWritesPlanes(Device& dev, const ConvGeom& g) {
  ConvGeom planar = g;
  planar.dstNhwc = false;
  planar.planes = true;
  return oneChannel(planar);
}

void conv2dBackward(Device& dev, float* dx, float* dw, float* db, const float* dy, const float* x,
                    const float* w, const ConvGeom& g) {
  checkGeom(g);
  XS_CHECK(!g.pool || (!dx && dw && oneChannel(g)), ShapeError,
           "conv2d: a fused pool needs the one-channel weight gradient (no dx; ask conv2dWritesPlanes first)");
  if (g.keepSrc && narrowForward(g)) {  // no forward copy of x to reuse (an old one may be stale)
    ConvGeom fresh = g;
    fresh.keepSrc = false;
    return conv2dBackward(dev, dx, dw, db, dy, x, w, fresh);
  }
  if (g.nhwcPool && g.nhwcPool->codes) {  // dy is the max-pool's: the weight pass spreads it
    XS_CHECK(!dx && dw && g.nhwcPool->dy && detail::conv2dOneChannelWideOnOurs(dev, g, db != nullptr), ShapeError,
             "conv2d: a fused max-pool's backward gives the weight and bias gradients only, from the pool's "
             "gradient (NhwcPool::dy), on the native bf16 one-channel kernels (ask conv2dMaxPoolsNhwc first)");
    detail::conv2dBackwardOneDnn(dev, nullptr, dw, db, nullptr, x, w, g);
    return;
  }
  if (g.nhwcPool) {  // dy is the pool's: spread into bf16 bits, which both narrow passes read
    XS_CHECK(dw && narrowData(g) && narrowWeights(g) && detail::narrowPoolsNhwc(dev, g), ShapeError,
             "conv2d: a fused channels-last pool needs the native bf16 narrow kernels (ask conv2dPoolsNhwc first)");
    XS_CHECK(g.nhwcPool->dy && (!g.nhwcPool->f.relu || g.nhwcPool->mask), ShapeError,
             "conv2d with a fused pool: give the pool's gradient (NhwcPool::dy) and the forward's mask");
    const std::uint16_t* bits = detail::nhwcPoolGradBits(dev, g);
    if (dx) detail::conv2dDataGradientNarrow(dev, dx, nullptr, w, g, bits);
    detail::conv2dWeightGradientNarrow(dev, dw, db, nullptr, x, g, bits);
    return;
  }
  if (g.dyBlocked || g.dxBlocked) {  // only oneDNN's blocked passes take these (conv2dGradsBlocked16)
    // Both passes in blocks (either side may come or go channels last), or dx alone.
    const bool blocks = conv2dGradsBlocked16(dev, g, db != nullptr, dx != nullptr) ||
                        (!g.dyBlocked && dx && conv2dDxBlocked16(dev, g, db != nullptr));
    XS_CHECK(blocks && detail::conv2dBackwardOneDnn(dev, dx, dw, db, dy, x, w, g), ShapeError,
             "conv2d: gradients in blocks of 16 channels need oneDNN's blocked backward (channels last): ask "
             "conv2dGradsBlocked16 or conv2dDxBlocked16 first");
    return;
  }
  if (dx && narrowData(g)) {
    detail::conv2dDataGradientNarrow(dev, dx, dy, w, g);
    if (dw) conv2dBackward(dev, nullptr, dw, db, dy, x, w, g);
    return;
  }
  if (!dx && dw && oneChannel(g)) {
    detail::conv2dBackwardOneChannel(dev, dw, db, dy, x, g);
    return;
  }
  if (!dx && dw && narrowWeights(g)) {
    detail::conv2dWeightGradientNarrow(dev, dw, db, dy, x, g);
    return;
  }
  // The weight gradient as a GEMM, dx on oneDNN's direct kernel (db names its cached primitives).
  if (dw && convBackend() == ConvBackend::kOneDnn && detail::useNhwcGemmWeightGradient(dev, g) &&
      (!dx || detail::conv2dBackwardOneDnn(dev, dx, nullptr, db, dy, x, w, g))) {
    detail::conv2dBackwardGemmNhwc(dev, nullptr, dw, db, dy, x, w, g);
    return;
  }
  if (g.dyBf16) {  // oneDNN's kernels read bf16 dy as it is; the other paths widen it once
    if (convBackend() == ConvBackend::kOneDnn && !detail::useNhwcGemm(g) &&
        detail::conv2dBackwardOneDnn(dev, dx, dw, db, dy, x, w, g))
      return;
    const std::size_t count = static_cast<std::size_t>(g.n) * g.oc * g.oh() * g.ow();
    Tensor wide(dev, Shape{static_cast<int>(count)}, "convolution staging");
    const auto* bits = reinterpret_cast<const std::uint16_t*>(dy);
    for (std::size_t i = 0; i < count; ++i) wide.data()[i] = bf16BitsToFloat(bits[i]);
    ConvGeom f = g;
    f.dyBf16 = false;
    f.dyRounded = true;  // bf16 values, widened exactly
    conv2dBackward(dev, dx, dw, db, wide.data(), x, w, f);
    return;
  }
  if (convBackend() == ConvBackend::kOneDnn && detail::useNhwcGemm(g)) {
    detail::conv2dBackwardGemmNhwc(dev, dx, dw, db, dy, x, w, g);
    return;
  }
  if (convBackend() == ConvBackend::kOneDnn && detail::conv2dBackwardOneDnn(dev, dx, dw, db, dy, x, w, g))
    return;
  if (g.srcNhwc || g.dstNhwc) {  // im2col runs on NCHW: convert around it
    ConvGeom p = g;
    p.srcNhwc = p.dstNhwc = false;
    const int hw = g.h * g.w;
    const float* dyc = asNchw(dev, kLayoutSlotB, dy, g.dstNhwc, g.n, g.oc, g.oh() * g.ow());
    const float* xc = asNchw(dev, kLayoutSlotA, x, g.srcNhwc, g.n, g.c, hw);
    // dx goes through a buffer of its own: the scratch slots hold x and dy meanwhile.
    Tensor dxc;
    if (dx && g.srcNhwc) dxc = Tensor(dev, Shape{g.n, g.c, g.h, g.w}, "convolution staging");
    conv2dBackward(dev, dx && g.srcNhwc ? dxc.data() : dx, dw, db, dyc, xc, w, p);
    if (dx && g.srcNhwc) nchwToNhwc(dx, dxc.data(), g.n, g.c, hw);
    return;
  }
  const int ohw = g.oh() * g.ow(), ckk = g.c * g.kh * g.kw;
  if (g.overwriteGrads) {  // this path adds to them
    std::memset(dw, 0, static_cast<std::size_t>(g.oc) * ckk * sizeof(float));
    if (db) std::memset(db, 0, static_cast<std::size_t>(g.oc) * sizeof(float));
  }
  const int nbMax = chunkImages(g);
  for (int n0 = 0; n0 < g.n; n0 += nbMax) {
    int nb = std::min(nbMax, g.n - n0);
    int cols = nb * ohw;
    // dyc [oc, nb*ohw]
    const float* dyc;
    if (nb == 1) dyc = dy + static_cast<std::size_t>(n0) * g.oc * ohw;
    else {
      float* t = detail::scratch(dev, 1, static_cast<std::size_t>(g.oc) * cols);
      for (int im = 0; im < nb; ++im)
        for (int o = 0; o < g.oc; ++o)
          std::memcpy(t + static_cast<std::size_t>(o) * cols + static_cast<std::size_t>(im) * ohw,
                      dy + (static_cast<std::size_t>(n0 + im) * g.oc + o) * ohw, ohw * sizeof(float));
      dyc = t;
    }
    if (db)
      for (int o = 0; o < g.oc; ++o) {
        const float* r = dyc + static_cast<std::size_t>(o) * cols;
        float s = 0.f;
        for (int p = 0; p < cols; ++p) s += r[p];
        db[o] += s;
      }
    bool direct = nb == 1 && isPointwise(g);
    const float* col;
    if (direct) col = x + static_cast<std::size_t>(n0) * g.c * ohw;
    else {
      float* c = detail::scratch(dev, 0, static_cast<std::size_t>(ckk) * cols);
      im2col(c, x, g, n0, nb);
      col = c;
    }
    // dw [oc, ckk] += dyc [oc, cols] * col^T [cols, ckk]
    gemm(dev, false, true, g.oc, ckk, cols, dyc, cols, col, cols, 1.f, dw, ckk);
    if (!dx) continue;
    float* dxn = dx + static_cast<std::size_t>(n0) * g.c * g.h * g.w;
    if (direct) {  // dx [c, hw] = w^T [c, oc] * dyc [oc, hw]
      gemm(dev, true, false, ckk, cols, g.oc, w, ckk, dyc, cols, 0.f, dxn, cols);
      continue;
    }
    // dcol [ckk, cols] = w^T [ckk, oc] * dyc [oc, cols]
    float* dcol = detail::scratch(dev, 2, static_cast<std::size_t>(ckk) * cols);
    gemm(dev, true, false, ckk, cols, g.oc, w, ckk, dyc, cols, 0.f, dcol, cols);
    std::memset(dxn, 0, static_cast<std::size_t>(nb) * g.c * g.h * g.w * sizeof(float));
    col2im(dx, dcol, g, n0, nb);
  }
}

}  // namespace xs::engine
