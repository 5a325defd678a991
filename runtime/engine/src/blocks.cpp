// blocks.cpp: composite modules: Sequential and the ResNet basic block.
#include <cstring>

#include "xspawn/error.hpp"
#include "xspawn/nn.hpp"
#include "gradient_pool.hpp"
#include "module_clock.hpp"
#include "ops.hpp"

namespace xs::nn {

Sequential& Sequential::add(std::string name, ModulePtr m) {
  children_.emplace_back(std::move(name), std::move(m));
  return *this;
}

Shape Sequential::build(const Shape& in, const std::string& prefix, BuildInfo& info) {
  // When nothing reads this Sequential's input gradient, nothing reads that of its leading
  // modules without parameters (a flatten, a pool) either: their backward is skipped, and the
  // first module with parameters computes no input gradient. (The MLP's fc1, after its flatten,
  // would otherwise compute a 784-wide input gradient each step; PyTorch skips it too.)
  Shape s = in;
  bool leading = !needInputGrad_;
  firstBackward_ = 0;
  info_.assign(children_.size(), {});
  for (std::size_t i = 0; i < children_.size(); ++i) {
    auto& [name, m] = children_[i];
    m->setNeedInputGrad(!leading);
    m->setChained(i > 0);
    const std::size_t views = info.params.views().size();
    const double flops = info.forwardFlops;
    info_[i].name = prefix.empty() ? name : prefix + "." + name;
    s = m->build(s, info_[i].name, info);
    // Its backward: the weight gradient's products, and the input gradient's unless skipped.
    info_[i].forwardFlops = info.forwardFlops - flops;
    info_[i].backwardFlops = info_[i].forwardFlops * (leading ? 1 : 2);
    if (leading && info.params.views().size() == views) firstBackward_ = i + 1;
    else leading = false;
  }
  // ReLU then a max- or average pool: the pool does both (saves the ReLU's two passes over the map).
  // Last to first: a module asks its next about the next's own next (roundsInputToBf16).
  for (std::size_t i = children_.size(); i-- > 1;)
    children_[i - 1].second->fuseWithNext(*children_[i].second);
  return s;
}

const Tensor& Sequential::forward(const Tensor& x, Context& ctx) {
  const Tensor* t = &x;
  engine::detail::ModuleClock* clock = ctx.moduleClock;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    Module& m = *children_[i].second;
    if (clock) clock->begin();
    t = &m.forward(*t, ctx);
    if (clock) clock->end(&m, info_[i].name, info_[i].forwardFlops, info_[i].backwardFlops, false);
  }
  return *t;
}

const Tensor& Sequential::backward(const Tensor& dy, Context& ctx) {
  const Tensor* t = &dy;
  engine::detail::ModuleClock* clock = ctx.moduleClock;
  for (std::size_t i = children_.size(); i-- > firstBackward_;) {
    Module& m = *children_[i].second;
    if (clock) clock->begin();
    const Tensor& dx = m.backward(*t, ctx);
    if (clock) clock->end(&m, info_[i].name, info_[i].forwardFlops, info_[i].backwardFlops, true);
    // t has been read for the last time unless m passed it on: its buffer goes back to the
    // model's pool (when it came from there). dy is the caller's, which may read it again.
    if (dx.data() != t->data() && t != &dy) engine::detail::giveBackGradient(ctx, *t);
    t = &dx;
  }
  return firstBackward_ > 0 ? dx_ : *t;  // dx_ stays empty: nobody reads it
}

}  // namespace xs::nn

namespace xs::engine {

using nn::BuildInfo;
using nn::Context;
using nn::Module;
using nn::ModulePtr;
using nn::Sequential;

namespace {

class BasicBlock : public Module {
 public:
  BasicBlock(int in, int out, int stride, bool reluInput, bool maskedGrad)
      : reluInput_(reluInput), maskedGrad_(maskedGrad) {
    body_.add("conv1", nn::Conv2d(in, out, 3, stride, 1))
        .add("bn1", nn::BatchNorm2d(out, true, true))  // batch-norm + ReLU in one pass
        .add("conv2", nn::Conv2d(out, out, 3, 1, 1))
        .add("bn2", nn::BatchNorm2d(out, false, true));
    if (stride != 1 || in != out) shortcut_ = nn::Conv2d(in, out, 1, stride, 0);
  }
  Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) override {
    body_.setNeedInputGrad(needInputGrad_);
    Shape out = body_.build(in, prefix, info);
    if (shortcut_) {
      shortcut_->setNeedInputGrad(needInputGrad_);
      Shape s = shortcut_->build(in, prefix + ".conv3", info);
      XS_CHECK(s == out, ShapeError, prefix + ": shortcut shape " + s.str() + " differs from " + out.str());
    } else {
      XS_CHECK(in == out, ShapeError, prefix + ": identity shortcut needs equal shapes");
    }
    return out;
  }
  // y = relu(body(x) + shortcut(x))
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    x_ = &x;
    const Tensor& b = body_.forward(x, ctx);
    const Tensor& s = shortcut_ ? shortcut_->forward(x, ctx) : x;
    XS_CHECK(b.layout() == s.layout(), ShapeError, "basic block: body and shortcut layouts differ");
    y_.ensure(ctx.dev, b.shape(), "activations");
    y_.setLayout(b.layout());
    addReluForward(y_.data(), b.data(), s.data(), b.numel());
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    const Tensor* ds = &dy;  // d loss / d (body + shortcut): dy through the ReLU
    if (!maskedGrad_) {
      detail::lendGradient(ctx, dsum_, dy.shape());
      dsum_.setLayout(dy.layout());
      reluBackward(dsum_.data(), dy.data(), y_.data(), dy.numel());
      ds = &dsum_;
    }
    const Tensor& dxBody = body_.backward(*ds, ctx);
    if (!needInputGrad_) {
      if (shortcut_) shortcut_->backward(*ds, ctx);
      detail::giveBackGradient(ctx, dsum_);
      return dx_;
    }
    detail::lendGradient(ctx, dx_, x_->shape());
    dx_.setLayout(x_->layout());
    const Tensor& dxShort = shortcut_ ? shortcut_->backward(*ds, ctx) : *ds;
    if (reluInput_)  // also the backward of the ReLU that produced x, which then leaves it as is
      reluMaskedSum(dx_.data(), dxBody.data(), dxShort.data(), x_->data(), dx_.numel());
    else
      addForward(dx_.data(), dxBody.data(), dxShort.data(), dx_.numel());
    // Both paths' gradients and dsum_ are read (dy is the caller's).
    detail::giveBackGradient(ctx, dxBody);
    if (shortcut_) detail::giveBackGradient(ctx, dxShort);
    detail::giveBackGradient(ctx, dsum_);
    return dx_;
  }

 private:
  bool reluInput_, maskedGrad_;
  Sequential body_;
  ModulePtr shortcut_;
  Tensor dsum_;
};

}  // namespace

}  // namespace xs::engine

namespace xs::nn {

ModulePtr BasicBlock(int in, int out, int stride, bool reluInput, bool maskedGrad) {
  return std::make_unique<engine::BasicBlock>(in, out, stride, reluInput, maskedGrad);
}

}  // namespace xs::nn
