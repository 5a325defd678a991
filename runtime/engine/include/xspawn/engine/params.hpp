// params.hpp: ParamStore, one flat buffer of values (and one of gradients) with named views,
// so a step's gradients are one contiguous all-reduce and can live in caller-provided memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xspawn/engine/device.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

enum class Init { kUniform, kOnes, kZeros };

namespace detail {
struct ParamStoreAccess;  // the engine's own layers and optimizers (not installed)
}

struct ParamView {
  std::string name;    // PyTorch-style: "features.0.weight"
  Shape shape;
  std::size_t offset;  // in floats, into the flat buffer
  std::size_t count;
  Init init;
  float bound;         // kUniform: values in [-bound, bound)
};

class ParamStore {
 public:
  explicit ParamStore(bool withGrads) : withGrads_(withGrads) {}
  // Registers a view (before allocate); returns its index. Offsets are 16-float aligned.
  std::size_t add(const std::string& name, const Shape& shape, Init init, float bound = 0.f);
  // Allocates the value (and gradient) buffers on dev, zeroed.
  void allocate(Device& dev);
  // Fills every view from its init rule; view i draws from stream mix64(seed ^ hash(name)).
  void initialize(std::uint64_t seed);

  // View i's values. The mutable form counts them as changed (the engine keeps derived copies,
  // such as bf16's rounded weights, until then): read through a const store to avoid
  // that, and write through a pointer asked for after the last forward or optimizer step.
  float* value(std::size_t i) {
    if (!roundedCurrent_.empty()) roundedCurrent_[i] = 0;
    if (!bitsCurrent_.empty()) bitsCurrent_[i] = 0;
    return values_.data() + views_[i].offset;
  }
  const float* value(std::size_t i) const { return values_.data() + views_[i].offset; }
  // View i's gradient, to add to: zeros if zeroGrad cleared it and nothing wrote it since.
  float* grad(std::size_t i) {
    if (!unset_.empty() && unset_[i]) fillUnset(i);
    return grads_ + views_[i].offset;
  }
  // The gradient of views [first, last] (registered one after the other, as a layer's weight
  // and bias) for a backward that writes every element of them in one go. overwrite is true when
  // zeroGrad cleared them all and nothing wrote them since: the caller then writes the views
  // instead of adding to them, and their zeros are never filled in (torch's zero_grad with
  // set_to_none). Otherwise any cleared one is filled with zeros and the caller adds. Either way
  // the views hold a gradient afterwards. data is view first's gradient.
  struct GradSlot {
    float* data;
    bool overwrite;
  };
  GradSlot gradSlot(std::size_t first, std::size_t last);
  GradSlot gradSlot(std::size_t i) { return gradSlot(i, i); }
  // Every value, in one flat buffer; the mutable form counts them all as changed (as value(i)).
  float* values() {
    roundedCurrent_.assign(roundedCurrent_.size(), 0);
    bitsCurrent_.assign(bitsCurrent_.size(), 0);
    return values_.data();
  }
  const float* values() const { return values_.data(); }
  // The whole gradient buffer, every view cleared by zeroGrad and unwritten since as zeros.
  float* grads() {
    fillAllUnset();
    return grads_;
  }
  const float* grads() const {
    fillAllUnset();
    return grads_;
  }
  std::size_t size() const { return size_; }  // floats in each flat buffer (with alignment gaps)
  std::size_t paramCount() const;             // floats in the views
  const std::vector<ParamView>& views() const { return views_; }
  // Index of the view with that name; throws UsageError naming it when absent.
  std::size_t find(const std::string& name) const;

  // Moves the gradients into external memory of count == size() floats (e.g. a shared-memory
  // segment for a zero-copy all-reduce); the current gradients are copied there.
  void bindGradients(float* external, std::size_t count);
  bool gradientsExternal() const { return external_; }
  // Clears every gradient. The views are marked, not filled: grad(i) and grads() fill a view
  // with zeros when read first, and a backward that writes a whole view (gradSlot) skips both
  // the fill and the read of the zeros.
  void zeroGrad();

 private:
  friend struct detail::ParamStoreAccess;
  void fillUnset(std::size_t i) const;
  void fillAllUnset() const;

  bool withGrads_;
  std::vector<ParamView> views_;
  std::size_t size_ = 0;
  Tensor values_, ownGrads_;
  float* grads_ = nullptr;
  bool external_ = false;
  // Per view: cleared by zeroGrad and not written since (its memory still holds old values).
  mutable std::vector<std::uint8_t> unset_;
  mutable bool anyUnset_ = false;
  // bf16 mirrors of the values, each made at the first read of a view through it, and per view
  // whether it holds the current values' rounding (detail::ParamStoreAccess): emulated bf16's
  // rounded floats, and native bf16's bits (what oneDNN's bf16 kernels read).
  Device* dev_ = nullptr;
  Tensor rounded_, bits_;
  std::vector<std::uint8_t> roundedCurrent_, bitsCurrent_;
  // Per view: read through the bits mirror at least once (the optimizers keep only those current).
  std::vector<std::uint8_t> bitsRead_;
};

}  // namespace xs::engine
