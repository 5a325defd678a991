// model.cpp: Model: build, initialise, transfer a batch, forward, loss, backward.
#include "xspawn/engine/model.hpp"


#include <cstring>
#include <utility>

#include "xspawn/error.hpp"
#include "gradient_pool.hpp"
#include "module_clock.hpp"
#include "ops.hpp"
#include "step_in_backward.hpp"
#include "telemetry.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine {

using nn::BuildInfo;

Model::Model(Device& dev, Network network, std::uint64_t seed)
    : dev_(dev), name_(std::move(network.name)), input_(network.input), numClasses_(network.numClasses),
      seed_(seed), net_(std::move(network.layers)), gradients_(std::make_unique<detail::GradientPool>(dev)) {
  XS_CHECK(net_ != nullptr, UsageError, "model '" + name_ + "': the network has no layers: build an nn::Sequential");
  XS_CHECK(numClasses_ > 0, UsageError,
           "model '" + name_ + "': the number of classes must be positive, got " + std::to_string(numClasses_));
  XS_CHECK(input_.rank >= 1 && input_.numel() > 0, ShapeError,
           "model '" + name_ + "': the per-sample input shape " + input_.str() + " is empty: give [c, h, w]");
  BuildInfo info{params_, buffers_};
  net_->setNeedInputGrad(false);
  Shape out = net_->build(input_, "", info);
  XS_CHECK(out.rank == 1 && out[0] == numClasses_, ShapeError,
           name_ + " produces " + out.str() + " per sample instead of " + std::to_string(numClasses_) +
               " logits: end the network in a Linear(..., " + std::to_string(numClasses_) + ")");
  flops_ = info.forwardFlops;
  params_.allocate(dev_);
  buffers_.allocate(dev_);
  initialize(seed_);
}

void Model::setModuleTimes(bool on, ModuleTimeBase base) {
  if (!on || base != moduleTimeBase_) moduleClock_.reset();
  moduleTimeBase_ = base;
  if (on && !moduleClock_) moduleClock_ = std::make_unique<detail::ModuleClock>(base);
}

const std::vector<ModuleTime>& Model::moduleTimes() const {
  static const std::vector<ModuleTime> kNone;
  return moduleClock_ ? moduleClock_->times() : kNone;
}

void Model::resetModuleTimes() {
  if (moduleClock_) moduleClock_->reset();
}

Model::~Model() {
  if (inBackward_) inBackward_->inBackwardOf_ = nullptr;
}

void Model::initialize(std::uint64_t seed) {
  seed_ = seed;
  params_.initialize(seed);
  buffers_.initialize(seed);
}

void Model::setLabelSmoothing(float eps) {
  XS_CHECK(eps >= 0.f && eps <= 1.f, UsageError,
           "model '" + name_ + "': label smoothing " + std::to_string(eps) +
               " is outside [0, 1]: use 0 (plain cross-entropy) up to 1, 0.1 is usual");
  labelSmoothing_ = eps;
}

void Model::checkSample(const Shape& sample) const {
  XS_CHECK(sample == input_, ShapeError,
           "model '" + name_ + "' takes samples of " + input_.str() + " but the data holds samples of " +
               sample.str() + ": resize or convert the images in the data transform to " + input_.str());
}

void Model::setBatch(const float* images, const std::int32_t* labels, int batch) {
  XS_CHECK(batch > 0, ShapeError, "batch size must be positive, got " + std::to_string(batch));
  XS_CHECK(images != nullptr && labels != nullptr, UsageError, "setBatch: null images or labels");
  checkLabels(labels, batch, numClasses_);
  Shape s{batch, input_[0], input_[1], input_[2]};
  images_.ensure(dev_, s, "input images");
  dev_.copyToDevice(images_.data(), images, s.numel());
  labels_.ensure(dev_, Shape{batch}, "input labels");
  static_assert(sizeof(float) == sizeof(std::int32_t));
  dev_.copyToDevice(labels_.data(), reinterpret_cast<const float*>(labels), batch);
  batch_ = batch;
  logits_ = nullptr;
}

const Tensor& Model::forward(bool train) {
  XS_CHECK(batch_ > 0, UsageError, "forward before setBatch: transfer a batch first");
  xs::detail::telemetry::Span span(xs::detail::Category::kForward, "forward");
  train_ = train;
  nn::Context ctx{dev_, params_, buffers_, train, seed_, step_};
  ctx.moduleClock = moduleClock_.get();
  if (train) {
    ++step_;
    xs::detail::telemetry::addSamples(static_cast<std::uint64_t>(batch_));
  }
  probsFresh_ = false;
  logits_ = &net_->forward(images_, ctx);
  probs_.ensure(dev_, logits_->shape(), "softmax");
  return *logits_;
}

float Model::loss() {
  XS_CHECK(logits_, UsageError, "loss before forward");
  probsFresh_ = true;
  return crossEntropyForward(probs_.data(), logits_->data(),
                             reinterpret_cast<const std::int32_t*>(labels_.data()), batch_, numClasses_,
                             labelSmoothing_);
}

int Model::correct() {
  XS_CHECK(logits_, UsageError, "correct before forward");
  return countCorrect(logits_->data(), reinterpret_cast<const std::int32_t*>(labels_.data()), batch_,
                      numClasses_);
}

void Model::backward() {
  XS_CHECK(logits_, UsageError, "backward before forward and loss");
  xs::detail::telemetry::Span span(xs::detail::Category::kBackward, "backward");
  if (!probsFresh_) loss();  // the softmax the gradient starts from, unless loss() just made it
  dlogits_.ensure(dev_, logits_->shape(), "logit gradients");
  crossEntropyBackward(dlogits_.data(), probs_.data(),
                       reinterpret_cast<const std::int32_t*>(labels_.data()), batch_, numClasses_, 1.f,
                       labelSmoothing_);
  nn::Context ctx{dev_, params_, buffers_, train_, seed_, step_, &gradReady_};
  ctx.moduleClock = moduleClock_.get();
  ctx.gradients = gradients_.get();
  if (!inBackward_) {
    net_->backward(dlogits_, ctx);
    params_.grads();  // zeros into the views this backward did not write (none in the built-in layers)
    return;
  }
  XS_CHECK(!gradReady_, UsageError,
           "model '" + name_ + "': backward() with both a gradient hook (setGradReadyHook; xs::data_parallel sets "
               "one) and an optimizer stepping inside backward (setOptimizerInBackward): ranks all-reduce their "
               "gradients before the step; turn one of them off");
  params_.zeroGrad();  // each backward is a whole step: nothing accumulates across them
  detail::StepInBackward step(params_, *inBackward_);
  ctx.stepInBackward = &step;
  net_->backward(dlogits_, ctx);
  step.finish();
}

void Model::setOptimizerInBackward(optim::Optimizer* opt) {
  XS_CHECK(!opt || &opt->params() == &params_, UsageError,
           "model '" + name_ + "': setOptimizerInBackward with " + (opt ? opt->kind() : "") +
               " optimizer built for another model's parameters: build it from this model, e.g. optim::SGD(model, "
               "...)");
  XS_CHECK(!opt || opt->stepsByViews(), UsageError,
           "model '" + name_ + "': setOptimizerInBackward: " + (opt ? detail::onlyAllAtOnce(*opt) : ""));
  if (inBackward_) inBackward_->inBackwardOf_ = nullptr;
  inBackward_ = opt;
  if (opt) opt->inBackwardOf_ = this;
}

StepResult Model::trainStep(const float* images, const std::int32_t* labels, int batch) {
  zeroGrad();
  setBatch(images, labels, batch);
  forward(true);
  StepResult r{loss(), correct(), batch};
  backward();
  return r;
}

StepResult Model::evaluate(const float* images, const std::int32_t* labels, int batch) {
  setBatch(images, labels, batch);
  forward(false);
  return StepResult{loss(), correct(), batch};
}

}  // namespace xs::engine
