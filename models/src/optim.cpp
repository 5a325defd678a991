// optim.cpp: SGD and Adam over flat buffers, following torch.optim's single-tensor updates.
#include "xspawn/engine/optim.hpp"

#include <cmath>

#include "xspawn/engine/error.hpp"

namespace xs::engine {

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

class Sgd : public Optimizer {
 public:
  Sgd(Device& dev, std::size_t n, const SgdOptions& o) : o_(o) {
    XS_CHECK(o.lr >= 0.f && o.momentum >= 0.f && o.weightDecay >= 0.f, ArgumentError,
             "SGD: learning rate, momentum and weight decay must be non-negative");
    XS_CHECK(!o.nesterov || (o.momentum > 0.f && o.dampening == 0.f), ArgumentError,
             "SGD: nesterov needs a positive momentum and zero dampening");
    lr_ = o.lr;
    if (o.momentum > 0.f) state_.emplace_back("momentum_buffer", zeros(dev, n, "SGD momentum"));
  }
  const char* kind() const override { return "sgd"; }
  void step(ParamStore& ps) override {
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

class Adam : public Optimizer {
 public:
  Adam(Device& dev, std::size_t n, const AdamOptions& o) : o_(o) {
    XS_CHECK(o.lr >= 0.f && o.eps >= 0.f && o.weightDecay >= 0.f, ArgumentError,
             "Adam: learning rate, eps and weight decay must be non-negative");
    XS_CHECK(o.beta1 >= 0.f && o.beta1 < 1.f && o.beta2 >= 0.f && o.beta2 < 1.f, ArgumentError,
             "Adam: betas must be in [0, 1)");
    lr_ = o.lr;
    state_.emplace_back("exp_avg", zeros(dev, n, "Adam first moment"));
    state_.emplace_back("exp_avg_sq", zeros(dev, n, "Adam second moment"));
  }
  const char* kind() const override { return "adam"; }
  void step(ParamStore& ps) override {
    ++steps_;
    float* p = ps.values();
    const float* g = ps.grads();
    float* m = state_[0].second.data();
    float* v = state_[1].second.data();
    const std::size_t n = ps.size();
    const double t = static_cast<double>(steps_);
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta1), t));
    const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta2), t));
    const float stepSize = lr_ / bc1, bc2Sqrt = std::sqrt(bc2);
    const float b1 = o_.beta1, b2 = o_.beta2, wd = o_.weightDecay, eps = o_.eps;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) {
      float d = g[i] + wd * p[i];
      m[i] = m[i] * b1 + (1.f - b1) * d;
      v[i] = v[i] * b2 + (1.f - b2) * d * d;
      float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
      p[i] -= stepSize * (m[i] / denom);
    }
  }

 private:
  AdamOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> makeSgd(Device& dev, std::size_t n, const SgdOptions& o) {
  return std::make_unique<Sgd>(dev, n, o);
}

std::unique_ptr<Optimizer> makeAdam(Device& dev, std::size_t n, const AdamOptions& o) {
  return std::make_unique<Adam>(dev, n, o);
}

float StepLr::at(int epoch) const {
  XS_CHECK(period > 0, ArgumentError, "lr_period must be positive, got " + std::to_string(period));
  XS_CHECK(epoch >= 0, ArgumentError, "epoch must be non-negative");
  float lr = base;
  for (int k = 0; k < epoch / period; ++k) lr *= decay;
  return lr;
}

}  // namespace xs::engine
