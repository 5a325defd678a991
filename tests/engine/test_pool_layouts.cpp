// test_pool_layouts.cpp: the channels-last max-pool kernels give the same bits as the NCHW ones
// (PyTorch's scan order and tie rule): values, indices and gradients, with and without the fused
// ReLU, over window shapes that overlap, pad, leave pixels uncovered and split channel blocks;
// and the same gradients when dy or dx are in channel blocks of 16 (nChw16c); the bf16-rounded
// gradient and ReLU are the rounded ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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
        auto dy = ties(ny, static_cast<unsigned>(cs.h), false);
        for (std::size_t i = 0; i < ny; i += 5) dy[i] = -0.f;  // a scatter into zeros makes these +0
        // NCHW reference
        std::vector<float> y(ny), dx(nx);
        std::vector<std::int32_t> am(ny);
        maxPool2dForward(y.data(), am.data(), x.data(), g);
        if (fused) reluForward(y.data(), y.data(), ny);
        maxPool2dBackward(dx.data(), dy.data(), am.data(), g, fused ? y.data() : nullptr);
        // channels last
        PoolGeom gl = g;
        gl.nhwc = true;
        std::vector<float> xl(nx), dyl(ny), yl(ny), dxl(nx, 7.f), back(nx), backY(ny);
        std::vector<std::int32_t> aml(ny), amBack(ny);
        nchwToNhwc(xl.data(), x.data(), g.n, g.c, hw);
        nchwToNhwc(dyl.data(), dy.data(), g.n, g.c, ohw);
        maxPool2dForward(yl.data(), aml.data(), xl.data(), gl);
        if (fused) reluForward(yl.data(), yl.data(), ny);
        maxPool2dBackward(dxl.data(), dyl.data(), aml.data(), gl, fused ? yl.data() : nullptr);
        nhwcToNchw(backY.data(), yl.data(), g.n, g.c, ohw);
        nhwcToNchw(back.data(), dxl.data(), g.n, g.c, hw);
        for (int n = 0; n < g.n; ++n)  // indices: transpose by hand (int32)
          for (int p = 0; p < ohw; ++p)
            for (int ch = 0; ch < g.c; ++ch)
              amBack[(static_cast<std::size_t>(n) * g.c + ch) * ohw + p] = aml[(static_cast<std::size_t>(n) * ohw + p) * g.c + ch];
        const std::string what = "c" + std::to_string(cs.c) + " " + std::to_string(cs.h) + "x" + std::to_string(cs.w) +
                                 " k" + std::to_string(cs.k) + " s" + std::to_string(cs.stride) + " p" +
                                 std::to_string(cs.pad) + (nan ? " nan" : "") + (fused ? " relu" : "");
        EXPECT_TRUE(sameBits(y, backY)) << what << ": pooled values";
        EXPECT_EQ(am, amBack) << what << ": indices";
        EXPECT_TRUE(sameBits(dx, back)) << what << ": gradient";
        // Gradients in channel blocks of 16 (what the Winograd convolutions read and write), each
        // side alone and both: the same bits once converted back.
        if (g.c % 16 != 0) continue;
        for (int sides = 1; sides <= 3; ++sides) {
          PoolGeom gb = gl;
          gb.dyBlocked = sides & 1;
          gb.dxBlocked = sides & 2;
          std::vector<float> dyb = gb.dyBlocked ? toBlocked(dyl, g.n, g.c, ohw) : dyl, dxb(nx, 7.f);
          maxPool2dBackward(dxb.data(), dyb.data(), aml.data(), gb, fused ? yl.data() : nullptr);
          if (gb.dxBlocked) dxb = fromBlocked(dxb, g.n, g.c, hw);
          EXPECT_TRUE(sameBits(dxl, dxb)) << what << ": gradient with blocked " << (sides == 1 ? "dy" : sides == 2 ? "dx" : "dy and dx");
        }
      }
}

TEST(PoolLayouts, BlockedGradientsNeedChannelsLastAndWholeBlocks) {
  PoolGeom g{1, 24, 4, 4, 2, 2, 0};
  g.nhwc = true;
  g.dxBlocked = true;
  std::vector<float> dy(24 * 4), dx(24 * 16), y(24 * 4);
  std::vector<std::int32_t> am(24 * 4, 0);
  EXPECT_THROW(maxPool2dBackward(dx.data(), dy.data(), am.data(), g), ShapeError);
  g.c = 16;
  g.nhwc = false;
  EXPECT_THROW(maxPool2dBackward(dx.data(), dy.data(), am.data(), g), ShapeError);
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
        std::vector<std::int32_t> am(ny);
        maxPool2dForward(y.data(), am.data(), x.data(), g);
        if (fused) reluForward(y.data(), y.data(), ny);
        g.dxBlocked = blocked;
        maxPool2dBackward(dx.data(), dy.data(), am.data(), g, fused ? y.data() : nullptr);
        roundToBf16(dx.data(), want.data(), nx);
        g.dxRounded = true;
        maxPool2dBackward(dxr.data(), dy.data(), am.data(), g, fused ? y.data() : nullptr);
        EXPECT_TRUE(sameBits(want, dxr)) << "c" << cs.c << " " << cs.h << "x" << cs.w << (fused ? " relu" : "")
                                         << (blocked ? " blocked" : "");
      }
}

TEST(PoolLayouts, RoundedGradientNeedsTilingWindows) {
  PoolGeom g{1, 16, 11, 11, 2, 1, 0};  // overlapping windows add into dx: no rounding in place
  g.nhwc = true;
  g.dxRounded = true;
  std::vector<float> dy(16 * 100), dx(16 * 121);
  std::vector<std::int32_t> am(16 * 100, 0);
  EXPECT_THROW(maxPool2dBackward(dx.data(), dy.data(), am.data(), g), ShapeError);
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
