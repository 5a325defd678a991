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
//   weight gradient: dw[o][k] = sum over b, in order, of dy[b][o] * x[b][k]
//                   (tiles of R rows x C vectors of k in registers, dy broadcast, x from
//                   panels of 16 columns, each [batch][16] contiguous)
//
// Each sum runs from the bias (or zero) with fused multiply-adds, the same in the AVX-512 kernels
// and the portable loops (tested bit for bit). The layers take them only with AVX-512
// (useLinearRows).
//
// With an SGD or Adam step inside backward (Model::setOptimizerInBackward), one pass makes the
// whole backward and the step: for each column block and group of R weight rows, the input
// gradient reads the rows, then the weight gradient's tiles update them with sgdUpdate or
// adamUpdate straight from the registers (and, in emulated bf16, write their rounding into the
// store's mirror). The gradient
// is never written, and the weights are read once instead of three times (input gradient,
// weight gradient's write and the optimizer's pass). This file is built with -ffp-contract=off
// (update_rules.hpp): the update has the optimizer's bits.
#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <utility>

#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "linear_rows_step.hpp"
#include "ops.hpp"
#include "update_rules.hpp"

namespace xs::engine {
namespace {

using rows::kDxtSlot;
using rows::kLanes;
using rows::kPanelsSlot;
using rows::kXtSlot;
constexpr int kMaxBatch = 64;  // 4 vectors
constexpr int kWholeSlot = 6;  // a batch padded to whole vectors

// x [batch, in] -> xT [in][width] (width = v * 16), zeros past the batch: ops_dense.cpp's tiled
// transpose (nchwToNhwc), through a copy padded to whole vectors when the batch is not.
void toColumns(Device& dev, float* xT, const float* x, int batch, int in, int width) {
  if (batch < width) {
    float* whole = detail::scratch(dev, kWholeSlot, static_cast<std::size_t>(width) * in);
    std::copy(x, x + static_cast<std::size_t>(batch) * in, whole);
    std::fill(whole + static_cast<std::size_t>(batch) * in, whole + static_cast<std::size_t>(width) * in, 0.f);
    x = whole;
  }
  nchwToNhwc(xT, x, 1, width, in);
}

// xT [in][width] -> x [batch, in] (nhwcToNchw), the rows past the batch dropped.
void fromColumns(Device& dev, float* x, const float* xT, int batch, int in, int width) {
  if (batch == width) return nhwcToNchw(x, xT, 1, width, in);
  float* whole = detail::scratch(dev, kWholeSlot, static_cast<std::size_t>(width) * in);
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
  rows::storeRows(y, acc, batch, out, o0);
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

// dy [batch][out] as the weight gradient reads it: dy[b][o] at at[b * perB + o * perO] (dy itself,
// or the input gradient's dy^T [out][V * 16]).
struct DyAt {
  const float* at;
  std::size_t perB, perO;
};

// x [batch, in] as the weight gradient reads it: panels of 16 columns, each [batch][16]
// contiguous (zeros past `in`), so a tile's loads stream through a few panels in order instead of
// striding across batch rows (as fast as dnnl_sgemm on AlexNet's classifier; 1.2-1.6x slower
// straight from x).
float* toPanels(Device& dev, const float* x, int batch, int in) {
  const int panels = (in + kLanes - 1) / kLanes;
  float* xp = detail::scratch(dev, kPanelsSlot, static_cast<std::size_t>(panels) * batch * kLanes);  // 64-byte aligned
  for (int p = 0; p < panels; ++p) {
    const int n = std::min(kLanes, in - p * kLanes);
    for (int b = 0; b < batch; ++b) {
      float* to = xp + (static_cast<std::size_t>(p) * batch + b) * kLanes;
      std::copy_n(x + static_cast<std::size_t>(b) * in + p * kLanes, n, to);
      std::fill(to + n, to + kLanes, 0.f);
    }
  }
  return xp;
}

// The weight gradient's tile of rows o0.. (R) by columns k.. (C vectors, the last one's lanes
// `last`), each a sum from zero over the batch in order, x from its panels xp; out(value, o, k,
// lanes) takes it.
template <int R, int C, class Out>
__attribute__((target("avx512f"))) void weightTile(const DyAt& dy, const float* xp, int batch, int o0, int k,
                                                   __mmask16 last, Out& out) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const float* panel = xp + static_cast<std::size_t>(k / kLanes) * batch * kLanes;
  for (int b = 0; b < batch; ++b) {
    __m512 xv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) xv[c] = _mm512_load_ps(panel + (static_cast<std::size_t>(c) * batch + b) * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_set1_ps(dy.at[b * dy.perB + (o0 + r) * dy.perO]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(d, xv[c], acc[r][c]);
    }
  }
  const Out sink = out;  // on the stack, out of the stores' reach (linear_rows_bf16.cpp's weightTile)
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sink(acc[r][c], o0 + r, k + c * kLanes, c == C - 1 ? last : __mmask16{0xffff});
}

// Rows [o0, o0 + R) by columns [k0, k1): tiles of C vectors (R * C <= 24 sums), then single
// vectors, the last one masked.
template <int R, class Out>
void weightTiles(const DyAt& dy, const float* xp, int batch, int o0, int k0, int k1, Out& out) {
  rows::columnTiles<std::min(4, 24 / R)>(k0, k1, [&](auto c, int k, __mmask16 last) {
    weightTile<R, c()>(dy, xp, batch, o0, k, last, out);
  });
}

// The same for `rows` (1..kMaxRows) rows.
template <int kMaxRows, class Out, int... I>
void weightTilesOf(int rows, const DyAt& dy, const float* xp, int batch, int o0, int k0, int k1, Out& out,
                   std::integer_sequence<int, I...>) {
  ((rows == I + 1 ? weightTiles<I + 1>(dy, xp, batch, o0, k0, k1, out) : void()), ...);
}
template <int kMaxRows, class Out>
void weightTilesOf(int rows, const DyAt& dy, const float* xp, int batch, int o0, int k0, int k1, Out& out) {
  weightTilesOf<kMaxRows>(rows, dy, xp, batch, o0, k0, k1, out, std::make_integer_sequence<int, kMaxRows>());
}

// ... or into a step of the weights it is the gradient of (Step: rows::StepOf), their rounding
// written into the mirror too (emulated bf16's, when there is one).
template <class Step>
struct IntoStep {
  Step step;
  float* rounded;
  int in;
  __attribute__((target("avx512f"))) void operator()(__m512 g, int o, int k, __mmask16 lanes) const {
    const std::size_t at = static_cast<std::size_t>(o) * in + k;
    const __m512 p = step(g, at, lanes);
    if (!rounded) return;
    // Past the cache, as the optimizer streams a large mirror: the next forward reads it only
    // after the rest of the step, and a store through the cache would first read the line.
    float* r = rounded + at;
    const __m512 bits = roundBf16(p);
    if (lanes == 0xffff && reinterpret_cast<std::uintptr_t>(r) % 64 == 0) _mm512_stream_ps(r, bits);
    else _mm512_mask_storeu_ps(r, lanes, bits);
  }
};

void weightGradPortable(float* dw, const float* dy, const float* x, int batch, int in, int out, bool overwrite) {
  for (int o = 0; o < out; ++o)
    for (int k = 0; k < in; ++k) {
      float acc = 0.f;
      for (int b = 0; b < batch; ++b)
        acc = std::fma(dy[static_cast<std::size_t>(b) * out + o], x[static_cast<std::size_t>(b) * in + k], acc);
      float& g = dw[static_cast<std::size_t>(o) * in + k];
      g = overwrite ? acc : g + acc;
    }
}

// The whole backward with the step (see the top): columns in the input gradient's blocks, rows
// in its groups of R, each group's block in pieces of kPiece columns, read by the input gradient
// and then updated by the weight gradient's tiles while in cache.
template <int V, class Into>
void backwardWithStep(float* dxT, const float* dyT, const float* xp, const float* wRead, int batch, int in, int out,
                      const Into& into) {
  constexpr int R = V == 4 ? 6 : 8;
  constexpr int kPiece = 192;  // a multiple of every tile's width (48, 64)
  const int block = 4608 / V;
  const DyAt dy{dyT, 1, static_cast<std::size_t>(V) * kLanes};
  for (int k0 = 0; k0 < in; k0 += block) {
    const int k1 = std::min(in, k0 + block);
    for (int o0 = 0; o0 < out; o0 += R) {
      const int rows = std::min(R, out - o0);
      for (int p0 = k0; p0 < k1; p0 += kPiece) {
        const int p1 = std::min(k1, p0 + kPiece);
        if (dxT) gradRowsKernel<V>(rows, std::make_index_sequence<R>())(dxT, dyT, wRead, in, o0, p0, p1);
        weightTilesOf<R>(rows, dy, xp, batch, o0, p0, p1, into);
      }
    }
  }
}

// wRead: the weights the input gradient reads (the values, or emulated bf16's rounded mirror).
template <int V>
void backwardWithStep(float* dxT, const float* dyT, const float* xp, const float* wRead, int batch, int in, int out,
                      const detail::FusedStep& s, std::size_t offset) {
  float* rounded = s.rounded ? s.rounded + offset : nullptr;
  rows::withStep(s, offset, [&](auto step) {
    backwardWithStep<V>(dxT, dyT, xp, wRead, batch, in, out, IntoStep<decltype(step)>{step, rounded, in});
  });
}

}  // namespace

bool& linearRowsPortableSlot() {
  static bool portable = false;
  return portable;
}

std::uint64_t& linearStepsFused() {
  static std::uint64_t count = 0;
  return count;
}

bool& fusesAdamInTiles() {
  // Adam's square root and two divisions a vector in the tiles' epilogue: AlexNet 64 through
  // the trainer ran 1.10x faster fused on an Intel Xeon (Emerald Rapids) and 0.87x on an AMD
  // EPYC (Zen 4), whose 512-bit divisions and square roots take two passes of its 256-bit units.
  static bool fuse = [] {
    __builtin_cpu_init();
    return !__builtin_cpu_is("amd");
  }();
  return fuse;
}

bool useLinearRows(int batch, int in, int out) {
  return cpuHasAvx512() && batch > 0 && batch <= kMaxBatch && static_cast<long long>(in) * out >= (1ll << 20);
}

void linearForwardRows(Device& dev, float* y, const float* x, const float* w, const float* bias, int batch, int in,
                       int out) {
  if (!cpuHasAvx512() || linearRowsPortableSlot()) return rowsPortable(y, x, w, bias, batch, in, out);
  const int v = (batch + kLanes - 1) / kLanes;
  float* xT = detail::scratch(dev, kXtSlot, static_cast<std::size_t>(in) * v * kLanes);  // 64-byte aligned
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
  float* dyT = detail::scratch(dev, kXtSlot, static_cast<std::size_t>(out) * width);  // 64-byte aligned
  float* dxT = detail::scratch(dev, kDxtSlot, static_cast<std::size_t>(in) * width);
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

namespace xs::engine {

void linearWeightGradientRows(Device& dev, float* dw, const float* dy, const float* x, int batch, int in, int out,
                              bool overwrite) {
  if (!cpuHasAvx512() || linearRowsPortableSlot()) return weightGradPortable(dw, dy, x, batch, in, out, overwrite);
  const float* xp = toPanels(dev, x, batch, in);
  const DyAt at{dy, static_cast<std::size_t>(out), 1};
  const rows::IntoGradient into{dw, in, overwrite};
  constexpr int R = 8;
  for (int o0 = 0; o0 < out; o0 += R) weightTilesOf<R>(std::min(R, out - o0), at, xp, batch, o0, 0, in, into);
}

bool linearBackwardWithStep(Device& dev, float* dx, const float* dy, const float* x, const float* w, int batch, int in,
                            int out, const detail::FusedStep& step, std::size_t offset) {
  if (!useLinearRows(batch, in, out) || linearRowsPortableSlot() || step.rule == detail::FusedStep::Rule::kNone ||
      step.bits ||  // a bits mirror is linearWeightStepBf16's to write
      ((step.rule == detail::FusedStep::Rule::kAdam || step.rule == detail::FusedStep::Rule::kAdamW) &&
       !fusesAdamInTiles()))
    return false;
  const int v = (batch + kLanes - 1) / kLanes, width = v * kLanes;
  float* dyT = detail::scratch(dev, kXtSlot, static_cast<std::size_t>(out) * width);  // 64-byte aligned
  toColumns(dev, dyT, dy, batch, out, width);
  float* dxT = nullptr;
  if (dx) {
    dxT = detail::scratch(dev, kDxtSlot, static_cast<std::size_t>(in) * width);
    std::fill(dxT, dxT + static_cast<std::size_t>(in) * width, 0.f);
  }
  const float* xp = toPanels(dev, x, batch, in);
  switch (v) {
    case 1: backwardWithStep<1>(dxT, dyT, xp, w, batch, in, out, step, offset); break;
    case 2: backwardWithStep<2>(dxT, dyT, xp, w, batch, in, out, step, offset); break;
    case 3: backwardWithStep<3>(dxT, dyT, xp, w, batch, in, out, step, offset); break;
    default: backwardWithStep<4>(dxT, dyT, xp, w, batch, in, out, step, offset); break;
  }
  if (step.rounded) _mm_sfence();  // the mirror's streamed stores before its next reader
  if (dx) fromColumns(dev, dx, dxT, batch, in, width);
  ++linearStepsFused();
  return true;
}

}  // namespace xs::engine

