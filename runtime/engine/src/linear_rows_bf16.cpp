// linear_rows_bf16.cpp: native bf16's forward and gradients of the linear layers with many
// weights at a small batch (AlexNet's classifier: 9216 -> 4096 at batch 32) where bf16 runs on
// AVX512-BF16's vdpbf16ps, not on AMX. vdpbf16ps adds the products of a pair of bf16 values to
// each fp32 lane (the high half's product first, as the instruction defines it), so every
// operand comes in pairs along its sum:
//
//   forward:         y[b][o] = bias[o] + sum over pairs (k, k+1), in order, of w[o][k] * x[b][k]
//                    (R output rows at once, each weight pair broadcast straight from the bits
//                    row against x's pairs [k / 2][batch] as V vectors: R * V sums)
//   input gradient:  dx[b][k] = sum over pairs (o, o+1), in order, of w[o][k] * dy[b][o]
//                    (w's rows packed 128 at a time, 16 strips of 32 columns at a time, two
//                    rows interleaved; 8 batch rows x 32 columns of sums, dy's pair broadcast)
//   weight gradient: dw[o][k] = sum over pairs (b, b+1), in order, of dy[b][o] * x[b][k]
//                    (tiles of R rows x C vectors of k in registers, dy's pair broadcast, x from
//                    panels of 16 columns, each [batch / 2][16 pairs] contiguous)
//
// Against oneDNN's bf16 matmul on AlexNet's fc1 (Zen 4, 2 MiB pages): forward 11.2 against 14.5
// ms, input gradient 16.3 against 19.3 ms (packing whole chunks then), weight gradient 14.8
// against 17.5 ms. Each sum runs from zero (or the bias), its bits independent of the tiling, so
// the same tiles make the gradient alone (linearBackward) and inside a step
// (linearBackwardStepped): with SGD inside backward they write 4 rows' gradient into a buffer
// in L2, which steps those rows' weights one row at a time and streams the new bits into the
// store's mirror for the next forward (weightSteps; Adam's square root and divisions there cost
// more than its own pass after the gradient). This file is built with -ffp-contract=off
// (update_rules.hpp): the update has the optimizer's bits.
#include <algorithm>
#include <array>
#include <cstdint>
#include <immintrin.h>
#include <utility>

#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"
#include "linear_rows_step.hpp"
#include "ops.hpp"

namespace xs::engine {
namespace {

using rows::kLanes;
// The weight gradient's tiles: 4 rows x 6 vectors (6 x 4 and 3 x 8 ran as fast; 2 x 12 and 8 x 3
// slower).
constexpr int kTileRows = 4;
// Scratch: x's pairs (forward), w's packed rows (input gradient) and the stepped rows' gradient
// (weightSteps) in rows::kXtSlot, dy's pairs in kDxtSlot and x's panels in kPanelsSlot (weight
// gradient).

std::uint32_t pairOf(std::uint16_t low, std::uint16_t high) { return low | static_cast<std::uint32_t>(high) << 16; }

// dy [batch][out] bits -> [out][pairs] pairs (dy[b][o], dy[b+1][o]): dy^T, zeros past the batch.
std::uint32_t* dyByBatch(Device& dev, const std::uint16_t* dy, int batch, int out, int pairs) {
  auto* p = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, rows::kDxtSlot, static_cast<std::size_t>(out) * pairs));
  transposeBits(reinterpret_cast<std::uint16_t*>(p), dy, batch, out, 2 * pairs);
  return p;
}

// x [batch][in] bits -> panels of 16 columns, each [pairs][16] pairs (x[b][k], x[b+1][k]), zeros
// past either end.
std::uint32_t* toPairPanels(Device& dev, const std::uint16_t* x, int batch, int in, int pairs) {
  const int panels = (in + kLanes - 1) / kLanes;
  auto* xp = reinterpret_cast<std::uint32_t*>(
      detail::scratch(dev, rows::kPanelsSlot, static_cast<std::size_t>(panels) * pairs * kLanes));  // 64-byte aligned
  for (int p = 0; p < panels; ++p)
    for (int j = 0; j < pairs; ++j) {
      const std::uint16_t* lo = x + static_cast<std::size_t>(2 * j) * in;
      const std::uint16_t* hi = 2 * j + 1 < batch ? lo + in : nullptr;
      std::uint32_t* to = xp + (static_cast<std::size_t>(p) * pairs + j) * kLanes;
      for (int l = 0; l < kLanes; ++l) {
        const int k = p * kLanes + l;
        to[l] = k < in ? pairOf(lo[k], hi ? hi[k] : std::uint16_t{0}) : 0u;
      }
    }
  return xp;
}

using Bh = __m512bh;

// x [batch][in] bits -> [in / 2][width] pairs over the batch's lanes (pairsByColumn).
std::uint32_t* xByPairs(Device& dev, const std::uint16_t* x, int batch, int in, int width) {
  auto* p = reinterpret_cast<std::uint32_t*>(
      detail::scratch(dev, rows::kXtSlot, static_cast<std::size_t>((in + 1) / 2) * width));
  pairsByColumn(p, x, batch, in, width);
  return p;
}

// Output rows o0.. (R of them; rows past `out` run on the last row and are dropped): every sum
// from the bias over pairs of k in order, the batch as V vectors of x's pairs.
template <int V, int R>
XS_DPBF16 void forwardRows(float* y, const std::uint32_t* xq, const std::uint16_t* w, const float* bias,
                           int batch, int in, int out, int o0) {
  __m512 acc[R][V];
  const std::uint16_t* row[R];
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r) {
    const int o = std::min(o0 + r, out - 1);
    row[r] = w + static_cast<std::size_t>(o) * in;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_set1_ps(bias ? bias[o] : 0.f);
  }
  // acc += the rows' pairs from k (their high halves zero past `in`) against x's pairs.
  auto pairs = [&](int k, bool last) XS_DPBF16 {
    __m512i xv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) xv[v] = _mm512_load_si512(xq + (static_cast<std::size_t>(k / 2) * V + v) * kLanes);
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r) {
      const __m512i wb = _mm512_set1_epi32(static_cast<int>(last ? row[r][k] : wordAt(row[r] + k)));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (Bh)wb, (Bh)xv[v]);
    }
  };
  int k = 0;
  for (; k + 1 < in; k += 2) pairs(k, false);
  if (k < in) pairs(k, true);
  rows::storeRows(y, acc, batch, out, o0);
}

template <int V>
void allForwardRows(float* y, const std::uint32_t* xq, const std::uint16_t* w, const float* bias, int batch, int in,
                    int out) {
  constexpr int R = 24 / V;
  for (int o0 = 0; o0 < out; o0 += R) forwardRows<V, R>(y, xq, w, bias, batch, in, out, o0);
}

// The input gradient's weights, kChunkRows rows at a time, kPackStrips strips of 32 columns at a
// time (128 KB, in L2 while every batch row reads them): each strip the chunk's pairs of rows
// (o, o+1) as two vectors (unpacked: k 0-3, 8-11, ... in the first, 4-7, 12-15, ... in the
// second), a missing last row as zeros. Each row is read in order, 1 KB of it at a time. (Read
// in place, strip by strip, the rows' stride maps them onto a few cache sets and each line comes
// alone from memory: 1.5x slower. All strips of a chunk at once, 2.4 MB on AlexNet's fc1, left
// L2 between the packing and the sums: with that and masked loads, fc1's and fc2's input
// gradients ran 1.28x and 1.17x slower on Zen 5.)
constexpr int kChunkRows = 128;
constexpr int kPackStrips = 16;

XS_DPBF16 void packStrips(__m512i* packed, const std::uint16_t* w, int in, int out, int o0, int pairs, int s0,
                          int s1) {
  for (int q = 0; q < pairs; ++q) {
    const int o = o0 + 2 * q;
    const std::uint16_t* row = w + static_cast<std::size_t>(o) * in;
    const bool second = o + 1 < out;
    for (int s = s0; s < s1; ++s) {
      const int n = std::min(32, in - 32 * s);
      // Whole strips by plain loads: masked ones from memory, even with every lane set, ran
      // 1.11-1.15x slower here on Zen 5 (rows::loadLanes).
      auto load = [n](const std::uint16_t* p) XS_DPBF16 {
        return n == 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << n) - 1), p);
      };
      const __m512i a = load(row + 32 * s), b = second ? load(row + in + 32 * s) : _mm512_setzero_si512();
      __m512i* to = packed + (static_cast<std::size_t>(s - s0) * pairs + q) * 2;
      _mm512_store_si512(to, _mm512_unpacklo_epi16(a, b));
      _mm512_store_si512(to + 1, _mm512_unpackhi_epi16(a, b));
    }
  }
}

// Input gradient: dx [batch][in]'s columns k0.. (32, those in `lanes`) for batch rows b0.. (R;
// rows past the batch run on the last one and are dropped), summed on from dx (from zero for the
// first chunk) over the chunk's pairs of rows from o0 on, in order, from their strip; dy's pair
// broadcast straight from its row.
template <int R>
XS_DPBF16 void gradColumns(float* dx, const std::uint16_t* dy, const __m512i* strip, int pairs, int batch,
                           int in, int out, int o0, int b0, int k0, __mmask32 lanes) {
  // The vectors' order (128-bit chunks of columns alternating between the two) and back.
  const __m512i toFirst = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i toSecond = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const __m512i fromFirst = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i fromSecond = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  const __mmask16 low = static_cast<__mmask16>(lanes), high = static_cast<__mmask16>(lanes >> 16);
  __m512 acc[R][2];
  const std::uint16_t* dyRow[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int b = std::min(b0 + r, batch - 1);
    dyRow[r] = dy + static_cast<std::size_t>(b) * out;
    const float* from = dx + static_cast<std::size_t>(b) * in + k0;
    const __m512 v0 = o0 ? _mm512_maskz_loadu_ps(low, from) : _mm512_setzero_ps();
    const __m512 v1 = o0 ? _mm512_maskz_loadu_ps(high, from + kLanes) : _mm512_setzero_ps();
    acc[r][0] = _mm512_permutex2var_ps(v0, toFirst, v1);
    acc[r][1] = _mm512_permutex2var_ps(v0, toSecond, v1);
  }
  auto pairOfRows = [&](int q, bool last) XS_DPBF16 {
    const __m512i lo = _mm512_load_si512(strip + 2 * q), hi = _mm512_load_si512(strip + 2 * q + 1);
    const int o = o0 + 2 * q;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i d = _mm512_set1_epi32(static_cast<int>(last ? dyRow[r][o] : wordAt(dyRow[r] + o)));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (Bh)lo, (Bh)d);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (Bh)hi, (Bh)d);
    }
  };
  const int whole = o0 + 2 * pairs <= out ? pairs : pairs - 1;
  for (int q = 0; q < whole; ++q) pairOfRows(q, false);
  if (whole < pairs) pairOfRows(whole, true);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (b0 + r >= batch) break;
    float* to = dx + static_cast<std::size_t>(b0 + r) * in + k0;
    _mm512_mask_storeu_ps(to, low, _mm512_permutex2var_ps(acc[r][0], fromFirst, acc[r][1]));
    _mm512_mask_storeu_ps(to + kLanes, high, _mm512_permutex2var_ps(acc[r][0], fromSecond, acc[r][1]));
  }
}

// The weight gradient's tile of rows o0.. (R) by columns k.. (C vectors, the last one's lanes
// `last`), each a sum from zero over the batch's pairs in order; out(value, o, k, lanes) takes it.
template <int R, int C, class Out>
XS_DPBF16 void weightTile(const std::uint32_t* dyB, const std::uint32_t* xp, int pairs, int o0, int k,
                          __mmask16 last, Out& out) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 12
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const std::uint32_t* panel = xp + static_cast<std::size_t>(k / kLanes) * pairs * kLanes;
  for (int j = 0; j < pairs; ++j) {
    __m512i d[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      d[r] = _mm512_set1_epi32(static_cast<int>(dyB[static_cast<std::size_t>(o0 + r) * pairs + j]));
#pragma GCC unroll 12
    for (int c = 0; c < C; ++c) {
      const __m512i xv = _mm512_load_si512(panel + (static_cast<std::size_t>(c) * pairs + j) * kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (Bh)d[r], (Bh)xv);
    }
  }
  // A copy on the stack whose address never escapes: the epilogue's stores (through intrinsics,
  // which may alias anything) would otherwise make the compiler reload out's pointers after each
  // one (1.09-1.17x on AlexNet's fc1 on Zen 5, when the step still ran in this epilogue).
  const Out sink = out;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 12
    for (int c = 0; c < C; ++c) sink(acc[r][c], o0 + r, k + c * kLanes, c == C - 1 ? last : __mmask16{0xffff});
}

// Rows [o0, o0 + R) by columns [k0, k1): tiles of C vectors, then single ones, the last masked.
template <int R, class Out>
void weightTiles(const std::uint32_t* dyB, const std::uint32_t* xp, int pairs, int o0, int k0, int k1, Out& out) {
  rows::columnTiles<24 / kTileRows>(k0, k1, [&](auto c, int k, __mmask16 last) {
    weightTile<R, c()>(dyB, xp, pairs, o0, k, last, out);
  });
}

// Rows [o0, o0 + rows), in tiles of kTileRows rows.
template <class Out, int... I>
void weightRows(int rows, const std::uint32_t* dyB, const std::uint32_t* xp, int pairs, int o0, int k0, int k1,
                Out& out, std::integer_sequence<int, I...>) {
  for (; rows >= kTileRows; rows -= kTileRows, o0 += kTileRows)
    weightTiles<kTileRows>(dyB, xp, pairs, o0, k0, k1, out);
  ((rows == I + 1 ? weightTiles<I + 1>(dyB, xp, pairs, o0, k0, k1, out) : void()), ...);
}
template <class Out>
void weightRows(int rows, const std::uint32_t* dyB, const std::uint32_t* xp, int pairs, int o0, int k0, int k1,
                Out& out) {
  weightRows(rows, dyB, xp, pairs, o0, k0, k1, out, std::make_integer_sequence<int, kTileRows - 1>());
}

// Where a weight gradient's vector goes when it steps the weights (Step: rows::StepOf; into the
// gradient: rows::IntoGradient): their new bits written into the store's mirror too, past the
// cache (the next forward reads them only after the rest of the step).
template <class Step>
struct IntoStepBits {
  Step step;
  std::uint16_t* bits;
  int in;
  XS_DPBF16 void operator()(__m512 g, int o, int k, __mmask16 lanes) const {
    const std::size_t at = static_cast<std::size_t>(o) * in + k;
    const __m512 p = step(g, at, lanes);
    if (!bits) return;
    const __m512i high = _mm512_maskz_srli_epi32(kAllLanes, _mm512_castps_si512(roundBf16(p)), 16);
    const __m256i b = _mm512_maskz_cvtepi32_epi16(kAllLanes, high);
    std::uint16_t* r = bits + at;
    if (lanes == 0xffff && reinterpret_cast<std::uintptr_t>(r) % 32 == 0)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(r), b);
    else _mm256_mask_storeu_epi16(r, lanes, b);
  }
  // Two vectors side by side (the second's lanes `lanes`): their bits streamed as one whole cache
  // line where they fill one (1.07x on AlexNet's fc1 against two halves).
  XS_DPBF16 void two(__m512 g0, __m512 g1, int o, int k, __mmask16 lanes) const {
    const std::size_t at = static_cast<std::size_t>(o) * in + k;
    std::uint16_t* r = bits ? bits + at : nullptr;
    if (!r || lanes != 0xffff || reinterpret_cast<std::uintptr_t>(r) % 64 != 0) {
      (*this)(g0, o, k, 0xffff);
      return (*this)(g1, o, k + kLanes, lanes);
    }
    const __m512 p0 = step(g0, at, 0xffff), p1 = step(g1, at + kLanes, 0xffff);
    // The upper halves of the rounded floats: 16-bit words 1, 3, ..., 31 of p0, then of p1.
    static constexpr auto kUpper = [] {
      std::array<std::uint16_t, 32> w{};
      for (int i = 0; i < 32; ++i) w[i] = static_cast<std::uint16_t>(2 * i + 1);
      return w;
    }();
    const __m512i upper = _mm512_loadu_si512(kUpper.data());
    const __m512i b = _mm512_permutex2var_epi16(_mm512_castps_si512(roundBf16(p0)), upper,
                                                _mm512_castps_si512(roundBf16(p1)));
    _mm512_stream_si512(reinterpret_cast<__m512i*>(r), b);
  }
};

// The weight gradient's pass: kTileRows rows at a time over all columns, into `into`.
template <class Into>
void weightGradient(Device& dev, const std::uint16_t* dy, const std::uint16_t* x, int batch, int in, int out,
                    Into& into) {
  const int pairs = (batch + 1) / 2;
  const std::uint32_t* dyB = dyByBatch(dev, dy, batch, out, pairs);
  const std::uint32_t* xp = toPairPanels(dev, x, batch, in, pairs);
  for (int o0 = 0; o0 < out; o0 += kTileRows)
    weightRows(std::min(kTileRows, out - o0), dyB, xp, pairs, o0, 0, in, into);
}

// With a step: each kTileRows rows' gradient into a buffer of theirs (in L2, from the same tiles,
// so the same sums), then the step over those rows one row at a time. Stepped from the tiles'
// registers, the update's streams (weights and momentum read and written, the bits written: 18
// bytes a weight) ran four rows abreast in pieces of 96 columns and did not overlap the tiles'
// sums; one row at a time they stream at the rate of a plain loop. AlexNet 64's bf16 step on
// Zen 5: 1.05x (1.03x in a slower phase of the VM's memory).
// The step of rows o0.. (`count` of them) from their gradient g [count][in], row after row.
template <class Into>
XS_DPBF16 void stepRows(const float* g, int count, int in, int o0, const Into& into) {
  const Into sink = into;  // on the stack, as in weightTile
  for (int r = 0; r < count; ++r) {
    const float* row = g + static_cast<std::size_t>(r) * in;
    int k = 0;
    for (; k + 2 * kLanes <= in; k += 2 * kLanes)
      sink.two(_mm512_loadu_ps(row + k), _mm512_loadu_ps(row + k + kLanes), o0 + r, k, 0xffff);
    for (; k < in; k += kLanes) {
      const __mmask16 lanes = static_cast<__mmask16>((1u << std::min(kLanes, in - k)) - 1);
      sink(rows::loadLanes(lanes, row + k), o0 + r, k, lanes);
    }
  }
}

template <class Into>
void weightSteps(Device& dev, const std::uint16_t* dy, const std::uint16_t* x, int batch, int in, int out,
                 const Into& into) {
  const int pairs = (batch + 1) / 2;
  const std::uint32_t* dyB = dyByBatch(dev, dy, batch, out, pairs);
  const std::uint32_t* xp = toPairPanels(dev, x, batch, in, pairs);
  float* g = detail::scratch(dev, rows::kXtSlot, static_cast<std::size_t>(kTileRows) * in);  // free in this pass
  for (int o0 = 0; o0 < out; o0 += kTileRows) {
    const int count = std::min(kTileRows, out - o0);
    // The rows' gradient as a gradient of rows 0..count-1 (dy^T from row o0 on) into g.
    rows::IntoGradient buffer{g, in, true};
    weightRows(count, dyB + static_cast<std::size_t>(o0) * pairs, xp, pairs, 0, 0, in, buffer);
    stepRows(g, count, in, o0, into);
  }
}

}  // namespace

void pairsByColumn(std::uint32_t* dst, const std::uint16_t* x, int batch, int in, int width) {
  for (int q = 0; q < (in + 1) / 2; ++q) {
    const int k = 2 * q;
    std::uint32_t* to = dst + static_cast<std::size_t>(q) * width;
    for (int b = 0; b < width; ++b) {
      const std::uint16_t* row = x + static_cast<std::size_t>(std::min(b, batch - 1)) * in;
      to[b] = b < batch ? pairOf(row[k], k + 1 < in ? row[k + 1] : std::uint16_t{0}) : 0u;
    }
  }
}

void transposeBits(std::uint16_t* dst, const std::uint16_t* src, int rows, int cols, int width) {
  for (int c = 0; c < cols; ++c) {
    std::uint16_t* to = dst + static_cast<std::size_t>(c) * width;
    for (int r = 0; r < width; ++r) to[r] = r < rows ? src[static_cast<std::size_t>(r) * cols + c] : std::uint16_t{0};
  }
}

void linearForwardBf16(Device& dev, float* y, const std::uint16_t* x, const std::uint16_t* w, const float* bias,
                       int batch, int in, int out) {
  const int v = (batch + kLanes - 1) / kLanes;
  const std::uint32_t* xq = xByPairs(dev, x, batch, in, v * kLanes);
  switch (v) {
    case 1: return allForwardRows<1>(y, xq, w, bias, batch, in, out);
    case 2: return allForwardRows<2>(y, xq, w, bias, batch, in, out);
    case 3: return allForwardRows<3>(y, xq, w, bias, batch, in, out);
    default: return allForwardRows<4>(y, xq, w, bias, batch, in, out);
  }
}

void linearDataGradientBf16(Device& dev, float* dx, const std::uint16_t* dy, const std::uint16_t* w, int batch,
                            int in, int out) {
  // kChunkRows rows and kPackStrips strips at a time, packed; then 32 columns at a time, 8 batch
  // rows at a time, the columns' strip (8 KB) in L1 for every batch row. Each dx sum still runs
  // over the chunks in order, and within a chunk over its pairs in order.
  constexpr int R = 8;
  const int strips = (in + 31) / 32;
  auto* packed = reinterpret_cast<__m512i*>(  // 64-byte aligned, as every scratch slot
      detail::scratch(dev, rows::kXtSlot, static_cast<std::size_t>(std::min(strips, kPackStrips)) * kChunkRows * kLanes));
  for (int o0 = 0; o0 < out; o0 += kChunkRows) {
    const int pairs = (std::min(kChunkRows, out - o0) + 1) / 2;
    for (int s0 = 0; s0 < strips; s0 += kPackStrips) {
      const int s1 = std::min(strips, s0 + kPackStrips);
      packStrips(packed, w, in, out, o0, pairs, s0, s1);
      for (int s = s0; s < s1; ++s) {
        const int n = std::min(32, in - 32 * s);
        const __mmask32 lanes = n == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
        const __m512i* strip = packed + static_cast<std::size_t>(s - s0) * pairs * 2;
        for (int b0 = 0; b0 < batch; b0 += R)
          gradColumns<R>(dx, dy, strip, pairs, batch, in, out, o0, b0, 32 * s, lanes);
      }
    }
  }
}

bool useLinearRowsBf16(int batch, int in, int out) {
  return useLinearRows(batch, in, out) && dpbf16Kernels() && !linearRowsPortableSlot();
}

bool fusesLinearStepBf16(int batch, int in, int out, const detail::FusedStep& step) {
  // SGD only: Adam's square root and divisions in the tiles' epilogue cost more than its own
  // pass after the gradient (fc1 on Zen 4: 44.7 ms against 15.1 + about 20).
  using Rule = detail::FusedStep::Rule;
  return useLinearRowsBf16(batch, in, out) &&
         (step.rule == Rule::kSgd || step.rule == Rule::kSgdMomentum || step.rule == Rule::kSgdNesterov);
}

void linearWeightGradientBf16(Device& dev, float* dw, const std::uint16_t* dy, const std::uint16_t* x, int batch,
                              int in, int out, bool overwrite) {
  rows::IntoGradient into{dw, in, overwrite};
  weightGradient(dev, dy, x, batch, in, out, into);
}

bool linearWeightStepBf16(Device& dev, const std::uint16_t* dy, const std::uint16_t* x, int batch, int in, int out,
                          const detail::FusedStep& step, std::size_t offset) {
  if (!fusesLinearStepBf16(batch, in, out, step)) return false;
  std::uint16_t* bits = step.bits ? step.bits + offset : nullptr;
  rows::withStep<rows::kSgdRules>(step, offset, [&](auto s) {
    IntoStepBits<decltype(s)> into{s, bits, in};
    weightSteps(dev, dy, x, batch, in, out, into);
  });
  if (bits) _mm_sfence();  // the mirror's streamed stores before its next reader
  ++linearStepsFused();
  return true;
}

}  // namespace xs::engine
