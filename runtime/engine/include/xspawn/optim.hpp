// optim.hpp: optimizers with torch.optim's update rules (SGD with momentum, dampening, nesterov
// and weight decay; Adam; AdamW; Adadelta), each stepping over a model's whole flat parameter
// and gradient buffers at once, with named state buffers that checkpoints save; and the
// learning-rate schedules StepLR and CosineAnnealingLR (of the epoch) and OneCycleLR (of the
// step), as pure functions so a resumed run recomputes them. An optimizer can also step inside a
// model's backward (engine::Model::setOptimizerInBackward).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xspawn/engine/model.hpp"
#include "xspawn/engine/params.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine::detail {
class StepInBackward;
}

namespace xs::optim {

struct SgdOptions {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weightDecay = 0.f;  // weight decay: L2 on the gradient
  bool nesterov = false;
};

// Adam: weight decay is L2 added to the gradient (torch.optim.Adam).
struct AdamOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 0.f;
};

// AdamW: weight decay decoupled from the gradient, p -= lr * wd * p (torch.optim.AdamW).
struct AdamWOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 1e-2f;
};

// Adadelta (torch.optim.Adadelta): lr scales the ratio of the running RMS of updates to that of
// the gradients (1.0 in PyTorch's MNIST example).
struct AdadeltaOptions {
  float lr = 1.0f, rho = 0.9f, eps = 1e-6f, weightDecay = 0.f;
};

// What every optimizer is: the built-in ones (SGD, Adam, AdamW, Adadelta) and one's own, which
// derives from it (examples/own_optimizer.cpp).
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  // One update of the parameters it was built for from their gradients (all at once). A
  // UsageError while a model steps it inside its backward (inBackward()); an optimizer of one's
  // own says so by calling checkNotInBackward("step()") first.
  virtual void step() = 0;
  virtual const char* kind() const = 0;  // "sgd", "adam", "adamw" or "adadelta"
  // The learning rate the next step uses (a schedule sets it before every step).
  float lr() const { return lr_; }
  void setLr(float lr) { lr_ = lr; }
  // The steps made so far (Adam's bias correction counts them); setSteps restores the count
  // with the state() buffers (loadCheckpoint does).
  std::uint64_t steps() const { return steps_; }
  void setSteps(std::uint64_t n) { steps_ = n; }
  // The parameters it updates (xs::optimizer_step checks they are its model's).
  engine::ParamStore& params() const { return params_; }
  // Named state buffers (as long as the parameter buffer) for checkpoints.
  std::vector<std::pair<std::string, engine::Tensor*>> state();
  // True while a model makes this optimizer's step inside its backward
  // (engine::Model::setOptimizerInBackward).
  bool inBackward() const { return inBackwardOf_ != nullptr; }

 protected:
  explicit Optimizer(engine::ParamStore& params) : params_(params) {}
  // The step view by view, for a step inside backward: beginViews() once, then stepView once
  // for every parameter view (offset and count as in engine::ParamView, grad its count
  // gradients) in the order backward finishes them, then endViews(). The built-in optimizers
  // make the same update as step(), bit for bit, and their stepsByViews() is true. The defaults
  // say false and throw UsageError: an optimizer of one's own steps inside backward once it
  // overrides all four (engine::Model::setOptimizerInBackward refuses it otherwise).
  virtual bool stepsByViews() const { return false; }
  virtual void beginViews();
  virtual void stepView(std::size_t offset, std::size_t count, const float* grad);
  virtual void endViews();
  // UsageError naming the call when the step belongs inside a model's backward.
  void checkNotInBackward(const char* call) const;

  engine::ParamStore& params_;
  float lr_ = 0.f;
  std::uint64_t steps_ = 0;
  std::vector<std::pair<std::string, engine::Tensor>> state_;

 private:
  friend class engine::Model;
  friend class engine::detail::StepInBackward;
  engine::Model* inBackwardOf_ = nullptr;  // the model stepping it in backward, which unlinks it
};

// Optimizers over a model's parameters (the model must outlive them). UsageError on a negative
// rate or an out-of-range setting.
std::unique_ptr<Optimizer> SGD(engine::Model& model, const SgdOptions& options = {});
std::unique_ptr<Optimizer> Adam(engine::Model& model, const AdamOptions& options = {});
std::unique_ptr<Optimizer> AdamW(engine::Model& model, const AdamWOptions& options = {});
std::unique_ptr<Optimizer> Adadelta(engine::Model& model, const AdadeltaOptions& options = {});
// The same over any parameter store whose state lives on dev.
std::unique_ptr<Optimizer> SGD(engine::ParamStore& params, engine::Device& dev, const SgdOptions& options = {});
std::unique_ptr<Optimizer> Adam(engine::ParamStore& params, engine::Device& dev, const AdamOptions& options = {});
std::unique_ptr<Optimizer> AdamW(engine::ParamStore& params, engine::Device& dev, const AdamWOptions& options = {});
std::unique_ptr<Optimizer> Adadelta(engine::ParamStore& params, engine::Device& dev,
                                    const AdadeltaOptions& options = {});

// torch.optim.lr_scheduler.StepLR stepped once per epoch: lr = base * gamma^floor(epoch / stepSize)
// (seed 003's lr_period / lr_decay; seed 002's step_size 1, gamma 0.7).
// Computed in double and rounded once, as PyTorch keeps a learning rate in a Python float.
struct StepLR {
  double base = 0.1;
  int stepSize = 1;
  double gamma = 0.1;
  float at(int epoch) const;
};

// torch.optim.lr_scheduler.CosineAnnealingLR stepped once per epoch, in closed form:
// lr = etaMin + (base - etaMin) * (1 + cos(pi * epoch / tMax)) / 2 (for epoch <= tMax).
struct CosineAnnealingLR {
  double base = 0.1;
  int tMax = 10;
  double etaMin = 0.0;
  float at(int epoch) const;
};

// torch.optim.lr_scheduler.OneCycleLR (two phases, cycle_momentum=False) stepped once per
// optimizer step, in closed form: from maxLr / divFactor up to maxLr over the first
// pctStart * totalSteps steps, then down to maxLr / divFactor / finalDivFactor at the last
// step, along a half cosine (cosine = true, torch's "cos") or a straight line ("linear").
struct OneCycleLR {
  double maxLr = 0.1;
  std::int64_t totalSteps = 1;
  double pctStart = 0.3;
  double divFactor = 25.0;
  double finalDivFactor = 1e4;
  bool cosine = true;
  float at(std::int64_t step) const;  // step 0 is the first optimizer step
};

}  // namespace xs::optim
