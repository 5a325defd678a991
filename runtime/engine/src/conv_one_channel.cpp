// conv_one_channel.cpp: convolutions of one input channel into fewer than 16 channels-last
// output channels, stride 1 (LeNet-5's first layer, 1 -> 6). oneDNN vectorises such a layer over
// its output channels and fills 6 of 16 lanes (32 GFLOP/s, docs/engine.md). The sums, with xe
// the padded image whose every pixel is repeated oc times, and wt[t] tap t's weights repeated
// along an output row [ow, oc]:
//
//   y[oy][j] = b[j % oc] + sum over taps t = (ky, kx) of xe[oy + ky][j + kx * oc] * wt[t][j]
//   dw[o][t] = sum over j with j % oc == o of (sum over images and oy of dy[oy][j] * xe[oy + ky][j + kx * oc])
//
// The weight gradient and the portable forward take a row as the vector, so every load is
// contiguous and every lane works. The AVX-512 forward makes the same sums with 16 pixels of one
// channel as the vector instead: one load of the padded image per tap serves every channel
// (the row form's loads straddle cache lines: 0.7 multiply-adds a cycle), and the channels
// interleave into the row on the way out. (Aligned copies of xe per kx measured slower: 5x the
// expansion's writes, and the kernels then read L2 instead of L1.) Each sum runs in a fixed
// order with fused multiply-adds, the same in the AVX-512 kernels and the portable loops
// (tested bit for bit).
// Emulated bf16 rounds x and dy once per call, and w as it builds wt (or its rounded copy).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#include "conv_onednn.hpp"
#include "gemm.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxRow = 1024;  // (w + 2 pad) * oc, so ow * oc too: wt stays in L2
constexpr int kMaxTaps = 64;
// Scratch slots: the GEMM paths' (conv_gemm_nhwc.cpp and gemm()'s rounded copies), which do
// not run at the same time.
constexpr int kImageSlot = 0, kTapSlot = 1, kDySlot = 2, kRoundedXSlot = 4, kRoundedDySlot = 5, kSumSlot = 6,
              kPaddedSlot = 7;

// p rounded up to 64 bytes (scratch asked for one vector more).
float* aligned(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(p) + 63) & ~std::uintptr_t{63});
}

// The row geometry: J = ow * oc values per output row, padded to whole vectors (Jp); the padded
// image's rows (xp) of w + 2 pad pixels plus a vector of zeros; xe [h + 2 pad][xeRow], each row
// whole vectors holding (w + 2 pad) * oc values and then zeros, so a load past J + kx * oc
// reads zeros.
struct Rows {
  int oc, oh, ow, kh, kw, J, Jp, xpRow, xeRow, xeRows;
  explicit Rows(const ConvGeom& g)
      : oc(g.oc), oh(g.oh()), ow(g.ow()), kh(g.kh), kw(g.kw), J(ow * oc), Jp((J + kLanes - 1) / kLanes * kLanes),
        xpRow(g.w + 2 * g.pad + 2 * kLanes), xeRow(((g.w + 2 * g.pad) * oc + 2 * kLanes - 1) / kLanes * kLanes),
        xeRows(g.h + 2 * g.pad) {}
  int taps() const { return kh * kw; }
  std::size_t xeCount() const { return static_cast<std::size_t>(xeRows) * xeRow; }
  // Row `row` of xe from column kx's first value on.
  const float* xe(const float* base, int kx, int row) const {
    return base + static_cast<std::size_t>(row) * xeRow + kx * oc;
  }
};

float maybeRounded(float v, bool round) { return round ? roundToBf16(v) : v; }

// xe[row][j] = xp[row][j / oc], from the padded image's rows (zeros past them).
void expandRowsPortable(float* xe, const float* xp, const Rows& r) {
  for (int row = 0; row < r.xeRows; ++row)
    for (int j = 0; j < r.xeRow; ++j) xe[static_cast<std::size_t>(row) * r.xeRow + j] = xp[row * r.xpRow + j / r.oc];
}

// Where each vector of an xe row takes its pixels: lane l of vector v takes pixel
// first[v] + lane[v][l] = (16 v + l) / oc. Made once per call.
struct Expansion {
  alignas(64) int lane[kMaxRow / kLanes + 4][kLanes];
  int first[kMaxRow / kLanes + 4];
  explicit Expansion(const Rows& r) {
    for (int v = 0; v < r.xeRow / kLanes; ++v) {
      first[v] = v * kLanes / r.oc;
      for (int l = 0; l < kLanes; ++l) lane[v][l] = (v * kLanes + l) / r.oc - first[v];
    }
  }
};

// The same with one permute per vector.
__attribute__((target("avx512f"))) void expandRowsAvx512(float* xe, const float* xp, const Rows& r,
                                                          const Expansion& e) {
  const int nv = r.xeRow / kLanes;
  for (int row = 0; row < r.xeRows; ++row) {
    float* to = xe + static_cast<std::size_t>(row) * r.xeRow;
    const float* from = xp + static_cast<std::size_t>(row) * r.xpRow;
    for (int v = 0; v < nv; ++v)
      _mm512_store_ps(to + v * kLanes, _mm512_mask_permutexvar_ps(_mm512_setzero_ps(), 0xffff,
                                                                  _mm512_load_si512(e.lane[v]),
                                                                  _mm512_loadu_ps(from + e.first[v])));
  }
}

// Image x [h, w] -> xp, its padded rows.
void padImage(float* xp, const float* x, const ConvGeom& g, const Rows& r) {
  std::fill(xp, xp + static_cast<std::size_t>(r.xeRows) * r.xpRow, 0.f);
  for (int iy = 0; iy < g.h; ++iy)
    std::memcpy(xp + static_cast<std::size_t>(iy + g.pad) * r.xpRow + g.pad, x + static_cast<std::size_t>(iy) * g.w,
                g.w * sizeof(float));
}

// Image x [h, w] -> xe (through xp).
void expandImage(float* xe, float* xp, const float* x, const ConvGeom& g, const Rows& r, const Expansion* vec) {
  padImage(xp, x, g, r);
  if (vec) expandRowsAvx512(xe, xp, r, *vec);
  else expandRowsPortable(xe, xp, r);
}

// w [oc, 1, kh, kw] -> wt [taps, Jp]: wt[t][j] = w[j % oc][t], zeros past J. Also the bias row.
void expandWeights(float* wt, float* bias, const float* w, const float* b, const Rows& r, bool round) {
  for (int t = 0; t < r.taps(); ++t)
    for (int j = 0; j < r.Jp; ++j)
      wt[static_cast<std::size_t>(t) * r.Jp + j] = j < r.J ? maybeRounded(w[(j % r.oc) * r.taps() + t], round) : 0.f;
  for (int j = 0; j < r.Jp; ++j) bias[j] = j < r.J && b ? b[j % r.oc] : 0.f;
}

// ---- forward -------------------------------------------------------------------------------

void forwardRowsPortable(float* y, const float* xe, const float* wt, const float* bias, const Rows& r) {
  for (int oy = 0; oy < r.oh; ++oy)
    for (int j = 0; j < r.J; ++j) {
      float acc = bias[j];
      for (int ky = 0; ky < r.kh; ++ky)
        for (int kx = 0; kx < r.kw; ++kx)
          acc = std::fma(r.xe(xe, kx, oy + ky)[j], wt[static_cast<std::size_t>(ky * r.kw + kx) * r.Jp + j], acc);
      y[static_cast<std::size_t>(oy) * r.J + j] = acc;
    }
}

// The AVX-512 forward runs the same sums the other way round: a vector is 16 pixels of an
// output row, one per channel, from the padded image xp (each tap one load shared by every
// channel, each weight one broadcast shared by R rows), and the channels' vectors interleave
// into [ow, oc] on the way out.
// Interleaving oc vectors of 16 pixels: output vector v's lane l is pixel p = (16 v + l) / oc of
// channel ch = (16 v + l) % oc, taken from the pair of channels (ch - ch % 2, +1) by one
// two-source permute (index p, plus 16 for the odd channel), then blended in by pairs.
struct Interleave {
  alignas(64) int index[kLanes][kLanes];
  __mmask16 pair[kLanes][kLanes / 2];  // [v][ch / 2]: the lanes of v that channel pair takes
  explicit Interleave(int oc) {
    for (int v = 0; v < oc; ++v) {
      for (int j = 0; j < kLanes / 2; ++j) pair[v][j] = 0;
      for (int l = 0; l < kLanes; ++l) {
        const int q = v * kLanes + l, ch = q % oc;
        index[v][l] = q / oc + (ch % 2) * kLanes;
        pair[v][ch / 2] = static_cast<__mmask16>(pair[v][ch / 2] | (1u << l));
      }
    }
  }
};

// Rows oy0.. (R of them, those past oh computed on a clamped row and dropped) of pixel block
// [16 b, 16 b + 16) into y, OC channels.
template <int OC, int R>
__attribute__((target("avx512f"))) void forwardTile(float* y, const float* xp, const float* w, const float* b,
                                                    const Rows& r, const Interleave& il, int oy0, int blk) {
  __m512 acc[R][OC];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int o = 0; o < OC; ++o) acc[i][o] = _mm512_set1_ps(b ? b[o] : 0.f);
  const float* rows[R];
  for (int i = 0; i < R; ++i)
    rows[i] = xp + static_cast<std::size_t>(std::min(oy0 + i, r.oh - 1)) * r.xpRow + blk * kLanes;
  const int taps = r.taps();
  for (int ky = 0; ky < r.kh; ++ky)
    for (int kx = 0; kx < r.kw; ++kx) {
      __m512 xv[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) xv[i] = _mm512_loadu_ps(rows[i] + static_cast<std::size_t>(ky) * r.xpRow + kx);
#pragma GCC unroll 16
      for (int o = 0; o < OC; ++o) {
        const __m512 wv = _mm512_set1_ps(w[o * taps + ky * r.kw + kx]);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i][o] = _mm512_fmadd_ps(xv[i], wv, acc[i][o]);
      }
    }
  const int valid = std::min(kLanes, r.ow - blk * kLanes) * OC;  // values of this block's row
  for (int i = 0; i < R && oy0 + i < r.oh; ++i) {
    float* to = y + (static_cast<std::size_t>(oy0 + i) * r.ow + blk * kLanes) * OC;
    for (int v = 0; v < OC && v * kLanes < valid; ++v) {
      const __m512i index = _mm512_load_si512(il.index[v]);
      __m512 out = _mm512_permutex2var_ps(acc[i][0], index, acc[i][OC > 1 ? 1 : 0]);
#pragma GCC unroll 8
      for (int j = 1; 2 * j < OC; ++j)
        out = _mm512_mask_blend_ps(il.pair[v][j], out,
                                   _mm512_permutex2var_ps(acc[i][2 * j], index, acc[i][std::min(2 * j + 1, OC - 1)]));
      const int left = valid - v * kLanes;
      _mm512_mask_storeu_ps(to + v * kLanes, left >= kLanes ? __mmask16(0xffff) : __mmask16((1u << left) - 1), out);
    }
  }
}

// Rows of R at a time: R * OC accumulators, at most 24, and R loads of x.
template <int OC>
__attribute__((target("avx512f"))) void forwardImageAvx512(float* y, const float* xp, const float* w,
                                                             const float* b, const Rows& r, const Interleave& il) {
  constexpr int R = OC <= 6 ? 4 : OC <= 8 ? 3 : OC <= 12 ? 2 : 1;
  const int blocks = (r.ow + kLanes - 1) / kLanes;
  for (int oy = 0; oy < r.oh; oy += R)
    for (int blk = 0; blk < blocks; ++blk) forwardTile<OC, R>(y, xp, w, b, r, il, oy, blk);
}

using ForwardImage = void (*)(float*, const float*, const float*, const float*, const Rows&, const Interleave&);

template <std::size_t... I>
ForwardImage forwardImage(int oc, std::index_sequence<I...>) {
  static constexpr ForwardImage kTable[] = {&forwardImageAvx512<static_cast<int>(I) + 1>...};
  return kTable[oc - 1];
}

// ---- backward: weights and bias -------------------------------------------------------------

// sums [taps + 1, Jp] += per tap, dy rows * the xe rows they met; the last row sums dy (bias).
void weightSumsPortable(float* sums, const float* dy, const float* xe, const Rows& r) {
  float* bsum = sums + static_cast<std::size_t>(r.taps()) * r.Jp;
  for (int oy = 0; oy < r.oh; ++oy) {
    const float* d = dy + static_cast<std::size_t>(oy) * r.Jp;
    for (int t = 0; t < r.taps(); ++t) {
      const float* xr = r.xe(xe, t % r.kw, oy + t / r.kw);
      float* s = sums + static_cast<std::size_t>(t) * r.Jp;
      for (int j = 0; j < r.Jp; ++j) s[j] = std::fma(d[j], xr[j], s[j]);
    }
    for (int j = 0; j < r.Jp; ++j) bsum[j] += d[j];
  }
}

// One ky row of taps (KW of them) for NV vectors from v0, in registers over every oy.
template <int KW, int NV>
__attribute__((target("avx512f"))) void weightBlock(float* sums, const float* dy, const float* xe, const Rows& r,
                                                    int ky, int v0) {
  auto sum = [&](int kx, int i) { return sums + static_cast<std::size_t>(ky * r.kw + kx) * r.Jp + (v0 + i) * kLanes; };
  __m512 acc[KW][NV];
  for (int kx = 0; kx < KW; ++kx)
    for (int i = 0; i < NV; ++i) acc[kx][i] = _mm512_load_ps(sum(kx, i));
  for (int oy = 0; oy < r.oh; ++oy) {
    __m512 d[NV];
    for (int i = 0; i < NV; ++i) d[i] = _mm512_load_ps(dy + static_cast<std::size_t>(oy) * r.Jp + (v0 + i) * kLanes);
    for (int kx = 0; kx < KW; ++kx) {
      const float* row = r.xe(xe, kx, oy + ky) + v0 * kLanes;
      for (int i = 0; i < NV; ++i) acc[kx][i] = _mm512_fmadd_ps(d[i], _mm512_loadu_ps(row + i * kLanes), acc[kx][i]);
    }
  }
  for (int kx = 0; kx < KW; ++kx)
    for (int i = 0; i < NV; ++i) _mm512_store_ps(sum(kx, i), acc[kx][i]);
}

// Taps 3 or 5 wide: KW x 3 accumulators and 3 of dy fit the 32 registers.
template <int KW>
__attribute__((target("avx512f"))) void weightTapsAvx512(float* sums, const float* dy, const float* xe,
                                                          const Rows& r) {
  const int nv = r.Jp / kLanes;
  for (int ky = 0; ky < r.kh; ++ky) {
    int v = 0;
    for (; v + 3 <= nv; v += 3) weightBlock<KW, 3>(sums, dy, xe, r, ky, v);
    if (nv - v == 2) weightBlock<KW, 2>(sums, dy, xe, r, ky, v);
    if (nv - v == 1) weightBlock<KW, 1>(sums, dy, xe, r, ky, v);
  }
}

__attribute__((target("avx512f"))) void weightSumsAvx512(float* sums, const float* dy, const float* xe,
                                                          const Rows& r) {
  if (r.kw == 3) weightTapsAvx512<3>(sums, dy, xe, r);
  else weightTapsAvx512<5>(sums, dy, xe, r);
  float* bsum = sums + static_cast<std::size_t>(r.taps()) * r.Jp;
  for (int oy = 0; oy < r.oh; ++oy) {
    const float* d = dy + static_cast<std::size_t>(oy) * r.Jp;
    for (int j = 0; j < r.Jp; j += kLanes)
      _mm512_store_ps(bsum + j, _mm512_add_ps(_mm512_load_ps(bsum + j), _mm512_load_ps(d + j)));
  }
}

bool vectorKernels() { return cpuHasAvx512() && !oneChannelPortableSlot(); }


}  // namespace

bool& oneChannelPortableSlot() {
  static bool portable = false;
  return portable;
}

bool useOneChannelConv(const ConvGeom& g) {
  return g.c == 1 && g.stride == 1 && g.dstNhwc && g.oc < 16 && !g.dyBlocked && !g.dxBlocked && !g.dyBf16 &&
         g.oh() * g.ow() > 0 && static_cast<long>(g.w + 2 * g.pad) * g.oc <= kMaxRow && g.kh * g.kw <= kMaxTaps;
}

void conv2dForwardOneChannel(Device& dev, float* y, const float* x, const float* w, const float* b,
                             const ConvGeom& g) {
  const Rows r(g);
  const bool emulated = emulatesBf16(dev);
  const std::size_t xCount = static_cast<std::size_t>(g.n) * g.h * g.w;
  if (emulated && !g.xRounded) x = roundedScratch(dev, kRoundedXSlot, x, xCount);
  float* xp = dev.scratch(kPaddedSlot, static_cast<std::size_t>(r.xeRows) * r.xpRow);
  if (vectorKernels()) {
    if (emulated && !g.wRounded) w = roundedScratch(dev, kTapSlot, w, static_cast<std::size_t>(g.oc) * r.taps());
    const Interleave il(g.oc);
    const ForwardImage kernel = forwardImage(g.oc, std::make_index_sequence<kLanes - 1>());
    for (int n = 0; n < g.n; ++n) {
      padImage(xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r);
      kernel(y + static_cast<std::size_t>(n) * r.oh * r.J, xp, w, b, r, il);
    }
    return;
  }
  float* wt = aligned(dev.scratch(kTapSlot, static_cast<std::size_t>(r.taps() + 1) * r.Jp + kLanes));
  float* bias = wt + static_cast<std::size_t>(r.taps()) * r.Jp;
  expandWeights(wt, bias, w, b, r, emulated && !g.wRounded);
  float* xe = aligned(dev.scratch(kImageSlot, r.xeCount() + kLanes));
  for (int n = 0; n < g.n; ++n) {
    expandImage(xe, xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r, nullptr);
    forwardRowsPortable(y + static_cast<std::size_t>(n) * r.oh * r.J, xe, wt, bias, r);
  }
}

void conv2dBackwardOneChannel(Device& dev, float* dw, float* db, const float* dy, const float* x,
                              const ConvGeom& g) {
  const Rows r(g);
  const std::size_t sumCount = static_cast<std::size_t>(r.taps() + 1) * r.Jp;
  float* sums = dev.scratch(kSumSlot, sumCount + kLanes);
  sums = aligned(sums);
  std::fill(sums, sums + sumCount, 0.f);
  float* dyRows = dev.scratch(kDySlot, static_cast<std::size_t>(r.oh) * r.Jp + kLanes);
  dyRows = aligned(dyRows);
  float* xe = aligned(dev.scratch(kImageSlot, r.xeCount() + kLanes));
  float* xp = dev.scratch(kPaddedSlot, static_cast<std::size_t>(r.xeRows) * r.xpRow);
  const bool vec = vectorKernels() && (r.kw == 3 || r.kw == 5);
  const Expansion expansion(r);
  const bool emulated = emulatesBf16(dev);
  const std::size_t xCount = static_cast<std::size_t>(g.n) * g.h * g.w;
  const std::size_t dyCount = static_cast<std::size_t>(g.n) * r.oh * r.J;
  if (emulated && !g.xRounded) x = roundedScratch(dev, kRoundedXSlot, x, xCount);
  if (emulated && !g.dyRounded) dy = roundedScratch(dev, kRoundedDySlot, dy, dyCount);
  for (int n = 0; n < g.n; ++n) {
    // dy rows padded to whole vectors with zeros
    for (int oy = 0; oy < r.oh; ++oy) {
      float* to = dyRows + static_cast<std::size_t>(oy) * r.Jp;
      std::memcpy(to, dy + (static_cast<std::size_t>(n) * r.oh + oy) * r.J, r.J * sizeof(float));
      std::fill(to + r.J, to + r.Jp, 0.f);
    }
    expandImage(xe, xp, x + static_cast<std::size_t>(n) * g.h * g.w, g, r, vectorKernels() ? &expansion : nullptr);
    if (vec) weightSumsAvx512(sums, dyRows, xe, r);
    else weightSumsPortable(sums, dyRows, xe, r);
  }
  // Each output channel's lanes, in the order of j.
  for (int t = 0; t <= r.taps(); ++t) {
    if (t == r.taps() && !db) break;
    for (int o = 0; o < r.oc; ++o) {
      float s = 0.f;
      for (int j = o; j < r.J; j += r.oc) s += sums[static_cast<std::size_t>(t) * r.Jp + j];
      float& to = t < r.taps() ? dw[o * r.taps() + t] : db[o];
      to = g.overwriteGrads ? s : to + s;
    }
  }
}

}  // namespace xs::engine::detail
