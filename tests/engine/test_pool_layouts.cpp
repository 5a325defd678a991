// test_pool_layouts.cpp: the channels-last max-pool kernels give the same bits as the NCHW ones
// (PyTorch's scan order and tie rule): values, picked pixels (window codes against plane indices)
// and gradients, with and without the fused ReLU (and its bf16 rounding), over window shapes that
// overlap, pad, leave pixels uncovered and split channel blocks; and the same gradients when dy
// or dx are in channel blocks of 16 (nChw16c), or x (the forward's input); the bf16-rounded
// gradient and ReLU are the rounded ones; and each kernel refuses the other's geometry. A bf16
// convolution's output and input gradient in channel blocks are its channels-last values, and
// an fp32 one's blocked passes take dy channels last with dx in blocks.
// Every average-pool path (layouts, from planes into channels last, fused ReLU and rounding)
// against the separate passes; the adaptive average pool against its formula. The layout
// transposes (channels first <-> last) against their index formula, with a guard past the end.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "ops.hpp"

using namespace xs::engine;
using xs::ShapeError;
using xs::UsageError;

namespace {

// Small integers, so that windows hold ties; a NaN now and then.
std::vector<float> ties(std::size_t n, unsigned seed, bool nan) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int>(s >> 28) - 8);
  }
  if (nan) v[n / 3] = v[n / 2] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// [n, hw, c] <-> [n, c/16, hw, 16]
std::vector<float> toBlocked(const std::vector<float>& v, int n, int c, int hw) {
  std::vector<float> b(v.size());
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < hw; ++p)
      for (int j = 0; j < c; ++j)
        b[((static_cast<std::size_t>(i) * (c / 16) + j / 16) * hw + p) * 16 + j % 16] =
            v[(static_cast<std::size_t>(i) * hw + p) * c + j];
  return b;
}
std::vector<float> fromBlocked(const std::vector<float>& b, int n, int c, int hw) {
  std::vector<float> v(b.size());
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < hw; ++p)
      for (int j = 0; j < c; ++j)
        v[(static_cast<std::size_t>(i) * hw + p) * c + j] =
            b[((static_cast<std::size_t>(i) * (c / 16) + j / 16) * hw + p) * 16 + j % 16];
  return v;
}

// The NCHW kernel's plane indices as channels-last window codes [n, c, oh, ow]: the offset in
// the k x k window from its unclipped origin, with the pass bit where dy goes through.
std::vector<std::uint16_t> codesOf(const std::vector<std::int32_t>& am, const std::vector<float>& y,
                                   const PoolGeom& g, bool relu) {
  std::vector<std::uint16_t> c(am.size());
  const int oh = g.oh(), ow = g.ow();
  for (std::size_t i = 0; i < am.size(); ++i) {
    const int oy = static_cast<int>(i / ow % oh), ox = static_cast<int>(i % ow);
    const int iy = am[i] / g.w, ix = am[i] % g.w;
    const int offset = (iy - (oy * g.stride - g.pad)) * g.k + (ix - (ox * g.stride - g.pad));
    c[i] = static_cast<std::uint16_t>(offset | (!relu || y[i] > 0.f ? kPoolPasses : 0));
  }
  return c;
}

// [n, hw, c] -> [n, c, hw]
template <class T>
std::vector<T> transposed(const std::vector<T>& v, int n, int c, int hw) {
  std::vector<T> t(v.size());
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < hw; ++p)
      for (int j = 0; j < c; ++j)
        t[(static_cast<std::size_t>(i) * c + j) * hw + p] = v[(static_cast<std::size_t>(i) * hw + p) * c + j];
  return t;
}

struct Case {
  int c, h, w, k, stride, pad;
};

}  // namespace

TEST(PoolLayouts, ChannelsLastMatchesNchwBitForBit) {
  const Case cases[] = {
      {32, 26, 26, 2, 2, 0},  // the convnet's pools
      {64, 11, 11, 2, 1, 0},  // overlapping
      {128, 8, 8, 2, 2, 0},
      {35, 9, 7, 3, 2, 1},    // padded; 2 blocks of 16 and a tail of 3
      {3, 7, 8, 3, 3, 0},     // the last row and column in no window
      {16, 5, 5, 3, 1, 1},
      {17, 13, 13, 3, 2, 0},  // AlexNet's shape
      {32, 9, 7, 3, 2, 1},    // padded, whole blocks (x in channel blocks too)
      {64, 13, 13, 3, 2, 0},
      // 2x2 windows take their own kernels: edges in 1 or 2 windows, uncovered rows and
      // columns, channels not in blocks of 16
      {48, 7, 9, 2, 2, 0},
      {20, 6, 7, 2, 2, 0},
      {16, 5, 5, 2, 1, 0},
      {3, 4, 6, 2, 1, 0},
      {32, 2, 5, 2, 1, 0},
  };
  for (const Case& cs : cases)
    for (bool nan : {false, true})
      for (bool fused : {false, true}) {
        PoolGeom g{2, cs.c, cs.h, cs.w, cs.k, cs.stride, cs.pad};
        const int hw = g.h * g.w, ohw = g.oh() * g.ow();
        const std::size_t nx = static_cast<std::size_t>(g.n) * g.c * hw, ny = static_cast<std::size_t>(g.n) * g.c * ohw;
        auto x = ties(nx, static_cast<unsigned>(cs.c + cs.k), nan);
        // Gradients whose sums round (so that overlapping windows must add in the same order),
        // an infinity and a NaN among them.
        auto dy = ties(ny, static_cast<unsigned>(cs.h), false);
        for (std::size_t i = 0; i < ny; ++i) dy[i] = dy[i] * 1.2345678f + 1e-3f * static_cast<float>(i % 7);
        for (std::size_t i = 0; i < ny; i += 5) dy[i] = -0.f;  // a scatter into zeros makes these +0
        dy[ny / 3] = std::numeric_limits<float>::infinity();
        dy[ny / 2 + 1] = std::numeric_limits<float>::quiet_NaN();
        // NCHW reference
        std::vector<float> y(ny), dx(nx);
        std::vector<std::int32_t> am(ny);
        maxPool2dForward(y.data(), am.data(), x.data(), g);
        if (fused) reluForward(y.data(), y.data(), ny);
        maxPool2dBackward(dx.data(), dy.data(), am.data(), g, fused ? y.data() : nullptr);
        // channels last, the fused ReLU in the forward's epilogue
        PoolGeom gl = g;
        gl.nhwc = true;
        std::vector<float> xl(nx), dyl(ny), yl(ny), dxl(nx, 7.f), back(nx), backY(ny);
        std::vector<std::uint16_t> code(ny);
        nchwToNhwc(xl.data(), x.data(), g.n, g.c, hw);
        nchwToNhwc(dyl.data(), dy.data(), g.n, g.c, ohw);
        maxPoolNhwcForward(yl.data(), code.data(), xl.data(), gl, fused ? PoolEpilogue::kRelu : PoolEpilogue::kNone);
        maxPoolNhwcBackward(dxl.data(), dyl.data(), code.data(), gl);
        nhwcToNchw(backY.data(), yl.data(), g.n, g.c, ohw);
        nhwcToNchw(back.data(), dxl.data(), g.n, g.c, hw);
        const std::string what = "c" + std::to_string(cs.c) + " " + std::to_string(cs.h) + "x" + std::to_string(cs.w) +
                                 " k" + std::to_string(cs.k) + " s" + std::to_string(cs.stride) + " p" +
                                 std::to_string(cs.pad) + (nan ? " nan" : "") + (fused ? " relu" : "");
        EXPECT_TRUE(sameBits(y, backY)) << what << ": pooled values";
        EXPECT_EQ(codesOf(am, y, g, fused), transposed(code, g.n, g.c, ohw)) << what << ": picked pixels";
        EXPECT_TRUE(sameBits(dx, back)) << what << ": gradient";
        if (fused) {  // rounded in the same pass: the rounded values, the same codes
          std::vector<float> yr(ny), want(ny);
          std::vector<std::uint16_t> coder(ny);
          maxPoolNhwcForward(yr.data(), coder.data(), xl.data(), gl, PoolEpilogue::kReluRoundedToBf16);
          roundToBf16(yl.data(), want.data(), ny);
          EXPECT_TRUE(sameBits(want, yr)) << what << ": rounded pooled values";
          EXPECT_EQ(code, coder) << what << ": rounded codes";
        }
        // Gradients in channel blocks of 16 (what the Winograd convolutions read and write), each
        // side alone and both: the same bits once converted back.
        if (g.c % 16 != 0) continue;
        // x in channel blocks (a bf16 convolution's output as its primitive writes it): the
        // same pooled values and codes, with each epilogue (2x2 windows: by the AVX-512 kernel
        // where the CPU has AVX-512 BW).
        for (PoolEpilogue e : {PoolEpilogue::kNone, PoolEpilogue::kRelu, PoolEpilogue::kReluRoundedToBf16}) {
          PoolGeom gx = gl;
          gx.xBlocked = true;
          std::vector<float> want(ny), got(ny, 7.f);
          std::vector<std::uint16_t> wantCode(ny), gotCode(ny, 7);
          maxPoolNhwcForward(want.data(), wantCode.data(), xl.data(), gl, e);
          maxPoolNhwcForward(got.data(), gotCode.data(), toBlocked(xl, g.n, g.c, hw).data(), gx, e);
          EXPECT_TRUE(sameBits(want, got)) << what << ": pooled values from blocked x, epilogue " << int(e);
          EXPECT_EQ(wantCode, gotCode) << what << ": codes from blocked x, epilogue " << int(e);
        }
        for (int sides = 1; sides <= 3; ++sides) {
          PoolGeom gb = gl;
          gb.dyBlocked = sides & 1;
          gb.dxBlocked = sides & 2;
          std::vector<float> dyb = gb.dyBlocked ? toBlocked(dyl, g.n, g.c, ohw) : dyl, dxb(nx, 7.f);
          maxPoolNhwcBackward(dxb.data(), dyb.data(), code.data(), gb);
          if (gb.dxBlocked) dxb = fromBlocked(dxb, g.n, g.c, hw);
          EXPECT_TRUE(sameBits(dxl, dxb)) << what << ": gradient with blocked " << (sides == 1 ? "dy" : sides == 2 ? "dx" : "dy and dx");
        }
      }
}

TEST(PoolLayouts, BlockedGradientsAndInputsNeedChannelsLastAndWholeBlocks) {
  PoolGeom g{1, 24, 4, 4, 2, 2, 0};
  g.nhwc = true;
  g.dxBlocked = true;
  std::vector<float> dy(24 * 4), dx(24 * 16), y(24 * 4);
  std::vector<std::uint16_t> code(24 * 4, 0);
  std::vector<std::int32_t> am(24 * 4, 0);
  EXPECT_THROW(maxPoolNhwcBackward(dx.data(), dy.data(), code.data(), g), ShapeError);
  g.dxBlocked = false;
  g.xBlocked = true;  // x in blocks of 16 channels: 24 is not whole blocks
  EXPECT_THROW(maxPoolNhwcForward(y.data(), code.data(), dx.data(), g, PoolEpilogue::kNone), ShapeError);
  g.xBlocked = false;
  g.dxBlocked = true;
  g.c = 16;
  g.nhwc = false;
  EXPECT_THROW(maxPool2dBackward(dx.data(), dy.data(), am.data(), g), ShapeError);
}

TEST(PoolLayouts, EachKernelRefusesTheOtherLayout) {
  PoolGeom g{1, 16, 4, 4, 2, 2, 0};
  std::vector<float> x(16 * 16), y(16 * 4);
  std::vector<std::uint16_t> code(16 * 4);
  std::vector<std::int32_t> am(16 * 4);
  EXPECT_THROW(maxPoolNhwcForward(y.data(), code.data(), x.data(), g, PoolEpilogue::kNone), ShapeError);
  EXPECT_THROW(maxPoolNhwcBackward(x.data(), y.data(), code.data(), g), ShapeError);
  g.nhwc = true;
  EXPECT_THROW(maxPool2dForward(y.data(), am.data(), x.data(), g), ShapeError);
  EXPECT_THROW(maxPool2dBackward(x.data(), y.data(), am.data(), g), ShapeError);
  g.nhwc = false;
  g.xBlocked = true;  // x in channel blocks: the channels-last max-pool's only
  EXPECT_THROW(maxPool2dForward(y.data(), am.data(), x.data(), g), ShapeError);
  EXPECT_THROW(avgPool2dForward(y.data(), x.data(), g, {}), ShapeError);
  g.nhwc = true;
  g.xBlocked = false;
  // A window whose offsets would not fit a code: the layer pools it in NCHW instead.
  PoolGeom wide{1, 1, kMaxNhwcPoolWindow + 1, kMaxNhwcPoolWindow + 1, kMaxNhwcPoolWindow + 1, 1, 0};
  wide.nhwc = true;
  std::vector<float> big(static_cast<std::size_t>(wide.h) * wide.w);
  try {
    maxPoolNhwcForward(y.data(), code.data(), big.data(), wide, PoolEpilogue::kNone);
    ADD_FAILURE() << "a window of " << wide.k << " was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("pool it in NCHW"), std::string::npos) << e.what();
  }
}

TEST(PoolLayouts, RoundedGradientIsTheRoundedGradient) {
  // dxRounded (emulated bf16, the convolution before rounds dx): each value is the rounding of
  // the unrounded kernel's, in both dx layouts, with and without the fused ReLU.
  const Case cases[] = {{32, 26, 26, 2, 2, 0}, {128, 8, 8, 2, 2, 0}, {16, 5, 7, 2, 2, 0}, {48, 7, 9, 2, 2, 0},
                        {20, 6, 7, 2, 2, 0},  {35, 9, 9, 3, 3, 0}};
  for (const Case& cs : cases)
    for (bool fused : {false, true})
      for (bool blocked : {false, true}) {
        if (blocked && cs.c % 16 != 0) continue;
        PoolGeom g{2, cs.c, cs.h, cs.w, cs.k, cs.stride, cs.pad};
        g.nhwc = true;
        const std::size_t nx = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
        const std::size_t ny = static_cast<std::size_t>(g.n) * g.c * g.oh() * g.ow();
        auto x = ties(nx, static_cast<unsigned>(cs.c), false), dy = ties(ny, 3, false);
        for (std::size_t i = 0; i < ny; ++i) dy[i] = dy[i] * 1.2345678f + 1e-3f * static_cast<float>(i % 7);
        std::vector<float> y(ny), dx(nx), dxr(nx, 7.f), want(nx);
        std::vector<std::uint16_t> code(ny);
        maxPoolNhwcForward(y.data(), code.data(), x.data(), g, fused ? PoolEpilogue::kRelu : PoolEpilogue::kNone);
        g.dxBlocked = blocked;
        maxPoolNhwcBackward(dx.data(), dy.data(), code.data(), g);
        roundToBf16(dx.data(), want.data(), nx);
        g.dxRounded = true;
        maxPoolNhwcBackward(dxr.data(), dy.data(), code.data(), g);
        EXPECT_TRUE(sameBits(want, dxr)) << "c" << cs.c << " " << cs.h << "x" << cs.w << (fused ? " relu" : "")
                                         << (blocked ? " blocked" : "");
      }
}

TEST(PoolLayouts, RoundedGradientNeedsTilingWindows) {
  PoolGeom g{1, 16, 11, 11, 2, 1, 0};  // overlapping windows add into dx: no rounding in place
  g.nhwc = true;
  g.dxRounded = true;
  std::vector<float> dy(16 * 100), dx(16 * 121);
  std::vector<std::uint16_t> code(16 * 100, 0);
  EXPECT_THROW(maxPoolNhwcBackward(dx.data(), dy.data(), code.data(), g), ShapeError);
}

TEST(PoolLayouts, ReluRoundedIsTheRoundedRelu) {
  auto x = ties(4099, 9, true);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] * 1.0123456f + 1e-4f * static_cast<float>(i % 13);
  x[5] = -0.f;
  x[6] = std::numeric_limits<float>::denorm_min();
  std::vector<float> y(x.size()), want(x.size());
  reluForward(want.data(), x.data(), x.size());
  roundToBf16(want.data(), want.data(), want.size());
  reluRoundedToBf16(y.data(), x.data(), x.size());
  EXPECT_TRUE(sameBits(want, y));
}

TEST(PoolLayouts, ReluBackwardRoundedIsTheRoundedGradient) {
  auto y = ties(4099, 4, true), dy = ties(4099, 5, false);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = dy[i] * 1.0123456f + 1e-4f * static_cast<float>(i % 11);
  std::vector<float> dx(y.size()), want(y.size());
  reluBackward(want.data(), dy.data(), y.data(), y.size());
  roundToBf16(want.data(), want.data(), want.size());
  reluBackwardRoundedToBf16(dx.data(), dy.data(), y.data(), y.size());
  EXPECT_TRUE(sameBits(want, dx));
}

// The channels-last average pool sums every window in the NCHW kernel's order: the same bits
// (values with long fractions, so that another order would round differently), padded and
// overlapping windows included; LeNet-5's pools first.
// The separate passes the average pool fuses: ReLU, pool, rounding of y; and of the gradient,
// the pool's backward, the ReLU's (its mask from relu(x)), rounding. NCHW.
struct SeparateAvg {
  std::vector<float> y, dx;
  SeparateAvg(const std::vector<float>& x, const std::vector<float>& dy, const PoolGeom& g, AvgPoolFusion f,
              bool roundDx)
      : y(dy.size()), dx(x.size()) {
    std::vector<float> rx(x), dPool(x.size());
    if (f.relu) reluForward(rx.data(), x.data(), x.size());
    avgPool2dForward(y.data(), rx.data(), g);
    if (f.roundY) roundToBf16(y.data(), y.data(), y.size());
    PoolGeom plain = g;  // the pool's own backward, unrounded
    plain.dxRounded = false;
    avgPool2dBackward(dPool.data(), dy.data(), plain);
    if (f.relu && roundDx) reluBackwardRoundedToBf16(dx.data(), dPool.data(), rx.data(), x.size());
    else if (f.relu) reluBackward(dx.data(), dPool.data(), rx.data(), x.size());
    else if (roundDx) roundToBf16(dPool.data(), dx.data(), x.size());
    else dx = dPool;
  }
};

// Every average-pool path against the separate NCHW passes, bit for bit: NCHW and channels last
// (AVX-512 where the CPU has it, and the portable loops), with and without the fused ReLU and
// the bf16 rounding of y and of dx, over LeNet-5's shapes, padded and overlapping windows, a
// channel count past one vector and pixels no window covers; values whose sums round
// differently in another order, negatives, -0 and a NaN with a payload.
TEST(PoolLayouts, EveryAveragePoolPathMatchesTheSeparatePassesBitForBit) {
  // {4, 6, 5, 2, 1, 0} and {3, 5, 5, 2, 2, 1} divide by 4 (a power of two: a multiply) on windows
  // that overlap (stride 1) and on windows clipped by the padding (which the divisor counts). The
  // last three pack several windows a vector (c <= 8): a last group short of P with a row and a
  // column no window covers, one channel (16 windows), 8 channels (both vectors full). The 2x2
  // windows that tile with fewer than 16 channels also pool from planes: 15 channels on a row of
  // 35 windows (3 blocks, the last of 3) as well.
  const Case cases[] = {{6, 28, 28, 2, 2, 0}, {16, 10, 10, 2, 2, 0}, {5, 9, 7, 3, 2, 1}, {17, 8, 8, 3, 1, 1},
                        {33, 7, 9, 2, 2, 0},  {3, 7, 7, 3, 3, 0},    {4, 6, 5, 2, 1, 0}, {3, 5, 5, 2, 2, 1},
                        {5, 9, 15, 2, 2, 0},  {1, 6, 40, 2, 2, 0},   {8, 4, 6, 2, 2, 0}, {15, 4, 70, 2, 2, 0}};
  for (const Case& cs : cases)
    for (int fusion = 0; fusion < 8; ++fusion) {
      const AvgPoolFusion f{.relu = (fusion & 1) != 0, .roundY = (fusion & 2) != 0};
      PoolGeom g{3, cs.c, cs.h, cs.w, cs.k, cs.stride, cs.pad};
      g.dxRounded = (fusion & 4) != 0;
      const int hw = g.h * g.w, ohw = g.oh() * g.ow();
      const std::size_t nx = static_cast<std::size_t>(g.n) * g.c * hw, ny = static_cast<std::size_t>(g.n) * g.c * ohw;
      std::vector<float> x(nx), dy(ny);
      for (std::size_t i = 0; i < nx; ++i) x[i] = std::sin(0.731f * static_cast<float>(i)) * 3.1f;
      for (std::size_t i = 0; i < ny; ++i) dy[i] = std::cos(0.413f * static_cast<float>(i)) * 1.7f;
      // A NaN whose payload the rounding must keep (without its NaN rule it would round to -0).
      const float payloadNan = std::bit_cast<float>(0x7fffffffu);
      x[nx / 5] = -0.f, x[nx / 3] = payloadNan, dy[ny / 4] = -0.f, dy[ny / 2] = payloadNan;
      const SeparateAvg want(x, dy, g, f, g.dxRounded);
      const std::string what = std::to_string(cs.c) + "x" + std::to_string(cs.h) + "x" + std::to_string(cs.w) +
                               " k" + std::to_string(cs.k) + " s" + std::to_string(cs.stride) + " fusion " +
                               std::to_string(fusion);
      std::vector<float> y(ny), dx(nx, 7.f);
      avgPool2dForward(y.data(), x.data(), g, f);
      avgPool2dBackward(dx.data(), dy.data(), g, f.relu ? x.data() : nullptr);
      EXPECT_TRUE(sameBits(y, want.y)) << "nchw " << what;
      EXPECT_TRUE(sameBits(dx, want.dx)) << "nchw " << what;
      PoolGeom gl = g;
      gl.nhwc = true;
      std::vector<float> xl(nx), dyl(ny);
      nchwToNhwc(xl.data(), x.data(), g.n, g.c, hw);
      nchwToNhwc(dyl.data(), dy.data(), g.n, g.c, ohw);
      for (bool portable : {false, true}) {
        std::vector<float> yl(ny), dxl(nx, 7.f);
        const float* relu = f.relu ? xl.data() : nullptr;
        if (portable) {
          avgPoolNhwcForwardPortable(yl.data(), xl.data(), gl, f);
          avgPoolNhwcBackwardPortable(dxl.data(), dyl.data(), gl, relu);
        } else {
          avgPool2dForward(yl.data(), xl.data(), gl, f);
          avgPool2dBackward(dxl.data(), dyl.data(), gl, relu);
        }
        const char* path = portable ? "portable " : "channels last ";
        EXPECT_TRUE(sameBits(transposed(yl, g.n, g.c, ohw), want.y)) << path << what;
        EXPECT_TRUE(sameBits(transposed(dxl, g.n, g.c, hw), want.dx)) << path << what;
      }
      if (!avgPoolPlanesApply(g)) continue;
      for (bool portable : {false, true}) {  // x and dx NCHW, y and dy channels last
        std::vector<std::uint16_t> mask(avgPoolPlanesMasks(g), 0xabcd);
        std::vector<float> yl(ny), dxp(nx, 7.f);
        avgPoolPlanesPortableSlot() = portable;
        avgPoolPlanesForward(yl.data(), mask.data(), x.data(), g, f);
        avgPoolPlanesBackward(dxp.data(), dyl.data(), f.relu ? mask.data() : nullptr, g);
        avgPoolPlanesPortableSlot() = false;
        const char* path = portable ? "planes, portable " : "planes ";
        EXPECT_TRUE(sameBits(transposed(yl, g.n, g.c, ohw), want.y)) << path << what;
        EXPECT_TRUE(sameBits(dxp, want.dx)) << path << what;
      }
    }
}

TEST(PoolLayouts, PoolFromPlanesRefusesOtherGeometries) {
  PoolGeom g{1, 6, 8, 8, 2, 2, 0};
  ASSERT_TRUE(avgPoolPlanesApply(g));
  std::vector<float> x(384), y(96);
  std::vector<std::uint16_t> mask(avgPoolPlanesMasks(g));
  EXPECT_THROW(avgPoolPlanesForward(y.data(), nullptr, x.data(), g, {.relu = true}), ShapeError);  // no mask
  for (PoolGeom bad : {PoolGeom{1, 6, 8, 8, 3, 3, 0}, PoolGeom{1, 6, 8, 8, 2, 1, 0}, PoolGeom{1, 16, 8, 8, 2, 2, 0}}) {
    EXPECT_FALSE(avgPoolPlanesApply(bad));
    EXPECT_THROW(avgPoolPlanesForward(y.data(), mask.data(), x.data(), bad, {}), ShapeError);
    EXPECT_THROW(avgPoolPlanesBackward(x.data(), y.data(), nullptr, bad), ShapeError);
  }
  g.nhwc = true;
  EXPECT_FALSE(avgPoolPlanesApply(g));
}

TEST(PoolLayouts, AveragePoolRefusesBlockedGradients) {
  PoolGeom g{1, 16, 4, 4, 2, 2, 0};
  g.nhwc = true;
  g.dyBlocked = true;
  std::vector<float> dy(64), dx(256);
  EXPECT_THROW(avgPool2dBackward(dx.data(), dy.data(), g), ShapeError);
  g.dyBlocked = false, g.nhwc = false;
  EXPECT_THROW(avgPoolNhwcBackwardPortable(dx.data(), dy.data(), g), ShapeError);
}

TEST(PoolLayouts, Bf16ConvolutionsWriteBlocksAsTheirNhwcValues) {
  // Native bf16, where the primitives compute y and dx in channel blocks (conv2dWritesBlocked16,
  // conv2dDxBlocked16): handed over so, they are the channels-last values bit for bit, and the
  // weight and bias gradients are the same. The convnet's conv 2 at batch 3.
  DeviceOptions o;
  o.precision = Precision::kBf16;
  Device dev(o);
  ConvGeom g{3, 32, 13, 13, 64, 3, 3};
  g.srcNhwc = g.dstNhwc = true;
  if (!conv2dWritesBlocked16(dev, g, true) || !conv2dDxBlocked16(dev, g, true)) {
    GTEST_SKIP() << "this CPU's bf16 convolution primitives keep channels last (no AVX512-BF16 without AMX)";
  }
  const int hw = g.h * g.w, ohw = g.oh() * g.ow();
  const auto x = ties(static_cast<std::size_t>(g.n) * g.c * hw, 1, false);
  const auto w = ties(static_cast<std::size_t>(g.oc) * g.c * 9, 2, false), b = ties(g.oc, 3, false);
  const auto dy = ties(static_cast<std::size_t>(g.n) * g.oc * ohw, 4, false);
  std::vector<float> y(dy.size()), yb(dy.size(), 7.f), dx(x.size()), dxb(x.size(), 7.f);
  std::vector<float> dw(w.size()), dwb(w.size()), db(g.oc), dbb(g.oc);
  conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
  conv2dBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
  ConvGeom gb = g;
  gb.dstBlocked = true;
  conv2dForward(dev, yb.data(), x.data(), w.data(), b.data(), gb);
  EXPECT_TRUE(sameBits(toBlocked(y, g.n, g.oc, ohw), yb)) << "y in channel blocks";
  gb.dstBlocked = false;
  gb.dxBlocked = true;  // alone: dy channels last
  conv2dBackward(dev, dxb.data(), dwb.data(), dbb.data(), dy.data(), x.data(), w.data(), gb);
  EXPECT_TRUE(sameBits(toBlocked(dx, g.n, g.c, hw), dxb)) << "dx in channel blocks";
  EXPECT_TRUE(sameBits(dw, dwb) && sameBits(db, dbb)) << "weight and bias gradients";
  // Where they do not, asking for the layout is an error, not a silent other layout.
  ConvGeom narrow = g;
  narrow.oc = 24;
  narrow.dstBlocked = true;
  std::vector<float> y24(static_cast<std::size_t>(g.n) * 24 * ohw);
  EXPECT_THROW(conv2dForward(dev, y24.data(), x.data(), w.data(), b.data(), narrow), ShapeError);
}

TEST(PoolLayouts, Fp32BlockedPassesTakeEitherSideChannelsLast) {
  // fp32 Winograd data gradient (conv2dGradsBlocked16 with dx): dx in blocks while dy comes
  // channels last (the module after it did not hand dy over in blocks), as AlexNet at 224x224
  // does; dx is the channels-last one in blocks, bit for bit.
  Device dev;
  ConvGeom g{10, 64, 56, 56, 64, 3, 3, 1, 1};
  g.srcNhwc = g.dstNhwc = true;
  if (!conv2dGradsBlocked16(dev, g, false, true)) GTEST_SKIP() << "no blocked fp32 backward for this geometry here";
  const int hw = g.h * g.w, ohw = g.oh() * g.ow();
  const auto x = ties(static_cast<std::size_t>(g.n) * g.c * hw, 5, false);
  const auto w = ties(static_cast<std::size_t>(g.oc) * g.c * 9, 6, false);
  const auto dy = ties(static_cast<std::size_t>(g.n) * g.oc * ohw, 7, false);
  std::vector<float> dx(x.size()), dxb(x.size(), 7.f), dw(w.size()), dwb(w.size());
  conv2dBackward(dev, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), g);
  ConvGeom gb = g;
  gb.dxBlocked = true;
  conv2dBackward(dev, dxb.data(), dwb.data(), nullptr, dy.data(), x.data(), w.data(), gb);
  EXPECT_TRUE(sameBits(toBlocked(dx, g.n, g.c, hw), dxb)) << "dx in channel blocks";
  EXPECT_TRUE(sameBits(dw, dwb)) << "weight gradient";
}

namespace {

// PyTorch's adaptive average pool, written out: window [floor(i*in/out), ceil((i+1)*in/out)),
// its sum from 0 in row order divided by its size; backward adds each window's share, from 0,
// in window order.
void adaptiveReference(std::vector<float>& y, std::vector<float>& dx, const std::vector<float>& x,
                       const std::vector<float>& dy, int planes, int h, int w, int oh, int ow) {
  auto begin = [](int i, int in, int out) { return i * in / out; };
  auto end = [](int i, int in, int out) { return ((i + 1) * in + out - 1) / out; };
  y.assign(static_cast<std::size_t>(planes) * oh * ow, 0.f);
  dx.assign(static_cast<std::size_t>(planes) * h * w, 0.f);
  for (int p = 0; p < planes; ++p)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const int y0 = begin(oy, h, oh), y1 = end(oy, h, oh), x0 = begin(ox, w, ow), x1 = end(ox, w, ow);
        const float count = static_cast<float>((y1 - y0) * (x1 - x0));
        float s = 0.f;
        for (int iy = y0; iy < y1; ++iy)
          for (int ix = x0; ix < x1; ++ix) s += x[(static_cast<std::size_t>(p) * h + iy) * w + ix];
        const std::size_t o = (static_cast<std::size_t>(p) * oh + oy) * ow + ox;
        y[o] = s / count;
        const float share = dy[o] / count;
        for (int iy = y0; iy < y1; ++iy)
          for (int ix = x0; ix < x1; ++ix) dx[(static_cast<std::size_t>(p) * h + iy) * w + ix] += share;
      }
}

}  // namespace

// The one-pixel input's own loops (AlexNet below 67x67 pools 1x1 into 6x6) and the general ones,
// against the formula: every bit, with gradients whose sums round (so their order shows), -0,
// infinities, quiet and signalling NaNs and denormals, and plane counts past whole 16s.
TEST(PoolLayouts, AdaptiveAveragePoolIsTheFormulaBitForBit) {
  const float sNaN = std::bit_cast<float>(0x7fa00001u);
  for (const auto& [n, c, h, w, oh, ow] : {std::tuple{3, 19, 1, 1, 6, 6}, {1, 16, 1, 1, 1, 1}, {2, 5, 1, 1, 2, 3},
                                           {2, 3, 5, 5, 3, 3}, {1, 2, 6, 6, 6, 6}, {1, 3, 7, 4, 2, 3}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w) + " -> " + std::to_string(oh) + "x" + std::to_string(ow));
    const int planes = n * c;
    std::vector<float> x(static_cast<std::size_t>(planes) * h * w), dy(static_cast<std::size_t>(planes) * oh * ow);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 23) - 1.05f;
    for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0f / static_cast<float>(i % 7 + 3) + 1e-3f * static_cast<float>(i);
    const float special[] = {-0.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                             sNaN, 1e-41f, -std::numeric_limits<float>::infinity()};
    for (std::size_t k = 0; k < std::size(special); ++k) {
      x[(k * 7) % x.size()] = special[k];
      dy[(k * 11 + 3) % dy.size()] = special[k];
    }
    std::vector<float> wantY, wantDx;
    adaptiveReference(wantY, wantDx, x, dy, planes, h, w, oh, ow);
    std::vector<float> y(wantY.size(), 7.f), dx(wantDx.size(), 7.f);
    adaptiveAvgPool2dForward(y.data(), x.data(), n, c, h, w, oh, ow);
    adaptiveAvgPool2dBackward(dx.data(), dy.data(), n, c, h, w, oh, ow);
    EXPECT_TRUE(sameBits(y, wantY)) << "forward";
    EXPECT_TRUE(sameBits(dx, wantDx)) << "backward";
  }
}

// Every float lands where the index formula puts it, for planes smaller than, equal to and past
// the 16 x 16 blocks (partial blocks on either side), and nothing past the images is written.
TEST(Layouts, TransposesPutEveryFloatWhereTheFormulaSays) {
  for (auto [n, c, hw] : {std::tuple{2, 16, 25}, {3, 1, 7}, {2, 5, 1}, {1, 16, 16}, {2, 17, 33}, {1, 128, 16},
                          {2, 3, 50}, {1, 40, 9}}) {
    const std::size_t count = static_cast<std::size_t>(n) * c * hw;
    std::vector<float> src(count), last(count + 16, -1.f), back(count + 16, -1.f);
    for (std::size_t i = 0; i < count; ++i) src[i] = static_cast<float>(i);
    nchwToNhwc(last.data(), src.data(), n, c, hw);
    nhwcToNchw(back.data(), last.data(), n, c, hw);
    const std::string shape = std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(hw);
    for (int i = 0; i < n; ++i)
      for (int ch = 0; ch < c; ++ch)
        for (int p = 0; p < hw; ++p) {
          const std::size_t first = (static_cast<std::size_t>(i) * c + ch) * hw + p;
          ASSERT_EQ(last[(static_cast<std::size_t>(i) * hw + p) * c + ch], src[first]) << "channels last, " << shape;
          ASSERT_EQ(back[first], src[first]) << "back to channels first, " << shape;
        }
    for (std::size_t k = count; k < last.size(); ++k) {
      ASSERT_EQ(last[k], -1.f) << "written past the end, " << shape;
      ASSERT_EQ(back[k], -1.f) << "written past the end, " << shape;
    }
  }
}
