// test_conv_narrow_weights.cpp: the weight and bias gradients from few input channels
// (conv_narrow_weights.cpp): its AVX-512 kernels and portable loops against a scalar reference of
// the same sums, bit for bit; against im2col to fp32's tolerance; emulated bf16 as fp32 on
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

using Grads = test::WeightGrads;

// The sums conv_narrow_weights.cpp documents, in its order: each from zero over images, rows and
// pixels with fused multiply-adds (zeros outside the image), then added to dw / db or written.
Grads reference(const ConvGeom& g, const Vec& x, const Vec& dy, const Grads& start) {
  const int oh = g.oh(), ow = g.ow();
  auto weight = [&](int o, int ci, int ky, int kx) {
    float s = 0.f;
    for (int n = 0; n < g.n; ++n)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          const int iy = oy + ky - g.pad, ix = ox + kx - g.pad;
          const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
          const float v = inside ? x[((static_cast<std::size_t>(n) * g.h + iy) * g.w + ix) * g.c + ci] : 0.f;
          s = std::fma(dy[((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * g.oc + o], v, s);
        }
    return s;
  };
  auto bias = [&](int o) {
    float s = 0.f;
    for (std::size_t p = 0; p < static_cast<std::size_t>(g.n) * oh * ow; ++p) s += dy[p * g.oc + o];
    return s;
  };
  return test::weightSums(g, g.overwriteGrads ? Grads{Vec(start.dw.size(), 0.f), Vec(start.db.size(), 0.f)} : start,
                          weight, bias);
}

// Shapes: LeNet-5's conv 2 (a run of 30: two passes of 15); 3 channels 3 x 3, padding 1, 8
// outputs; one channel 5 x 5, padding 2; 15 channels (a run of 45: three passes) into 16; 7 x 7
// taps of 2 channels, padding 3, 4 outputs.
const Case kCases[] = {{3, 6, 14, 14, 16, 5, 0}, {2, 3, 9, 11, 8, 3, 1}, {2, 1, 12, 10, 5, 5, 2},
                       {2, 15, 7, 20, 16, 3, 1}, {1, 2, 16, 16, 4, 7, 3}};

TEST(ConvNarrowWeights, KernelsMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true})
      for (bool overwrite : {false, true})
        for (bool bias : {true, false}) {
          ConvGeom g = geom(c);
          g.overwriteGrads = overwrite;
          ASSERT_TRUE(detail::useNarrowWeightGradient(g));
          const Vec x = test::pattern(xCount(g), 1), dy = test::pattern(yCount(g), 2);
          const Grads start{test::pattern(wCount(g), 3), test::pattern(g.oc, 4)};
          Grads got = start;
          detail::narrowWeightsPortableSlot() = portable;
          detail::conv2dWeightGradientNarrow(dev, got.dw.data(), bias ? got.db.data() : nullptr, dy.data(), x.data(),
                                             g);
          detail::narrowWeightsPortableSlot() = false;
          const Grads want = reference(g, x, dy, start);
          const std::string what = "c " + std::to_string(c.c) + " k " + std::to_string(c.k) +
                                   (portable ? " portable" : " vector") + (overwrite ? " overwrite" : "");
          EXPECT_EQ(got.dw, want.dw) << what;
          EXPECT_EQ(got.db, bias ? want.db : start.db) << what;
        }
}

TEST(ConvNarrowWeights, AgreesWithIm2col) {
  Device dev;
  for (const Case& c : kCases) {
    const ConvGeom g = geom(c);
    const Vec x = test::pattern(xCount(g), 5), w = test::pattern(wCount(g), 6), dy = test::pattern(yCount(g), 7);
    auto grads = [&] {
      Grads r{Vec(wCount(g), 0.f), Vec(g.oc, 0.f)};
      conv2dBackward(dev, nullptr, r.dw.data(), r.db.data(), dy.data(), x.data(), w.data(), g);
      return r;
    };
    const Grads got = grads();
    const Grads want = [&] {
      test::ConvBackendScope im2col(ConvBackend::kIm2col);
      return grads();
    }();
    golden::expectClose("dw", got.dw.data(), want.dw, 1e-5, 1e-5);
    golden::expectClose("db", got.db.data(), want.db, 1e-5, 1e-5);
  }
}

TEST(ConvNarrowWeights, EmulatedBf16IsFp32OnRoundedOperands) {
  // x and dy rounded by the kernel, or told they are rounded already.
  const ConvGeom g = geom(kCases[0]);
  const Vec x = test::pattern(xCount(g), 8), dy = test::pattern(yCount(g), 9);
  Vec rx = x, rdy = dy;
  roundToBf16(rx.data(), rx.data(), rx.size());
  roundToBf16(rdy.data(), rdy.data(), rdy.size());
  test::ModeScope mode(Bf16Mode::kEmulated);
  Device fp32, emulated(golden::bf16Options());
  auto grads = [&](Device& dev, const ConvGeom& geo, const Vec& xs, const Vec& dys) {
    Grads r{Vec(wCount(g), 0.f), Vec(g.oc, 0.f)};
    detail::conv2dWeightGradientNarrow(dev, r.dw.data(), r.db.data(), dys.data(), xs.data(), geo);
    return r;
  };
  ConvGeom flagged = g;
  flagged.xRounded = flagged.dyRounded = true;
  const Grads want = grads(fp32, g, rx, rdy), raw = grads(emulated, g, x, dy), told = grads(emulated, flagged, rx, rdy);
  EXPECT_EQ(raw.dw, want.dw);
  EXPECT_EQ(raw.db, want.db);
  EXPECT_EQ(told.dw, want.dw);
  EXPECT_EQ(told.db, want.db);
}

}  // namespace
}  // namespace xs::engine
