// optim.cpp: SGD, Adam, AdamW and Adadelta over flat buffers, following torch.optim's
// single-tensor updates; StepLR and CosineAnnealingLR.
#include "xspawn/optim.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "xspawn/error.hpp"

namespace xs::optim {

using engine::Device;
using engine::ParamStore;
using engine::Shape;
using engine::Tensor;

std::vector<std::pair<std::string, Tensor*>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor*>> r;
  for (auto& [name, t] : state_) r.emplace_back(name, &t);
  return r;
}

namespace {

Tensor zeros(Device& dev, std::size_t n, const char* what) {
  Tensor t(dev, Shape{static_cast<int>(std::max<std::size_t>(n, 1))}, what);
  t.zero();
  return t;
}

class SgdRule : public Optimizer {
 public:
  SgdRule(ParamStore& ps, Device& dev, const SgdOptions& o) : Optimizer(ps), o_(o) {
    const std::size_t n = ps.size();
    XS_CHECK(o.lr >= 0.f && o.momentum >= 0.f && o.weightDecay >= 0.f, UsageError,
             "SGD: learning rate, momentum and weight decay must be non-negative");
    XS_CHECK(!o.nesterov || (o.momentum > 0.f && o.dampening == 0.f), UsageError,
             "SGD: nesterov needs a positive momentum and zero dampening");
    lr_ = o.lr;
    if (o.momentum > 0.f) state_.emplace_back("momentum_buffer", zeros(dev, n, "SGD momentum"));
  }
  const char* kind() const override { return "sgd"; }
  void step() override {
    ParamStore& ps = params_;
    float* p = ps.values();
    const float* g = ps.grads();
    const std::size_t n = ps.size();
    const float wd = o_.weightDecay, mu = o_.momentum, damp = 1.f - o_.dampening, lr = lr_;
    // One branch-free loop per case so each vectorises.
    float* buf = mu == 0.f ? nullptr : state_[0].second.data();
    const float keep = steps_ == 0 ? 0.f : mu, take = steps_ == 0 ? 1.f : damp;  // buf = d at first
    if (!buf) {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
    } else if (o_.nesterov) {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) {
        float d = g[i] + wd * p[i], b = keep * buf[i] + take * d;
        buf[i] = b;
        p[i] -= lr * (d + mu * b);
      }
    } else {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) {
        float d = g[i] + wd * p[i], b = keep * buf[i] + take * d;
        buf[i] = b;
        p[i] -= lr * b;
      }
    }
    ++steps_;
  }

 private:
  SgdOptions o_;
};

class AdamRule : public Optimizer {
 public:
  AdamRule(ParamStore& ps, Device& dev, const AdamOptions& o, bool decoupled = false)
      : Optimizer(ps), o_(o), decoupled_(decoupled) {
    const std::size_t n = ps.size();
    XS_CHECK(o.lr >= 0.f && o.eps >= 0.f && o.weightDecay >= 0.f, UsageError,
             "Adam: learning rate, eps and weight decay must be non-negative");
    XS_CHECK(o.beta1 >= 0.f && o.beta1 < 1.f && o.beta2 >= 0.f && o.beta2 < 1.f, UsageError,
             "Adam: betas must be in [0, 1)");
    lr_ = o.lr;
    state_.emplace_back("exp_avg", zeros(dev, n, "Adam first moment"));
    state_.emplace_back("exp_avg_sq", zeros(dev, n, "Adam second moment"));
  }
  const char* kind() const override { return decoupled_ ? "adamw" : "adam"; }
  void step() override {
    ParamStore& ps = params_;
    ++steps_;
    const double t = static_cast<double>(steps_);
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta1), t));
    const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta2), t));
    // Adam adds the decay to the gradient; AdamW shrinks the weights first (decoupled), in its
    // own instance of the loop so Adam's stays as it was.
    if (decoupled_)
      update<true>(ps, lr_ / bc1, std::sqrt(bc2));
    else
      update<false>(ps, lr_ / bc1, std::sqrt(bc2));
  }

 private:
  template <bool kDecoupled>
  void update(ParamStore& ps, float stepSize, float bc2Sqrt) {
    float* p = ps.values();
    const float* g = ps.grads();
    float* m = state_[0].second.data();
    float* v = state_[1].second.data();
    const std::size_t n = ps.size();
    const float b1 = o_.beta1, b2 = o_.beta2, eps = o_.eps;
    const float wd = kDecoupled ? 0.f : o_.weightDecay, shrink = 1.f - lr_ * o_.weightDecay;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (kDecoupled) p[i] *= shrink;
      float d = g[i] + wd * p[i];
      m[i] = m[i] * b1 + (1.f - b1) * d;
      v[i] = v[i] * b2 + (1.f - b2) * d * d;
      float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
      p[i] -= stepSize * (m[i] / denom);
    }
  }

 private:
  AdamOptions o_;
  bool decoupled_;
};

class AdadeltaRule : public Optimizer {
 public:
  AdadeltaRule(ParamStore& ps, Device& dev, const AdadeltaOptions& o) : Optimizer(ps), o_(o) {
    XS_CHECK(o.lr >= 0.f && o.eps >= 0.f && o.weightDecay >= 0.f, UsageError,
             "Adadelta: learning rate, eps and weight decay must be non-negative");
    XS_CHECK(o.rho >= 0.f && o.rho <= 1.f, UsageError, "Adadelta: rho must be in [0, 1]");
    lr_ = o.lr;
    state_.emplace_back("square_avg", zeros(dev, ps.size(), "Adadelta square average"));
    state_.emplace_back("acc_delta", zeros(dev, ps.size(), "Adadelta accumulated update"));
  }
  const char* kind() const override { return "adadelta"; }
  void step() override {
    ParamStore& ps = params_;
    ++steps_;
    float* p = ps.values();
    const float* g = ps.grads();
    float* sq = state_[0].second.data();
    float* acc = state_[1].second.data();
    const std::size_t n = ps.size();
    const float rho = o_.rho, eps = o_.eps, wd = o_.weightDecay, lr = lr_;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) {
      float d = g[i] + wd * p[i];
      sq[i] = sq[i] * rho + (1.f - rho) * d * d;
      float delta = std::sqrt(acc[i] + eps) / std::sqrt(sq[i] + eps) * d;
      acc[i] = acc[i] * rho + (1.f - rho) * delta * delta;
      p[i] -= lr * delta;
    }
  }

 private:
  AdadeltaOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> SGD(ParamStore& params, Device& dev, const SgdOptions& o) {
  return std::make_unique<SgdRule>(params, dev, o);
}
std::unique_ptr<Optimizer> Adam(ParamStore& params, Device& dev, const AdamOptions& o) {
  return std::make_unique<AdamRule>(params, dev, o);
}
std::unique_ptr<Optimizer> AdamW(ParamStore& params, Device& dev, const AdamWOptions& o) {
  return std::make_unique<AdamRule>(params, dev, AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weightDecay}, true);
}
std::unique_ptr<Optimizer> Adadelta(ParamStore& params, Device& dev, const AdadeltaOptions& o) {
  return std::make_unique<AdadeltaRule>(params, dev, o);
}
std::unique_ptr<Optimizer> SGD(engine::Model& m, const SgdOptions& o) { return SGD(m.params(), m.device(), o); }
std::unique_ptr<Optimizer> Adam(engine::Model& m, const AdamOptions& o) { return Adam(m.params(), m.device(), o); }
std::unique_ptr<Optimizer> AdamW(engine::Model& m, const AdamWOptions& o) { return AdamW(m.params(), m.device(), o); }
std::unique_ptr<Optimizer> Adadelta(engine::Model& m, const AdadeltaOptions& o) {
  return Adadelta(m.params(), m.device(), o);
}

float StepLR::at(int epoch) const {
  XS_CHECK(stepSize > 0, UsageError, "StepLR: the step size (epochs) must be positive, got " + std::to_string(stepSize));
  XS_CHECK(epoch >= 0, UsageError, "StepLR: epoch must be non-negative");
  return static_cast<float>(base * std::pow(gamma, static_cast<double>(epoch / stepSize)));
}

float CosineAnnealingLR::at(int epoch) const {
  XS_CHECK(tMax > 0, UsageError, "CosineAnnealingLR: tMax (epochs) must be positive, got " + std::to_string(tMax));
  XS_CHECK(epoch >= 0, UsageError, "CosineAnnealingLR: epoch must be non-negative");
  const double t = std::min(epoch, tMax);
  return static_cast<float>(etaMin + (base - etaMin) * (1.0 + std::cos(std::numbers::pi * t / tMax)) / 2.0);
}

float OneCycleLR::at(std::int64_t step) const {
  XS_CHECK(totalSteps > 0, UsageError, "OneCycleLR: totalSteps must be positive, got " + std::to_string(totalSteps));
  XS_CHECK(pctStart > 0 && pctStart < 1, UsageError, "OneCycleLR: pctStart must be in (0, 1)");
  XS_CHECK(divFactor > 0 && finalDivFactor > 0, UsageError, "OneCycleLR: the div factors must be positive");
  XS_CHECK(step >= 0, UsageError, "OneCycleLR: step must be non-negative");
  const double initial = maxLr / divFactor, last = initial / finalDivFactor;
  // torch's phase ends: step pctStart * total - 1 reaches maxLr, step total - 1 the last rate.
  const double peakStep = pctStart * static_cast<double>(totalSteps) - 1.0;
  const double lastStep = static_cast<double>(totalSteps) - 1.0;
  const double t = static_cast<double>(std::min<std::int64_t>(step, totalSteps - 1));
  auto anneal = [this](double from, double to, double pct) {
    return cosine ? to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0) : (to - from) * pct + from;
  };
  if (t <= peakStep) return static_cast<float>(anneal(initial, maxLr, peakStep > 0 ? t / peakStep : 1.0));
  return static_cast<float>(anneal(maxLr, last, lastStep > peakStep ? (t - peakStep) / (lastStep - peakStep) : 1.0));
}

}  // namespace xs::optim
