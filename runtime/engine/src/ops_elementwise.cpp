// ops_elementwise.cpp: ReLU, dropout, residual add and batch-norm 2d, forward and backward.
#include <cmath>
#include <cstring>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "ops.hpp"
#include "rng.hpp"

namespace xs::engine {
namespace detail {
void batchNormNhwcForward(float* y, float* mean, float* invstd, float* runMean, float* runVar,
                          const float* x, const float* gamma, const float* beta, bool train,
                          const BatchNormArgs& a);
void batchNormNhwcBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                           const float* mean, const float* invstd, const float* gamma, bool train,
                           const BatchNormArgs& a, const float* y);
}  // namespace detail

// The element-wise loops are branch-free and vectorised for the widest ISA found at run time.
#define XS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {
// The ReLU loops, each written once: kRound writes the result rounded to bf16 (gemm.hpp).
template <bool kRound>
[[gnu::always_inline]] inline float keep(float v) {
  if constexpr (kRound) return roundToBf16(v);
  else return v;
}
template <bool kRound>
[[gnu::always_inline]] inline void reluLoop(float* y, const float* x, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    float v = x[i];
    y[i] = keep<kRound>(v > 0.f ? v : 0.f);
  }
}
template <bool kRound>
[[gnu::always_inline]] inline void reluGradLoop(float* dx, const float* dy, const float* y, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    float d = dy[i];
    dx[i] = keep<kRound>(y[i] > 0.f ? d : 0.f);
  }
}
}  // namespace

XS_CLONES void reluForward(float* y, const float* x, std::size_t count) { reluLoop<false>(y, x, count); }
XS_CLONES void reluRoundedToBf16(float* y, const float* x, std::size_t count) { reluLoop<true>(y, x, count); }
XS_CLONES void reluBackward(float* dx, const float* dy, const float* y, std::size_t count) {
  reluGradLoop<false>(dx, dy, y, count);
}
XS_CLONES void reluBackwardRoundedToBf16(float* dx, const float* dy, const float* y, std::size_t count) {
  reluGradLoop<true>(dx, dy, y, count);
}

namespace {
// The mask and the product, one counter-based draw per value: vectorised with AVX-512's 64-bit
// multiplies and conversions (x86-64-v4), each lane the same integer arithmetic as a scalar.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void dropoutMasked(float* y, float* mask, const float* x, std::size_t count, float p, float keep,
                   std::uint64_t base) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    const float m = uniform01(mix64(base + i)) < p ? 0.f : keep;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}
}  // namespace

void dropoutForward(float* y, float* mask, const float* x, std::size_t count, float p,
                    std::uint64_t seed, std::uint64_t step) {
  XS_CHECK(p >= 0.f && p < 1.f, UsageError,
           "dropout probability " + std::to_string(p) + " must be in [0, 1)");
  dropoutMasked(y, mask, x, count, p, 1.f / (1.f - p), mix64(seed ^ mix64(step + 0x5eedu)));
}

XS_CLONES void dropoutBackward(float* dx, const float* dy, const float* mask, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) dx[i] = dy[i] * mask[i];
}

XS_CLONES void addForward(float* y, const float* a, const float* b, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
}

XS_CLONES void addReluForward(float* y, const float* a, const float* b, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    float v = a[i] + b[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

XS_CLONES void reluMaskedSum(float* dx, const float* a, const float* b, const float* y, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    const float sum = a[i] + b[i];  // loaded everywhere, not through masks (as reluGradLoop's dy)
    dx[i] = y[i] > 0.f ? sum : 0.f;
  }
}

XS_CLONES void accumulate(float* dst, const float* src, std::size_t count) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) dst[i] += src[i];
}

namespace {
// Sum and sum of squared deviations from mu of one channel's row of hw values.
XS_CLONES void rowMoments(const float* p, int hw, float mu, double& sum, double& sq) {
  float s = 0.f, q = 0.f;
#pragma omp simd reduction(+ : s, q)
  for (int k = 0; k < hw; ++k) {
    float d = p[k] - mu;
    s += p[k];
    q += d * d;
  }
  sum += s;
  sq += q;
}

XS_CLONES void rowAffine(float* y, const float* x, int hw, float scale, float shift) {
#pragma omp simd
  for (int k = 0; k < hw; ++k) y[k] = x[k] * scale + shift;
}
}  // namespace

void batchNorm2dForwardTrain(float* y, float* mean, float* invstd, float* runMean, float* runVar,
                             const float* x, const float* gamma, const float* beta,
                             const BatchNormArgs& a) {
  XS_CHECK(a.n * a.hw > 1, ShapeError,
           "batch-norm in training needs more than one value per channel: use a batch above 1");
  if (a.nhwc) {
    detail::batchNormNhwcForward(y, mean, invstd, runMean, runVar, x, gamma, beta, true, a);
    return;
  }
  const double m = static_cast<double>(a.n) * a.hw;
  for (int c = 0; c < a.c; ++c) {
    // Two passes (mean, then squared deviations) keep the variance accurate.
    double s = 0.0, unused = 0.0;
    for (int i = 0; i < a.n; ++i) rowMoments(x + (static_cast<std::size_t>(i) * a.c + c) * a.hw, a.hw, 0.f, s, unused);
    const float mu = static_cast<float>(s / m);
    double s2 = 0.0, v = 0.0;
    for (int i = 0; i < a.n; ++i) rowMoments(x + (static_cast<std::size_t>(i) * a.c + c) * a.hw, a.hw, mu, s2, v);
    double var = v / m;
    float is = static_cast<float>(1.0 / std::sqrt(var + a.eps));
    mean[c] = mu;
    invstd[c] = is;
    runMean[c] = (1.f - a.momentum) * runMean[c] + a.momentum * mu;
    runVar[c] = (1.f - a.momentum) * runVar[c] + a.momentum * static_cast<float>(v / (m - 1.0));
    float scale = gamma[c] * is, shift = beta[c] - mu * scale;
    for (int i = 0; i < a.n; ++i) {
      std::size_t off = (static_cast<std::size_t>(i) * a.c + c) * a.hw;
      rowAffine(y + off, x + off, a.hw, scale, shift);
    }
  }
  if (a.relu) reluForward(y, y, static_cast<std::size_t>(a.n) * a.c * a.hw);
}

void batchNorm2dForwardEval(float* y, float* mean, float* invstd, const float* runMean,
                            const float* runVar, const float* x, const float* gamma,
                            const float* beta, const BatchNormArgs& a) {
  if (a.nhwc) {
    detail::batchNormNhwcForward(y, mean, invstd, const_cast<float*>(runMean), const_cast<float*>(runVar),
                                 x, gamma, beta, false, a);
    return;
  }
  for (int c = 0; c < a.c; ++c) {
    float is = 1.f / std::sqrt(runVar[c] + a.eps);
    mean[c] = runMean[c];
    invstd[c] = is;
    float scale = gamma[c] * is, shift = beta[c] - runMean[c] * scale;
    for (int i = 0; i < a.n; ++i) {
      std::size_t off = (static_cast<std::size_t>(i) * a.c + c) * a.hw;
      rowAffine(y + off, x + off, a.hw, scale, shift);
    }
  }
  if (a.relu) reluForward(y, y, static_cast<std::size_t>(a.n) * a.c * a.hw);
}

namespace {
// Sums of dy and dy * (x - mu) over one row.
XS_CLONES void rowGradSums(const float* dy, const float* x, int hw, float mu, double& sdy, double& sdyx) {
  float a = 0.f, b = 0.f;
#pragma omp simd reduction(+ : a, b)
  for (int k = 0; k < hw; ++k) {
    a += dy[k];
    b += dy[k] * (x[k] - mu);
  }
  sdy += a;
  sdyx += b;
}

// dx = g * (dy - k1 - (x - mu) * is * k2)
XS_CLONES void rowGradInput(float* dx, const float* dy, const float* x, int hw, float g, float k1,
                            float mu, float isk2) {
#pragma omp simd
  for (int k = 0; k < hw; ++k) dx[k] = g * (dy[k] - k1 - (x[k] - mu) * isk2);
}
}  // namespace

void batchNorm2dBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                         const float* mean, const float* invstd, const float* gamma, bool train,
                         const BatchNormArgs& a, const float* y) {
  XS_CHECK(!a.relu || y, UsageError, "batch-norm backward with a fused ReLU needs the forward's output y");
  XS_CHECK(!a.dxBf16 || a.nhwc, UsageError, "batch-norm writes a bf16 dx only in the NHWC layout");
  if (a.nhwc) {
    detail::batchNormNhwcBackward(dx, dgamma, dbeta, dy, x, mean, invstd, gamma, train, a, y);
    return;
  }
  if (a.relu) {  // dx = dy masked by the ReLU, then the batch-norm backward in place on it
    reluBackward(dx, dy, y, static_cast<std::size_t>(a.n) * a.c * a.hw);
    dy = dx;
  }
  const double m = static_cast<double>(a.n) * a.hw;
  for (int c = 0; c < a.c; ++c) {
    double sdy = 0.0, sdxm = 0.0;  // sum dy, sum dy * (x - mu)
    const float mu = mean[c], is = invstd[c];
    for (int i = 0; i < a.n; ++i) {
      std::size_t off = (static_cast<std::size_t>(i) * a.c + c) * a.hw;
      rowGradSums(dy + off, x + off, a.hw, mu, sdy, sdxm);
    }
    const double sdyx = sdxm * is;  // sum dy * xhat
    dgamma[c] += static_cast<float>(sdyx);
    dbeta[c] += static_cast<float>(sdy);
    const float g = gamma[c] * is;
    const float k1 = train ? static_cast<float>(sdy / m) : 0.f;
    const float k2 = train ? static_cast<float>(sdyx / m) : 0.f;
    for (int i = 0; i < a.n; ++i) {
      std::size_t off = (static_cast<std::size_t>(i) * a.c + c) * a.hw;
      rowGradInput(dx + off, dy + off, x + off, a.hw, g, k1, mu, is * k2);
    }
  }
}

}  // namespace xs::engine
