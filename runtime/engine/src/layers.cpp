// layers.cpp: the leaf modules (linear, conv2d, pools, ReLU, flatten); dropout and batch-norm are in
// layers_norm_dropout.cpp.
#include "xspawn/nn.hpp"

#include <cmath>
#include <cstring>
#include <utility>

#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "gradient_pool.hpp"
#include "layer_checks.hpp"
#include "ops.hpp"
#include "param_mirror.hpp"
#include "step_in_backward.hpp"

namespace xs::nn {

void Context::gradsReady(std::size_t first, std::size_t last) const {
  if (stepInBackward) stepInBackward->ready(first, last);
  if (!gradReady || !*gradReady) return;
  for (std::size_t i = first; i <= last; ++i) params.grad(i);  // a view nothing wrote reads as zeros
  const auto& v = params.views();
  // A view owns the alignment gap after it, so the ranges tile the whole buffer.
  std::size_t end = last + 1 < v.size() ? v[last + 1].offset : params.size();
  (*gradReady)(v[first].offset, end - v[first].offset);
}

}  // namespace xs::nn

namespace xs::engine {

using detail::expectChw;
using detail::expectGradientOf;
using detail::gradientLayoutError;
using detail::moduleName;
using detail::ParamStoreAccess;
using nn::BuildInfo;
using nn::Context;
using nn::Module;

namespace {

// Weight view w as a convolution's or linear layer's products read it: in emulated bf16
// (rounded), the store's rounded mirror, which the optimizer keeps current.
const float* productWeights(Context& ctx, std::size_t w, bool rounded) {
  // Read through the const store: the mutable value() would count the weights as changed and
  // make the bf16 mirrors convert them again (ParamStore::value).
  return rounded ? ParamStoreAccess::rounded(ctx.params, w) : std::as_const(ctx.params).value(w);
}


class Linear : public Module {
 public:
  Linear(int in, int out) : in_(in), out_(out) {}
  Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) override {
    who_ = moduleName(prefix, "linear");
    XS_CHECK(in.rank == 1, ShapeError, prefix + ": linear expects flat features, got " + in.str());
    if (in_ == 0) in_ = in[0];  // inferred from the input
    XS_CHECK(in[0] == in_, ShapeError,
             prefix + ": linear expects " + std::to_string(in_) + " features, got " + in.str());
    float bound = 1.f / std::sqrt(static_cast<float>(in_));
    w_ = info.params.add(prefix + ".weight", Shape{out_, in_}, Init::kUniform, bound);
    b_ = info.params.add(prefix + ".bias", Shape{out_}, Init::kUniform, bound);
    info.forwardFlops += 2.0 * in_ * out_;
    return Shape{out_};
  }
  bool roundsInputToBf16() const override { return true; }
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    x_ = &x;
    int B = x.shape()[0];
    y_.ensure(ctx.dev, Shape{B, out_}, "activations");
    rounded_.xRounded = x.bf16Values();
    rounded_.wRounded = emulatesBf16(ctx.dev);
    // The bits mirror only where linearForward reads it (its matmul on bf16 bits).
    rounded_.wBits = bf16Matmul(ctx.dev) ? ParamStoreAccess::bits(ctx.params, w_) : nullptr;
    // Emulated, its backward rounds dy. Native, it converts dy itself, and a dy rounded by the
    // layer after would change its bias gradient, which sums dy as handed over.
    y_.setBf16Grad(rounded_.wRounded);
    linearForward(ctx.dev, y_.data(), x.data(), weight(ctx), ctx.params.value(b_), B, in_, out_, &rounded_);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    expectGradientOf(y_, dy, who_);
    int B = dy.shape()[0];
    if (needInputGrad_) detail::lendGradient(ctx, dx_, x_->shape());
    rounded_.dyRounded = dy.bf16Values();
    const bool overwrite = ctx.params.gradSlot(w_, b_).overwrite;
    float* dx = needInputGrad_ ? dx_.data() : nullptr;
    if (!overwrite || !backwardWithStep(ctx, dx, dy.data(), B))
      linearBackward(ctx.dev, dx, ctx.params.grad(w_), ctx.params.grad(b_), dy.data(), x_->data(), weight(ctx), B,
                     in_, out_, &rounded_, overwrite);
    ctx.gradsReady(w_, b_);
    return dx_;
  }

 private:
  const float* weight(Context& ctx) { return productWeights(ctx, w_, rounded_.wRounded); }
  // An SGD or Adam step inside backward made in the gradients' own pass (the bias's then follows
  // from its gradient in gradsReady).
  bool backwardWithStep(Context& ctx, float* dx, const float* dy, int B) {
    const detail::FusedStep* step = ctx.stepInBackward ? ctx.stepInBackward->fused() : nullptr;
    if (!step || !linearBackwardStepped(ctx.dev, dx, ctx.params.grad(b_), dy, x_->data(), weight(ctx), B, in_, out_,
                                        &rounded_, *step, ctx.params.views()[w_].offset))
      return false;
    ctx.stepInBackward->stepped(w_);
    return true;
  }
  int in_, out_;
  std::size_t w_ = 0, b_ = 0;
  RoundedOperands rounded_;  // bf16 only
  std::string who_ = "linear";  // its name, for errors (build)
};

// An average pool from planes computed inside the one-channel convolution before it, image by
// image (PlanesPool, ops.hpp): the pool gives its geometry and buffers, and a ReLU fused into
// the pool passes the question on.
class PlanesPoolSource {
 public:
  virtual ~PlanesPoolSource() = default;
  // on: the convolution computes the pool's output for a batch of n this forward (and spreads
  // its gradient back in backward); off: the pool runs on its own. Null when it cannot.
  virtual const PlanesPool* fuseIntoConv(Context& ctx, int n, bool on) = 0;
  // The same for a channels-last convolution whose kernels pool (conv2dPoolsNhwc,
  // conv2dMaxPoolsNhwc): conv its geometry for this batch, with a bias when bias, asked for dx
  // when dx. Null when they cannot, or when off.
  virtual const NhwcPool* fuseIntoNhwcConv(Context&, const ConvGeom&, bool, bool, bool) { return nullptr; }
  // Whether it reads its input in blocks of 16 channels (Layout::kNchw16c) as it is: a max-pool
  // channels last over a multiple of 16 channels, or a ReLU that such a pool applies. A
  // convolution before it then hands its output over in that layout.
  virtual bool takesBlockedInput() const { return false; }
};

class Conv2d : public Module {
 public:
  Conv2d(int in, int out, int k, int stride, int pad, bool bias)
      : in_(in), out_(out), k_(k), stride_(stride), pad_(pad), bias_(bias) {}
  Shape build(const Shape& in, const std::string& prefix, BuildInfo& info) override {
    who_ = moduleName(prefix, "conv2d");
    expectChw(in, prefix + ": conv2d");
    XS_CHECK(in[0] == in_, ShapeError,
             prefix + ": conv2d expects " + std::to_string(in_) + " channels, got " + in.str());
    g_ = ConvGeom{1, in_, in[1], in[2], out_, k_, k_, stride_, pad_};
    g_.keepSrc = true;  // x stays as it is until backward
    XS_CHECK(g_.oh() > 0 && g_.ow() > 0, ShapeError,
             prefix + ": the image " + in.str() + " is too small for this network: use a larger --image-size");
    float bound = 1.f / std::sqrt(static_cast<float>(in_ * k_ * k_));
    w_ = info.params.add(prefix + ".weight", Shape{out_, in_, k_, k_}, Init::kUniform, bound);
    if (bias_) b_ = info.params.add(prefix + ".bias", Shape{out_}, Init::kUniform, bound);
    info.forwardFlops += 2.0 * out_ * g_.oh() * g_.ow() * in_ * k_ * k_;
    return Shape{out_, g_.oh(), g_.ow()};
  }
  bool roundsInputToBf16() const override { return true; }
  void fuseWithNext(Module& next) override {
    planesNext_ = next.takesPlanarInput();
    auto* source = dynamic_cast<PlanesPoolSource*>(&next);
    poolSource_ = source;
    blockedNext_ = source && source->takesBlockedInput();
  }
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    x_ = &x;
    g_.n = x.shape()[0];
    g_.xRounded = x.bf16Values();
    g_.wRounded = emulatesBf16(ctx.dev);
    g_.srcNhwc = x.layout() == Layout::kNhwc || in_ == 1;  // one channel: the same bytes either way
    g_.dstNhwc = preferredLayout(ctx.dev) == Layout::kNhwc;
    // Before a pool that takes planes, kernels that compute planes write them (one input channel).
    g_.planes = g_.dstNhwc && planesNext_ && !needInputGrad_ && conv2dWritesPlanes(ctx.dev, g_);
    if (g_.planes) g_.dstNhwc = false;
    g_.pool = planesNext_ && poolSource_ ? poolSource_->fuseIntoConv(ctx, g_.n, g_.planes) : nullptr;
    // Channels last before a pool that the kernels compute: an average pool in the narrow ones'
    // passes (conv2dPoolsNhwc), a max-pool in the one-channel forward of a first layer (conv2dMaxPoolsNhwc).
    g_.nhwcPool =
        poolSource_ && !g_.pool ? poolSource_->fuseIntoNhwcConv(ctx, g_, !g_.planes, bias_, needInputGrad_) : nullptr;
    // Before a max-pool, y as the primitive computes it (channel blocks) when that is not NHWC:
    // the pool reads it so, one reorder less. dy still comes back channels last.
    g_.dstBlocked = blockedNext_ && g_.dstNhwc && !g_.pool && !g_.nhwcPool && conv2dWritesBlocked16(ctx.dev, g_, bias_);
    // With the pool fused in, y is the pool's: this layer's output is never written or read.
    if (!g_.pool && !g_.nhwcPool) y_.ensure(ctx.dev, Shape{g_.n, out_, g_.oh(), g_.ow()}, "activations");
    y_.setLayout(g_.dstBlocked ? Layout::kNchw16c : g_.dstNhwc ? Layout::kNhwc : Layout::kNchw);
    conv2dForward(ctx.dev, y_.data(), x.data(), weight(ctx), bias_ ? ctx.params.value(b_) : nullptr, g_);
    // oneDNN backward passes that take dy (and give dx) in channel blocks: say so to the module
    // after (y_), and give dx so when the module before asked (x) and reads nothing else.
    blockedGrads_ = conv2dGradsBlocked16(ctx.dev, g_, bias_, needInputGrad_);
    y_.setBlockedGrad(blockedGrads_);
    y_.setBf16Grad(bf16Products(ctx.dev));  // its backward rounds dy (conv2dBackward)
    blockedDx_ = chained_ && needInputGrad_ && x.blockedGrad() &&
                 (blockedGrads_ || conv2dDxBlocked16(ctx.dev, g_, bias_));
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    g_.dyBlocked = dy.layout() == Layout::kNchw16c;
    const Layout dyLayout = g_.dstBlocked ? Layout::kNhwc : y_.layout();  // a blocked y's dy: channels last
    const bool fused = g_.pool || g_.nhwcPool;
    XS_CHECK(fused || dy.layout() == dyLayout || (g_.dyBlocked && blockedGrads_), ShapeError,
             gradientLayoutError(who_));  // fused: the pool's dy
    XS_CHECK(!fused || dy.dtype() == DType::kF32, ShapeError, "conv2d with a fused pool: dy must be float32");
    g_.dxBlocked = blockedDx_;
    if (needInputGrad_) {
      detail::lendGradient(ctx, dx_, x_->shape());
      dx_.setLayout(blockedDx_ ? Layout::kNchw16c : x_->layout());
    }
    g_.dyBf16 = dy.dtype() == DType::kBf16;
    g_.dyRounded = dy.bf16Values();
    g_.overwriteGrads = ctx.params.gradSlot(w_, bias_ ? b_ : w_).overwrite;
    conv2dBackward(ctx.dev, needInputGrad_ ? dx_.data() : nullptr, ctx.params.grad(w_),
                   bias_ ? ctx.params.grad(b_) : nullptr, dy.data(), x_->data(), weight(ctx), g_);
    ctx.gradsReady(w_, bias_ ? b_ : w_);
    return dx_;
  }

 private:
  int in_, out_, k_, stride_, pad_;
  bool bias_;
  const float* weight(Context& ctx) { return productWeights(ctx, w_, g_.wRounded); }
  bool blockedGrads_ = false, blockedDx_ = false;  // see forward
  bool planesNext_ = false;                         // the module after takes planes (fuseWithNext)
  bool blockedNext_ = false;                        // ... or channel blocks (takesBlockedInput)
  PlanesPoolSource* poolSource_ = nullptr;          // ... and can be computed in this one's passes
  std::string who_ = "conv2d";                      // its name, for errors (build)
  ConvGeom g_{};
  std::size_t w_ = 0, b_ = 0;
};

class Pool2d : public Module, public PlanesPoolSource {
 public:
  enum Kind { kMax, kAvg, kAdaptive };
  Pool2d(Kind kind, int a, int b, int pad) : kind_(kind), a_(a), b_(b), pad_(pad) {}
  bool absorbReluBefore() override { return reluBefore_ = kind_ != kAdaptive; }
  void fuseWithNext(Module& next) override { nextRounds_ = next.roundsInputToBf16(); }
  bool takesPlanarInput() const override { return kind_ == kAvg && avgPoolPlanesApply(nchw(g_)); }
  bool takesBlockedInput() const override { return kind_ == kMax && g_.k <= kMaxNhwcPoolWindow && g_.c % 16 == 0; }
  Shape build(const Shape& in, const std::string& prefix, BuildInfo&) override {
    who_ = moduleName(prefix, "pooling");
    expectChw(in, prefix + ": pooling");
    if (kind_ == kAdaptive) {
      g_ = PoolGeom{1, in[0], in[1], in[2], 1, 1, 0};
      return Shape{in[0], a_, b_};
    }
    g_ = PoolGeom{1, in[0], in[1], in[2], a_, b_, pad_};
    XS_CHECK(g_.oh() > 0 && g_.ow() > 0, ShapeError,
             prefix + ": the feature map " + in.str() + " is smaller than the pooling window: use a "
                      "larger --image-size");
    return Shape{in[0], g_.oh(), g_.ow()};
  }
  const PlanesPool* fuseIntoConv(Context& ctx, int n, bool on) override {
    fused_ = on && kind_ == kAvg && avgPoolPlanesApply(nchw(g_));
    if (!fused_) return nullptr;
    g_.n = n;
    planes_ = true;
    const AvgPoolFusion f = fusedOutput(ctx);
    std::uint16_t* masks = reluBefore_ ? reluMasks(ctx, avgPoolPlanesMasks(g_)) : nullptr;
    fusion_ = PlanesPool{nchw(g_), f, y_.data(), masks, nullptr};
    fusion_.g.dxRounded = bf16Products(ctx.dev);  // as the convolution's own kernels round dy
    return &fusion_;
  }
  const NhwcPool* fuseIntoNhwcConv(Context& ctx, const ConvGeom& conv, bool on, bool bias, bool dx) override {
    PoolGeom p = g_;
    p.n = conv.n;
    p.nhwc = true;
    const bool max = on && kind_ == kMax && !dx && conv2dMaxPoolsNhwc(ctx.dev, conv, p, bias);
    fused_ = max || (on && kind_ == kAvg && conv2dPoolsNhwc(ctx.dev, conv, p));
    if (!fused_) return nullptr;
    g_ = p;
    planes_ = false;
    const AvgPoolFusion f = fusedOutput(ctx);
    if (max) {  // window codes as its own pass keeps them; dy in blocks as it would take it
      argmax_.ensure(ctx.dev, y_.shape(), "max-pool indices");
      y_.setBlockedGrad(true);
      nhwcFusion_ = NhwcPool{f, y_.data(), nullptr, nullptr, reinterpret_cast<std::uint16_t*>(argmax_.data())};
    } else {
      nhwcFusion_ = NhwcPool{f, y_.data(), reluBefore_ ? reluMasks(ctx, conv2dPoolMasks(conv)) : nullptr, nullptr};
    }
    return &nhwcFusion_;
  }
  const Tensor& forward(const Tensor& x0, Context& ctx) override {
    fusedPass_ = fused_;
    fused_ = false;
    if (fusedPass_) {  // the convolution before computed y_ (fuseIntoConv)
      x_ = &x0;
      return y_;
    }
    // Max- and average pools run in either layout; the adaptive pool pools channels-last input
    // in NCHW (the output stays NCHW, which the next convolution or flatten takes).
    g_.nhwc = x0.layout() == Layout::kNhwc && (kind_ == kAvg || (kind_ == kMax && g_.k <= kMaxNhwcPoolWindow));
    g_.xBlocked = x0.layout() == Layout::kNchw16c;  // only where takesBlockedInput said so
    XS_CHECK(!g_.xBlocked || takesBlockedInput(), ShapeError,
             "pooling: input in channel blocks reaches a pool that does not read them");
    g_.nhwc = g_.nhwc || g_.xBlocked;
    // From planes (NCHW) into the channels last the next layer prefers, in one pass.
    planes_ = kind_ == kAvg && x0.layout() == Layout::kNchw && preferredLayout(ctx.dev) == Layout::kNhwc &&
              avgPoolPlanesApply(g_);
    const Tensor& x = g_.nhwc || planes_ ? x0 : toNchw(x0, ctx);
    x_ = &x0;
    g_.n = x.shape()[0];
    if (kind_ == kAdaptive) {
      y_.ensure(ctx.dev, Shape{g_.n, g_.c, a_, b_}, "activations");
      y_.setLayout(Layout::kNchw);
      adaptiveAvgPool2dForward(y_.data(), x.data(), g_.n, g_.c, g_.h, g_.w, a_, b_);
      y_.setBlockedGrad(false);
      blockedDx_ = false;
      return y_;
    }
    Shape out{g_.n, g_.c, g_.oh(), g_.ow()};
    // Rounded in the pool's pass when the next layer would round it (a max-pool: with its ReLU).
    const bool rounded = (kind_ == kAvg || reluBefore_) && nextRounds_ && bf16Products(ctx.dev);
    y_.ensure(ctx.dev, out, "activations");
    y_.setLayout(planes_ || g_.xBlocked ? Layout::kNhwc : x.layout());
    if (planes_) {
      avgPoolPlanesForward(y_.data(), reluMasks(ctx, avgPoolPlanesMasks(g_)), x.data(), g_,
                           {.relu = reluBefore_, .roundY = rounded});
    } else if (kind_ == kAvg) {
      avgPool2dForward(y_.data(), x.data(), g_, {.relu = reluBefore_, .roundY = rounded});
    } else {
      // max(relu(x)) = relu(max(x)); rounded in the same pass when the next layer would round it.
      argmax_.ensure(ctx.dev, out, "max-pool indices");
      if (g_.nhwc) {
        const PoolEpilogue e = maxPoolEpilogue({.relu = reluBefore_, .roundY = rounded});
        maxPoolNhwcForward(y_.data(), reinterpret_cast<std::uint16_t*>(argmax_.data()), x.data(), g_, e);
      } else {
        maxPool2dForward(y_.data(), reinterpret_cast<std::int32_t*>(argmax_.data()), x.data(), g_);
        if (rounded) reluRoundedToBf16(y_.data(), y_.data(), y_.numel());
        else if (reluBefore_) reluForward(y_.data(), y_.data(), y_.numel());
      }
    }
    y_.setBf16Values(rounded);
    // The channels-last max-pool reads dy and writes dx in channel blocks as well: the
    // convolutions around it then skip their reorders (Tensor::blockedGrad).
    const bool maxNhwc = kind_ == kMax && g_.nhwc;
    const bool blocks = maxNhwc && g_.c % 16 == 0;
    y_.setBlockedGrad(blocks);
    blockedDx_ = blocks && chained_ && needInputGrad_ && x0.blockedGrad();
    // The convolution before rounds dx to bf16: write it rounded (a max-pool: windows that tile only).
    g_.dxRounded = (kind_ == kAvg || (maxNhwc && g_.tiles())) && chained_ && x0.bf16Grad();
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    expectGradientOf(y_, dy, who_);
    if (fusedPass_) {  // the convolution before spreads dy back
      fusion_.dy = nhwcFusion_.dy = dy.data();
      return dy;
    }
    const bool nhwc = x_->layout() == Layout::kNhwc && !g_.nhwc;  // pooled in NCHW (a blocked x: never)
    g_.dyBlocked = dy.layout() == Layout::kNchw16c;
    g_.dxBlocked = blockedDx_;
    Tensor& dx = nhwc ? staged_ : dx_;
    detail::lendGradient(ctx, dx, x_->shape());
    dx.setBf16Values(g_.dxRounded);  // set for average pools and channels-last max-pools
    dx.setLayout(blockedDx_ ? Layout::kNchw16c : g_.nhwc ? Layout::kNhwc : Layout::kNchw);
    if (kind_ == kAdaptive)
      adaptiveAvgPool2dBackward(dx.data(), dy.data(), g_.n, g_.c, g_.h, g_.w, a_, b_);
    else if (planes_)
      avgPoolPlanesBackward(dx.data(), dy.data(),
                            reluBefore_ ? reinterpret_cast<const std::uint16_t*>(argmax_.data()) : nullptr, g_);
    else if (kind_ == kAvg)
      avgPool2dBackward(dx.data(), dy.data(), g_, reluBefore_ ? x_->data() : nullptr);
    else if (g_.nhwc)  // the codes carry the fused ReLU's mask
      maxPoolNhwcBackward(dx.data(), dy.data(), reinterpret_cast<const std::uint16_t*>(argmax_.data()), g_);
    else
      maxPool2dBackward(dx.data(), dy.data(), reinterpret_cast<const std::int32_t*>(argmax_.data()), g_,
                        reluBefore_ ? y_.data() : nullptr);
    if (nhwc) {
      detail::lendGradient(ctx, dx_, x_->shape());
      dx_.setLayout(Layout::kNhwc);
      nchwToNhwc(dx_.data(), staged_.data(), g_.n, g_.c, g_.h * g_.w);
      detail::giveBackGradient(ctx, staged_);
    }
    return dx_;
  }

 private:
  // Pooling planes or fused into a convolution: the fused ReLU's mask, `words` 16-bit words
  // (avgPoolPlanesMasks, conv2dPoolMasks), in argmax_.
  std::uint16_t* reluMasks(Context& ctx, std::size_t words) {
    argmax_.ensure(ctx.dev, Shape{static_cast<int>((words + 1) / 2)}, "ReLU masks");
    return reinterpret_cast<std::uint16_t*>(argmax_.data());
  }
  // The output of a pool that the convolution before computes (fuseIntoConv, fuseIntoNhwcConv):
  // y_ channels last for g_'s batch; the fusion's ReLU and rounding.
  AvgPoolFusion fusedOutput(Context& ctx) {
    const bool rounded = (kind_ == kAvg || reluBefore_) && nextRounds_ && bf16Products(ctx.dev);  // as forward's
    y_.ensure(ctx.dev, Shape{g_.n, g_.c, g_.oh(), g_.ow()}, "activations");
    y_.setLayout(Layout::kNhwc);
    y_.setBf16Values(rounded);
    y_.setBlockedGrad(false);
    blockedDx_ = false;
    return {.relu = reluBefore_, .roundY = rounded};
  }
  static PoolGeom nchw(PoolGeom g) {
    g.nhwc = false;
    return g;
  }
  const Tensor& toNchw(const Tensor& x, Context& ctx) {
    if (x.layout() == Layout::kNchw) return x;
    staged_.ensure(ctx.dev, x.shape(), "activations");
    staged_.setLayout(Layout::kNchw);
    nhwcToNchw(staged_.data(), x.data(), x.shape()[0], x.shape()[1], x.shape()[2] * x.shape()[3]);
    return staged_;
  }

  Kind kind_;
  int a_, b_, pad_;
  bool reluBefore_ = false;  // the ReLU before it is fused in (Sequential::build)
  bool nextRounds_ = false;  // the module after rounds its input to bf16 (roundsInputToBf16)
  bool blockedDx_ = false;   // dx goes back in channel blocks (see forward)
  bool planes_ = false;      // an average pool from planes into channels last (see forward)
  bool fused_ = false;       // the next forward's output is computed by the convolution before
  bool fusedPass_ = false;   // this pass's was (forward), and its backward is the convolution's
  PlanesPool fusion_{};      // what the convolution reads and writes (fuseIntoConv)
  NhwcPool nhwcFusion_{};    // the same, channels last (fuseIntoNhwcConv)
  PoolGeom g_{};
  std::string who_ = "pooling";  // its name, for errors (build)
  // Plane indices (int32, NCHW), window codes (uint16, channels last) or, pooling planes, the
  // fused ReLU's mask (one bit a pixel).
  Tensor argmax_;
  Tensor staged_;
};

class Relu : public Module, public PlanesPoolSource {
 public:
  Shape build(const Shape& in, const std::string& prefix, BuildInfo&) override {
    who_ = moduleName(prefix, "relu");
    return in;
  }
  void fuseWithNext(Module& next) override {
    passThrough_ = next.absorbReluBefore();
    nextRounds_ = next.roundsInputToBf16();
    planesNext_ = passThrough_ && next.takesPlanarInput();
    auto* source = dynamic_cast<PlanesPoolSource*>(&next);
    next_ = source;
    blockedNext_ = passThrough_ && source && source->takesBlockedInput();
  }
  bool takesBlockedInput() const override { return blockedNext_; }  // x goes to the pool as it is
  const PlanesPool* fuseIntoConv(Context& ctx, int n, bool on) override {  // the pool that applies it
    return planesNext_ && next_ ? next_->fuseIntoConv(ctx, n, on) : nullptr;
  }
  const NhwcPool* fuseIntoNhwcConv(Context& ctx, const ConvGeom& conv, bool on, bool bias, bool dx) override {
    return passThrough_ && next_ ? next_->fuseIntoNhwcConv(ctx, conv, on, bias, dx) : nullptr;
  }
  bool takesPlanarInput() const override { return planesNext_; }  // x goes to the pool as it is
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    if (passThrough_) return x;  // the pool after it applies the ReLU
    y_.ensure(ctx.dev, x.shape(), "activations");
    y_.setLayout(x.layout());
    // bf16: rounded in this pass when the next layer would round y, and dx rounded when the
    // layer before would round it (Tensor::bf16Values, bf16Grad).
    const bool round = bf16Products(ctx.dev) && nextRounds_;
    if (round) reluRoundedToBf16(y_.data(), x.data(), x.numel());
    else reluForward(y_.data(), x.data(), x.numel());
    y_.setBf16Values(round);
    roundDx_ = chained_ && x.bf16Grad();  // set only in bf16
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    if (passThrough_) return dy;  // the pool after it already passed only the positive positions
    expectGradientOf(y_, dy, who_);
    detail::lendGradient(ctx, dx_, dy.shape());
    dx_.setLayout(dy.layout());
    if (roundDx_) reluBackwardRoundedToBf16(dx_.data(), dy.data(), y_.data(), dy.numel());
    else reluBackward(dx_.data(), dy.data(), y_.data(), dy.numel());
    dx_.setBf16Values(roundDx_);
    return dx_;
  }

 private:
  bool passThrough_ = false;
  bool nextRounds_ = false, roundDx_ = false;
  bool planesNext_ = false, blockedNext_ = false;
  PlanesPoolSource* next_ = nullptr;  // the module after, when it can fuse into a convolution
  std::string who_ = "relu";          // its name, for errors (build)
};

class Flatten : public Module {
 public:
  Shape build(const Shape& in, const std::string& prefix, BuildInfo&) override {
    who_ = moduleName(prefix, "flatten");
    return Shape{static_cast<int>(in.numel())};
  }
  void fuseWithNext(Module& next) override { nextRounds_ = next.roundsInputToBf16(); }
  bool roundsInputToBf16() const override { return nextRounds_; }
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    int B = x.shape()[0];
    in_ = x.shape();
    nhwc_ = x.layout() == Layout::kNhwc;
    y_.ensure(ctx.dev, Shape{B, static_cast<int>(x.shape().perSample())}, "activations");
    // Features in PyTorch's [c, h, w] order whatever the layout: the linear weights expect it.
    // bf16: the copy rounds, for the next layer that would round (the MLP's images).
    const bool round = !nhwc_ && nextRounds_ && !x.bf16Values() && bf16Products(ctx.dev);
    if (nhwc_) nhwcToNchw(y_.data(), x.data(), B, in_[1], in_[2] * in_[3]);
    else if (round) roundToBf16(x.data(), y_.data(), x.numel());
    else std::memcpy(y_.data(), x.data(), x.numel() * sizeof(float));
    y_.setBf16Values(x.bf16Values() || round);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    if (!needInputGrad_) return dx_;  // nobody reads the input's gradient
    expectGradientOf(y_, dy, who_);
    detail::lendGradient(ctx, dx_, in_);
    dx_.setLayout(nhwc_ ? Layout::kNhwc : Layout::kNchw);
    if (nhwc_) nchwToNhwc(dx_.data(), dy.data(), in_[0], in_[1], in_[2] * in_[3]);
    else std::memcpy(dx_.data(), dy.data(), dy.numel() * sizeof(float));
    return dx_;
  }

 private:
  Shape in_;
  bool nhwc_ = false;
  bool nextRounds_ = false;
  std::string who_ = "flatten";  // its name, for errors (build)
};

}  // namespace

}  // namespace xs::engine

namespace xs::nn {

ModulePtr Linear(int in, int out) { return std::make_unique<engine::Linear>(in, out); }
ModulePtr Conv2d(int in, int out, int k, int stride, int pad, bool bias) {
  return std::make_unique<engine::Conv2d>(in, out, k, stride, pad, bias);
}
ModulePtr MaxPool2d(int k, int stride, int pad) {
  return std::make_unique<engine::Pool2d>(engine::Pool2d::kMax, k, stride > 0 ? stride : k, pad);
}
ModulePtr AvgPool2d(int k, int stride, int pad) {
  return std::make_unique<engine::Pool2d>(engine::Pool2d::kAvg, k, stride > 0 ? stride : k, pad);
}
ModulePtr AdaptiveAvgPool2d(int oh, int ow) {
  return std::make_unique<engine::Pool2d>(engine::Pool2d::kAdaptive, oh, ow, 0);
}
ModulePtr ReLU() { return std::make_unique<engine::Relu>(); }
ModulePtr Flatten() { return std::make_unique<engine::Flatten>(); }

}  // namespace xs::nn
