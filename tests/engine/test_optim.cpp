// test_optim.cpp: SGD and Adam updates against hand-computed PyTorch rules, and StepLr.
#include <gtest/gtest.h>

#include <cmath>

#include "xspawn/engine/error.hpp"
#include "xspawn/engine/optim.hpp"

namespace xs::engine {
namespace {

struct Fixture {
  Device dev;
  ParamStore ps{true};
  Fixture() {
    ps.add("w", Shape{2}, Init::kZeros);
    ps.allocate(dev);
    ps.value(0)[0] = 1.f;
    ps.value(0)[1] = -2.f;
  }
  void setGrad(float a, float b) {
    ps.grad(0)[0] = a;
    ps.grad(0)[1] = b;
  }
};

TEST(Optim, SgdMomentumNesterovWeightDecay) {
  Fixture f;
  auto opt = makeSgd(f.dev, f.ps.size(), SgdOptions{0.1f, 0.9f, 0.f, 0.01f, true});
  // Step 1: d = g + wd p; buf = d; p -= lr (d + mu buf)
  f.setGrad(0.5f, 0.25f);
  opt->step(f.ps);
  float d0 = 0.5f + 0.01f * 1.f, p0 = 1.f - 0.1f * (d0 + 0.9f * d0);
  EXPECT_FLOAT_EQ(f.ps.value(0)[0], p0);
  // Step 2: buf = mu buf + d
  f.setGrad(-1.f, 0.f);
  opt->step(f.ps);
  float d1 = -1.f + 0.01f * p0, b1 = 0.9f * d0 + d1;
  EXPECT_FLOAT_EQ(f.ps.value(0)[0], p0 - 0.1f * (d1 + 0.9f * b1));
  EXPECT_EQ(opt->steps(), 2u);
  EXPECT_EQ(opt->state().size(), 1u);
}

TEST(Optim, PlainSgd) {
  Fixture f;
  auto opt = makeSgd(f.dev, f.ps.size(), SgdOptions{0.5f});
  f.setGrad(2.f, -2.f);
  opt->step(f.ps);
  EXPECT_FLOAT_EQ(f.ps.value(0)[0], 0.f);
  EXPECT_FLOAT_EQ(f.ps.value(0)[1], -1.f);
}

TEST(Optim, AdamTwoSteps) {
  Fixture f;
  AdamOptions o;
  o.lr = 0.01f;
  o.weightDecay = 0.1f;
  auto opt = makeAdam(f.dev, f.ps.size(), o);
  double p = 1.0, m = 0, v = 0;
  for (int t = 1; t <= 2; ++t) {
    double g = (t == 1 ? 0.3 : -0.7) + 0.1 * p;
    f.setGrad(t == 1 ? 0.3f : -0.7f, 0.f);
    opt->step(f.ps);
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    double denom = std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
    p -= 0.01 / (1 - std::pow(0.9, t)) * m / denom;
    EXPECT_NEAR(f.ps.value(0)[0], p, 1e-6) << "step " << t;
  }
}

TEST(Optim, StepLrAndErrors) {
  StepLr s{0.1f, 80, 0.1f};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(79), 0.1f);
  EXPECT_FLOAT_EQ(s.at(80), 0.01f);
  EXPECT_FLOAT_EQ(s.at(165), 0.001f);
  EXPECT_THROW((StepLr{0.1f, 0, 0.1f}.at(3)), ArgumentError);
  Device dev;
  EXPECT_THROW(makeSgd(dev, 4, SgdOptions{-1.f}), ArgumentError);
  EXPECT_THROW(makeSgd(dev, 4, SgdOptions{0.1f, 0.f, 0.f, 0.f, true}), ArgumentError);
  AdamOptions bad;
  bad.beta1 = 1.f;
  EXPECT_THROW(makeAdam(dev, 4, bad), ArgumentError);
}

}  // namespace
}  // namespace xs::engine
