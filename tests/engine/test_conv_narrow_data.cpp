// test_conv_narrow_data.cpp: the input gradient into few channels (conv_narrow_data.cpp): its
// AVX-512 kernels and portable loops against a scalar reference of the same sums, bit for bit;
// the whole backward against im2col to fp32's tolerance; emulated bf16 as fp32 on rounded
// operands.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "conv_onednn.hpp"
#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"

namespace xs::engine {
namespace {
using golden::Vec;

using Case = test::ConvCase;
using test::wCount, test::xCount, test::yCount;
constexpr auto geom = test::nhwcGeom;

// The sums conv_narrow_data.cpp documents, in its order (test::narrowDataOrder): each pixel's
// run t over o from zero with fused multiply-adds.
Vec reference(const ConvGeom& g, const Vec& dy, const Vec& w) {
  return test::narrowDataOrder(g, [&](int n, int oy, int ox, int ky, int kx, int ci) {
    float t = 0.f;
    for (int o = 0; o < g.oc; ++o)
      t = std::fma(dy[((static_cast<std::size_t>(n) * g.oh() + oy) * g.ow() + ox) * g.oc + o],
                   w[((static_cast<std::size_t>(o) * g.c + ci) * g.kh + ky) * g.kw + kx], t);
    return t;
  });
}

// Shapes: LeNet-5's conv 2 (6 channels, 5 x 5: two pixels a group); 3 channels 3 x 3 (one
// vector a tap row: four pixels a group, an odd row); 1 channel; 15 channels 3 x 3 wide (three
// vectors a tap row); padding 1 and 2; 7 x 7 taps of 2 channels (kh * vk = 7).
const Case kCases[] = {{3, 6, 14, 14, 16, 5, 0}, {2, 3, 9, 11, 8, 3, 1}, {2, 1, 12, 10, 5, 5, 2},
                       {2, 15, 7, 20, 32, 3, 1}, {1, 2, 16, 16, 4, 7, 3}};

TEST(ConvNarrowData, KernelsMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true}) {
      const ConvGeom g = geom(c);
      ASSERT_TRUE(detail::useNarrowDataGradient(g));
      Vec w = test::pattern(wCount(g), 1), dy = test::pattern(yCount(g), 2), dx(xCount(g), 7.f);
      detail::narrowDataPortableSlot() = portable;
      detail::conv2dDataGradientNarrow(dev, dx.data(), dy.data(), w.data(), g);
      detail::narrowDataPortableSlot() = false;
      EXPECT_EQ(dx, reference(g, dy, w)) << "c " << c.c << " k " << c.k << (portable ? " portable" : " vector");
    }
}

struct Grads {
  Vec dx, dw, db;
};

Grads backward(Device& dev, const ConvGeom& g, const Vec& x, const Vec& w, const Vec& dy) {
  Grads r{Vec(xCount(g)), Vec(wCount(g), 0.f), Vec(g.oc, 0.f)};
  conv2dBackward(dev, r.dx.data(), r.dw.data(), r.db.data(), dy.data(), x.data(), w.data(), g);
  return r;
}

TEST(ConvNarrowData, BackwardAgreesWithIm2col) {
  Device dev;
  for (const Case& c : kCases) {
    const ConvGeom g = geom(c);
    Vec x = test::pattern(xCount(g), 3), w = test::pattern(wCount(g), 4), dy = test::pattern(yCount(g), 5);
    const Grads got = backward(dev, g, x, w, dy);
    const Grads want = [&] {
      test::ConvBackendScope im2col(ConvBackend::kIm2col);
      return backward(dev, g, x, w, dy);
    }();
    golden::expectClose("dx", got.dx.data(), want.dx, 1e-5, 1e-5);
    golden::expectClose("dw", got.dw.data(), want.dw, 1e-5, 1e-5);
    golden::expectClose("db", got.db.data(), want.db, 1e-5, 1e-5);
  }
}

TEST(ConvNarrowData, EmulatedBf16IsFp32OnRoundedOperands) {
  // w and dy rounded as the kernel builds its rows, or told they are rounded already.
  const ConvGeom g = geom(kCases[0]);
  Vec w = test::pattern(wCount(g), 6), dy = test::pattern(yCount(g), 7);
  Vec rw = w, rdy = dy;
  roundToBf16(rw.data(), rw.data(), rw.size());
  roundToBf16(rdy.data(), rdy.data(), rdy.size());
  test::ModeScope mode(Bf16Mode::kEmulated);
  Device fp32, emulated(golden::bf16Options());
  Vec want(xCount(g)), raw(xCount(g)), told(xCount(g));
  detail::conv2dDataGradientNarrow(fp32, want.data(), rdy.data(), rw.data(), g);
  detail::conv2dDataGradientNarrow(emulated, raw.data(), dy.data(), w.data(), g);
  ConvGeom flagged = g;
  flagged.wRounded = flagged.dyRounded = true;
  detail::conv2dDataGradientNarrow(emulated, told.data(), rdy.data(), rw.data(), flagged);
  EXPECT_EQ(raw, want);
  EXPECT_EQ(told, want);
}

}  // namespace
}  // namespace xs::engine
