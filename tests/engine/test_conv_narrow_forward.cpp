// test_conv_narrow_forward.cpp: the forward from few input channels (conv_narrow_forward.cpp):
// its AVX-512 kernels and portable loops against a scalar reference of the same sums, bit for
// bit; against im2col to fp32's tolerance, with the backward after it; emulated bf16 as fp32 on
// rounded operands.
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

// The sums conv_narrow_forward.cpp documents, in its order: from the bias (or zero) over tap
// rows ky, input channels ci and taps kx, with fused multiply-adds; zeros outside the image.
Vec reference(const ConvGeom& g, const Vec& x, const Vec& w, const float* b) {
  const int oh = g.oh(), ow = g.ow();
  Vec y(yCount(g));
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox)
        for (int o = 0; o < g.oc; ++o) {
          float acc = b ? b[o] : 0.f;
          for (int ky = 0; ky < g.kh; ++ky)
            for (int ci = 0; ci < g.c; ++ci)
              for (int kx = 0; kx < g.kw; ++kx) {
                const int iy = oy + ky - g.pad, ix = ox + kx - g.pad;
                const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                const float v = inside ? x[((static_cast<std::size_t>(n) * g.h + iy) * g.w + ix) * g.c + ci] : 0.f;
                acc = std::fma(v, w[((static_cast<std::size_t>(o) * g.c + ci) * g.kh + ky) * g.kw + kx], acc);
              }
          y[((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * g.oc + o] = acc;
        }
  return y;
}

// Shapes: LeNet-5's conv 2 (6 channels into 16, 5 x 5); 3 channels 3 x 3 into 8, padding 1;
// one channel into 16 (the one-channel path takes fewer), padding 2; 15 channels on a row of
// 30 pixels (three blocks); 29 pixels (blocks of 9 and 10); 7 x 7 taps (the portable loops).
const Case kCases[] = {{3, 6, 14, 14, 16, 5, 0}, {2, 3, 9, 11, 8, 3, 1},  {2, 1, 12, 10, 16, 5, 2},
                       {2, 15, 7, 32, 16, 3, 1}, {1, 4, 6, 33, 12, 5, 0}, {1, 2, 16, 16, 4, 7, 3}};

TEST(ConvNarrowForward, KernelsMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true})
      for (bool bias : {true, false}) {
        const ConvGeom g = geom(c);
        ASSERT_TRUE(detail::useNarrowForward(g));
        Vec x = test::pattern(xCount(g), 1), w = test::pattern(wCount(g), 2), b = test::pattern(g.oc, 3);
        Vec y(yCount(g), 7.f);
        detail::narrowForwardPortableSlot() = portable;
        detail::conv2dForwardNarrow(dev, y.data(), x.data(), w.data(), bias ? b.data() : nullptr, g);
        detail::narrowForwardPortableSlot() = false;
        EXPECT_EQ(y, reference(g, x, w, bias ? b.data() : nullptr))
            << "c " << c.c << " oc " << c.oc << " k " << c.k << (portable ? " portable" : " vector")
            << (bias ? " bias" : "");
      }
}

struct Passes {
  Vec y, dx, dw, db;
};

// conv2dForward, then conv2dBackward as a layer calls them (keepSrc: x unchanged between).
Passes run(Device& dev, const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  Passes r{Vec(yCount(g)), Vec(xCount(g)), Vec(wCount(g), 0.f), Vec(g.oc, 0.f)};
  ConvGeom kept = g;
  kept.keepSrc = true;
  conv2dForward(dev, r.y.data(), x.data(), w.data(), b.data(), kept);
  conv2dBackward(dev, r.dx.data(), r.dw.data(), r.db.data(), dy.data(), x.data(), w.data(), kept);
  return r;
}

TEST(ConvNarrowForward, AgreesWithIm2colForwardAndBackward) {
  Device dev;
  for (const Case& c : kCases) {
    const ConvGeom g = geom(c);
    Vec x = test::pattern(xCount(g), 4), w = test::pattern(wCount(g), 5), b = test::pattern(g.oc, 6),
        dy = test::pattern(yCount(g), 7);
    const Passes got = run(dev, g, x, w, b, dy);
    const Passes want = [&] {
      test::ConvBackendScope im2col(ConvBackend::kIm2col);
      return run(dev, g, x, w, b, dy);
    }();
    golden::expectClose("y", got.y.data(), want.y, 1e-5, 1e-5);
    golden::expectClose("dx", got.dx.data(), want.dx, 1e-5, 1e-5);
    golden::expectClose("dw", got.dw.data(), want.dw, 1e-5, 1e-5);
    golden::expectClose("db", got.db.data(), want.db, 1e-5, 1e-5);
  }
}

TEST(ConvNarrowForward, EmulatedBf16IsFp32OnRoundedOperands) {
  // x and w rounded by the kernel, or told they are rounded already.
  const ConvGeom g = geom(kCases[0]);
  Vec x = test::pattern(xCount(g), 8), w = test::pattern(wCount(g), 9), b = test::pattern(g.oc, 10);
  Vec rx = x, rw = w;
  roundToBf16(rx.data(), rx.data(), rx.size());
  roundToBf16(rw.data(), rw.data(), rw.size());
  test::ModeScope mode(Bf16Mode::kEmulated);
  Device fp32, emulated(golden::bf16Options());
  Vec want(yCount(g)), raw(yCount(g)), told(yCount(g));
  detail::conv2dForwardNarrow(fp32, want.data(), rx.data(), rw.data(), b.data(), g);
  detail::conv2dForwardNarrow(emulated, raw.data(), x.data(), w.data(), b.data(), g);
  ConvGeom flagged = g;
  flagged.xRounded = flagged.wRounded = true;
  detail::conv2dForwardNarrow(emulated, told.data(), rx.data(), rw.data(), b.data(), flagged);
  EXPECT_EQ(raw, want);
  EXPECT_EQ(told, want);
}

}  // namespace
}  // namespace xs::engine
