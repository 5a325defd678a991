// test_conv_narrow_pool.cpp: the 2x2 average pool (and the ReLU before it) fused into the narrow
// convolution in native bf16 (ConvGeom::nhwcPool, conv2dPoolsNhwc; conv_narrow_forward.cpp and
// conv_narrow_pool.cpp): the pool's output, the ReLU's mask and the convolution's gradients bit
// for bit against the separate passes, where it applies and where it does not, and through the
// layers (LeNet-5's conv 2, ReLU and pool 2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conv_onednn.hpp"
#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"
#include "xspawn/error.hpp"

namespace xs::engine {
namespace {
using golden::Vec;
using Case = test::ConvCase;

// LeNet-5's conv 2 (6 channels, 14 x 14, into 16, 5 x 5); 4 channels 3 x 3 with padding into 12
// (8 x 8); 2 channels into 10 (10 x 10 on a 12 x 12 map).
const Case kCases[] = {{3, 6, 14, 14, 16, 5, 0}, {2, 4, 8, 8, 12, 3, 1}, {2, 2, 12, 12, 10, 3, 0}};

PoolGeom poolOf(const ConvGeom& g) {
  PoolGeom p{g.n, g.oc, g.oh(), g.ow(), 2, 2, 0};
  p.nhwc = true;
  return p;
}

class ConvNarrowPool : public test::NativeBf16Kernels {};

TEST_F(ConvNarrowPool, AFusedPoolGivesTheSeparatePassesBits) {
  // conv -> (ReLU +) pool and pool backward -> conv backward over the batch, against the pool
  // computed from the forward's registers and its gradient spread into the bits the backward
  // kernels read; with and without the ReLU, y rounded or not, dx asked for or not.
  for (const Case& c : kCases)
    for (bool relu : {true, false})
      for (bool round : {true, false})
        for (bool withDx : {true, false}) {
          ConvGeom g = test::nhwcGeom(c);
          g.overwriteGrads = true;
          PoolGeom pg = poolOf(g);
          ASSERT_TRUE(conv2dPoolsNhwc(dev_, g, pg));
          pg.dxRounded = true;  // as the bf16 convolution before it asks
          const std::size_t pooled = static_cast<std::size_t>(g.n) * pg.oh() * pg.ow() * g.oc;
          const Vec x = test::pattern(test::xCount(g), 41), w = test::pattern(test::wCount(g), 42),
                    b = test::pattern(g.oc, 43), dyPool = test::pattern(pooled, 44);
          const AvgPoolFusion f{.relu = relu, .roundY = round};
          Vec y(test::yCount(g)), dyConv(y.size()), yWant(pooled), yGot(pooled, -1.f);
          Vec dxWant(x.size()), dxGot(x.size(), 7.f), dwWant(w.size()), dwGot(w.size()), dbWant(g.oc), dbGot(g.oc);
          conv2dForward(dev_, y.data(), x.data(), w.data(), b.data(), g);
          avgPool2dForward(yWant.data(), y.data(), pg, f);
          avgPool2dBackward(dyConv.data(), dyPool.data(), pg, relu ? y.data() : nullptr);
          ConvGeom separate = g;
          separate.dyRounded = true;
          conv2dBackward(dev_, withDx ? dxWant.data() : nullptr, dwWant.data(), dbWant.data(), dyConv.data(),
                         x.data(), w.data(), separate);

          std::vector<std::uint16_t> mask(conv2dPoolMasks(g), 0xdead);
          const NhwcPool pool{f, yGot.data(), relu ? mask.data() : nullptr, dyPool.data()};
          ConvGeom fused = g;
          fused.nhwcPool = &pool;
          conv2dForward(dev_, nullptr, x.data(), w.data(), b.data(), fused);
          conv2dBackward(dev_, withDx ? dxGot.data() : nullptr, dwGot.data(), dbGot.data(), nullptr, x.data(),
                         w.data(), fused);
          const std::string what = "oc " + std::to_string(c.oc) + (relu ? " relu" : "") + (round ? " round" : "") +
                                   (withDx ? " dx" : "");
          EXPECT_TRUE(test::sameBits(yGot, yWant)) << what;
          if (withDx) EXPECT_TRUE(test::sameBits(dxGot, dxWant)) << what;
          EXPECT_TRUE(test::sameBits(dwGot, dwWant)) << what;
          EXPECT_TRUE(test::sameBits(dbGot, dbWant)) << what;
          if (!relu) continue;
          for (std::size_t px = 0; px < mask.size(); ++px) {  // bit o: y > 0
            std::uint16_t want = 0;
            for (int o = 0; o < g.oc; ++o) want |= static_cast<std::uint16_t>((y[px * g.oc + o] > 0.f) << o);
            ASSERT_EQ(mask[px], want) << what << " pixel " << px;
          }
        }
}

TEST_F(ConvNarrowPool, AppliesOnlyWhereItsKernelsRun) {
  const ConvGeom g = test::nhwcGeom(kCases[0]);
  EXPECT_TRUE(conv2dPoolsNhwc(dev_, g, poolOf(g)));
  PoolGeom wide = poolOf(g);  // 3 x 3 windows
  wide.k = wide.stride = 3;
  EXPECT_FALSE(conv2dPoolsNhwc(dev_, g, wide));
  const ConvGeom odd = test::nhwcGeom({2, 6, 13, 13, 16, 5, 0});  // 9 x 9 outputs
  EXPECT_FALSE(conv2dPoolsNhwc(dev_, odd, poolOf(odd)));
  const ConvGeom tooWide = test::nhwcGeom({1, 6, 18, 18, 16, 5, 0});  // rows of 14: two rows do not fit
  EXPECT_FALSE(conv2dPoolsNhwc(dev_, tooWide, poolOf(tooWide)));
  const ConvGeom oddOut = test::nhwcGeom({2, 6, 14, 14, 15, 5, 0});  // odd output channels: no pairs
  EXPECT_FALSE(conv2dPoolsNhwc(dev_, oddOut, poolOf(oddOut)));
  {
    test::ModeScope emulated(Bf16Mode::kEmulated);
    Device dev(golden::bf16Options());
    EXPECT_FALSE(conv2dPoolsNhwc(dev, g, poolOf(g)));
    Device fp32;
    EXPECT_FALSE(conv2dPoolsNhwc(fp32, g, poolOf(g)));
    // Asked anyway: a ShapeError that says to ask first, nothing written.
    Vec y(4, 3.f);
    test::expectFusedPoolRefused(fp32, g, NhwcPool{{}, y.data(), nullptr, nullptr}, "conv2dPoolsNhwc");
    EXPECT_EQ(y, Vec(4, 3.f));
  }
}

TEST_F(ConvNarrowPool, LayersFuseConvReluAndPool) {
  // LeNet-5's conv 2, ReLU and pool 2 fused through the layers (Pool2d::fuseIntoNhwcConv): the
  // same weights, bit for bit, as with an Opaque copy after conv 2, which keeps them apart.
  auto net = [](nn::Sequential& n, bool opaque) {
    n.add("conv1", nn::Conv2d(1, 6, 5, 1, 2)).add("relu1", nn::ReLU()).add("pool1", nn::AvgPool2d(2));
    n.add("conv2", nn::Conv2d(6, 16, 5));
    if (opaque) n.add("copy", std::make_unique<test::Opaque>());
    n.add("relu2", nn::ReLU()).add("pool2", nn::AvgPool2d(2)).add("flatten", nn::Flatten());
    n.add("fc", nn::Linear(0, 10));
  };
  EXPECT_TRUE(test::sameBits(test::trainedWeights(Precision::kBf16, {1, 28, 28}, false, net),
                             test::trainedWeights(Precision::kBf16, {1, 28, 28}, true, net)));
}

}  // namespace
}  // namespace xs::engine
