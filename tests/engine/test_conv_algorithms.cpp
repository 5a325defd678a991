// test_conv_algorithms.cpp: which oneDNN algorithm each backward pass of a 3x3 convolution takes
// (Winograd for the weight gradient, for the data gradient only on big passes), and that a data
// gradient on Winograd stays within the golden tolerance of the direct one at such a size. The
// convolutions of a device share their staging buffers: layers and batch sizes interleaved on one
// device give the bits each gives on a device of its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
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

// The convnet's conv 2 and 3 channels last (the layouts that stage through reorders in bf16), at
// batch 16 and at an epoch's last, partial batch of 12: forwards then backwards, interleaved as a
// network and a partial batch run them, on one device, against each on a device of its own.
TEST(ConvAlgorithms, SharedStagingKeepsEveryLayersBits) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    std::vector<ConvGeom> layers{ConvGeom{16, 32, 13, 13, 64, 3, 3}, ConvGeom{16, 64, 10, 10, 128, 3, 3},
                                 ConvGeom{12, 32, 13, 13, 64, 3, 3}};
    struct Result {
      std::vector<float> y, dx, dw, db;
    };
    auto inputs = [](const ConvGeom& g, int seed) {
      const std::size_t nx = static_cast<std::size_t>(g.n) * g.c * g.h * g.w, nw = static_cast<std::size_t>(g.oc) * g.c * 9;
      return std::tuple{test::pattern(nx, seed), test::pattern(nw, seed + 1), test::pattern(g.oc, seed + 2),
                        test::pattern(static_cast<std::size_t>(g.n) * g.oc * g.oh() * g.ow(), seed + 3)};
    };
    auto forward = [&](Device& dev, const ConvGeom& g, int seed, Result& r) {
      auto [x, w, b, dy] = inputs(g, seed);
      r.y.assign(dy.size(), 0.f);
      conv2dForward(dev, r.y.data(), x.data(), w.data(), b.data(), g);
    };
    auto backward = [&](Device& dev, const ConvGeom& g, int seed, Result& r) {
      auto [x, w, b, dy] = inputs(g, seed);
      r.dx.assign(x.size(), 0.f);
      r.dw.assign(w.size(), 0.f);
      r.db.assign(b.size(), 0.f);
      conv2dBackward(dev, r.dx.data(), r.dw.data(), r.db.data(), dy.data(), x.data(), w.data(), g);
    };
    for (ConvGeom& g : layers) g.srcNhwc = g.dstNhwc = true;
    std::vector<Result> alone(layers.size()), shared(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      DeviceOptions o;
      o.precision = p;
      Device dev(o);
      forward(dev, layers[i], static_cast<int>(10 * i), alone[i]);
      backward(dev, layers[i], static_cast<int>(10 * i), alone[i]);
    }
    DeviceOptions o;
    o.precision = p;
    Device dev(o);
    for (std::size_t i = 0; i < layers.size(); ++i) forward(dev, layers[i], static_cast<int>(10 * i), shared[i]);
    for (std::size_t i = layers.size(); i-- > 0;) backward(dev, layers[i], static_cast<int>(10 * i), shared[i]);
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const std::string what = std::string(precisionName(p)) + ", layer " + std::to_string(i);
      auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
      };
      EXPECT_TRUE(same(shared[i].y, alone[i].y)) << what << ": y";
      EXPECT_TRUE(same(shared[i].dx, alone[i].dx)) << what << ": dx";
      EXPECT_TRUE(same(shared[i].dw, alone[i].dw)) << what << ": dw";
      EXPECT_TRUE(same(shared[i].db, alone[i].db)) << what << ": db";
    }
  }
}

}  // namespace xs::engine
