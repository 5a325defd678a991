// model.hpp: Model, a network built by name with a seed on one Device, with its flat parameter,
// gradient and running-statistics buffers, and the train/eval steps a trainer calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xspawn/engine/device.hpp"
#include "xspawn/engine/layers.hpp"
#include "xspawn/engine/params.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

struct ModelConfig {
  std::string name = "mlp";  // mlp, convnet, lenet5, alexnet, resnet18
  int channels = 0;          // 0: the model's default (1 for mlp/convnet/lenet5, 3 otherwise)
  int imageSize = 0;         // 0: the model's default (28; 224 for alexnet, 32 for resnet18)
  int numClasses = 10;
  std::uint64_t seed = 0;    // the same seed gives bit-identical initial weights everywhere
  float dropout = 0.5f;      // alexnet's classifier dropout
};

struct StepResult {
  float loss = 0;   // mean cross-entropy over the batch
  int correct = 0;  // samples whose arg-max logit is the label
  int batch = 0;
};

class Model {
 public:
  // Builds cfg.name on dev and initialises it from cfg.seed (PyTorch's default rules).
  Model(Device& dev, const ModelConfig& cfg);
  static std::vector<std::string> names();

  const ModelConfig& config() const { return cfg_; }
  Device& device() { return dev_; }
  Shape inputShape() const { return input_; }  // per sample: [c, h, w]
  int numClasses() const { return cfg_.numClasses; }
  double forwardFlopsPerSample() const { return flops_; }

  // Host -> device transfer of a batch: images [batch, c, h, w], labels [batch].
  void setBatch(const float* images, const std::int32_t* labels, int batch);
  // Logits [batch, classes] of the current batch; train selects batch statistics and dropout.
  const Tensor& forward(bool train);
  float loss();      // mean cross-entropy of the last forward
  int correct();     // correct predictions of the last forward
  void backward();   // accumulates d loss / d params into the gradient buffer

  // zeroGrad + setBatch + forward(train) + loss + backward.
  StepResult trainStep(const float* images, const std::int32_t* labels, int batch);
  // setBatch + forward(eval) + loss.
  StepResult evaluate(const float* images, const std::int32_t* labels, int batch);

  ParamStore& params() { return params_; }
  ParamStore& buffers() { return buffers_; }  // BatchNorm running statistics
  std::size_t gradientCount() const { return params_.size(); }
  // Places the gradient buffer in caller memory (gradientCount() floats, 64-byte aligned).
  void bindGradients(float* external, std::size_t count) { params_.bindGradients(external, count); }
  void zeroGrad() { params_.zeroGrad(); }
  // Re-initialises parameters and running statistics from seed.
  void initialize(std::uint64_t seed);

  // Training forwards run so far: dropout masks are drawn from (seed, step), so a resumed run
  // sets it to the steps already trained to continue the same mask sequence.
  std::uint64_t step() const { return step_; }
  void setStep(std::uint64_t step) { step_ = step; }

  // Called during backward() each time a contiguous range [offset, offset + count) of the flat
  // gradient buffer is final (one call per layer with parameters, roughly last layer first);
  // the calls cover the whole buffer (alignment gaps included) exactly once per backward. Lets
  // a trainer start reducing gradients while backward runs. An empty function removes it.
  using GradReadyHook = std::function<void(std::size_t offset, std::size_t count)>;
  void setGradReadyHook(GradReadyHook hook) { gradReady_ = std::move(hook); }

 private:
  Device& dev_;
  ModelConfig cfg_;
  Shape input_;
  double flops_ = 0;
  ParamStore params_{true}, buffers_{false};
  std::unique_ptr<Sequential> net_;
  Tensor images_, labels_, probs_, dlogits_;
  const Tensor* logits_ = nullptr;
  int batch_ = 0;
  bool train_ = false;
  std::uint64_t step_ = 0;
  GradReadyHook gradReady_;
};

// The network of a model name for a per-sample input shape (used by Model).
std::unique_ptr<Sequential> buildNetwork(const ModelConfig& cfg);
// The default per-sample input of a model name: [c, h, w].
Shape defaultInput(const ModelConfig& cfg);

}  // namespace xs::engine
