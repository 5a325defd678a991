// test_conv_algorithms.cpp: which oneDNN algorithm each backward pass of a 3x3 convolution takes
// (Winograd for the weight gradient, for the data gradient only on big passes), and that a data
// gradient on Winograd stays within the golden tolerance of the direct one at such a size.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "conv_onednn.hpp"
#include "ops.hpp"
#include "test_util.hpp"
#include "xspawn/engine/device.hpp"

namespace xs::engine {
namespace {

ConvGeom conv3x3(int n, int c, int hw, int oc) {
  ConvGeom g{n, c, hw, hw, oc, 3, 3};
  g.pad = 1;
  return g;
}

}  // namespace

TEST(ConvAlgorithms, DataGradientOnWinogradOnlyOnBigPasses) {
  // The convnet's conv 2 and 3 (no padding) at the default batch 16 and the bench's 100: direct.
  for (int n : {16, 100}) {
    EXPECT_FALSE(detail::winogradDataGradient(ConvGeom{n, 32, 13, 13, 64, 3, 3})) << n;
    EXPECT_FALSE(detail::winogradDataGradient(ConvGeom{n, 64, 10, 10, 128, 3, 3})) << n;
  }
  // ResNet-18's smallest 3x3 stage at batch 128 and AlexNet 224's conv 4 at batch 32: Winograd.
  EXPECT_TRUE(detail::winogradDataGradient(conv3x3(128, 256, 8, 256)));
  EXPECT_TRUE(detail::winogradDataGradient(conv3x3(32, 384, 13, 256)));
}

TEST(ConvAlgorithms, WinogradDataGradientMatchesDirect) {
  // 1.2G multiply-adds: the data gradient runs on Winograd by default; with Winograd off, direct.
  ConvGeom g = conv3x3(16, 128, 16, 256);
  ASSERT_TRUE(detail::winogradDataGradient(g));
  Device dev;
  const std::size_t nx = static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  const std::size_t nw = static_cast<std::size_t>(g.oc) * g.c * 9, ny = static_cast<std::size_t>(g.n) * g.oc * g.oh() * g.ow();
  auto x = test::pattern(nx, 1), w = test::pattern(nw, 2), dy = test::pattern(ny, 3);
  auto run = [&](bool winograd) {
    setConvWinograd(winograd);
    std::vector<float> dx(nx), dw(nw, 0.f);
    conv2dBackward(dev, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), g);
    setConvWinograd(true);
    return std::pair{dx, dw};
  };
  auto [dxWino, dwWino] = run(true);
  auto [dxDirect, dwDirect] = run(false);
  auto expectClose = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    double absSum = 0;
    for (float v : want) absSum += std::fabs(v);
    const double typical = absSum / static_cast<double>(want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      bad += std::fabs(got[i] - want[i]) > 2e-3 * (std::fabs(want[i]) + typical);
    EXPECT_EQ(bad, 0u) << what << ": values beyond the golden tolerance of the direct pass";
  };
  expectClose(dxWino, dxDirect, "dx");
  expectClose(dwWino, dwDirect, "dw");
  EXPECT_NE(dxWino, dxDirect) << "the data gradient did not take Winograd";
}

}  // namespace xs::engine
