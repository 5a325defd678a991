// nn.hpp: the layers a network is built from (xs::nn, after torch.nn): Conv2d, Linear, ReLU,
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, BatchNorm2d, Dropout, Flatten, the ResNet BasicBlock,
// and Sequential to chain them. Each module owns its output and input-gradient tensors on the
// emulated core (in a model's backward, the engine's own layers borrow the memory of the latter:
// Context::gradients), keeps its parameters in the model's flat buffers and names them PyTorch-style
// ("features.0.weight"), so a network built here maps one to one onto its PyTorch twin.
// Wrap a network into a trainable engine::Model (model.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xspawn/engine/params.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine::detail {
class StepInBackward;
class ModuleClock;
class GradientPool;
}

namespace xs::nn {

using engine::Device;
using engine::ParamStore;
using engine::Shape;
using engine::Tensor;

// What a forward/backward pass runs with.
struct Context {
  Device& dev;
  ParamStore& params;
  ParamStore& buffers;  // running statistics
  bool train = true;
  std::uint64_t seed = 0;  // dropout masks
  std::uint64_t step = 0;
  // Told when a range of the flat gradient buffer is final (Model::setGradReadyHook); may be null.
  const std::function<void(std::size_t, std::size_t)>* gradReady = nullptr;
  // The optimizer step made inside this backward (engine::Model::setOptimizerInBackward), which
  // the engine's own layers may fuse into their kernels; null otherwise.
  engine::detail::StepInBackward* stepInBackward = nullptr;
  // Times each module's forward and backward (engine::Model::setModuleTimes); null otherwise.
  engine::detail::ModuleClock* moduleClock = nullptr;
  // The model's activation gradients (engine::Model's backward), null otherwise: the engine's
  // own layers write their input gradient into a buffer lent from it, which the Sequential
  // around them takes back once the module before has read it. A module of one's own leaves it
  // alone and keeps its own.
  engine::detail::GradientPool* gradients = nullptr;
  // Reports the gradients of parameter views [first, last] (registered consecutively) as final:
  // a module's backward calls it once its gradients are written and it has read those
  // parameters for the last time in this backward (the gradient hook sees the gradients, and an
  // optimizer in backward steps the views from them at once).
  void gradsReady(std::size_t first, std::size_t last) const;
};

// Accumulates the build-time facts of a model.
struct BuildInfo {
  ParamStore& params;
  ParamStore& buffers;
  double forwardFlops = 0;  // multiply-adds x 2 per sample in GEMM-backed ops
};

class Module {
 public:
  virtual ~Module() = default;
  // Registers parameters under prefix; in is the per-sample shape [c, h, w] or [f]; returns
  // the per-sample output shape. needInputGrad false skips dx: Sequential::build sets it on its
  // first module when nothing reads the Sequential's input gradient (a model's first), and
  // then also on the modules after it up to the first with parameters. The backward of those
  // before that one, which register no parameters, is not called at all: a module without
  // parameters must not rely on its backward running.
  virtual Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) = 0;
  virtual const Tensor& forward(const Tensor& x, Context& ctx) = 0;
  virtual const Tensor& backward(const Tensor& dy, Context& ctx) = 0;
  void setNeedInputGrad(bool v) { needInputGrad_ = v; }
  // Fusion of a ReLU into the module after it (Sequential::build calls fuseWithNext on each
  // module): a ReLU asks `next` to take over its work (absorbReluBefore: max-pool, as
  // relu(max(x)) = max(relu(x)) and its gradient goes only where the pooled value is positive;
  // average pool, which pools relu(x) as it reads x and passes its gradient where x > 0);
  // if it does, the ReLU passes x and dy through.
  // Sequential::build calls it from the last module to the first, so that `next` has already
  // met its own next when asked.
  virtual void fuseWithNext(Module&) {}
  virtual bool absorbReluBefore() { return false; }
  // True when this module's bf16 kernels round its input to bf16 (convolution, linear; a
  // flatten passes the question on): the module before may then write its output rounded
  // (Tensor::bf16Values) in a pass it makes anyway, and save this module its rounding pass.
  virtual bool roundsInputToBf16() const { return false; }
  // True when this module takes an NCHW input as fast as a channels-last one and gives its
  // output channels last all the same (a 2x2 average pool of fewer than 16 channels): the module
  // before may then write NCHW where its kernels compute channel planes (a convolution of one
  // input channel), and skip interleaving them. A ReLU fused into the module after it passes
  // the question on.
  virtual bool takesPlanarInput() const { return false; }
  // Set by Sequential::build on every module but its first: the input is the output of the
  // module before, read by nothing else, so its gradient may go back in the layout that module
  // asked for (Tensor::blockedGrad).
  void setChained(bool v) { chained_ = v; }

 protected:
  Tensor y_, dx_;
  const Tensor* x_ = nullptr;
  bool needInputGrad_ = true;
  bool chained_ = false;
};

using ModulePtr = std::unique_ptr<Module>;

class Sequential : public Module {
 public:
  Sequential& add(std::string name, ModulePtr m);
  Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) override;
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;

 private:
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::size_t firstBackward_ = 0;  // leading children whose backward nobody needs (build)
  // Per child, for engine::Model::moduleTimes: its full name ("features.0"), and the
  // multiply-adds x 2 a sample of its forward and of its backward (build).
  struct ChildInfo {
    std::string name;
    double forwardFlops = 0, backwardFlops = 0;
  };
  std::vector<ChildInfo> info_;
};

// The layers, named and parameterised as in torch.nn (padding is symmetric, in pixels). Each
// returns a new module to add to a Sequential.
// Linear: y = x W^T + b; x [batch, in] -> [batch, out]. in == 0: taken from the input at build.
ModulePtr Linear(int in, int out);
// Conv2d: x [batch, in, h, w] -> [batch, out, (h + 2 pad - k) / stride + 1, ...]; k x k kernels.
ModulePtr Conv2d(int in, int out, int k, int stride = 1, int pad = 0, bool bias = true);
// MaxPool2d / AvgPool2d: k x k windows; stride 0 means stride = k (torch's default).
ModulePtr MaxPool2d(int k, int stride = 0, int pad = 0);
ModulePtr AvgPool2d(int k, int stride = 0, int pad = 0);
// AdaptiveAvgPool2d: averages to an oh x ow output whatever the input size (1, 1: global pool).
ModulePtr AdaptiveAvgPool2d(int oh, int ow);
ModulePtr ReLU();
// Dropout: zeroes each value with probability p in training and scales the rest by 1/(1-p);
// masks are drawn from (the model's seed, its step), so a run is reproducible and resumable.
ModulePtr Dropout(float p = 0.5f);
// BatchNorm2d: per-channel batch statistics in training, running statistics (momentum 0.1) in
// evaluation. relu: followed by a ReLU in one pass each way. gradToConv: its input gradient goes
// only to a convolution (the layer before it), so in bf16 channels-last it is written as bf16.
ModulePtr BatchNorm2d(int channels, bool relu = false, bool gradToConv = false);
// Flatten: [batch, c, h, w] -> [batch, c * h * w].
ModulePtr Flatten();
// ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut is a
// strided 1x1 conv ("conv3") when the stride or the channel count changes.
// reluInput: x is a ReLU's output (x >= 0): the block returns dx already through that ReLU's
// backward (masked by x > 0, which the ReLU's own backward then leaves as is). maskedGrad: the
// dy the block receives is already masked by its output y > 0 (the next block has reluInput),
// so the block skips its own ReLU's backward. Both false: an ordinary block anywhere.
ModulePtr BasicBlock(int in, int out, int stride, bool reluInput = false, bool maskedGrad = false);

}  // namespace xs::nn
