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
// Native bf16 on vdpbf16ps (narrowBf16, oc even) takes the output channels in pairs (o, o + 1)
// and sums by columns: each (image, dx row iy, pixel ox) sums its t over every tap row ky that
// reaches iy and every pair, in registers, and adds it into dxp once (kh times fewer masked adds
// than a t a tap row); dy's channels-last bits read as 32-bit words, one a pixel and pair, are
// broadcast against wp [oc / 2][kh][vk * 16], each lane a pair of weights, each pair's o + 1
// first (vdpbf16ps adds its high half's product first). A group is the same row of R images.
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
#include "xspawn/error.hpp"

namespace xs::engine::detail {
namespace {

constexpr int kLanes = 16;
constexpr int kMaxAcc = 14;  // accumulators a pixel: two pixels' and a weight fit 32 registers
// The bf16 columns' groups: at most kMaxTargets targets and kMaxColumnAcc accumulators, about
// kColumnAcc where the batch allows (enough chains to hide vdpbf16ps's latency).
constexpr int kMaxTargets = 12, kMaxColumnAcc = 24, kColumnAcc = 12;

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

// Native bf16: t by columns. A target (n, iy, ox) is a row of an image's dxp and a pixel of dy;
// its t [vk * 16] sums over the rows of dy that reach dxp row iy, ky ascending (oy = iy - ky),
// and over the pairs q of output channels in order: dy's word (dy[oy][ox][2q], dy[oy][ox][2q +
// 1]) broadcast against wp[q][ky]'s vectors, each pair's o + 1 first. t is added into dxp once,
// where the fp32 kernels add one t a tap row: kh times fewer masked adds. A group's T targets are
// one row iy of R images and P pixels whose runs do not overlap: the same rows of dy reach them
// all, so they share each weight load and no step is spent on a row outside dy.
template <int VK, int T>
XS_DPBF16 inline void columnGroup(float* dxp, const std::uint32_t* const (&d)[T], const std::size_t (&to)[T],
                                 const std::uint32_t* wk, int steps, const Runs& r, const __mmask16* lanes) {
  const int oq = r.oc / 2;
  const std::size_t rowWords = static_cast<std::size_t>(r.ow) * oq, qStride = static_cast<std::size_t>(r.na) * kLanes;
  __m512 acc[VK][T];  // dpbf16Tile's [vectors][words]: wp's VK vectors, the T targets' words
#pragma GCC unroll 16
  for (int v = 0; v < VK; ++v)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[v][t] = _mm512_setzero_ps();
  for (int s = 0; s < steps; ++s, wk += r.vk * kLanes) {
    const std::uint32_t* ds[T];  // the targets' dy rows oy - s
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) ds[t] = d[t] - s * rowWords;
    for (int q = 0; q < oq; ++q) dpbf16Tile(acc, wk + q * qStride, kLanes, [&ds, q](int t) { return ds[t][q]; });
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
    for (int v = 0; v < VK; ++v) {
      float* at = dxp + to[t] + v * kLanes;
      _mm512_mask_storeu_ps(at, lanes[v], _mm512_add_ps(_mm512_maskz_loadu_ps(lanes[v], at), acc[v][t]));
    }
}

// columnGroup over groups: targets d0, to0, then each group's pixels one to the right of the
// last's; kyLo the first step's tap row.
template <int VK, int T>
XS_DPBF16 void columnPairs(float* dxp, const std::uint32_t* const* d0, const std::size_t* to0, int groups, int kyLo,
                           int steps, const std::uint32_t* wp, const Runs& r, const __mmask16* lanes) {
  if constexpr (T * VK <= kMaxColumnAcc) {
    for (int gi = 0; gi < groups; ++gi) {
      const std::uint32_t* d[T];
      std::size_t to[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        d[t] = d0[t] + static_cast<std::size_t>(gi) * (r.oc / 2);
        to[t] = to0[t] + static_cast<std::size_t>(gi) * r.c;
      }
      columnGroup<VK, T>(dxp, d, to, wp + static_cast<std::size_t>(kyLo) * r.vk * kLanes, steps, r, lanes);
    }
  }
}

using ColumnKernel = void (*)(float*, const std::uint32_t* const*, const std::size_t*, int, int, int,
                              const std::uint32_t*, const Runs&, const __mmask16*);

template <int VK, std::size_t... I>
constexpr std::array<ColumnKernel, kMaxTargets> columnKernels(std::index_sequence<I...>) {
  return {&columnPairs<VK, static_cast<int>(I) + 1>...};
}

template <std::size_t... V>
ColumnKernel columnKernel(int vk, int targets, std::index_sequence<V...>) {
  static constexpr std::array<ColumnKernel, kMaxTargets> kTable[] = {
      columnKernels<static_cast<int>(V) + 1>(std::make_index_sequence<kMaxTargets>())...};
  return kTable[vk - 1][targets - 1];
}

// The groups of targets: P pixels a row (gi, gi + step), whose runs do not overlap, in R images,
// for about kColumnAcc accumulators. The adds into a dxp row go group by group, pixel by pixel:
// the order test::narrowDataColumns follows. A group adds its targets pixel by pixel, each
// pixel's images in turn, so that two adds in a row touch other images: a masked store's whole 64
// bytes, lanes left out or not, hold up a load that overlaps them until the store is written.
struct Columns {
  int P, step, R;
  explicit Columns(const Runs& r) {
    const int most = std::min(kMaxTargets, std::max(1, kMaxColumnAcc / r.vk));
    P = r.ow >= 2 && (r.ow + 1) / 2 >= r.run / r.c && most >= 2 ? 2 : 1;  // runs kw pixels long
    step = (r.ow + P - 1) / P;
    R = std::max(1, std::min(most / P, kColumnAcc / (P * r.vk)));
  }
};

// Images n0.. (count of them, at most cols.R): dxp their padded dx, dxpImage apart; dy their
// words [oh][ow][oc / 2], dyImage words apart.
void imagesColumns(float* dxp, std::size_t dxpImage, const std::uint32_t* dy, std::size_t dyImage, int count,
                   const std::uint32_t* wp, const Runs& r, const Columns& cols) {
  const std::size_t rowWords = static_cast<std::size_t>(r.ow) * (r.oc / 2);
  __mmask16 lanes[kMaxAcc];
  for (int v = 0; v < r.vk; ++v) lanes[v] = firstLanes(r.valid(v));
  // Groups gi < full hold all P pixels; an odd last one (ow odd, P 2) holds one.
  const int full = r.ow - (cols.P - 1) * cols.step;
  for (int iy = 0; iy < r.dxpRows; ++iy) {
    const int kyLo = std::max(0, iy - (r.oh - 1)), kyHi = std::min(r.kh - 1, iy);
    for (int gi = 0; gi < cols.step; gi += full) {
      const std::uint32_t* d[kMaxTargets];
      std::size_t to[kMaxTargets];
      int t = 0;
      for (int p = 0; p < cols.P; ++p) {
        const int ox = gi + p * cols.step;
        if (ox >= r.ow) continue;
        const std::size_t dyAt = static_cast<std::size_t>(iy - kyLo) * rowWords + static_cast<std::size_t>(ox) * (r.oc / 2);
        const std::size_t dxAt = static_cast<std::size_t>(iy) * r.dxpRow + static_cast<std::size_t>(ox) * r.c;
        for (int i = 0; i < count; ++i) {
          d[t] = dy + i * dyImage + dyAt;
          to[t++] = i * dxpImage + dxAt;
        }
      }
      columnKernel(r.vk, t, std::make_index_sequence<kMaxAcc>())(dxp, d, to, gi < full ? full : cols.step - full, kyLo,
                                                                kyHi - kyLo + 1, wp, r, lanes);
    }
  }
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

void conv2dDataGradientNarrow(Device& dev, float* dx, const float* dy, const float* w, const ConvGeom& g,
                              const std::uint16_t* dyBits) {
  const Runs r(g);
  const std::size_t yImage = static_cast<std::size_t>(r.oh) * r.ow * r.oc, dyCount = g.n * yImage;
  const bool pairs = narrowBf16(dev) && r.oc % 2 == 0 && !narrowDataPortableSlot();
  float* wr = detail::scratch(dev, kWeightSlot, r.wrCount());  // 64-byte aligned, as every scratch slot
  auto* wp = reinterpret_cast<std::uint32_t*>(wr);
  XS_CHECK(!dyBits || pairs, ShapeError, "conv2d: dy as bf16 bits needs the native bf16 input gradient");
  const RowKernel kernel = pairs ? nullptr : rowKernel(r);
  if (pairs) {
    tapPairs(wp, w, g, r);
    if (!dyBits) {  // dy's bits
      auto* bits = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kDyBitsSlot, (dyCount + 1) / 2));
      if (g.dyRounded) bf16BitsOfRounded(dy, bits, dyCount);
      else toBf16Bits(dy, bits, dyCount);
      dyBits = bits;
    }
  } else {
    const bool emulated = bf16Products(dev);
    tapRows(wr, w, g, r, emulated && !g.wRounded);
    if (emulated && !g.dyRounded) dy = roundedScratch(dev, kRoundedDySlot, dy, dyCount);
  }
  const Columns cols(r);
  const int chunk = pairs ? cols.R : 1;  // images a pass: the columns' groups span R of them
  const std::size_t image = static_cast<std::size_t>(g.h) * g.w * g.c;
  const std::size_t padded = static_cast<std::size_t>(r.dxpRows) * r.dxpRow;
  float* dxp = g.pad ? detail::scratch(dev, kPaddedSlot, chunk * padded) : nullptr;
  for (int n0 = 0; n0 < g.n; n0 += chunk) {
    const int count = std::min(chunk, g.n - n0);
    float* to = g.pad ? dxp : dx + n0 * image;  // without padding dx is dxp
    std::fill(to, to + count * padded, 0.f);
    if (pairs) {
      imagesColumns(to, padded, reinterpret_cast<const std::uint32_t*>(dyBits + n0 * yImage), yImage / 2, count, wp, r,
                    cols);
    } else {
      for (int oy = 0; oy < r.oh; ++oy) {
        const float* dyRow = dy + n0 * yImage + static_cast<std::size_t>(oy) * r.ow * r.oc;
        kernel(to + static_cast<std::size_t>(oy) * r.dxpRow, dyRow, wr, r);
      }
    }
    if (g.pad)
      for (int i = 0; i < count; ++i)
        for (int iy = 0; iy < g.h; ++iy)
          std::memcpy(dx + (n0 + i) * image + static_cast<std::size_t>(iy) * g.w * g.c,
                      dxp + i * padded + static_cast<std::size_t>(iy + g.pad) * r.dxpRow + g.pad * g.c,
                      g.w * g.c * sizeof(float));
  }
}

}  // namespace xs::engine::detail
