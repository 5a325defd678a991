// params.cpp: flat parameter/gradient buffers with named views and deterministic init.
#include "xspawn/engine/params.hpp"

#include <cstring>

#include <fmt/format.h>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "param_mirror.hpp"
#include "rng.hpp"

namespace xs::engine {

std::size_t ParamStore::add(const std::string& name, const Shape& shape, Init init, float bound) {
  XS_CHECK(values_.empty(), UsageError, "parameter '" + name + "' added after allocation");
  ParamView v{name, shape, size_, shape.numel(), init, bound};
  size_ += (v.count + 15) / 16 * 16;
  views_.push_back(v);
  return views_.size() - 1;
}

void ParamStore::allocate(Device& dev) {
  if (size_ == 0) return;
  dev_ = &dev;
  values_ = Tensor(dev, Shape{static_cast<int>(size_)}, "parameters");
  values_.zero();
  if (withGrads_) {
    ownGrads_ = Tensor(dev, Shape{static_cast<int>(size_)}, "gradients");
    ownGrads_.zero();
    grads_ = ownGrads_.data();
  }
}

void ParamStore::initialize(std::uint64_t seed) {
  for (std::size_t i = 0; i < views_.size(); ++i) {
    const ParamView& v = views_[i];
    float* p = value(i);
    switch (v.init) {
      case Init::kUniform: fillUniform(p, v.count, v.bound, mix64(seed ^ hashName(v.name))); break;
      case Init::kOnes: std::fill(p, p + v.count, 1.f); break;
      case Init::kZeros: std::fill(p, p + v.count, 0.f); break;
    }
  }
}

std::size_t ParamStore::paramCount() const {
  std::size_t n = 0;
  for (auto& v : views_) n += v.count;
  return n;
}

std::size_t ParamStore::find(const std::string& name) const {
  for (std::size_t i = 0; i < views_.size(); ++i)
    if (views_[i].name == name) return i;
  XS_THROW(UsageError, "no parameter named '" + name + "' in this model");
}

void ParamStore::bindGradients(float* external, std::size_t count) {
  XS_CHECK(withGrads_, UsageError, "this store keeps no gradients");
  XS_CHECK(external != nullptr, UsageError, "bindGradients: the external buffer is null");
  XS_CHECK(count == size_, ShapeError,
           fmt::format("bindGradients: the buffer holds {} floats but the model's gradient buffer "
                       "needs {}: size it with gradientCount()", count, size_));
  XS_CHECK(reinterpret_cast<std::uintptr_t>(external) % 64 == 0, UsageError,
           "bindGradients: the external buffer must be 64-byte aligned");
  fillAllUnset();
  if (external != grads_) std::memcpy(external, grads_, size_ * sizeof(float));
  grads_ = external;
  external_ = true;
  ownGrads_ = Tensor();
}

void ParamStore::zeroGrad() {
  if (!grads_) return;
  unset_.assign(views_.size(), 1);
  anyUnset_ = true;
}

ParamStore::GradSlot ParamStore::gradSlot(std::size_t first, std::size_t last) {
  float* data = grads_ + views_[first].offset;
  if (unset_.empty()) return {data, false};
  bool overwrite = true;
  for (std::size_t i = first; i <= last; ++i) overwrite = overwrite && unset_[i] != 0;
  for (std::size_t i = first; i <= last; ++i) {
    if (overwrite) unset_[i] = 0;
    else grad(i);  // a cleared one gets its zeros: the caller adds
  }
  return {data, overwrite};
}

void ParamStore::fillUnset(std::size_t i) const {
  std::memset(grads_ + views_[i].offset, 0, views_[i].count * sizeof(float));
  unset_[i] = 0;
}

void ParamStore::fillAllUnset() const {
  if (!anyUnset_) return;
  for (std::size_t i = 0; i < unset_.size(); ++i)
    if (unset_[i]) fillUnset(i);
  anyUnset_ = false;
}

namespace detail {

const float* ParamStoreAccess::rounded(ParamStore& s, std::size_t i) {
  if (s.rounded_.empty()) {
    s.rounded_ = Tensor(*s.dev_, Shape{static_cast<int>(s.size_)}, "bf16-rounded parameters");
    s.roundedCurrent_.assign(s.views_.size(), 0);
  }
  float* r = s.rounded_.data() + s.views_[i].offset;
  if (!s.roundedCurrent_[i]) {
    roundToBf16(s.values_.data() + s.views_[i].offset, r, s.views_[i].count);
    s.roundedCurrent_[i] = 1;
  }
  return r;
}

const std::uint16_t* ParamStoreAccess::bits(ParamStore& s, std::size_t i) {
  if (s.bits_.empty()) {  // size_ is a multiple of 16: size_ / 2 floats hold its bits
    s.bits_ = Tensor(*s.dev_, Shape{static_cast<int>(s.size_ / 2)}, "bf16 parameters");
    s.bitsCurrent_.assign(s.views_.size(), 0);
    s.bitsRead_.assign(s.views_.size(), 0);
  }
  s.bitsRead_[i] = 1;
  auto* b = reinterpret_cast<std::uint16_t*>(s.bits_.data()) + s.views_[i].offset;
  if (!s.bitsCurrent_[i]) {
    toBf16Bits(s.values_.data() + s.views_[i].offset, b, s.views_[i].count);  // the optimizers' rule
    s.bitsCurrent_[i] = 1;
  }
  return b;
}

ParamStoreAccess::Update ParamStoreAccess::update(ParamStore& s) {
  // The mirror's views that the caller's pass (an optimizer's loop) writes.
  if (!s.bits_.empty()) s.bitsCurrent_ = s.bitsRead_;
  else s.roundedCurrent_.assign(s.roundedCurrent_.size(), 1);
  return target(s);
}

ParamStoreAccess::Update ParamStoreAccess::target(ParamStore& s) {
  if (!s.bits_.empty()) {
    s.roundedCurrent_.assign(s.roundedCurrent_.size(), 0);
    return {s.values_.data(), nullptr, reinterpret_cast<std::uint16_t*>(s.bits_.data()), s.bitsRead_.data()};
  }
  return {s.values_.data(), s.rounded_.empty() ? nullptr : s.rounded_.data(), nullptr};
}

void ParamStoreAccess::written(ParamStore& s, const Update& t) {
  if (t.bits) s.bitsCurrent_ = s.bitsRead_;
  else s.bitsCurrent_.assign(s.bitsCurrent_.size(), 0);
  s.roundedCurrent_.assign(s.roundedCurrent_.size(), t.rounded ? 1 : 0);
}

}  // namespace detail

}  // namespace xs::engine
