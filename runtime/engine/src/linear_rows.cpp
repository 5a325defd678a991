// linear_rows.cpp: the forward and input gradient of a linear layer with many weights at a
// small batch (AlexNet's classifier: 9216 -> 4096 at batch 32). dnnl_sgemm runs them at 40-45%
// of the core's peak: with 32 rows of x or dy, each weight it loads serves few multiply-adds, and
// the input gradient walks the weights across their rows. Here both run transposed, the batch as
// V vectors (zeros past it), every weight row streamed once, in order:
//
//   forward:        y[b][o] = bias[o] + sum over k, in order, of w[o][k] * x[b][k]
//                   (R output rows at once: R * V sums, each weight broadcast against x^T's vectors)
//   input gradient: dx[b][k] = sum over o, in order, of w[o][k] * dy[b][o]
//                   (R weight rows at once against their R rows of dy^T in registers, into
//                   dx^T [in][V * 16], a block of it in cache at a time)
//
// Each sum runs from the bias (or zero) with fused multiply-adds, the same in the AVX-512 kernels
// and the portable loops (tested bit for bit). The layers take them only with AVX-512
// (useLinearRows).
#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <utility>

#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxBatch = 64;  // 4 vectors
// Scratch: gemm()'s rounded copies and the convolutions' slots, not live meanwhile.
constexpr int kXtSlot = 4, kDxtSlot = 5, kWholeSlot = 6;

// x [batch, in] -> xT [in][width] (width = v * 16), zeros past the batch: ops_dense.cpp's tiled
// transpose (nchwToNhwc), through a copy padded to whole vectors when the batch is not.
void toColumns(Device& dev, float* xT, const float* x, int batch, int in, int width) {
  if (batch < width) {
    float* whole = dev.scratch(kWholeSlot, static_cast<std::size_t>(width) * in);
    std::copy(x, x + static_cast<std::size_t>(batch) * in, whole);
    std::fill(whole + static_cast<std::size_t>(batch) * in, whole + static_cast<std::size_t>(width) * in, 0.f);
    x = whole;
  }
  nchwToNhwc(xT, x, 1, width, in);
}

// xT [in][width] -> x [batch, in] (nhwcToNchw), the rows past the batch dropped.
void fromColumns(Device& dev, float* x, const float* xT, int batch, int in, int width) {
  if (batch == width) return nhwcToNchw(x, xT, 1, width, in);
  float* whole = dev.scratch(kWholeSlot, static_cast<std::size_t>(width) * in);
  nhwcToNchw(whole, xT, 1, width, in);
  std::copy(whole, whole + static_cast<std::size_t>(batch) * in, x);
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

// Input gradient: rows o0.. (R of them) of w into dxT's columns [k0, k1): dxT[k] += sum over r of
// w[o0 + r][k] * dyT[o0 + r], r in order.
template <int V, int R>
__attribute__((target("avx512f"))) void gradRowsAvx512(float* dxT, const float* dyT, const float* w, int in, int o0,
                                                       int k0, int k1) {
  __m512 d[R][V];
  const float* row[R];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r) {
    row[r] = w + static_cast<std::size_t>(o0 + r) * in;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) d[r][v] = _mm512_load_ps(dyT + (static_cast<std::size_t>(o0 + r) * V + v) * kLanes);
  }
  for (int k = k0; k < k1; ++k) {
    float* t = dxT + static_cast<std::size_t>(k) * V * kLanes;
    __m512 acc[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[v] = _mm512_load_ps(t + v * kLanes);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m512 wb = _mm512_set1_ps(row[r][k]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(wb, d[r][v], acc[v]);
    }
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_store_ps(t + v * kLanes, acc[v]);
  }
}

using GradRows = void (*)(float*, const float*, const float*, int, int, int, int);

template <int V, std::size_t... I>
GradRows gradRowsKernel(int rows, std::index_sequence<I...>) {
  static constexpr GradRows kTable[] = {&gradRowsAvx512<V, static_cast<int>(I) + 1>...};
  return kTable[rows - 1];
}

// R = 8 weight rows at once (6 for 4 vectors): R * V of dy^T, V sums and a broadcast in 32
// registers. (12 rows ran 1.1x slower than 8 on fc1.) Columns in blocks that keep dx^T's block
// (about 300 KB) in cache while every weight row streams through it.
template <int V>
void allGradRows(float* dxT, const float* dyT, const float* w, int in, int out) {
  constexpr int R = V == 4 ? 6 : 8;
  const int block = 4608 / V;
  for (int k0 = 0; k0 < in; k0 += block)
    for (int o0 = 0; o0 < out; o0 += R) {
      const int rows = std::min(R, out - o0);
      gradRowsKernel<V>(rows, std::make_index_sequence<R>())(dxT, dyT, w, in, o0, k0, std::min(in, k0 + block));
    }
}

void gradPortable(float* dx, const float* dy, const float* w, int batch, int in, int out) {
  for (int b = 0; b < batch; ++b)
    for (int k = 0; k < in; ++k) {
      float acc = 0.f;
      for (int o = 0; o < out; ++o)
        acc = std::fma(w[static_cast<std::size_t>(o) * in + k], dy[static_cast<std::size_t>(b) * out + o], acc);
      dx[static_cast<std::size_t>(b) * in + k] = acc;
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
  toColumns(dev, xT, x, batch, in, v * kLanes);
  switch (v) {
    case 1: return allRows<1>(y, xT, w, bias, batch, in, out);
    case 2: return allRows<2>(y, xT, w, bias, batch, in, out);
    case 3: return allRows<3>(y, xT, w, bias, batch, in, out);
    default: return allRows<4>(y, xT, w, bias, batch, in, out);
  }
}

void linearDataGradientRows(Device& dev, float* dx, const float* dy, const float* w, int batch, int in, int out) {
  if (!cpuHasAvx512() || linearRowsPortableSlot()) return gradPortable(dx, dy, w, batch, in, out);
  const int v = (batch + kLanes - 1) / kLanes, width = v * kLanes;
  float* dyT = dev.scratch(kXtSlot, static_cast<std::size_t>(out) * width);  // 64-byte aligned
  float* dxT = dev.scratch(kDxtSlot, static_cast<std::size_t>(in) * width);
  toColumns(dev, dyT, dy, batch, out, width);
  std::fill(dxT, dxT + static_cast<std::size_t>(in) * width, 0.f);
  switch (v) {
    case 1: allGradRows<1>(dxT, dyT, w, in, out); break;
    case 2: allGradRows<2>(dxT, dyT, w, in, out); break;
    case 3: allGradRows<3>(dxT, dyT, w, in, out); break;
    default: allGradRows<4>(dxT, dyT, w, in, out); break;
  }
  fromColumns(dev, dx, dxT, batch, in, width);
}

}  // namespace xs::engine
