// optim.hpp: optimizers with PyTorch's update rules (SGD with momentum/nesterov/weight decay,
// Adam), stepping over a model's whole flat parameter and gradient buffers, and StepLr.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xspawn/engine/params.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

struct SgdOptions {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weightDecay = 0.f;
  bool nesterov = false;
};

struct AdamOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 0.f;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of params.values() from params.grads() (all views at once).
  virtual void step(ParamStore& params) = 0;
  virtual const char* kind() const = 0;  // "sgd" or "adam"
  float lr() const { return lr_; }
  void setLr(float lr) { lr_ = lr; }
  std::uint64_t steps() const { return steps_; }
  void setSteps(std::uint64_t n) { steps_ = n; }
  // Named state buffers (same length as the parameter buffer) for checkpoints.
  std::vector<std::pair<std::string, Tensor*>> state();

 protected:
  float lr_ = 0.f;
  std::uint64_t steps_ = 0;
  std::vector<std::pair<std::string, Tensor>> state_;
};

// n is the length of the flat parameter buffer (ParamStore::size()).
std::unique_ptr<Optimizer> makeSgd(Device& dev, std::size_t n, const SgdOptions& o);
std::unique_ptr<Optimizer> makeAdam(Device& dev, std::size_t n, const AdamOptions& o);

// Step schedule (seed 003's lr_period / lr_decay): lr = base * decay^floor(epoch / period).
struct StepLr {
  float base = 0.1f;
  int period = 80;
  float decay = 0.1f;
  float at(int epoch) const;
};

}  // namespace xs::engine
