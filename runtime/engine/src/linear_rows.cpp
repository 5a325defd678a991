// linear_rows.cpp: the forward of a linear layer with many weights at a small batch (AlexNet's
// classifier: 9216 -> 4096 at batch 32). dnnl_sgemm runs it at about 45% of the core's peak:
// with 32 rows of x, each weight it loads serves few multiply-adds. Here the product runs
// transposed, y^T = w x^T:
//
//   y[b][o] = bias[o] + sum over k, in order, of w[o][k] * x[b][k]
//
// R output rows at once, each weight broadcast once against x^T's V vectors of the batch
// (xT [in][V * 16], zeros past the batch): R * V sums in registers, R broadcasts and V loads for
// R * V multiply-adds, and every weight row streamed once, in order. Each sum runs from the bias
// (or zero) with fused multiply-adds, tested bit for bit against a scalar loop of the same
// order. Only with AVX-512 (the caller asks useLinearRows).
#include <algorithm>
#include <cmath>
#include <immintrin.h>

#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxBatch = 64;  // 4 vectors
constexpr int kXtSlot = 4;     // scratch: gemm()'s rounded copies, not live meanwhile

// x [batch, in] -> xT [in][v * 16], zeros past the batch.
void transposeBatch(float* xT, const float* x, int batch, int in, int v) {
  const int width = v * kLanes;
  for (int k = 0; k < in; ++k) std::fill(xT + static_cast<std::size_t>(k) * width + batch,
                                         xT + static_cast<std::size_t>(k + 1) * width, 0.f);
  for (int b = 0; b < batch; ++b)
    for (int k = 0; k < in; ++k) xT[static_cast<std::size_t>(k) * width + b] = x[static_cast<std::size_t>(b) * in + k];
}

// Output rows o0.. (R of them; rows past `out` run on the last row and are dropped).
template <int V, int R>
__attribute__((target("avx512f"))) void rowsAvx512(float* y, const float* xT, const float* w, const float* bias,
                                                   int batch, int in, int out, int o0) {
  __m512 acc[R][V];
  const float* row[R];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r) {
    const int o = std::min(o0 + r, out - 1);
    row[r] = w + static_cast<std::size_t>(o) * in;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_set1_ps(bias ? bias[o] : 0.f);
  }
  for (int k = 0; k < in; ++k) {
    __m512 xv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) xv[v] = _mm512_load_ps(xT + (static_cast<std::size_t>(k) * V + v) * kLanes);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m512 wb = _mm512_set1_ps(row[r][k]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(wb, xv[v], acc[r][v]);
    }
  }
  alignas(64) float t[R][V * kLanes];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_store_ps(t[r] + v * kLanes, acc[r][v]);
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < R && o0 + r < out; ++r) y[static_cast<std::size_t>(b) * out + o0 + r] = t[r][b];
}

void rowsPortable(float* y, const float* x, const float* w, const float* bias, int batch, int in, int out) {
  for (int b = 0; b < batch; ++b)
    for (int o = 0; o < out; ++o) {
      float acc = bias ? bias[o] : 0.f;
      for (int k = 0; k < in; ++k)
        acc = std::fma(w[static_cast<std::size_t>(o) * in + k], x[static_cast<std::size_t>(b) * in + k], acc);
      y[static_cast<std::size_t>(b) * out + o] = acc;
    }
}

// V vectors of the batch and R = 24 / V rows: 24 sums, V loads and R broadcasts in 32 registers.
template <int V>
void allRows(float* y, const float* xT, const float* w, const float* bias, int batch, int in, int out) {
  constexpr int R = 24 / V;
  for (int o0 = 0; o0 < out; o0 += R) rowsAvx512<V, R>(y, xT, w, bias, batch, in, out, o0);
}

}  // namespace

bool& linearRowsPortableSlot() {
  static bool portable = false;
  return portable;
}

bool useLinearRows(int batch, int in, int out) {
  return cpuHasAvx512() && batch > 0 && batch <= kMaxBatch && static_cast<long long>(in) * out >= (1ll << 20);
}

void linearForwardRows(Device& dev, float* y, const float* x, const float* w, const float* bias, int batch, int in,
                       int out) {
  if (!cpuHasAvx512() || linearRowsPortableSlot()) return rowsPortable(y, x, w, bias, batch, in, out);
  const int v = (batch + kLanes - 1) / kLanes;
  float* xT = dev.scratch(kXtSlot, static_cast<std::size_t>(in) * v * kLanes);  // 64-byte aligned
  transposeBatch(xT, x, batch, in, v);
  switch (v) {
    case 1: return allRows<1>(y, xT, w, bias, batch, in, out);
    case 2: return allRows<2>(y, xT, w, bias, batch, in, out);
    case 3: return allRows<3>(y, xT, w, bias, batch, in, out);
    default: return allRows<4>(y, xT, w, bias, batch, in, out);
  }
}

}  // namespace xs::engine
