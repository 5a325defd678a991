// test_golden.cpp: the engine against PyTorch's results recorded in fixtures/ by
// scripts/make_engine_fixtures.py (every op forward/backward, optimizer steps, every model).
#include <gtest/gtest.h>

#include <cmath>

#include "golden_util.hpp"
#include "test_util.hpp"
#include "gemm.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/models.hpp"
#include "ops.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine {
namespace {
using namespace golden;

TEST(Golden, Linear) {
  Device dev;
  const json& c = fixture("ops.json")["linear"];
  Vec x = vec(c["in0"]), w = vec(c["in1"]), b = vec(c["in2"]), dy = vec(c["dy"]);
  int B = dims(c["in0_shape"])[0], I = dims(c["in0_shape"])[1], O = dims(c["in1_shape"])[0];
  Vec y(B * O), dx(B * I), dw(O * I, 0.f), db(O, 0.f);
  linearForward(dev, y.data(), x.data(), w.data(), b.data(), B, I, O);
  linearBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), B, I, O);
  expectClose("linear y", y.data(), vec(c["y"]));
  expectClose("linear dx", dx.data(), vec(c["grad0"]));
  expectClose("linear dw", dw.data(), vec(c["grad1"]));
  expectClose("linear db", db.data(), vec(c["grad2"]));
}

TEST(Golden, Conv2d) {
  for (ConvBackend backend : {ConvBackend::kOneDnn, ConvBackend::kIm2col})
  for (int path = 0; path < 3; ++path)  // NCHW; NHWC on oneDNN's kernels; NHWC as GEMMs
  for (int i = 0; i < 4; ++i) {
    setConvBackend(backend);
    setNhwcGemmMaxPixels(path == 2 ? 1 << 20 : 0);
    Device dev;
    const json& c = fixture("ops.json")["conv2d_" + std::to_string(i)];
    auto xs = dims(c["in0_shape"]), ws = dims(c["in1_shape"]);
    ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], c["params"]["stride"], c["params"]["pad"]};
    g.srcNhwc = g.dstNhwc = path > 0;
    Vec x = vec(c["in0"]), w = vec(c["in1"]), b = vec(c["in2"]), dy = vec(c["dy"]);
    Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
    auto convert = [&](Vec& v, int ch, int hw, bool toNhwc) {
      if (path == 0) return;
      Vec t(v.size());
      if (toNhwc) nchwToNhwc(t.data(), v.data(), g.n, ch, hw);
      else nhwcToNchw(t.data(), v.data(), g.n, ch, hw);
      v = t;
    };
    convert(x, g.c, g.h * g.w, true);
    convert(dy, g.oc, g.oh() * g.ow(), true);
    conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
    conv2dBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
    convert(y, g.oc, g.oh() * g.ow(), false);
    convert(dx, g.c, g.h * g.w, false);
    std::string tag = std::string(convBackendName(backend)) + " path " + std::to_string(path) + " conv2d_" +
                      std::to_string(i);
    expectClose(tag + " y", y.data(), vec(c["y"]));
    expectClose(tag + " dx", dx.data(), vec(c["grad0"]));
    expectClose(tag + " dw", dw.data(), vec(c["grad1"]));
    expectClose(tag + " db", db.data(), vec(c["grad2"]));
  }
  setConvBackend(ConvBackend::kOneDnn);
  setNhwcGemmMaxPixels(16);
}

TEST(Golden, Pools) {
  for (const char* kind : {"maxpool_", "avgpool_", "adaptive_avgpool_"})
    for (int i = 0;; ++i) {
      std::string name = kind + std::to_string(i);
      if (!fixture("ops.json").contains(name)) break;
      const json& c = fixture("ops.json")[name];
      auto s = dims(c["in0_shape"]);
      Vec x = vec(c["in0"]), dy = vec(c["dy"]), y(dy.size()), dx(x.size());
      const json& p = c["params"];
      if (name.rfind("adaptive", 0) == 0) {
        adaptiveAvgPool2dForward(y.data(), x.data(), s[0], s[1], s[2], s[3], p["oh"], p["ow"]);
        adaptiveAvgPool2dBackward(dx.data(), dy.data(), s[0], s[1], s[2], s[3], p["oh"], p["ow"]);
      } else {
        PoolGeom g{s[0], s[1], s[2], s[3], p["k"], p["stride"], p["pad"]};
        if (name[0] == 'm') {
          std::vector<std::int32_t> am(y.size());
          maxPool2dForward(y.data(), am.data(), x.data(), g);
          maxPool2dBackward(dx.data(), dy.data(), am.data(), g);
          // Channels last: the same results after converting back.
          g.nhwc = true;
          const int ohw = g.oh() * g.ow();
          Vec xl(x.size()), dyl(dy.size()), yl(y.size()), dxl(x.size()), back(x.size());
          nchwToNhwc(xl.data(), x.data(), g.n, g.c, g.h * g.w);
          nchwToNhwc(dyl.data(), dy.data(), g.n, g.c, ohw);
          std::vector<std::uint16_t> code(y.size());
          maxPoolNhwcForward(yl.data(), code.data(), xl.data(), g, PoolEpilogue::kNone);
          maxPoolNhwcBackward(dxl.data(), dyl.data(), code.data(), g);
          nhwcToNchw(back.data(), yl.data(), g.n, g.c, ohw);
          expectClose(name + " nhwc y", back.data(), vec(c["y"]));
          nhwcToNchw(back.data(), dxl.data(), g.n, g.c, g.h * g.w);
          expectClose(name + " nhwc dx", back.data(), vec(c["grad0"]));
        } else {
          avgPool2dForward(y.data(), x.data(), g);
          avgPool2dBackward(dx.data(), dy.data(), g);
        }
      }
      expectClose(name + " y", y.data(), vec(c["y"]));
      expectClose(name + " dx", dx.data(), vec(c["grad0"]));
    }
}

TEST(Golden, ReluAndLogSoftmax) {
  const json& r = fixture("ops.json")["relu"];
  Vec x = vec(r["in0"]), dy = vec(r["dy"]), y(x.size()), dx(x.size());
  reluForward(y.data(), x.data(), x.size());
  reluBackward(dx.data(), dy.data(), y.data(), x.size());
  expectClose("relu y", y.data(), vec(r["y"]), 0, 0);
  expectClose("relu dx", dx.data(), vec(r["grad0"]), 0, 0);
  const json& l = fixture("ops.json")["log_softmax"];
  auto s = dims(l["in0_shape"]);
  x = vec(l["in0"]), dy = vec(l["dy"]), y.assign(x.size(), 0), dx.assign(x.size(), 0);
  logSoftmaxForward(y.data(), x.data(), s[0], s[1]);
  logSoftmaxBackward(dx.data(), dy.data(), y.data(), s[0], s[1]);
  expectClose("log_softmax y", y.data(), vec(l["y"]));
  expectClose("log_softmax dx", dx.data(), vec(l["grad0"]));
}

TEST(Golden, BatchNorm) {
  for (bool nhwc : {false, true})
  for (bool train : {true, false}) {
    const json& c = fixture("ops.json")[train ? "batchnorm_train" : "batchnorm_eval"];
    auto s = dims(c["in0_shape"]);
    BatchNormArgs a{s[0], s[1], s[2] * s[3]};
    a.nhwc = nhwc;
    Vec x = vec(c["in0"]), g = vec(c["in1"]), b = vec(c["in2"]), dy = vec(c["dy"]);
    Vec rm = vec(c["running_mean"]), rv = vec(c["running_var"]);
    Vec y(x.size()), dx(x.size()), mean(a.c), invstd(a.c), dg(a.c, 0.f), db(a.c, 0.f);
    auto toNhwc = [&](Vec& v) {  // channels last in, channels last out
      if (!nhwc) return;
      Vec t(v.size());
      nchwToNhwc(t.data(), v.data(), a.n, a.c, a.hw);
      v = t;
    };
    auto toNchw = [&](Vec& v) {
      if (!nhwc) return;
      Vec t(v.size());
      nhwcToNchw(t.data(), v.data(), a.n, a.c, a.hw);
      v = t;
    };
    toNhwc(x);
    toNhwc(dy);
    if (train)
      batchNorm2dForwardTrain(y.data(), mean.data(), invstd.data(), rm.data(), rv.data(), x.data(), g.data(),
                              b.data(), a);
    else
      batchNorm2dForwardEval(y.data(), mean.data(), invstd.data(), rm.data(), rv.data(), x.data(), g.data(),
                             b.data(), a);
    batchNorm2dBackward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), invstd.data(),
                        g.data(), train, a);
    toNchw(y);
    toNchw(dx);
    std::string tag = std::string(train ? "bn train" : "bn eval") + (nhwc ? " nhwc" : "");
    expectClose(tag + " y", y.data(), vec(c["y"]));
    expectClose(tag + " dx", dx.data(), vec(c["grad0"]), 1e-3, 1e-5);
    expectClose(tag + " dgamma", dg.data(), vec(c["grad1"]));
    expectClose(tag + " dbeta", db.data(), vec(c["grad2"]));
    expectClose(tag + " running mean", rm.data(), vec(c["running_mean_after"]));
    expectClose(tag + " running var", rv.data(), vec(c["running_var_after"]));
  }
}

TEST(Golden, CrossEntropyAndNll) {
  const json& c = fixture("ops.json")["cross_entropy"];
  Vec logits = vec(c["logits"]);
  auto labels = c["labels"].get<std::vector<std::int32_t>>();
  int B = static_cast<int>(labels.size()), C = static_cast<int>(logits.size()) / B;
  Vec probs(logits.size()), d(logits.size()), lp(logits.size()), dlp(logits.size());
  EXPECT_NEAR(crossEntropyForward(probs.data(), logits.data(), labels.data(), B, C), c["loss"].get<double>(), 1e-5);
  crossEntropyBackward(d.data(), probs.data(), labels.data(), B, C);
  expectClose("cross-entropy grad", d.data(), vec(c["grad"]));
  logSoftmaxForward(lp.data(), logits.data(), B, C);
  EXPECT_NEAR(nllLossForward(lp.data(), labels.data(), B, C), c["nll_loss"].get<double>(), 1e-5);
  nllLossBackward(dlp.data(), labels.data(), B, C);
  logSoftmaxBackward(d.data(), dlp.data(), lp.data(), B, C);
  expectClose("log-softmax + nll grad", d.data(), vec(c["nll_grad"]));
}

std::unique_ptr<optim::Optimizer> optimizerFor(const std::string& name, Device& dev, ParamStore& ps) {
  if (name == "sgd_momentum_nesterov_wd") return optim::SGD(ps, dev, optim::SgdOptions{0.1f, 0.9f, 0.f, 5e-4f, true});
  if (name == "sgd_momentum_dampening") return optim::SGD(ps, dev, optim::SgdOptions{0.05f, 0.9f, 0.1f, 0.f, false});
  if (name == "sgd_plain_wd") return optim::SGD(ps, dev, optim::SgdOptions{0.1f, 0.f, 0.f, 0.01f, false});
  if (name == "adam_wd") return optim::Adam(ps, dev, optim::AdamOptions{1e-2f, 0.8f, 0.99f, 1e-6f, 0.01f});
  return optim::Adam(ps, dev, optim::AdamOptions{});
}

TEST(Golden, Optimizers) {
  for (auto& [name, c] : fixture("optim.json").items()) {
    if (name[0] == '_') continue;
    Device dev;
    ParamStore ps(true);
    Vec p0 = vec(c["p0"]);
    ps.add("p", Shape{static_cast<int>(p0.size())}, Init::kZeros);
    ps.allocate(dev);
    std::copy(p0.begin(), p0.end(), ps.value(0));
    auto opt = optimizerFor(name, dev, ps);
    for (std::size_t s = 0; s < c["grads"].size(); ++s) {
      Vec g = vec(c["grads"][s]);
      std::copy(g.begin(), g.end(), ps.grad(0));
      opt->step();
      expectClose(name + " step " + std::to_string(s + 1), ps.value(0), vec(c["after"][s]), 1e-5, 1e-6);
    }
  }
}

// Loads a model fixture: the model with the fixture's weights and the batch on its device.
struct GoldenModel {
  const json& c;
  Device dev;
  std::unique_ptr<Model> m;
  Vec x;
  std::vector<std::int32_t> labels;
  GoldenModel(const std::string& name, Precision prec = Precision::kFp32)
      : c(fixture("models.json")[name]), dev([&] { DeviceOptions o; o.precision = prec; return o; }()) {
    models::ModelConfig cfg;
    cfg.name = name;
    cfg.imageSize = c["image_size"];
    cfg.dropout = 0.f;
    m = std::make_unique<Model>(dev, models::network(cfg), cfg.seed);
    const auto& views = m->params().views();
    EXPECT_EQ(views.size(), c["init"].size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      const json& in = c["init"][i];
      EXPECT_EQ(views[i].name, in["name"].get<std::string>());
      EXPECT_EQ(views[i].count, m->params().views()[i].shape.numel());
      fillPattern(m->params().value(i), views[i].count, in["seed"], in["scale"]);
      float off = in["offset"];
      for (std::size_t k = 0; k < views[i].count; ++k) m->params().value(i)[k] += off;
    }
    int B = c["batch"], ch = c["channels"], s = c["image_size"];
    x = test::pattern(static_cast<std::size_t>(B) * ch * s * s, 7);
    labels = c["labels"].get<std::vector<std::int32_t>>();
    m->zeroGrad();
    m->setBatch(x.data(), labels.data(), B);
  }
};

// Sets a layout policy for the scope of a test.
struct LayoutScope {
  explicit LayoutScope(LayoutPolicy p) { setLayoutPolicy(p); }
  ~LayoutScope() { setLayoutPolicy(LayoutPolicy::kAuto); }
};

void checkModel(const std::string& name);

class GoldenModels : public ::testing::TestWithParam<std::string> {};

// NCHW activations between the layers.
TEST_P(GoldenModels, ForwardBackwardAndOneStep) {
  LayoutScope nchw(LayoutPolicy::kNchw);
  checkModel(GetParam());
}

// Every convolution pass direct (no Winograd backward passes in fp32).
TEST_P(GoldenModels, DirectConvolutionsOnly) {
  struct DirectScope {
    DirectScope() { setConvWinograd(false); }
    ~DirectScope() { setConvWinograd(true); }
  } direct;
  checkModel(GetParam());
}

// The same fp32 models with channels-last activations (bf16's layout) between the layers.
TEST_P(GoldenModels, ChannelsLastForwardBackwardAndOneStep) {
  LayoutScope nhwc(LayoutPolicy::kNhwc);
  checkModel(GetParam());
}

void checkModel(const std::string& name) {
  GoldenModel g(name);
  Model& m = *g.m;
  const json& c = g.c;
  expectClose("logits", m.forward(true).data(), vec(c["logits"]), 1e-3, 1e-4);
  EXPECT_NEAR(m.loss(), c["loss"].get<double>(), 1e-4 * (1 + c["loss"].get<double>()));
  m.backward();
  for (std::size_t i = 0; i < m.params().views().size(); ++i) {
    const auto& v = m.params().views()[i];
    const json& gj = c["grads"][v.name];
    const float* gr = m.params().grad(i);
    double sum = 0, absSum = gj["abs_sum"];
    for (std::size_t k = 0; k < v.count; ++k) sum += gr[k];
    EXPECT_NEAR(sum, gj["sum"].get<double>(), 2e-3 * absSum + 1e-5) << v.name;
    double typical = absSum / static_cast<double>(v.count);
    auto idx = gj["idx"].get<std::vector<std::size_t>>();
    Vec want = vec(gj["val"]);
    // A conv bias right before batch-norm has a true gradient of 0: both sides hold rounding noise.
    double floor = typical < 1e-6 ? 1e-5 : 1e-7;
    for (std::size_t k = 0; k < idx.size(); ++k)
      EXPECT_NEAR(gr[idx[k]], want[k], 2e-3 * (std::fabs(want[k]) + typical) + floor) << v.name << "[" << idx[k] << "]";
  }
  for (auto& [bname, vals] : c["buffers"].items())
    expectClose(bname, m.buffers().value(m.buffers().find(bname)), vec(vals), 1e-3, 1e-5);
  auto opt = optim::SGD(m.params(), g.dev, optim::SgdOptions{0.05f, 0.9f, 0.f, 5e-4f});
  opt->step();
  for (std::size_t i = 0; i < m.params().views().size(); ++i) {
    const auto& v = m.params().views()[i];
    const json& a = c["after_step"][v.name];
    auto idx = a["idx"].get<std::vector<std::size_t>>();
    Vec want = vec(a["val"]);
    for (std::size_t k = 0; k < idx.size(); ++k)
      EXPECT_NEAR(m.params().value(i)[idx[k]], want[k], 1e-4 * (1 + std::fabs(want[k]))) << v.name;
  }
  m.forward(true);
  EXPECT_NEAR(m.loss(), c["loss_after_step"].get<double>(), 2e-3 * (1 + c["loss"].get<double>()));
  expectClose("eval logits", m.forward(false).data(), vec(c["eval_logits"]), 5e-3, 1e-3);
}

TEST(Golden, ModelsOnIm2colConvolution) {
  setConvBackend(ConvBackend::kIm2col);
  for (LayoutPolicy p : {LayoutPolicy::kNchw, LayoutPolicy::kNhwc}) {
    LayoutScope scope(p);
    GoldenModel g("resnet18");
    expectClose("im2col logits", g.m->forward(true).data(), vec(g.c["logits"]), 1e-3, 1e-4);
    g.m->loss();
    g.m->backward();
    const json& gj = g.c["grads"]["conv1.weight"];
    double sum = 0;
    for (std::size_t k = 0; k < 64 * 27; ++k) sum += g.m->params().grad(0)[k];
    EXPECT_NEAR(sum, gj["sum"].get<double>(), 2e-3 * gj["abs_sum"].get<double>() + 1e-5);
  }
  setConvBackend(ConvBackend::kOneDnn);
}

INSTANTIATE_TEST_SUITE_P(AllModels, GoldenModels,
                         ::testing::Values("mlp", "convnet", "lenet5", "alexnet", "resnet18"));

TEST(Golden, Bf16StaysCloseToFp32PyTorch) {
  // bf16 products keep 8 mantissa bits: logits agree to within a percent of their range (seen:
  // at most 0.55 % for ResNet-18, which runs channels last with its 4x4 maps as GEMMs).
  for (const char* name : {"convnet", "resnet18", "alexnet"}) {
    GoldenModel g(name, Precision::kBf16);
    expectClose(std::string("bf16 logits ") + name, g.m->forward(true).data(), vec(g.c["logits"]), 1e-2, 1e-2);
  }
}

}  // namespace
}  // namespace xs::engine
