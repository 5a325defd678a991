// layers.hpp: modules wrapping the ops: each owns its output and input-gradient tensors, keeps
// indices of its parameters in the model's flat stores, and names them PyTorch-style.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xspawn/engine/ops.hpp"
#include "xspawn/engine/params.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

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
  // Reports the gradients of parameter views [first, last] (registered consecutively) as final.
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
  // the per-sample output shape. needInputGrad false skips dx (the first layer).
  virtual Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) = 0;
  virtual const Tensor& forward(const Tensor& x, Context& ctx) = 0;
  virtual const Tensor& backward(const Tensor& dy, Context& ctx) = 0;
  void setNeedInputGrad(bool v) { needInputGrad_ = v; }
  // Fusion of a ReLU into the module after it (Sequential::build calls fuseWithNext on each
  // module): a ReLU asks `next` to take over its work (absorbReluBefore: max-pool, as
  // relu(max(x)) = max(relu(x)) and its gradient goes only where the pooled value is positive);
  // if it does, the ReLU passes x and dy through.
  virtual void fuseWithNext(Module&) {}
  virtual bool absorbReluBefore() { return false; }
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
};

// in == 0: the input size is taken from the shape at build time.
ModulePtr makeLinear(int in, int out);
ModulePtr makeConv2d(int in, int out, int k, int stride = 1, int pad = 0, bool bias = true);
ModulePtr makeMaxPool2d(int k, int stride, int pad = 0);
ModulePtr makeAvgPool2d(int k, int stride, int pad = 0);
ModulePtr makeAdaptiveAvgPool2d(int oh, int ow);
ModulePtr makeRelu();
ModulePtr makeDropout(float p);
// relu: batch-norm followed by ReLU, in one pass each way. gradToConv: its input gradient goes
// only to a convolution (the layer before it), so in bf16 channels-last it is written as bf16.
ModulePtr makeBatchNorm2d(int channels, bool relu = false, bool gradToConv = false);
ModulePtr makeFlatten();
// ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut is a
// strided 1x1 conv ("conv3") when the stride or the channel count changes.
// reluInput: x is a ReLU's output (x >= 0): the block returns dx already through that ReLU's
// backward (masked by x > 0, which the ReLU's own backward then leaves as is). maskedGrad: the
// dy the block receives is already masked by its output y > 0 (the next block has reluInput),
// so the block skips its own ReLU's backward.
ModulePtr makeBasicBlock(int in, int out, int stride, bool reluInput = false, bool maskedGrad = false);

}  // namespace xs::engine
