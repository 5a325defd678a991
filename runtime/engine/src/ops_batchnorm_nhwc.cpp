// ops_batchnorm_nhwc.cpp: batch-norm 2d on channels-last activations [n, hw, c]: every loop runs
// along the contiguous channels, with float partial sums per block of rows flushed to double.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine::detail {
namespace {

#define XS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
constexpr int kBlockRows = 64;  // rows summed in float before flushing to double

// s1[k] += sum_r (x[r,k] - shift[k]), s2[k] += sum_r (x[r,k] - shift[k])^2 over rows [0, rows).
XS_CLONES void shiftedMoments(const float* x, int rows, int c, const float* shift, float* p1, float* p2,
                              double* s1, double* s2) {
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    std::fill(p1, p1 + c, 0.f);
    std::fill(p2, p2 + c, 0.f);
    for (int r = r0; r < std::min(rows, r0 + kBlockRows); ++r) {
      const float* row = x + static_cast<std::size_t>(r) * c;
#pragma omp simd
      for (int k = 0; k < c; ++k) {
        float d = row[k] - shift[k];
        p1[k] += d;
        p2[k] += d * d;
      }
    }
    for (int k = 0; k < c; ++k) s1[k] += p1[k], s2[k] += p2[k];
  }
}

// y[r,k] = x[r,k] * scale[k] + shift[k], then max(0, .) when Relu, then rounded to bf16 values
// when Round (the next convolution's emulated operand, in this pass instead of one of its own)
template <bool Relu, bool Round>
XS_CLONES void affineRows(float* y, const float* x, std::size_t rows, int c, const float* scale,
                          const float* shift) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
#pragma omp simd
    for (int k = 0; k < c; ++k) {
      float v = xr[k] * scale[k] + shift[k];
      if constexpr (Relu) v = v > 0.f ? v : 0.f;
      yr[k] = Round ? roundToBf16(v) : v;
    }
  }
}

// The gradient reaching the batch-norm: dy, or dy where the fused ReLU's output y > 0. dy is
// loaded either way: read only where y > 0, the vector loops load it through masks
// (vmaskmovps), which took most of the backward's time on AMD Zen 5.
template <bool Relu>
inline float masked(const float* dy, const float* y, std::size_t i) {
  const float d = dy[i];
  if constexpr (Relu) return y[i] > 0.f ? d : 0.f;
  else return d;
}

// a[k] += sum_r dy[r,k], b[k] += sum_r dy[r,k] * (x[r,k] - mu[k])
template <bool Relu>
XS_CLONES void gradSums(const float* dy, const float* y, const float* x, int rows, int c, const float* mu,
                        float* p1, float* p2, double* a, double* b) {
  for (int r0 = 0; r0 < rows; r0 += kBlockRows) {
    std::fill(p1, p1 + c, 0.f);
    std::fill(p2, p2 + c, 0.f);
    for (int r = r0; r < std::min(rows, r0 + kBlockRows); ++r) {
      const std::size_t o = static_cast<std::size_t>(r) * c;
#pragma omp simd
      for (int k = 0; k < c; ++k) {
        float d = masked<Relu>(dy, y, o + k);
        p1[k] += d;
        p2[k] += d * (x[o + k] - mu[k]);
      }
    }
    for (int k = 0; k < c; ++k) a[k] += p1[k], b[k] += p2[k];
  }
}

// dx = g * (dy - k1 - (x - mu) * isk2), per channel k; stored as float or as bf16 bits
template <bool Relu, class Out>
XS_CLONES void gradInputRows(Out* dx, const float* dy, const float* y, const float* x, std::size_t rows,
                             int c, const float* g, const float* k1, const float* mu, const float* isk2) {
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t o = r * c;
#pragma omp simd
    for (int k = 0; k < c; ++k) {
      float v = g[k] * (masked<Relu>(dy, y, o + k) - k1[k] - (x[o + k] - mu[k]) * isk2[k]);
      if constexpr (std::is_same_v<Out, float>) dx[o + k] = v;
      else dx[o + k] = toBf16Bits(v);
    }
  }
}

template <bool Relu>
void gradInput(float* dx, bool bf16, const float* dy, const float* y, const float* x, std::size_t rows, int c,
               const float* g, const float* k1, const float* mu, const float* isk2) {
  if (bf16)
    gradInputRows<Relu>(reinterpret_cast<std::uint16_t*>(dx), dy, y, x, rows, c, g, k1, mu, isk2);
  else
    gradInputRows<Relu>(dx, dy, y, x, rows, c, g, k1, mu, isk2);
}

}  // namespace

void batchNormNhwcForward(float* y, float* mean, float* invstd, float* runMean, float* runVar,
                          const float* x, const float* gamma, const float* beta, bool train,
                          const BatchNormArgs& a) {
  const int c = a.c, rows = a.n * a.hw;
  std::vector<float> scale(c), shift(c), p1(c), p2(c);
  if (train) {
    // One pass over x: moments about the first row's values (close to the mean, so the
    // difference of squares loses no accuracy), accumulated in double.
    std::vector<double> s1(c, 0.0), s2(c, 0.0);
    std::vector<float> ref(x, x + c);
    shiftedMoments(x, rows, c, ref.data(), p1.data(), p2.data(), s1.data(), s2.data());
    const double m = static_cast<double>(rows);
    for (int k = 0; k < c; ++k) {
      double dm = s1[k] / m, v = std::max(0.0, s2[k] / m - dm * dm);
      float mu = static_cast<float>(ref[k] + dm);
      mean[k] = mu;
      invstd[k] = static_cast<float>(1.0 / std::sqrt(v + a.eps));
      runMean[k] = (1.f - a.momentum) * runMean[k] + a.momentum * mu;
      runVar[k] = (1.f - a.momentum) * runVar[k] + a.momentum * static_cast<float>(v * m / (m - 1.0));
    }
  } else {
    for (int k = 0; k < c; ++k) {
      mean[k] = runMean[k];
      invstd[k] = 1.f / std::sqrt(runVar[k] + a.eps);
    }
  }
  for (int k = 0; k < c; ++k) {
    scale[k] = gamma[k] * invstd[k];
    shift[k] = beta[k] - mean[k] * scale[k];
  }
  const auto n = static_cast<std::size_t>(rows);
  if (a.relu && a.roundY) affineRows<true, true>(y, x, n, c, scale.data(), shift.data());
  else if (a.relu) affineRows<true, false>(y, x, n, c, scale.data(), shift.data());
  else if (a.roundY) affineRows<false, true>(y, x, n, c, scale.data(), shift.data());
  else affineRows<false, false>(y, x, n, c, scale.data(), shift.data());
}

void batchNormNhwcBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                           const float* mean, const float* invstd, const float* gamma, bool train,
                           const BatchNormArgs& a, const float* y) {
  const int c = a.c, rows = a.n * a.hw;
  const double m = static_cast<double>(rows);
  std::vector<double> sdy(c, 0.0), sdxm(c, 0.0);
  std::vector<float> p1(c), p2(c), g(c), k1(c), isk2(c);
  if (a.relu) gradSums<true>(dy, y, x, rows, c, mean, p1.data(), p2.data(), sdy.data(), sdxm.data());
  else gradSums<false>(dy, y, x, rows, c, mean, p1.data(), p2.data(), sdy.data(), sdxm.data());
  for (int k = 0; k < c; ++k) {
    const double sdyx = sdxm[k] * invstd[k];  // sum dy * xhat
    dgamma[k] += static_cast<float>(sdyx);
    dbeta[k] += static_cast<float>(sdy[k]);
    g[k] = gamma[k] * invstd[k];
    k1[k] = train ? static_cast<float>(sdy[k] / m) : 0.f;
    isk2[k] = train ? invstd[k] * static_cast<float>(sdyx / m) : 0.f;
  }
  const auto n = static_cast<std::size_t>(rows);
  if (a.relu) gradInput<true>(dx, a.dxBf16, dy, y, x, n, c, g.data(), k1.data(), mean, isk2.data());
  else gradInput<false>(dx, a.dxBf16, dy, y, x, n, c, g.data(), k1.data(), mean, isk2.data());
}

}  // namespace xs::engine::detail
