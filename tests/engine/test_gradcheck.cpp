// test_gradcheck.cpp: finite-difference gradient checks of every op (fp32), per-op tolerance.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/error.hpp"
#include "ops.hpp"

namespace xs::engine {
namespace {
using test::expectGradient;
using test::pattern;

TEST(GradCheck, Linear) {
  Device dev;
  const int B = 3, I = 7, O = 5;
  auto x = pattern(B * I, 1), w = pattern(O * I, 2, 0.5f), b = pattern(O, 3), r = pattern(B * O, 4);
  auto fwd = [&] {
    std::vector<float> y(B * O);
    linearForward(dev, y.data(), x.data(), w.data(), b.data(), B, I, O);
    return y;
  };
  std::vector<float> dx(B * I), dw(O * I, 0.f), db(O, 0.f);
  linearBackward(dev, dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), B, I, O);
  expectGradient("linear dx", x, dx, r, fwd);
  expectGradient("linear dw", w, dw, r, fwd);
  expectGradient("linear db", b, db, r, fwd);
}

void convCheck(int stride, int pad, int k) {
  Device dev;
  ConvGeom g{2, 3, 7, 6, 4, k, k, stride, pad};
  const std::size_t ny = static_cast<std::size_t>(g.n) * g.oc * g.oh() * g.ow();
  auto x = pattern(g.n * g.c * g.h * g.w, 5), w = pattern(g.oc * g.c * k * k, 6, 0.3f);
  auto b = pattern(g.oc, 7), r = pattern(ny, 8);
  auto fwd = [&] {
    std::vector<float> y(ny);
    conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
    return y;
  };
  std::vector<float> dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
  conv2dBackward(dev, dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), g);
  std::string tag = "conv s" + std::to_string(stride) + " p" + std::to_string(pad) + " k" + std::to_string(k);
  expectGradient(tag + " dx", x, dx, r, fwd);
  expectGradient(tag + " dw", w, dw, r, fwd);
  expectGradient(tag + " db", b, db, r, fwd);
}

// Every convolution check runs on both backends (oneDNN primitives, im2col + GEMM).
class ConvGrad : public ::testing::TestWithParam<ConvBackend> {
 protected:
  void SetUp() override { setConvBackend(GetParam()); }
  void TearDown() override { setConvBackend(ConvBackend::kOneDnn); }
};

TEST_P(ConvGrad, Plain) { convCheck(1, 0, 3); }
TEST_P(ConvGrad, Padded) { convCheck(1, 1, 3); }
TEST_P(ConvGrad, Strided) { convCheck(2, 2, 5); }
TEST_P(ConvGrad, PointwiseStrided) { convCheck(2, 0, 1); }
TEST_P(ConvGrad, Pointwise) { convCheck(1, 0, 1); }

TEST_P(ConvGrad, LargeBatchChunks) {
  // Small output planes put several images in one GEMM: check the chunked path too.
  Device dev;
  ConvGeom g{9, 2, 4, 4, 3, 3, 3, 1, 0};
  const std::size_t ny = static_cast<std::size_t>(g.n) * g.oc * g.oh() * g.ow();
  auto x = pattern(g.n * g.c * g.h * g.w, 9), w = pattern(g.oc * g.c * 9, 10, 0.3f), r = pattern(ny, 11);
  auto fwd = [&] {
    std::vector<float> y(ny);
    conv2dForward(dev, y.data(), x.data(), w.data(), nullptr, g);
    return y;
  };
  std::vector<float> dx(x.size()), dw(w.size(), 0.f);
  conv2dBackward(dev, dx.data(), dw.data(), nullptr, r.data(), x.data(), w.data(), g);
  expectGradient("chunked conv dx", x, dx, r, fwd);
  expectGradient("chunked conv dw", w, dw, r, fwd);
}

INSTANTIATE_TEST_SUITE_P(Backends, ConvGrad, ::testing::Values(ConvBackend::kOneDnn, ConvBackend::kIm2col),
                         [](const auto& info) { return std::string(convBackendName(info.param)); });

TEST(GradCheck, MaxPool) {
  PoolGeom g{2, 3, 6, 7, 3, 2, 1};
  auto x = pattern(g.n * g.c * g.h * g.w, 12);
  const std::size_t ny = static_cast<std::size_t>(g.n) * g.c * g.oh() * g.ow();
  auto r = pattern(ny, 13);
  std::vector<std::int32_t> am(ny);
  auto fwd = [&] {
    std::vector<float> y(ny);
    maxPool2dForward(y.data(), am.data(), x.data(), g);
    return y;
  };
  fwd();
  std::vector<float> dx(x.size());
  maxPool2dBackward(dx.data(), r.data(), am.data(), g);
  expectGradient("max-pool dx", x, dx, r, fwd, 1e-4f, 2e-2);
}

// ReLU then max-pool in one op (as Sequential fuses them): relu(max(x)) forward, and the
// backward's mask gives the same bits as max-pool's backward followed by the ReLU's, in both
// layouts, overlapping windows included.
TEST(GradCheck, ReluFusedIntoMaxPool) {
  for (bool nhwc : {false, true}) {
    PoolGeom g{2, 3, 6, 7, 3, 2, 1};
    g.nhwc = nhwc;
    auto x = pattern(g.n * g.c * g.h * g.w, 14);  // about half of it negative
    const std::size_t ny = static_cast<std::size_t>(g.n) * g.c * g.oh() * g.ow();
    auto r = pattern(ny, 15);
    std::vector<float> rx(x.size()), y(ny), yFused(ny), dPool(x.size()), dSeparate(x.size()), dFused(x.size());
    std::vector<std::int32_t> am(ny), amFused(ny);
    std::vector<std::uint16_t> code(ny), codeFused(ny);
    reluForward(rx.data(), x.data(), x.size());
    if (nhwc) {  // the channels-last kernel fuses the ReLU in its forward's epilogue
      maxPoolNhwcForward(y.data(), code.data(), rx.data(), g, PoolEpilogue::kNone);
      maxPoolNhwcBackward(dPool.data(), r.data(), code.data(), g);
      maxPoolNhwcForward(yFused.data(), codeFused.data(), x.data(), g, PoolEpilogue::kRelu);
      maxPoolNhwcBackward(dFused.data(), r.data(), codeFused.data(), g);
    } else {
      maxPool2dForward(y.data(), am.data(), rx.data(), g);
      maxPool2dBackward(dPool.data(), r.data(), am.data(), g);
      maxPool2dForward(yFused.data(), amFused.data(), x.data(), g);
      reluForward(yFused.data(), yFused.data(), ny);
      maxPool2dBackward(dFused.data(), r.data(), amFused.data(), g, yFused.data());
    }
    reluBackward(dSeparate.data(), dPool.data(), rx.data(), x.size());
    EXPECT_EQ(0, std::memcmp(y.data(), yFused.data(), ny * sizeof(float))) << (nhwc ? "nhwc" : "nchw");
    EXPECT_EQ(0, std::memcmp(dSeparate.data(), dFused.data(), x.size() * sizeof(float))) << (nhwc ? "nhwc" : "nchw");
  }
}

TEST(GradCheck, AvgPool) {
  PoolGeom g{2, 2, 7, 6, 3, 2, 1};
  auto x = pattern(g.n * g.c * g.h * g.w, 14);
  const std::size_t ny = static_cast<std::size_t>(g.n) * g.c * g.oh() * g.ow();
  auto r = pattern(ny, 15);
  auto fwd = [&] {
    std::vector<float> y(ny);
    avgPool2dForward(y.data(), x.data(), g);
    return y;
  };
  std::vector<float> dx(x.size());
  avgPool2dBackward(dx.data(), r.data(), g);
  expectGradient("avg-pool dx", x, dx, r, fwd);
}

TEST(GradCheck, AdaptiveAvgPool) {
  const int n = 2, c = 2, h = 7, w = 5, oh = 3, ow = 2;
  auto x = pattern(n * c * h * w, 16), r = pattern(n * c * oh * ow, 17);
  auto fwd = [&] {
    std::vector<float> y(n * c * oh * ow);
    adaptiveAvgPool2dForward(y.data(), x.data(), n, c, h, w, oh, ow);
    return y;
  };
  std::vector<float> dx(x.size());
  adaptiveAvgPool2dBackward(dx.data(), r.data(), n, c, h, w, oh, ow);
  expectGradient("adaptive avg-pool dx", x, dx, r, fwd);
}

TEST(GradCheck, ReluAndAdd) {
  auto x = pattern(64, 18), a = pattern(64, 19), r = pattern(64, 20);
  for (std::size_t i = 0; i < 64; ++i)
    if (std::fabs(x[i] + a[i]) < 0.05f) x[i] += 0.2f;  // keep clear of the kink
  auto fwd = [&] {
    std::vector<float> s(64), y(64);
    addForward(s.data(), x.data(), a.data(), 64);
    reluForward(y.data(), s.data(), 64);
    return y;
  };
  auto y = fwd();
  std::vector<float> dx(64);
  reluBackward(dx.data(), r.data(), y.data(), 64);
  std::vector<float> da = dx;  // add passes the gradient to both inputs unchanged
  expectGradient("relu(x + a) dx", x, dx, r, fwd, 1e-3f);
  expectGradient("relu(x + a) da", a, da, r, fwd, 1e-3f);
}

TEST(GradCheck, Dropout) {
  auto x = pattern(200, 21), r = pattern(200, 22);
  std::vector<float> mask(200);
  auto fwd = [&] {
    std::vector<float> y(200);
    dropoutForward(y.data(), mask.data(), x.data(), 200, 0.3f, 99, 5);
    return y;
  };
  fwd();
  std::vector<float> dx(200);
  dropoutBackward(dx.data(), r.data(), mask.data(), 200);
  expectGradient("dropout dx", x, dx, r, fwd);
}

void batchNormCheck(bool train, bool nhwc = false, bool relu = false) {
  BatchNormArgs a{3, 2, 5};
  a.nhwc = nhwc;  // the same numbers read as [n, hw, c]
  a.relu = relu;
  const std::size_t n = 3 * 2 * 5;
  auto x = pattern(n, 23, 2.f), gamma = pattern(2, 24), beta = pattern(2, 25), r = pattern(n, 26);
  std::vector<float> mean(2), invstd(2), rm{0.1f, -0.2f}, rv{1.5f, 0.7f};
  auto fwd = [&] {
    std::vector<float> y(n), m = rm, v = rv;
    if (train) batchNorm2dForwardTrain(y.data(), mean.data(), invstd.data(), m.data(), v.data(), x.data(),
                                       gamma.data(), beta.data(), a);
    else batchNorm2dForwardEval(y.data(), mean.data(), invstd.data(), rm.data(), rv.data(), x.data(),
                                gamma.data(), beta.data(), a);
    return y;
  };
  std::vector<float> y = fwd();
  std::vector<float> dx(n), dg(2, 0.f), dbt(2, 0.f);
  batchNorm2dBackward(dx.data(), dg.data(), dbt.data(), r.data(), x.data(), mean.data(), invstd.data(),
                      gamma.data(), train, a, y.data());
  std::string tag = std::string(train ? "batch-norm train" : "batch-norm eval") + (nhwc ? " nhwc" : "") +
                    (relu ? " relu" : "");
  expectGradient(tag + " dx", x, dx, r, fwd, 1e-2f, 3e-2);
  expectGradient(tag + " dgamma", gamma, dg, r, fwd);
  expectGradient(tag + " dbeta", beta, dbt, r, fwd);
}

TEST(GradCheck, BatchNormTrain) { batchNormCheck(true); }
TEST(GradCheck, BatchNormEval) { batchNormCheck(false); }
TEST(GradCheck, BatchNormChannelsLastWithRelu) {
  for (bool train : {true, false})
    for (bool relu : {false, true}) {
      batchNormCheck(train, true, relu);
      if (relu) batchNormCheck(train, false, true);
    }
}

TEST(GradCheck, LogSoftmaxNll) {
  const int B = 4, C = 5;
  auto x = pattern(B * C, 27, 2.f);
  std::vector<std::int32_t> labels{0, 3, 4, 1};
  std::vector<float> one{1.f};
  auto fwd = [&] {
    std::vector<float> lp(B * C);
    logSoftmaxForward(lp.data(), x.data(), B, C);
    return std::vector<float>{nllLossForward(lp.data(), labels.data(), B, C)};
  };
  std::vector<float> lp(B * C), dlp(B * C), dx(B * C);
  logSoftmaxForward(lp.data(), x.data(), B, C);
  nllLossBackward(dlp.data(), labels.data(), B, C);
  logSoftmaxBackward(dx.data(), dlp.data(), lp.data(), B, C);
  expectGradient("log-softmax + nll dx", x, dx, one, fwd, 1e-2f, 1e-2);
}

TEST(GradCheck, CrossEntropy) {
  const int B = 4, C = 6;
  auto x = pattern(B * C, 28, 3.f);
  std::vector<std::int32_t> labels{5, 0, 2, 2};
  std::vector<float> probs(B * C), dx(B * C), one{1.f};
  auto fwd = [&] { return std::vector<float>{crossEntropyForward(probs.data(), x.data(), labels.data(), B, C)}; };
  fwd();
  crossEntropyBackward(dx.data(), probs.data(), labels.data(), B, C);
  expectGradient("cross-entropy dlogits", x, dx, one, fwd, 1e-2f, 1e-2);
}

TEST(GradCheck, CrossEntropyWithLabelSmoothing) {
  // torch's CrossEntropyLoss(label_smoothing=eps): (1 - eps) * nll + eps * mean over classes of
  // -log p, and its gradient.
  const int B = 4, C = 6;
  const float eps = 0.1f;
  auto x = pattern(B * C, 28, 3.f);
  std::vector<std::int32_t> labels{5, 0, 2, 2};
  std::vector<float> probs(B * C), dx(B * C), lp(B * C), one{1.f};
  logSoftmaxForward(lp.data(), x.data(), B, C);
  double expected = 0;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c)
      expected -= lp[b * C + c] * ((c == labels[b] ? 1 - eps : 0.f) + eps / C) / B;
  EXPECT_NEAR(crossEntropyForward(probs.data(), x.data(), labels.data(), B, C, eps), expected, 1e-5);
  auto fwd = [&] { return std::vector<float>{crossEntropyForward(probs.data(), x.data(), labels.data(), B, C, eps)}; };
  fwd();
  crossEntropyBackward(dx.data(), probs.data(), labels.data(), B, C, 1.f, eps);
  expectGradient("label-smoothed cross-entropy dlogits", x, dx, one, fwd, 1e-2f, 1e-2);
  // eps = 0 is plain cross-entropy, to the bit.
  std::vector<float> plain(B * C), zero(B * C);
  const float a = crossEntropyForward(probs.data(), x.data(), labels.data(), B, C);
  crossEntropyBackward(plain.data(), probs.data(), labels.data(), B, C);
  EXPECT_EQ(a, crossEntropyForward(probs.data(), x.data(), labels.data(), B, C, 0.f));
  crossEntropyBackward(zero.data(), probs.data(), labels.data(), B, C, 1.f, 0.f);
  EXPECT_EQ(plain, zero);
}

TEST(OpErrors, BadShapesAndLabels) {
  Device dev;
  std::vector<float> buf(1000);
  std::vector<std::int32_t> am(1000);
  EXPECT_THROW(conv2dForward(dev, buf.data(), buf.data(), buf.data(), nullptr, ConvGeom{1, 1, 2, 2, 1, 5, 5}),
               ShapeError);
  EXPECT_THROW(maxPool2dForward(buf.data(), am.data(), buf.data(), PoolGeom{1, 1, 2, 2, 3, 1}), ShapeError);
  std::vector<std::int32_t> labels{0, 7};
  EXPECT_THROW(crossEntropyForward(buf.data(), buf.data(), labels.data(), 2, 5), ShapeError);
  EXPECT_THROW(dropoutForward(buf.data(), buf.data(), buf.data(), 4, 1.f, 1, 1), UsageError);
  std::vector<float> one(4);
  EXPECT_THROW(batchNorm2dForwardTrain(buf.data(), one.data(), one.data(), one.data(), one.data(), buf.data(),
                                       one.data(), one.data(), BatchNormArgs{1, 1, 1}),
               ShapeError);
}

}  // namespace
}  // namespace xs::engine
