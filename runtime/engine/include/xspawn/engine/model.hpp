// model.hpp: engine::Model, a network (built from xs::nn layers) wrapped with a cross-entropy
// loss on one emulated core (Device): its flat parameter, gradient and running-statistics
// buffers, and the train/eval steps a training loop calls. The built-in networks are in
// xspawn/models.hpp; any other network is built the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xspawn/engine/device.hpp"
#include "xspawn/nn.hpp"
#include "xspawn/engine/params.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::optim {
class Optimizer;
}

namespace xs::engine {

// What a Model trains: a network, the per-sample input it takes and the classes it predicts.
struct Network {
  std::unique_ptr<nn::Sequential> layers;  // ends in numClasses logits per sample
  Shape input;                             // per sample: [c, h, w] (or [features])
  int numClasses = 10;
  std::string name = "custom";             // recorded in checkpoints; a load checks it
};

// One module's own time in the passes since Model::setModuleTimes or resetModuleTimes: what its
// forward and backward took, less the time of the modules inside it (a residual block's
// convolutions count as theirs), in seconds. FLOPs likewise: its own multiply-adds x 2 a sample
// (those of its convolutions and linear layers), forward and backward (the weight gradient's,
// and the input gradient's where one is computed).
struct ModuleTime {
  std::string name;  // as its parameters are named: "conv1", "features.0", "layer1.0.conv2"
  double forwardFlops = 0, backwardFlops = 0;
  double forwardSeconds = 0, backwardSeconds = 0;
};

// What Model::setModuleTimes measures with: elapsed time (kWall), or the CPU time of the thread
// that runs the passes (kThreadCpu), which leaves out what the thread waited for a core: for
// ranks that outnumber the cores, whose elapsed times count the other ranks' turns too. A CPU
// time read is a system call (1.3 us measured on a VM with page-table isolation), an elapsed
// one is not (26 ns there).
enum class ModuleTimeBase { kWall, kThreadCpu };

struct StepResult {
  float loss = 0;   // mean cross-entropy over the batch
  int correct = 0;  // samples whose arg-max logit is the label
  int batch = 0;
};

class Model {
 public:
  // Builds `network` on dev and initialises it from `seed` (PyTorch's default rules: the same
  // seed gives bit-identical initial weights on every rank). Throws ShapeError when the network
  // does not take network.input or does not end in network.numClasses logits.
  Model(Device& dev, Network network, std::uint64_t seed);
  ~Model();

  const std::string& name() const { return name_; }
  Device& device() { return dev_; }
  Shape inputShape() const { return input_; }  // per sample: [c, h, w]
  int numClasses() const { return numClasses_; }
  std::uint64_t seed() const { return seed_; }
  double forwardFlopsPerSample() const { return flops_; }

  // ShapeError, saying how to fix it, unless samples of shape `sample` are what the model takes.
  void checkSample(const Shape& sample) const;
  // Host -> device transfer of a batch: images [batch, c, h, w], labels [batch] in
  // [0, numClasses).
  void setBatch(const float* images, const std::int32_t* labels, int batch);
  // Logits [batch, classes] of the current batch; train selects batch statistics and dropout.
  const Tensor& forward(bool train);
  float loss();      // mean cross-entropy of the last forward (label-smoothed when set)
  int correct();     // correct predictions of the last forward
  // Accumulates d loss / d params into the gradient buffer; with an optimizer in backward, also
  // makes its step (setOptimizerInBackward).
  void backward();

  // zeroGrad + setBatch + forward(train) + loss + backward.
  StepResult trainStep(const float* images, const std::int32_t* labels, int batch);
  // setBatch + forward(eval) + loss.
  StepResult evaluate(const float* images, const std::int32_t* labels, int batch);

  ParamStore& params() { return params_; }
  ParamStore& buffers() { return buffers_; }  // BatchNorm running statistics
  std::size_t gradientCount() const { return params_.size(); }
  // torch.nn.CrossEntropyLoss(label_smoothing=eps): loss() and backward() compare the logits
  // with (1 - eps) on the label plus eps / numClasses() on every class, for training and
  // evaluation alike. 0 (the default) is plain cross-entropy. Throws UsageError outside [0, 1].
  void setLabelSmoothing(float eps);
  float labelSmoothing() const { return labelSmoothing_; }

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

  // Makes opt's step inside every backward() from now on (PyTorch's optimizer in backward):
  // each layer's parameters are updated as soon as backward has made their gradient, while it
  // is still in cache, and the largest linear layers (docs/engine.md: under SGD, and Adam or
  // AdamW in fp32 and emulated bf16 on CPUs other than AMD's, with AVX-512 and the oneDNN GEMM
  // backend) update their weights as they compute the gradient, which is then never written. The parameters end each
  // backward() as backward() and opt.step() would leave them, bit for bit, and opt.steps()
  // counts the step. So:
  // - each backward() is a whole step: gradients do not accumulate across backwards, and the
  //   gradient buffer means nothing afterwards (nothing can clip or all-reduce it);
  // - opt.step() is then a UsageError, and so is backward() with a gradient hook
  //   (setGradReadyHook, set by xs::data_parallel): several ranks must all-reduce their
  //   gradients before stepping, so this is for one process;
  // - a learning-rate schedule sets opt's rate before backward().
  // opt must be built over this model's parameters (UsageError otherwise); a second call
  // replaces the first, and null turns it off. Destroying either side turns it off. A backward()
  // that throws part of the way leaves the step made for the layers it reached.
  void setOptimizerInBackward(optim::Optimizer* opt);
  optim::Optimizer* optimizerInBackward() const { return inBackward_; }

  // Times every module of the network in each forward() and backward() from now on (on: true),
  // or stops (false, which also drops the times). A module's time covers its kernels and, with
  // an optimizer in backward, the step made for its parameters; the loss, zeroGrad() and a
  // separate optimizer step are outside every module. Costs two clock reads a module and pass.
  // `base`: elapsed or thread CPU time (a change of base drops the times so far).
  void setModuleTimes(bool on, ModuleTimeBase base = ModuleTimeBase::kWall);
  ModuleTimeBase moduleTimeBase() const { return moduleTimeBase_; }
  // Every module's own time since setModuleTimes(true) or the last resetModuleTimes(), in the
  // order their first forward ended (a module after those inside it); empty before that forward,
  // or when off. A module that did not run since keeps its entry, at zero.
  const std::vector<ModuleTime>& moduleTimes() const;
  void resetModuleTimes();

  // State a library above the engine keeps with the model (xs::optimizer_step keeps the
  // gradients' shared buffers there); destroyed before the rest of the model.
  struct Attachment {
    virtual ~Attachment() = default;
  };
  Attachment* attachment() const { return attachment_.get(); }
  void setAttachment(std::unique_ptr<Attachment> a) { attachment_ = std::move(a); }

 private:
  Device& dev_;
  std::string name_;
  Shape input_;
  int numClasses_ = 0;
  std::uint64_t seed_ = 0;
  double flops_ = 0;
  float labelSmoothing_ = 0.f;
  ParamStore params_{true}, buffers_{false};
  std::unique_ptr<nn::Sequential> net_;
  Tensor images_, labels_, probs_, dlogits_;
  const Tensor* logits_ = nullptr;
  bool probsFresh_ = false;  // probs_ is the softmax of logits_ (loss() since the last forward)
  int batch_ = 0;
  bool train_ = false;
  std::uint64_t step_ = 0;
  GradReadyHook gradReady_;
  optim::Optimizer* inBackward_ = nullptr;
  std::unique_ptr<detail::ModuleClock> moduleClock_;  // setModuleTimes
  std::unique_ptr<detail::GradientPool> gradients_;  // the backward's activation gradients
  ModuleTimeBase moduleTimeBase_ = ModuleTimeBase::kWall;
  std::unique_ptr<Attachment> attachment_;  // last: goes first
};

}  // namespace xs::engine
