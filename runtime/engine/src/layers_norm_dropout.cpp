// layers_norm_dropout.cpp: the batch-norm and dropout modules (the other leaf modules are in
// layers.cpp).
#include "xspawn/nn.hpp"

#include <string>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "gradient_pool.hpp"
#include "layer_checks.hpp"
#include "ops.hpp"
#include "rng.hpp"

namespace xs::engine {

using detail::expectChw;
using detail::expectGradientOf;
using detail::moduleName;
using nn::BuildInfo;
using nn::Context;
using nn::Module;

namespace {

class Dropout : public Module {
 public:
  explicit Dropout(float p) : p_(p) {
    XS_CHECK(p >= 0.f && p < 1.f, UsageError,
             "dropout probability " + std::to_string(p) + " must be in [0, 1)");
  }
  Shape build(const Shape& in, const std::string& prefix, BuildInfo&) override {
    salt_ = hashName(prefix);
    who_ = moduleName(prefix, "dropout");
    return in;
  }
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    active_ = ctx.train && p_ > 0.f;
    if (!active_) return x;
    y_.ensure(ctx.dev, x.shape(), "activations");
    y_.setLayout(x.layout());
    mask_.ensure(ctx.dev, x.shape(), "dropout mask");
    dropoutForward(y_.data(), mask_.data(), x.data(), x.numel(), p_, ctx.seed ^ salt_, ctx.step);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    if (!active_) return dy;
    expectGradientOf(y_, dy, who_);
    detail::lendGradient(ctx, dx_, dy.shape());
    dx_.setLayout(dy.layout());
    dropoutBackward(dx_.data(), dy.data(), mask_.data(), dy.numel());
    return dx_;
  }

 private:
  float p_;
  bool active_ = false;
  std::uint64_t salt_ = 0;
  std::string who_ = "dropout";  // its name, for errors (build)
  Tensor mask_;
};

class BatchNorm2d : public Module {
 public:
  BatchNorm2d(int c, bool relu, bool gradToConv) : c_(c), relu_(relu), gradToConv_(gradToConv) {}
  void fuseWithNext(Module& next) override { nextRounds_ = next.roundsInputToBf16(); }
  Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) override {
    who_ = moduleName(prefix, "batch-norm");
    expectChw(in, prefix + ": batch-norm");
    XS_CHECK(in[0] == c_, ShapeError,
             prefix + ": batch-norm expects " + std::to_string(c_) + " channels, got " + in.str());
    gamma_ = info.params.add(prefix + ".weight", Shape{c_}, Init::kOnes);
    beta_ = info.params.add(prefix + ".bias", Shape{c_}, Init::kZeros);
    mean_ = info.buffers.add(prefix + ".running_mean", Shape{c_}, Init::kZeros);
    var_ = info.buffers.add(prefix + ".running_var", Shape{c_}, Init::kOnes);
    return in;
  }
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    x_ = &x;
    train_ = ctx.train;
    const Shape& s = x.shape();
    args_ = BatchNormArgs{s[0], s[1], s[2] * s[3]};
    args_.nhwc = x.layout() == Layout::kNhwc;
    args_.relu = relu_;
    args_.roundY = nextRounds_ && args_.nhwc && bf16Products(ctx.dev);  // rounding at the producer
    y_.ensure(ctx.dev, s, "activations");
    y_.setLayout(x.layout());
    y_.setBf16Values(args_.roundY);
    stats_.ensure(ctx.dev, Shape{2, c_}, "batch-norm statistics");
    float* mean = stats_.data();
    float* invstd = mean + c_;
    if (train_)
      batchNorm2dForwardTrain(y_.data(), mean, invstd, ctx.buffers.value(mean_), ctx.buffers.value(var_),
                              x.data(), ctx.params.value(gamma_), ctx.params.value(beta_), args_);
    else
      batchNorm2dForwardEval(y_.data(), mean, invstd, ctx.buffers.value(mean_), ctx.buffers.value(var_),
                             x.data(), ctx.params.value(gamma_), ctx.params.value(beta_), args_);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    expectGradientOf(y_, dy, who_);
    detail::lendGradient(ctx, dx_, dy.shape());
    dx_.setLayout(dy.layout());
    // Feeding a bf16 convolution, dx is written as the bf16 it would be rounded to there.
    args_.dxBf16 = gradToConv_ && args_.nhwc && ctx.dev.precision() == Precision::kBf16;
    dx_.setDtype(args_.dxBf16 ? DType::kBf16 : DType::kF32);
    batchNorm2dBackward(dx_.data(), ctx.params.grad(gamma_), ctx.params.grad(beta_), dy.data(),
                        x_->data(), stats_.data(), stats_.data() + c_, ctx.params.value(gamma_),
                        train_, args_, y_.data());
    ctx.gradsReady(gamma_, beta_);
    return dx_;
  }

 private:
  int c_;
  bool relu_, gradToConv_;
  bool nextRounds_ = false;  // the module after rounds its input to bf16 (roundsInputToBf16)
  bool train_ = true;
  BatchNormArgs args_{};
  std::string who_ = "batch-norm";  // its name, for errors (build)
  std::size_t gamma_ = 0, beta_ = 0, mean_ = 0, var_ = 0;
  Tensor stats_;
};

}  // namespace

}  // namespace xs::engine

namespace xs::nn {

ModulePtr Dropout(float p) { return std::make_unique<engine::Dropout>(p); }
ModulePtr BatchNorm2d(int channels, bool relu, bool gradToConv) {
  return std::make_unique<engine::BatchNorm2d>(channels, relu, gradToConv);
}

}  // namespace xs::nn
