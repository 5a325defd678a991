// optim.cpp: SGD, Adam, AdamW and Adadelta over flat buffers, following torch.optim's
// single-tensor updates; StepLR and CosineAnnealingLR.
#include "xspawn/optim.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <immintrin.h>
#include <numbers>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "param_mirror.hpp"
#include "update_rules.hpp"
#include "step_in_backward.hpp"

namespace xs::optim {

using engine::Device;
using engine::ParamStore;
using engine::Shape;
using engine::Tensor;
using engine::detail::ParamStoreAccess;
using engine::detail::AdamArgs;
using engine::detail::FusedStep;
using engine::detail::Sgd;
using engine::detail::SgdArgs;

Optimizer::~Optimizer() {
  if (inBackwardOf_) inBackwardOf_->setOptimizerInBackward(nullptr);
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor*>> r;
  for (auto& [name, t] : state_) r.emplace_back(name, &t);
  return r;
}

void Optimizer::checkNotInBackward(const char* call) const {
  XS_CHECK(!inBackward(), UsageError,
           std::string(kind()) + " optimizer: " + call + " while the model makes this optimizer's step inside "
               "backward() (Model::setOptimizerInBackward): backward() has already stepped; call "
               "setOptimizerInBackward(nullptr) first to step after backward");
}

namespace {
[[noreturn]] void noViews(const Optimizer& o) { XS_THROW(UsageError, engine::detail::onlyAllAtOnce(o)); }
}  // namespace

void Optimizer::beginViews() { noViews(*this); }
void Optimizer::stepView(std::size_t, std::size_t, const float*) { noViews(*this); }
void Optimizer::endViews() { noViews(*this); }

namespace {

Tensor zeros(Device& dev, std::size_t n, const char* what) {
  Tensor t(dev, Shape{static_cast<int>(std::max<std::size_t>(n, 1))}, what);
  t.zero();
  return t;
}

// The update loops, one branch-free loop per rule and case so each vectorises, compiled for
// AVX-512 and AVX2 besides the baseline. This file is built with -ffp-contract=off: every
// operation rounds once, as written, so each width gives the same bits. Each loop also writes
// the new values rounded to bf16 into the store's mirror when it keeps one
// (detail::ParamStoreAccess): emulated bf16's rounded floats or native bf16's bits. The layers
// then read their weights rounded with no pass of their own.
#define XS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define XS_INLINE [[gnu::always_inline]] inline

// A mirror of more values than this is written past the cache: read by the next forward only
// after the rest of the step has evicted it, its lines would be read from memory first (read for
// ownership) just to be overwritten. The loops then round a block into a buffer on the stack and
// stream it out (streamOut). A step view by view (inside backward) decides by the whole store too.
constexpr std::size_t kStreamValues = std::size_t{4} << 20;  // 16 MiB of floats, 8 MiB of bits
constexpr std::size_t kBlockValues = 2048;                   // 8 KiB of floats: stays in L1

// What a loop writes beside each new value.
enum class Mirror { kNone, kRounded, kBits };
struct MirrorOut {
  Mirror kind;
  void* data;
  bool streamed;  // past the cache
};
// The mirror of a step over a store of `values` floats.
MirrorOut mirrorOf(const ParamStoreAccess::Update& u, std::size_t values) {
  const bool streamed = values >= kStreamValues;
  if (u.bits) return {Mirror::kBits, u.bits, streamed};
  return u.rounded ? MirrorOut{Mirror::kRounded, u.rounded, streamed} : MirrorOut{Mirror::kNone, nullptr, false};
}

// The mirror from value `offset` on (a view's step inside backward).
MirrorOut mirrorAt(MirrorOut r, std::size_t offset) {
  if (r.kind == Mirror::kBits) return {r.kind, static_cast<std::uint16_t*>(r.data) + offset, r.streamed};
  if (r.kind == Mirror::kRounded) return {r.kind, static_cast<float*>(r.data) + offset, r.streamed};
  return r;
}

// p[i] = v, and its rounding in the mirror r.
template <Mirror kM>
XS_INLINE void put(float* p, void* r, std::size_t i, float v) {
  p[i] = v;
  if constexpr (kM == Mirror::kRounded) static_cast<float*>(r)[i] = engine::roundToBf16(v);
  if constexpr (kM == Mirror::kBits) static_cast<std::uint16_t*>(r)[i] = engine::toBf16Bits(v);
}

// The bytes before dst's first `align`-byte boundary (a view's bits start 32-byte aligned).
std::size_t headTo(const char* dst, std::size_t align, std::size_t bytes) {
  return std::min(bytes, (align - reinterpret_cast<std::uintptr_t>(dst) % align) % align);
}

__attribute__((target("avx512f"))) void streamOutAvx512(char* dst, const char* src, std::size_t bytes) {
  std::size_t i = headTo(dst, 64, bytes);
  std::memcpy(dst, src, i);
  for (; i + 64 <= bytes; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  std::memcpy(dst + i, src + i, bytes - i);
}

void streamOutSse(char* dst, const char* src, std::size_t bytes) {
  std::size_t i = headTo(dst, 16, bytes);
  std::memcpy(dst, src, i);
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, bytes - i);
}

// dst = src, with non-temporal stores from dst's first aligned byte on.
void streamOut(void* dst, const void* src, std::size_t bytes) {
  (engine::cpuHasAvx512() ? streamOutAvx512 : streamOutSse)(static_cast<char*>(dst), static_cast<const char*>(src),
                                                             bytes);
}

template <Mirror kM>
using MirrorKind = std::integral_constant<Mirror, kM>;

// Runs body(MirrorKind<kind>, offset, count, mirror) over [0, n) for the store's mirror r: on the
// whole range, or with a mirror streamed past the cache in blocks whose rounding goes to a stack
// buffer and is streamed into r.
template <Mirror kM, class Body>
XS_INLINE void inBlocks(void* r, std::size_t n, bool streamed, Body body) {
  constexpr std::size_t kSize = kM == Mirror::kBits ? 2 : 4;
  if (!streamed) return body(MirrorKind<kM>{}, 0, n, r);
  alignas(64) float block[kBlockValues];
  for (std::size_t o = 0; o < n; o += kBlockValues) {
    const std::size_t len = std::min(kBlockValues, n - o);
    body(MirrorKind<kM>{}, o, len, block);
    streamOut(static_cast<char*>(r) + o * kSize, block, len * kSize);
  }
  _mm_sfence();  // the streamed stores ordered before the mirror's next reader
}

template <class Body>
XS_INLINE void withMirror(MirrorOut r, std::size_t n, Body body) {
  switch (r.kind) {
    case Mirror::kNone: return body(MirrorKind<Mirror::kNone>{}, 0, n, nullptr);
    case Mirror::kRounded: return inBlocks<Mirror::kRounded>(r.data, n, r.streamed, body);
    case Mirror::kBits: return inBlocks<Mirror::kBits>(r.data, n, r.streamed, body);
  }
}

// The rule as update_rules.hpp's sgdUpdate writes it for the fused kernels, spelled out over scalars
// here: the same operations in the same order (StepInBackward's tests check the bits), in the
// form GCC vectorizes at full width in every clone.
template <Sgd kRule, Mirror kM>
XS_INLINE void sgdBody(float* p, void* r, float* buf, const float* g, std::size_t n, const SgdArgs& a) {
  const float lr = a.lr, wd = a.wd, keep = a.keep, take = a.take, mu = a.mu;
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    float d = g[i] + wd * p[i];
    if constexpr (kRule == Sgd::kPlain) {
      put<kM>(p, r, i, p[i] - lr * d);
    } else {
      float b = keep * buf[i] + take * d;
      buf[i] = b;
      if constexpr (kRule == Sgd::kNesterov) put<kM>(p, r, i, p[i] - lr * (d + mu * b));
      else put<kM>(p, r, i, p[i] - lr * b);
    }
  }
}

template <Sgd kRule>
XS_INLINE void sgdRun(float* p, MirrorOut r, float* buf, const float* g, std::size_t n, const SgdArgs& a) {
  withMirror(r, n, [&](auto kind, std::size_t o, std::size_t len, void* out) {
    sgdBody<kRule, decltype(kind)::value>(p + o, out, buf ? buf + o : nullptr, g + o, len, a);
  });
}

XS_CLONES void sgdLoop(float* p, MirrorOut r, float*, const float* g, std::size_t n, const SgdArgs& a) {
  sgdRun<Sgd::kPlain>(p, r, nullptr, g, n, a);
}
XS_CLONES void sgdMomentumLoop(float* p, MirrorOut r, float* buf, const float* g, std::size_t n, const SgdArgs& a) {
  sgdRun<Sgd::kMomentum>(p, r, buf, g, n, a);
}
XS_CLONES void sgdNesterovLoop(float* p, MirrorOut r, float* buf, const float* g, std::size_t n, const SgdArgs& a) {
  sgdRun<Sgd::kNesterov>(p, r, buf, g, n, a);
}

// Adam adds the decay to the gradient; AdamW shrinks the weights first (decoupled). As
// update_rules.hpp's adamUpdate, over scalars.
template <bool kDecoupled, Mirror kM>
XS_INLINE void adamBody(float* p, void* r, float* m, float* v, const float* g, std::size_t n, const AdamArgs& a) {
  const float b1 = a.b1, b2 = a.b2, eps = a.eps, wd = a.wd, shrink = a.shrink, stepSize = a.stepSize,
              bc2Sqrt = a.bc2Sqrt;
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    float w = p[i];
    if constexpr (kDecoupled) w *= shrink;
    float d = g[i] + wd * w;
    m[i] = m[i] * b1 + (1.f - b1) * d;
    v[i] = v[i] * b2 + (1.f - b2) * d * d;
    float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
    put<kM>(p, r, i, w - stepSize * (m[i] / denom));
  }
}

template <bool kDecoupled>
XS_INLINE void adamRun(float* p, MirrorOut r, float* m, float* v, const float* g, std::size_t n, const AdamArgs& a) {
  withMirror(r, n, [&](auto kind, std::size_t o, std::size_t len, void* out) {
    adamBody<kDecoupled, decltype(kind)::value>(p + o, out, m + o, v + o, g + o, len, a);
  });
}

XS_CLONES void adamLoop(float* p, MirrorOut r, float* m, float* v, const float* g, std::size_t n, const AdamArgs& a) {
  adamRun<false>(p, r, m, v, g, n, a);
}
XS_CLONES void adamWLoop(float* p, MirrorOut r, float* m, float* v, const float* g, std::size_t n, const AdamArgs& a) {
  adamRun<true>(p, r, m, v, g, n, a);
}

struct AdadeltaArgs {
  float rho, eps, wd, lr;
};

template <Mirror kM>
XS_INLINE void adadeltaBody(float* p, void* r, float* sq, float* acc, const float* g, std::size_t n,
                            const AdadeltaArgs& a) {
  const float rho = a.rho, eps = a.eps, wd = a.wd, lr = a.lr;
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    float d = g[i] + wd * p[i];
    sq[i] = sq[i] * rho + (1.f - rho) * d * d;
    float delta = std::sqrt(acc[i] + eps) / std::sqrt(sq[i] + eps) * d;
    acc[i] = acc[i] * rho + (1.f - rho) * delta * delta;
    put<kM>(p, r, i, p[i] - lr * delta);
  }
}

XS_CLONES void adadeltaLoop(float* p, MirrorOut r, float* sq, float* acc, const float* g, std::size_t n,
                            const AdadeltaArgs& a) {
  withMirror(r, n, [&](auto kind, std::size_t o, std::size_t len, void* out) {
    adadeltaBody<decltype(kind)::value>(p + o, out, sq + o, acc + o, g + o, len, a);
  });
}

// A built-in rule: step() is its stepView over the whole store, and a step inside backward the
// same view by view; the rule gives its step's arguments (prepare), its update of a range
// (stepView) and the step a kernel may make itself (fuse).
class ViewedRule : public Optimizer {
 public:
  using Optimizer::Optimizer;
  bool stepsByViews() const override { return true; }
  void step() override {
    checkNotInBackward("step()");
    prepare();
    const float* g = params_.grads();
    target_ = ParamStoreAccess::update(params_);
    // One pass over each run of consecutive views whose bits mirror it writes, or not (the
    // whole store when it keeps no bits): a view owns the alignment gap after it, so the runs
    // tile the buffer.
    const auto& v = params_.views();
    for (std::size_t first = 0, i = 1; first < v.size(); ++i) {
      if (i < v.size() && bitsWritten(i) == bitsWritten(first)) continue;
      const std::size_t begin = first == 0 ? 0 : v[first].offset, end = i < v.size() ? v[i].offset : params_.size();
      stepView(begin, end - begin, g + begin);
      first = i;
    }
    ++steps_;
  }
  // The step a kernel may fuse: between beginViews and endViews.
  FusedStep fusable() const { return fusable_; }

 protected:
  virtual void prepare() {}
  virtual FusedStep fuse() { return FusedStep{}; }
  void beginViews() override {
    prepare();
    target_ = ParamStoreAccess::target(params_);
    fusable_ = fuse();
  }
  void endViews() override {
    ParamStoreAccess::written(params_, target_);
    fusable_ = FusedStep{};
    ++steps_;
  }
  // The values, and the mirror from value `offset` on, that this step writes: none for a view
  // whose bits nobody reads (offset: a view's, or the start of step()'s run of them).
  float* values(std::size_t offset) const { return target_.values + offset; }
  MirrorOut mirror(std::size_t offset) const {
    const auto& v = params_.views();
    const auto view = std::upper_bound(v.begin(), v.end(), offset,
                                       [](std::size_t o, const engine::ParamView& p) { return o < p.offset; });
    if (view != v.begin() && !bitsWritten(static_cast<std::size_t>(view - v.begin()) - 1))
      return {Mirror::kNone, nullptr, false};
    return mirrorAt(mirrorOf(target_, params_.size()), offset);
  }
  // Whether this step writes view i's bits (true without a bits mirror: nothing to decide).
  bool bitsWritten(std::size_t i) const { return !target_.bits || !target_.bitsViews || target_.bitsViews[i]; }
  float* state(std::size_t i, std::size_t offset) { return state_[i].second.data() + offset; }

  ParamStoreAccess::Update target_{};

 private:
  FusedStep fusable_{};
};

class SgdRule : public ViewedRule {
 public:
  SgdRule(ParamStore& ps, Device& dev, const SgdOptions& o) : ViewedRule(ps), o_(o) {
    const std::size_t n = ps.size();
    XS_CHECK(o.lr >= 0.f && o.momentum >= 0.f && o.weightDecay >= 0.f, UsageError,
             "SGD: learning rate, momentum and weight decay must be non-negative");
    XS_CHECK(!o.nesterov || (o.momentum > 0.f && o.dampening == 0.f), UsageError,
             "SGD: nesterov needs a positive momentum and zero dampening");
    lr_ = o.lr;
    if (o.momentum > 0.f) state_.emplace_back("momentum_buffer", zeros(dev, n, "SGD momentum"));
  }
  const char* kind() const override { return "sgd"; }

 protected:
  void prepare() override {
    const float mu = o_.momentum;
    args_ = SgdArgs{lr_, o_.weightDecay, steps_ == 0 ? 0.f : mu,  // buf = d at the first step
                    steps_ == 0 ? 1.f : 1.f - o_.dampening, mu};
  }
  void stepView(std::size_t offset, std::size_t count, const float* grad) override {
    float* buf = state_.empty() ? nullptr : state(0, offset);
    (!buf ? sgdLoop : o_.nesterov ? sgdNesterovLoop : sgdMomentumLoop)(values(offset), mirror(offset), buf, grad,
                                                                        count, args_);
  }
  FusedStep fuse() override {
    using Rule = FusedStep::Rule;
    FusedStep f;
    f.rule = state_.empty() ? Rule::kSgd : o_.nesterov ? Rule::kSgdNesterov : Rule::kSgdMomentum;
    f.values = target_.values, f.rounded = target_.rounded, f.bits = target_.bits, f.sgd = args_;
    f.first = state_.empty() ? nullptr : state(0, 0);
    return f;
  }

 private:
  SgdOptions o_;
  SgdArgs args_{};
};

class AdamRule : public ViewedRule {
 public:
  AdamRule(ParamStore& ps, Device& dev, const AdamOptions& o, bool decoupled = false)
      : ViewedRule(ps), o_(o), decoupled_(decoupled) {
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

 protected:
  // This step's arguments: its bias corrections count it (steps_ + 1).
  void prepare() override {
    const double t = static_cast<double>(steps_ + 1);
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta1), t));
    const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o_.beta2), t));
    args_ = AdamArgs{o_.beta1, o_.beta2, o_.eps, decoupled_ ? 0.f : o_.weightDecay, 1.f - lr_ * o_.weightDecay,
                     lr_ / bc1, std::sqrt(bc2)};
  }
  void stepView(std::size_t offset, std::size_t count, const float* grad) override {
    // Adam adds the decay to the gradient; AdamW shrinks the weights first (decoupled), in its
    // own instance of the loop so Adam's stays as it was.
    (decoupled_ ? adamWLoop : adamLoop)(values(offset), mirror(offset), state(0, offset), state(1, offset), grad,
                                        count, args_);
  }
  FusedStep fuse() override {
    FusedStep f;
    f.rule = decoupled_ ? FusedStep::Rule::kAdamW : FusedStep::Rule::kAdam;
    f.values = target_.values, f.rounded = target_.rounded, f.bits = target_.bits, f.adam = args_;
    f.first = state(0, 0), f.second = state(1, 0);
    return f;
  }

 private:
  AdamOptions o_;
  bool decoupled_;
  AdamArgs args_{};
};

class AdadeltaRule : public ViewedRule {
 public:
  AdadeltaRule(ParamStore& ps, Device& dev, const AdadeltaOptions& o) : ViewedRule(ps), o_(o) {
    XS_CHECK(o.lr >= 0.f && o.eps >= 0.f && o.weightDecay >= 0.f, UsageError,
             "Adadelta: learning rate, eps and weight decay must be non-negative");
    XS_CHECK(o.rho >= 0.f && o.rho <= 1.f, UsageError, "Adadelta: rho must be in [0, 1]");
    lr_ = o.lr;
    state_.emplace_back("square_avg", zeros(dev, ps.size(), "Adadelta square average"));
    state_.emplace_back("acc_delta", zeros(dev, ps.size(), "Adadelta accumulated update"));
  }
  const char* kind() const override { return "adadelta"; }

 protected:
  void stepView(std::size_t offset, std::size_t count, const float* grad) override {
    adadeltaLoop(values(offset), mirror(offset), state(0, offset), state(1, offset), grad, count,
                 AdadeltaArgs{o_.rho, o_.eps, o_.weightDecay, lr_});
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

}  // namespace xs::optim

namespace xs::engine::detail {

FusedStep fusableStep(const optim::Optimizer& opt) {
  const auto* rule = dynamic_cast<const optim::ViewedRule*>(&opt);
  return rule ? rule->fusable() : FusedStep{};
}

}  // namespace xs::engine::detail

namespace xs::optim {

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

namespace xs::engine::detail {

std::string onlyAllAtOnce(const optim::Optimizer& opt) {
  return std::string("the ") + opt.kind() + " optimizer cannot step inside backward: it makes its step only all at "
         "once (an optimizer of one's own: override stepsByViews, beginViews, stepView and endViews); step it after "
         "backward instead";
}

}  // namespace xs::engine::detail
