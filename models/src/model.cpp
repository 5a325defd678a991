// model.cpp: Model: build, initialise, transfer a batch, forward, loss, backward.
#include "xspawn/engine/model.hpp"

#include <cstring>

#include "xspawn/engine/error.hpp"
#include "xspawn/engine/ops.hpp"

namespace xs::engine {

Model::Model(Device& dev, const ModelConfig& cfg) : dev_(dev), cfg_(cfg) {
  net_ = buildNetwork(cfg_);
  input_ = defaultInput(cfg_);
  BuildInfo info{params_, buffers_};
  net_->setNeedInputGrad(false);
  Shape out = net_->build(input_, "", info);
  XS_CHECK(out.rank == 1 && out[0] == cfg_.numClasses, ShapeError,
           cfg_.name + " produces " + out.str() + " instead of " + std::to_string(cfg_.numClasses) + " logits");
  flops_ = info.forwardFlops;
  params_.allocate(dev_);
  buffers_.allocate(dev_);
  initialize(cfg_.seed);
}

std::vector<std::string> Model::names() { return {"mlp", "convnet", "lenet5", "alexnet", "resnet18"}; }

void Model::initialize(std::uint64_t seed) {
  cfg_.seed = seed;
  params_.initialize(seed);
  buffers_.initialize(seed);
}

void Model::setBatch(const float* images, const std::int32_t* labels, int batch) {
  XS_CHECK(batch > 0, ShapeError, "batch size must be positive, got " + std::to_string(batch));
  XS_CHECK(images != nullptr && labels != nullptr, ArgumentError, "setBatch: null images or labels");
  checkLabels(labels, batch, cfg_.numClasses);
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
  XS_CHECK(batch_ > 0, ArgumentError, "forward before setBatch: transfer a batch first");
  train_ = train;
  Context ctx{dev_, params_, buffers_, train, cfg_.seed, step_};
  if (train) ++step_;
  logits_ = &net_->forward(images_, ctx);
  probs_.ensure(dev_, logits_->shape(), "softmax");
  return *logits_;
}

float Model::loss() {
  XS_CHECK(logits_, ArgumentError, "loss before forward");
  return crossEntropyForward(probs_.data(), logits_->data(),
                             reinterpret_cast<const std::int32_t*>(labels_.data()), batch_, cfg_.numClasses);
}

int Model::correct() {
  XS_CHECK(logits_, ArgumentError, "correct before forward");
  return countCorrect(logits_->data(), reinterpret_cast<const std::int32_t*>(labels_.data()), batch_,
                      cfg_.numClasses);
}

void Model::backward() {
  XS_CHECK(logits_, ArgumentError, "backward before forward and loss");
  loss();  // refreshes the softmax the gradient starts from
  dlogits_.ensure(dev_, logits_->shape(), "logit gradients");
  crossEntropyBackward(dlogits_.data(), probs_.data(),
                       reinterpret_cast<const std::int32_t*>(labels_.data()), batch_, cfg_.numClasses);
  Context ctx{dev_, params_, buffers_, train_, cfg_.seed, step_, &gradReady_};
  net_->backward(dlogits_, ctx);
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
