// test_optim.cpp: SGD and Adam updates against hand-computed PyTorch rules, the schedules, and
// the bf16 mirror of the weights the optimizers write.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <numbers>

#include "xspawn/error.hpp"
#include "xspawn/optim.hpp"
#include "gemm.hpp"
#include "param_mirror.hpp"

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
  auto opt = optim::SGD(f.ps, f.dev, optim::SgdOptions{0.1f, 0.9f, 0.f, 0.01f, true});
  // Step 1: d = g + wd p; buf = d; p -= lr (d + mu buf)
  f.setGrad(0.5f, 0.25f);
  opt->step();
  float d0 = 0.5f + 0.01f * 1.f, p0 = 1.f - 0.1f * (d0 + 0.9f * d0);
  EXPECT_FLOAT_EQ(f.ps.value(0)[0], p0);
  // Step 2: buf = mu buf + d
  f.setGrad(-1.f, 0.f);
  opt->step();
  float d1 = -1.f + 0.01f * p0, b1 = 0.9f * d0 + d1;
  EXPECT_FLOAT_EQ(f.ps.value(0)[0], p0 - 0.1f * (d1 + 0.9f * b1));
  EXPECT_EQ(opt->steps(), 2u);
  EXPECT_EQ(opt->state().size(), 1u);
}

TEST(Optim, PlainSgd) {
  Fixture f;
  auto opt = optim::SGD(f.ps, f.dev, optim::SgdOptions{0.5f});
  f.setGrad(2.f, -2.f);
  opt->step();
  EXPECT_FLOAT_EQ(f.ps.value(0)[0], 0.f);
  EXPECT_FLOAT_EQ(f.ps.value(0)[1], -1.f);
}

TEST(Optim, AdamTwoSteps) {
  Fixture f;
  optim::AdamOptions o;
  o.lr = 0.01f;
  o.weightDecay = 0.1f;
  auto opt = optim::Adam(f.ps, f.dev, o);
  double p = 1.0, m = 0, v = 0;
  for (int t = 1; t <= 2; ++t) {
    double g = (t == 1 ? 0.3 : -0.7) + 0.1 * p;
    f.setGrad(t == 1 ? 0.3f : -0.7f, 0.f);
    opt->step();
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    double denom = std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
    p -= 0.01 / (1 - std::pow(0.9, t)) * m / denom;
    EXPECT_NEAR(f.ps.value(0)[0], p, 1e-6) << "step " << t;
  }
}

TEST(Optim, StepLrAndErrors) {
  optim::StepLR s{0.1f, 80, 0.1f};
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(79), 0.1f);
  EXPECT_FLOAT_EQ(s.at(80), 0.01f);
  EXPECT_FLOAT_EQ(s.at(165), 0.001f);
  EXPECT_THROW((optim::StepLR{0.1f, 0, 0.1f}.at(3)), UsageError);
  Fixture f;
  EXPECT_THROW(optim::SGD(f.ps, f.dev, optim::SgdOptions{-1.f}), UsageError);
  EXPECT_THROW(optim::SGD(f.ps, f.dev, optim::SgdOptions{0.1f, 0.f, 0.f, 0.f, true}), UsageError);
  optim::AdamOptions bad;
  bad.beta1 = 1.f;
  EXPECT_THROW(optim::Adam(f.ps, f.dev, bad), UsageError);
}

TEST(Optim, AdamWDecouplesTheWeightDecay) {
  Fixture f;
  optim::AdamWOptions o;
  o.lr = 0.01f;
  o.weightDecay = 0.1f;
  auto opt = optim::AdamW(f.ps, f.dev, o);
  EXPECT_STREQ(opt->kind(), "adamw");
  double p = 1.0, m = 0, v = 0;
  for (int t = 1; t <= 3; ++t) {
    const double g = 0.5 * t;
    f.setGrad(static_cast<float>(g), 0.f);
    opt->step();
    // torch.optim.AdamW: p *= 1 - lr wd; then Adam on the raw gradient.
    p *= 1.0 - 0.01 * 0.1;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    const double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.999, t));
    p -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    EXPECT_NEAR(f.ps.value(0)[0], p, 1e-6) << "step " << t;
  }
}

TEST(Optim, AdadeltaFollowsTorch) {
  Fixture f;
  optim::AdadeltaOptions o;  // lr 1.0, rho 0.9, eps 1e-6 as in PyTorch's MNIST example
  auto opt = optim::Adadelta(f.ps, f.dev, o);
  EXPECT_STREQ(opt->kind(), "adadelta");
  EXPECT_EQ(opt->state().size(), 2u);
  double p = 1.0, sq = 0, acc = 0;
  for (int t = 1; t <= 3; ++t) {
    const double g = t == 2 ? -0.3 : 0.8;
    f.setGrad(static_cast<float>(g), 0.f);
    opt->step();
    sq = 0.9 * sq + 0.1 * g * g;
    const double delta = std::sqrt(acc + 1e-6) / std::sqrt(sq + 1e-6) * g;
    acc = 0.9 * acc + 0.1 * delta * delta;
    p -= 1.0 * delta;
    EXPECT_NEAR(f.ps.value(0)[0], p, 1e-6) << "step " << t;
  }
  optim::AdadeltaOptions bad;
  bad.rho = 1.5f;
  EXPECT_THROW(optim::Adadelta(f.ps, f.dev, bad), UsageError);
}

TEST(Optim, OneCycle) {
  // torch.optim.lr_scheduler.OneCycleLR(max_lr=0.1, total_steps=10, cycle_momentum=False):
  // 0.004 up to 0.1 at step 2 (0.3 * 10 - 1), down to 4e-7 at step 9, half cosines.
  optim::OneCycleLR c{0.1, 10};
  EXPECT_FLOAT_EQ(c.at(0), 0.004f);
  EXPECT_FLOAT_EQ(c.at(1), 0.052f);
  EXPECT_FLOAT_EQ(c.at(2), 0.1f);
  EXPECT_NEAR(c.at(6), 4e-7 + (0.1 - 4e-7) / 2 * (std::cos(std::numbers::pi * 4 / 7) + 1), 1e-8);
  EXPECT_FLOAT_EQ(c.at(9), 4e-7f);
  EXPECT_FLOAT_EQ(c.at(20), 4e-7f);  // past the end: the last rate
  optim::OneCycleLR linear{0.1, 10, 0.3, 25, 1e4, false};
  EXPECT_FLOAT_EQ(linear.at(1), 0.052f);
  EXPECT_NEAR(linear.at(6), 0.1 + (4e-7 - 0.1) * 4 / 7, 1e-8);
  EXPECT_THROW((optim::OneCycleLR{0.1, 0}.at(0)), UsageError);
  EXPECT_THROW((optim::OneCycleLR{0.1, 10, 1.0}.at(0)), UsageError);
  EXPECT_THROW((optim::OneCycleLR{0.1, 10}.at(-1)), UsageError);
}

TEST(Optim, CosineAnnealing) {
  optim::CosineAnnealingLR c{0.1f, 10, 0.001f};
  EXPECT_FLOAT_EQ(c.at(0), 0.1f);
  EXPECT_NEAR(c.at(5), 0.001 + 0.099 * 0.5, 1e-7);
  EXPECT_FLOAT_EQ(c.at(10), 0.001f);
  EXPECT_FLOAT_EQ(c.at(12), 0.001f);
  EXPECT_THROW((optim::CosineAnnealingLR{0.1f, 0}.at(1)), UsageError);
  optim::StepLR seed002{1.0f, 1, 0.7f};
  EXPECT_NEAR(seed002.at(3), 0.343, 1e-6);
}

// bf16 keeps the weights rounded in a mirror (param_mirror.hpp) that every optimizer writes in
// its own pass: emulated bf16's rounded floats or native bf16's bits. A store nobody read
// rounded has no mirror and the same update.
namespace mirror {

using Make = std::function<std::unique_ptr<optim::Optimizer>(ParamStore&, Device&)>;

void fill(ParamStore& ps, std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) ps.value(0)[i] = scale * std::sin(0.37f * static_cast<float>(i));
}

// Two steps on a store with a mirror (bits: native's) and on one without: the same values, and
// the mirror holds their rounding without being rounded again when read.
void expectMirrorWritten(const Make& make, std::size_t n, bool bits) {
  Device dev;
  ParamStore with{true}, without{true};
  for (ParamStore* ps : {&with, &without}) {
    ps->add("w", Shape{static_cast<int>(n)}, Init::kZeros);
    ps->allocate(dev);
    fill(*ps, n, 1.f);
  }
  using detail::ParamStoreAccess;
  const float* r = bits ? nullptr : ParamStoreAccess::rounded(with, 0);  // makes the mirror
  const std::uint16_t* h = bits ? ParamStoreAccess::bits(with, 0) : nullptr;
  auto a = make(with, dev), b = make(without, dev);
  for (int step = 0; step < 2; ++step) {
    for (ParamStore* ps : {&with, &without})
      for (std::size_t i = 0; i < n; ++i) ps->grad(0)[i] = 0.25f * std::cos(0.11f * static_cast<float>(i + step));
    a->step();
    b->step();
  }
  if (bits) ASSERT_EQ(ParamStoreAccess::bits(with, 0), h);
  else ASSERT_EQ(ParamStoreAccess::rounded(with, 0), r);
  const ParamStore& w = without;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad += std::memcmp(&w.value(0)[i], &std::as_const(with).value(0)[i], sizeof(float)) != 0;
    if (bits) {
      bad += h[i] != toBf16Bits(w.value(0)[i]);
    } else {
      const float want = roundToBf16(w.value(0)[i]);
      bad += std::memcmp(&r[i], &want, sizeof(float)) != 0;
    }
  }
  EXPECT_EQ(bad, 0u) << n << " floats";
}

}  // namespace mirror

TEST(Optim, EveryRuleWritesTheBf16MirrorInItsPass) {
  const std::vector<std::pair<const char*, mirror::Make>> rules{
      {"sgd", [](ParamStore& p, Device& d) { return optim::SGD(p, d, optim::SgdOptions{0.1f}); }},
      {"momentum", [](ParamStore& p, Device& d) { return optim::SGD(p, d, optim::SgdOptions{0.1f, 0.9f, 0.f, 1e-3f}); }},
      {"nesterov",
       [](ParamStore& p, Device& d) { return optim::SGD(p, d, optim::SgdOptions{0.1f, 0.9f, 0.f, 0.f, true}); }},
      {"adam", [](ParamStore& p, Device& d) { return optim::Adam(p, d, optim::AdamOptions{}); }},
      {"adamw", [](ParamStore& p, Device& d) { return optim::AdamW(p, d, optim::AdamWOptions{}); }},
      {"adadelta", [](ParamStore& p, Device& d) { return optim::Adadelta(p, d, optim::AdadeltaOptions{}); }}};
  // Both kinds of mirror, in place, and above the size whose mirror is streamed past the cache
  // (with a ragged tail, odd for the bits).
  for (bool bits : {false, true})
    for (std::size_t n : {std::size_t{1000}, (std::size_t{4} << 20) + 37})
      for (const auto& [name, make] : rules) {
        SCOPED_TRACE(std::string(name) + (bits ? " bits" : " rounded"));
        mirror::expectMirrorWritten(make, n, bits);
      }
}

TEST(ParamStore, AStoreReadBothWaysKeepsBothMirrorsRight) {
  // An optimizer step writes the bits mirror; the rounded floats are then stale and rounded again.
  Device dev;
  ParamStore ps{true};
  ps.add("a", Shape{3}, Init::kZeros);
  ps.allocate(dev);
  ps.value(0)[0] = 1.f;
  using detail::ParamStoreAccess;
  EXPECT_EQ(ParamStoreAccess::rounded(ps, 0)[0], 1.f);
  EXPECT_EQ(ParamStoreAccess::bits(ps, 0)[0], 0x3f80);
  ps.grad(0)[0] = -1.f;
  optim::SGD(ps, dev, optim::SgdOptions{1.f})->step();  // 1 - 1 * (-1) = 2
  EXPECT_EQ(ParamStoreAccess::bits(ps, 0)[0], 0x4000);
  EXPECT_EQ(ParamStoreAccess::rounded(ps, 0)[0], 2.f);
  ps.value(0)[0] = 3.f;  // value(i) counts view i as changed in both mirrors
  EXPECT_EQ(ParamStoreAccess::bits(ps, 0)[0], 0x4040);
  EXPECT_EQ(ParamStoreAccess::rounded(ps, 0)[0], 3.f);
}

TEST(ParamStore, AValueWrittenThroughTheStoreIsRoundedAgain) {
  Device dev;
  ParamStore ps{true};
  ps.add("a", Shape{3}, Init::kZeros);
  ps.add("b", Shape{3}, Init::kZeros);
  ps.allocate(dev);
  const float x = 1.00390625f;  // 1 + 2^-8: not a bf16, rounds to 1 (ties to even)
  EXPECT_EQ(detail::ParamStoreAccess::rounded(ps, 0)[0], 0.f);
  ps.value(0)[0] = x;  // value(i) counts view i as changed
  EXPECT_EQ(detail::ParamStoreAccess::rounded(ps, 0)[0], 1.f);
  ps.values()[ps.views()[1].offset] = 3.f;  // values() counts every view as changed
  EXPECT_EQ(detail::ParamStoreAccess::rounded(ps, 1)[0], 3.f);
  EXPECT_EQ(detail::ParamStoreAccess::rounded(ps, 0)[0], 1.f);
}

TEST(ParamStore, AStepWritesTheBitsOfTheViewsReadThroughThemOnly) {
  // Views a, b, c: a and c are read through the bits (as the linear layers' weights), b is not
  // (as a convolution's, which reads the values): a step writes a's and c's bits, leaves b's
  // memory alone, and b's first read through the bits converts its current values.
  Device dev;
  ParamStore ps{true};
  for (const char* name : {"a", "b", "c"}) ps.add(name, Shape{40}, Init::kZeros);
  ps.allocate(dev);
  for (std::size_t v = 0; v < 3; ++v)
    for (int i = 0; i < 40; ++i) ps.value(v)[i] = 0.5f + 0.01f * static_cast<float>(i + 40 * v);
  using detail::ParamStoreAccess;
  const std::uint16_t* a = ParamStoreAccess::bits(ps, 0);
  ParamStoreAccess::bits(ps, 2);
  auto* b = const_cast<std::uint16_t*>(a) + ps.views()[1].offset;  // b's bits, never read
  std::fill(b, b + 40, std::uint16_t{0xdead});
  auto opt = optim::Adam(ps, dev, optim::AdamOptions{});
  for (int step = 0; step < 2; ++step) {
    for (std::size_t v = 0; v < 3; ++v)
      for (int i = 0; i < 40; ++i) ps.grad(v)[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    opt->step();
  }
  const ParamStore& values = ps;
  for (std::size_t v : {0u, 2u}) {
    const std::uint16_t* bits = ParamStoreAccess::bits(ps, v);
    for (int i = 0; i < 40; ++i) ASSERT_EQ(bits[i], toBf16Bits(values.value(v)[i])) << "view " << v << " " << i;
  }
  EXPECT_EQ(std::count(b, b + 40, std::uint16_t{0xdead}), 40);
  ParamStoreAccess::bits(ps, 1);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(b[i], toBf16Bits(values.value(1)[i])) << i;
}

}  // namespace
}  // namespace xs::engine
