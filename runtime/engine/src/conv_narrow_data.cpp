// conv_narrow_data.cpp: the input gradient of a channels-last, stride-1 convolution into fewer
// than 16 input channels (LeNet-5's conv 2: 16 channels back into 6). oneDNN vectorises that
// pass over the input channels and fills 6 of 16 lanes (61 GFLOP/s, docs/engine.md). Here every
// output pixel (oy, ox) adds, for each tap row ky, one contiguous run of kw * c values:
//
//   dxp[oy + ky][(ox + kx) * c + ci] += t[ky][kx * c + ci]
//   t[ky][kx * c + ci] = sum over o of dy[oy][ox][o] * w[o][ci][ky][kx]
//
// with dxp the padded channels-last dx, where (kx, ci) flatten like a row's (ix, ci). So t is a
// row of a small GEMM: dy's oc values broadcast against wr [oc][kh][vk * 16] (each ky's kw * c
// weights padded to vk vectors), kh * vk accumulators a pixel, P pixels of a row at once sharing
// every weight load, then kh * vk masked adds into dxp. The P pixels of a group stand ceil(ow / P)
// apart, so their runs do not overlap when that is at least kw.
// Each t sums over o in order with fused multiply-adds from zero, and the pixels add into dxp
// row by row, group by group: the same order in the AVX-512 kernels and the portable loops
// (tested bit for bit). Emulated bf16 rounds dy once per call and w as it builds wr.
//
// Native bf16 on vdpbf16ps (narrowBf16, oc even) takes the output channels in pairs (o, o + 1):
// dy's channels-last bits read as 32-bit words, one a pixel and pair, are broadcast against
// wp [oc / 2][kh][vk * 16], each lane a pair of weights; t sums over the pairs in order, each
// pair's o + 1 first (vdpbf16ps adds its high half's product first).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "kernel_util.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxAcc = 14;  // accumulators a pixel: two pixels' and a weight fit 32 registers

// Pixels a group for na accumulators a pixel: two, or four when four pixels' accumulators fit.
constexpr int pixelsPerGroup(int na) { return na <= 7 ? 4 : 2; }
// Scratch slots: the one-channel convolution's and the GEMM paths', which do not run meanwhile.
constexpr int kWeightSlot = 1, kPaddedSlot = 2, kRoundedDySlot = 5, kDyBitsSlot = 3;

// The geometry: vk vectors per tap row (kw * c values, `run`), na = kh * vk accumulators per
// pixel; dxp rows of (w + 2 pad) * c values.
struct Runs {
  int c, oc, oh, ow, kh, run, vk, na, dxpRow, dxpRows;
  explicit Runs(const ConvGeom& g)
      : c(g.c), oc(g.oc), oh(g.oh()), ow(g.ow()), kh(g.kh), run(g.kw * g.c), vk((run + kLanes - 1) / kLanes),
        na(kh * vk), dxpRow((g.w + 2 * g.pad) * g.c), dxpRows(g.h + 2 * g.pad) {}
  std::size_t wrCount() const { return static_cast<std::size_t>(oc) * na * kLanes; }
  // Lanes of accumulator a that hold values of the run.
  int valid(int a) const { return std::min(kLanes, run - (a % vk) * kLanes); }
};

// w [oc, c, kh, kw] -> wr [oc][kh][vk * 16]: wr[o][ky][kx * c + ci] = w[o][ci][ky][kx], zeros past
// the run.
void tapRows(float* wr, const float* w, const ConvGeom& g, const Runs& r, bool round) {
  std::fill(wr, wr + r.wrCount(), 0.f);
  for (int o = 0; o < r.oc; ++o)
    for (int ci = 0; ci < r.c; ++ci)
      for (int ky = 0; ky < r.kh; ++ky)
        for (int kx = 0; kx < g.kw; ++kx) {
          const float v = w[((static_cast<std::size_t>(o) * r.c + ci) * r.kh + ky) * g.kw + kx];
          wr[(static_cast<std::size_t>(o) * r.kh + ky) * r.vk * kLanes + kx * r.c + ci] = round ? roundToBf16(v) : v;
        }
}

// Native bf16: w [oc, c, kh, kw] -> wp [oc / 2][kh][vk * 16] words: (w[2q][ci][ky][kx],
// w[2q + 1][ci][ky][kx]) at kx * c + ci, zeros past the run.
void tapPairs(std::uint32_t* wp, const float* w, const ConvGeom& g, const Runs& r) {
  std::fill(wp, wp + r.wrCount() / 2, 0u);
  auto at = [&](int o, int ci, int ky, int kx) {
    return toBf16Bits(w[((static_cast<std::size_t>(o) * r.c + ci) * r.kh + ky) * g.kw + kx]);
  };
  for (int o = 0; o < r.oc; o += 2)
    for (int ci = 0; ci < r.c; ++ci)
      for (int ky = 0; ky < r.kh; ++ky)
        for (int kx = 0; kx < g.kw; ++kx)
          wp[(static_cast<std::size_t>(o / 2) * r.kh + ky) * r.vk * kLanes + kx * r.c + ci] =
              at(o, ci, ky, kx) | static_cast<std::uint32_t>(at(o + 1, ci, ky, kx)) << 16;
}

// The pixels of group gi (-1 past the row's end), in the order they add into dxp.
template <int P>
std::array<int, P> group(const Runs& r, int gi) {
  const int step = (r.ow + P - 1) / P;
  std::array<int, P> px{};
  for (int k = 0; k < P; ++k) px[k] = gi + k * step < r.ow ? gi + k * step : -1;
  return px;
}

// One output row oy of an image: dy row [ow][oc] into the dxp rows from oy on.
template <int P>
void rowPortable(float* dxp, const float* dyRow, const float* wr, const Runs& r) {
  float t[kMaxAcc * kLanes];
  const int groups = (r.ow + P - 1) / P;
  for (int gi = 0; gi < groups; ++gi)
    for (int ox : group<P>(r, gi)) {
      if (ox < 0) continue;
      std::fill(t, t + r.na * kLanes, 0.f);
      for (int o = 0; o < r.oc; ++o) {
        const float d = dyRow[static_cast<std::size_t>(ox) * r.oc + o];
        const float* wo = wr + static_cast<std::size_t>(o) * r.na * kLanes;
        for (int l = 0; l < r.na * kLanes; ++l) t[l] = std::fma(d, wo[l], t[l]);
      }
      for (int a = 0; a < r.na; ++a) {
        float* to = dxp + static_cast<std::size_t>(a / r.vk) * r.dxpRow + ox * r.c + (a % r.vk) * kLanes;
        for (int l = 0; l < r.valid(a); ++l) to[l] += t[a * kLanes + l];
      }
    }
}

// Each accumulator's place in a pixel's runs and its lanes, as locals of the kernels: the stores
// into dxp may not make the compiler read r's fields again.
template <int NA>
struct Places {
  std::size_t at[NA];
  __mmask16 lanes[NA];
  explicit Places(const Runs& r) {
    for (int a = 0; a < NA; ++a) {
      at[a] = static_cast<std::size_t>(a / r.vk) * r.dxpRow + (a % r.vk) * kLanes;
      lanes[a] = firstLanes(r.valid(a));
    }
  }
};

// A group's P pixels' t (acc) added into dxp, pixel by pixel.
template <int NA, int P>
__attribute__((target("avx512f"), always_inline)) inline void addGroup(float* dxp, const __m512 (&acc)[P][NA],
                                                                       const std::array<int, P>& px,
                                                                       const Places<NA>& places, int c) {
#pragma GCC unroll 16
  for (int k = 0; k < P; ++k) {
    if (px[k] < 0) continue;
    float* base = dxp + static_cast<std::size_t>(px[k]) * c;
#pragma GCC unroll 16
    for (int a = 0; a < NA; ++a)
      _mm512_mask_storeu_ps(base + places.at[a], places.lanes[a],
                            _mm512_add_ps(_mm512_maskz_loadu_ps(places.lanes[a], base + places.at[a]), acc[k][a]));
  }
}

// The same, NA accumulators a pixel in registers over every o.
template <int NA, int P>
__attribute__((target("avx512f"))) void rowAvx512(float* dxp, const float* dyRow, const float* wr, const Runs& r) {
  const int ow = r.ow, oc = r.oc, c = r.c, groups = (ow + P - 1) / P;
  const Places<NA> places(r);
  for (int gi = 0; gi < groups; ++gi) {
    const std::array<int, P> px = group<P>(r, gi);
    const float* d[P];
    for (int k = 0; k < P; ++k) d[k] = dyRow + static_cast<std::size_t>(px[k] < 0 ? px[0] : px[k]) * oc;
    __m512 acc[P][NA];
#pragma GCC unroll 16
    for (int k = 0; k < P; ++k)
#pragma GCC unroll 16
      for (int a = 0; a < NA; ++a) acc[k][a] = _mm512_setzero_ps();
    for (int o = 0; o < oc; ++o) {
      __m512 b[P];
#pragma GCC unroll 16
      for (int k = 0; k < P; ++k) b[k] = _mm512_set1_ps(d[k][o]);
      const float* wo = wr + static_cast<std::size_t>(o) * NA * kLanes;
#pragma GCC unroll 16
      for (int a = 0; a < NA; ++a) {
        __m512 wv = _mm512_load_ps(wo + a * kLanes);
        asm("" : "+v"(wv));  // one load for the P multiply-adds: GCC would fold it into each
#pragma GCC unroll 16
        for (int k = 0; k < P; ++k) acc[k][a] = _mm512_fmadd_ps(b[k], wv, acc[k][a]);
      }
    }
    addGroup<NA, P>(dxp, acc, px, places, c);
  }
}

// Native bf16: the same over the pairs of o, dyRow the row's bits [ow][oc], read a word (two
// channels) at a time, and wp tapPairs' words.
template <int NA, int P>
XS_DPBF16 void rowPairs(float* dxp, const std::uint16_t* dyRow, const std::uint32_t* wp, const Runs& r) {
  const int ow = r.ow, oq = r.oc / 2, c = r.c, groups = (ow + P - 1) / P;
  const Places<NA> places(r);
  for (int gi = 0; gi < groups; ++gi) {
    const std::array<int, P> px = group<P>(r, gi);
    const std::uint16_t* d[P];
    for (int k = 0; k < P; ++k) d[k] = dyRow + static_cast<std::size_t>(px[k] < 0 ? px[0] : px[k]) * 2 * oq;
    __m512 acc[P][NA];
#pragma GCC unroll 16
    for (int k = 0; k < P; ++k)
#pragma GCC unroll 16
      for (int a = 0; a < NA; ++a) acc[k][a] = _mm512_setzero_ps();
    for (int q = 0; q < oq; ++q) {
      __m512i b[P];
#pragma GCC unroll 16
      for (int k = 0; k < P; ++k) b[k] = _mm512_set1_epi32(static_cast<int>(wordAt(d[k] + 2 * q)));
      const std::uint32_t* wq = wp + static_cast<std::size_t>(q) * NA * kLanes;
#pragma GCC unroll 16
      for (int a = 0; a < NA; ++a) {
        __m512i wv = _mm512_load_si512(wq + a * kLanes);
        asm("" : "+v"(wv));  // one load for the P pairs' products, as in rowAvx512
#pragma GCC unroll 16
        for (int k = 0; k < P; ++k) acc[k][a] = _mm512_dpbf16_ps(acc[k][a], (__m512bh)b[k], (__m512bh)wv);
      }
    }
    addGroup<NA, P>(dxp, acc, px, places, c);
  }
}

using PairRow = void (*)(float*, const std::uint16_t*, const std::uint32_t*, const Runs&);

template <std::size_t... I>
PairRow pairRowKernel(int na, std::index_sequence<I...>) {
  static constexpr PairRow kTable[] = {&rowPairs<static_cast<int>(I) + 1, pixelsPerGroup(static_cast<int>(I) + 1)>...};
  return kTable[na - 1];
}

using RowKernel = void (*)(float*, const float*, const float*, const Runs&);

template <int NA>
constexpr RowKernel avx512Kernel() {
  return &rowAvx512<NA, pixelsPerGroup(NA)>;
}

template <std::size_t... I>
RowKernel avx512Kernel(int na, std::index_sequence<I...>) {
  static constexpr RowKernel kTable[] = {avx512Kernel<static_cast<int>(I) + 1>()...};
  return kTable[na - 1];
}

RowKernel rowKernel(const Runs& r) {
  if (cpuHasAvx512() && !narrowDataPortableSlot()) return avx512Kernel(r.na, std::make_index_sequence<kMaxAcc>());
  return pixelsPerGroup(r.na) == 4 ? &rowPortable<4> : &rowPortable<2>;
}

}  // namespace

bool& narrowDataPortableSlot() {
  static bool portable = false;
  return portable;
}

bool useNarrowDataGradient(const ConvGeom& g) {
  const int vk = (g.kw * g.c + kLanes - 1) / kLanes;
  return g.c < 16 && g.stride == 1 && g.srcNhwc && g.dstNhwc && !g.dyBlocked && !g.dxBlocked && !g.dyBf16 &&
         g.oh() > 0 && g.ow() > 0 && g.kh * vk <= kMaxAcc;
}

void conv2dDataGradientNarrow(Device& dev, float* dx, const float* dy, const float* w, const ConvGeom& g) {
  const Runs r(g);
  const std::size_t dyCount = static_cast<std::size_t>(g.n) * r.oh * r.ow * r.oc;
  const bool pairs = narrowBf16(dev) && r.oc % 2 == 0 && !narrowDataPortableSlot();
  float* wr = detail::scratch(dev, kWeightSlot, r.wrCount());  // 64-byte aligned, as every scratch slot
  auto* wp = reinterpret_cast<std::uint32_t*>(wr);
  std::uint16_t* dyBits = nullptr;  // native bf16: dy's bits
  const RowKernel kernel = pairs ? nullptr : rowKernel(r);
  const PairRow pairKernelOf = pairs ? pairRowKernel(r.na, std::make_index_sequence<kMaxAcc>()) : nullptr;
  if (pairs) {
    tapPairs(wp, w, g, r);
    dyBits = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kDyBitsSlot, (dyCount + 1) / 2));
    if (g.dyRounded) bf16BitsOfRounded(dy, dyBits, dyCount);
    else toBf16Bits(dy, dyBits, dyCount);
  } else {
    const bool emulated = bf16Products(dev);
    tapRows(wr, w, g, r, emulated && !g.wRounded);
    if (emulated && !g.dyRounded) dy = roundedScratch(dev, kRoundedDySlot, dy, dyCount);
  }
  const std::size_t image = static_cast<std::size_t>(g.h) * g.w * g.c;
  const std::size_t padded = static_cast<std::size_t>(r.dxpRows) * r.dxpRow;
  float* dxp = g.pad ? detail::scratch(dev, kPaddedSlot, padded) : nullptr;
  for (int n = 0; n < g.n; ++n) {
    float* to = g.pad ? dxp : dx + n * image;  // without padding dx is dxp
    std::fill(to, to + padded, 0.f);
    for (int oy = 0; oy < r.oh; ++oy) {
      const std::size_t row = (static_cast<std::size_t>(n) * r.oh + oy) * r.ow * r.oc;
      float* into = to + static_cast<std::size_t>(oy) * r.dxpRow;
      if (pairs) pairKernelOf(into, dyBits + row, wp, r);
      else kernel(into, dy + row, wr, r);
    }
    if (g.pad)
      for (int iy = 0; iy < g.h; ++iy)
        std::memcpy(dx + n * image + static_cast<std::size_t>(iy) * g.w * g.c,
                    dxp + static_cast<std::size_t>(iy + g.pad) * r.dxpRow + g.pad * g.c, g.w * g.c * sizeof(float));
  }
}

}  // namespace xs::engine::detail
