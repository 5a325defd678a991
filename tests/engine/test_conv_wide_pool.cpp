// test_conv_wide_pool.cpp: the 2x2 max-pool of stride 2 (and the ReLU before it) fused into the
// one-channel convolution into blocks of 16 outputs in native bf16 (NhwcPool::codes,
// conv2dMaxPoolsNhwc; conv_one_channel_wide_bf16.cpp): the pool's output, its window codes and
// the convolution's gradients bit for bit against the separate passes, where it applies and
// where it does not, and through the layers (the convnet's conv 1, ReLU and pool 1).
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
using Codes = std::vector<std::uint16_t>;

// The convnet's conv 1 (28 x 28 into 32, 5 x 5, padding 1: 26 x 26, 3 images: the last pair's
// second image is zeros); 3 x 3 taps into 32 on a map of 11 x 11 (odd: the last row and column
// are no window's); 48 outputs (blocks one at a time) on 30 x 30, five windows a tile.
const Case kCases[] = {{3, 1, 28, 28, 32, 5, 1}, {2, 1, 13, 13, 32, 3, 0}, {2, 1, 30, 30, 48, 5, 2}};

PoolGeom poolOf(const ConvGeom& g) {
  PoolGeom p{g.n, g.oc, g.oh(), g.ow(), 2, 2, 0};
  p.nhwc = true;
  return p;
}

// What the convolution ahead of the pool gets from the layers: channels last, its own
// gradients overwritten.
ConvGeom convOf(const Case& c) {
  ConvGeom g = test::nhwcGeom(c);
  g.overwriteGrads = true;
  return g;
}

class ConvWideMaxPool : public test::NativeBf16Kernels {};

TEST_F(ConvWideMaxPool, AFusedMaxPoolGivesTheSeparatePassesBits) {
  // conv (y in blocks) -> (ReLU +) max-pool, and the pool's backward -> the weight gradient,
  // against the pool made from the forward's registers and its gradient spread by the weight
  // pass into its own words; each epilogue, dy channels last and in blocks.
  const AvgPoolFusion epilogues[] = {{.relu = true, .roundY = true}, {.relu = true}, {}};
  for (const Case& c : kCases)
    for (const AvgPoolFusion& f : epilogues)
      for (bool dyBlocked : {false, true}) {
        const std::string what = "n " + std::to_string(c.n) + " " + std::to_string(c.h) + "x" + std::to_string(c.w) +
                                 " oc " + std::to_string(c.oc) + " k " + std::to_string(c.k) + " relu " +
                                 std::to_string(f.relu) + " round " + std::to_string(f.roundY) + " dy blocked " +
                                 std::to_string(dyBlocked);
        ConvGeom g = convOf(c);
        PoolGeom pg = poolOf(g);
        ASSERT_TRUE(conv2dMaxPoolsNhwc(dev_, g, pg, true)) << what;
        const std::size_t pooled = static_cast<std::size_t>(g.n) * pg.oh() * pg.ow() * g.oc;
        const Vec x = test::pattern(test::xCount(g), 51), w = test::pattern(test::wCount(g), 52),
                  b = test::pattern(g.oc, 53), dyPool = test::pattern(pooled, 54);
        // The separate passes, as the layers run them: y in blocks, the pool reading them.
        ConvGeom blocked = g;
        blocked.dstBlocked = true;
        Vec yBlocks(test::yCount(g)), yWant(pooled), dyBlocks(yBlocks.size());
        Codes codesWant(pooled);
        conv2dForward(dev_, yBlocks.data(), x.data(), w.data(), b.data(), blocked);
        PoolGeom separate = pg;
        separate.xBlocked = separate.dxBlocked = separate.dxRounded = true;
        separate.dyBlocked = dyBlocked;
        maxPoolNhwcForward(yWant.data(), codesWant.data(), yBlocks.data(), separate, maxPoolEpilogue(f));
        maxPoolNhwcBackward(dyBlocks.data(), dyPool.data(), codesWant.data(), separate);
        blocked.dyBlocked = blocked.dyRounded = true;
        Vec dwWant(w.size()), dbWant(g.oc), dwGot(w.size(), 5.f), dbGot(g.oc, 5.f);
        conv2dBackward(dev_, nullptr, dwWant.data(), dbWant.data(), dyBlocks.data(), x.data(), w.data(), blocked);
        // Fused: the pool from the registers, its gradient spread by the convolution.
        Vec yGot(pooled, -1.f);
        Codes codesGot(pooled, 0xffff);
        NhwcPool pool{f, yGot.data(), nullptr, nullptr, codesGot.data()};
        ConvGeom fused = g;
        fused.nhwcPool = &pool;
        conv2dForward(dev_, nullptr, x.data(), w.data(), b.data(), fused);
        EXPECT_TRUE(test::sameBits(yGot, yWant)) << what;
        EXPECT_EQ(codesGot, codesWant) << what;
        pool.dy = dyPool.data();
        fused.dyBlocked = dyBlocked;
        conv2dBackward(dev_, nullptr, dwGot.data(), dbGot.data(), dyPool.data(), x.data(), w.data(), fused);
        EXPECT_TRUE(test::sameBits(dwGot, dwWant)) << what;
        EXPECT_TRUE(test::sameBits(dbGot, dbWant)) << what;
      }
}

TEST_F(ConvWideMaxPool, AppliesOnlyWhereItsKernelRuns) {
  const ConvGeom g = convOf(kCases[0]);
  EXPECT_TRUE(conv2dMaxPoolsNhwc(dev_, g, poolOf(g), true));
  EXPECT_TRUE(conv2dMaxPoolsNhwc(dev_, g, poolOf(g), false));
  PoolGeom overlapping = poolOf(g);  // stride 1 (the convnet's pool 2)
  overlapping.stride = 1;
  EXPECT_FALSE(conv2dMaxPoolsNhwc(dev_, g, overlapping, true));
  PoolGeom wide = poolOf(g);  // 3 x 3 windows
  wide.k = wide.stride = 3;
  EXPECT_FALSE(conv2dMaxPoolsNhwc(dev_, g, wide, true));
  const ConvGeom twoChannels = convOf({2, 2, 28, 28, 32, 5, 1});
  EXPECT_FALSE(conv2dMaxPoolsNhwc(dev_, twoChannels, poolOf(twoChannels), true));
  const ConvGeom narrow = convOf({2, 1, 28, 28, 8, 5, 1});  // fewer than 16 outputs: other kernels
  EXPECT_FALSE(conv2dMaxPoolsNhwc(dev_, narrow, poolOf(narrow), true));
  {
    test::ModeScope emulated(Bf16Mode::kEmulated);
    Device dev(golden::bf16Options());
    EXPECT_FALSE(conv2dMaxPoolsNhwc(dev, g, poolOf(g), true));
    Device fp32;
    EXPECT_FALSE(conv2dMaxPoolsNhwc(fp32, g, poolOf(g), true));
    // Asked anyway: a ShapeError that says to ask first, nothing written.
    Vec y(4, 3.f);
    Codes codes(4, 9);
    test::expectFusedPoolRefused(fp32, g, NhwcPool{{}, y.data(), nullptr, nullptr, codes.data()}, "conv2dMaxPoolsNhwc");
    EXPECT_EQ(y, Vec(4, 3.f));
    EXPECT_EQ(codes, Codes(4, 9));
  }
}

TEST_F(ConvWideMaxPool, LayersFuseConvReluAndMaxPool) {
  // The convnet's front fused through the layers (Pool2d::fuseIntoNhwcConv): the same weights,
  // bit for bit, as with an Opaque copy after conv 1, which keeps the passes apart; and a
  // convolution that must give dx keeps them apart too (the same weights as with the copy).
  auto net = [](nn::Sequential& n, bool opaque) {
    n.add("conv1", nn::Conv2d(1, 32, 5, 1, 1));
    if (opaque) n.add("copy", std::make_unique<test::Opaque>());
    n.add("relu1", nn::ReLU()).add("maxpool1", nn::MaxPool2d(2, 2));
    n.add("conv2", nn::Conv2d(32, 64, 3)).add("relu2", nn::ReLU()).add("maxpool2", nn::MaxPool2d(2, 1));
    n.add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
  };
  EXPECT_TRUE(test::sameBits(test::trainedWeights(Precision::kBf16, {1, 28, 28}, false, net),
                             test::trainedWeights(Precision::kBf16, {1, 28, 28}, true, net)));
  auto behind = [](nn::Sequential& n, bool opaque) {  // conv 2 takes one channel and gives dx
    n.add("conv0", nn::Conv2d(1, 1, 3, 1, 1));
    if (opaque) n.add("copy", std::make_unique<test::Opaque>());
    n.add("conv1", nn::Conv2d(1, 16, 3)).add("relu1", nn::ReLU()).add("maxpool1", nn::MaxPool2d(2, 2));
    n.add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
  };
  EXPECT_TRUE(test::sameBits(test::trainedWeights(Precision::kBf16, {1, 16, 16}, false, behind),
                             test::trainedWeights(Precision::kBf16, {1, 16, 16}, true, behind)));
}

}  // namespace
}  // namespace xs::engine
