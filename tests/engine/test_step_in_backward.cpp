// test_step_in_backward.cpp: an optimizer's step made inside the model's backward
// (Model::setOptimizerInBackward) against backward() then step(): the same parameters, optimizer
// state and losses, bit for bit, for every built-in optimizer, in fp32 and both bf16s, through the
// linear layers that fuse SGD into their gradients' pass (fp32 and emulated bf16, and native bf16
// on vdpbf16ps: every batch width, ragged rows and columns) and through the view-by-view step of
// the others; and its misuses, each a UsageError that leaves the parameters as they were.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops.hpp"
#include "update_rules.hpp"
#include "test_util.hpp"
#include "xspawn/error.hpp"

namespace xs::engine {
namespace {

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(Model&)>;

// conv (1 -> c, 3x3, pad 1) on an h x w image, then a linear layer of `hidden` outputs with
// c * h * w inputs (at least 2^20 weights: linear_rows.cpp's kernels), its input gradient needed
// by the convolution, then a ReLU and 10 logits. c = 0: no convolution, so the linear layer is
// the first with parameters and makes no input gradient.
struct BigLinear {
  int c, h, w, hidden;
};

Network bigLinear(const BigLinear& g) {
  auto net = std::make_unique<nn::Sequential>();
  if (g.c > 0) net->add("conv", nn::Conv2d(1, g.c, 3, 1, 1));
  net->add("flat", nn::Flatten());
  net->add("fc1", nn::Linear(std::max(g.c, 1) * g.h * g.w, g.hidden)).add("relu", nn::ReLU());
  net->add("fc2", nn::Linear(g.hidden, 10));
  return Network{std::move(net), Shape{1, g.h, g.w}, 10, "big_linear"};
}

struct Trained {
  std::vector<float> values;
  std::vector<std::vector<float>> state;
  std::vector<float> losses;
  std::uint64_t steps = 0;
};

// `steps` training steps at `batch` on fixed data: backward() then step(), or the step inside
// backward().
Trained train(const std::function<Network()>& network, Precision p, const MakeOpt& make, int batch, bool inBackward,
              int steps = 3) {
  Device dev(p == Precision::kBf16 ? golden::bf16Options() : DeviceOptions{});
  Model model(dev, network(), 7);
  auto opt = make(model);
  if (inBackward) model.setOptimizerInBackward(opt.get());
  const auto x = test::pattern(static_cast<std::size_t>(batch) * model.inputShape().numel(), 21);
  std::vector<std::int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 7) % 10;
  Trained t;
  for (int s = 0; s < steps; ++s) {
    t.losses.push_back(model.trainStep(x.data(), y.data(), batch).loss);
    if (!inBackward) opt->step();
  }
  const ParamStore& ps = model.params();
  t.values.assign(ps.values(), ps.values() + ps.size());
  for (auto& [name, tensor] : opt->state()) t.state.emplace_back(tensor->data(), tensor->data() + tensor->numel());
  t.steps = opt->steps();
  return t;
}

// fp32, bf16 as this CPU runs it (native bits mirror with AMX or AVX512-BF16) and emulated bf16
// (the rounded floats mirror).
struct Mode {
  Precision precision;
  bool emulated;
  std::string name() const { return precision == Precision::kFp32 ? "fp32" : emulated ? "emulated bf16" : "bf16"; }
};
const Mode kModes[] = {{Precision::kFp32, false}, {Precision::kBf16, false}, {Precision::kBf16, true}};

// Whether a big linear layer makes its step in its own pass in mode m: fp32 and emulated bf16 on
// linear_rows.cpp's kernels (SGD; Adam and AdamW where fusesAdamInTiles), native bf16 on
// linear_rows_bf16.cpp's (vdpbf16ps, not AMX; SGD only).
bool bigLinearFuses(const Mode& m, bool sgd = true) {
  if (!cpuHasAvx512() || gemmBackend() != GemmBackend::kOneDnn) return false;
  const bool emulated = m.emulated || bf16Mode() == Bf16Mode::kEmulated;
  if (m.precision == Precision::kFp32 || emulated) return sgd || fusesAdamInTiles();
  return sgd && useLinearRowsBf16(32, 9216, 4096);
}

// Compares the two ways; returns whether a linear layer made its backward and step in one pass.
bool expectSame(const std::function<Network()>& network, Mode m, const MakeOpt& make, int batch) {
  test::ModeScope scope(m.emulated ? Bf16Mode::kEmulated : bf16Mode());
  const Precision p = m.precision;
  const Trained after = train(network, p, make, batch, false);
  const std::uint64_t fusedBefore = linearStepsFused();
  const Trained inside = train(network, p, make, batch, true);
  const bool fused = linearStepsFused() > fusedBefore;
  EXPECT_TRUE(test::sameBits(inside.values, after.values)) << "parameters";
  EXPECT_EQ(inside.state.size(), after.state.size());
  for (std::size_t i = 0; i < std::min(after.state.size(), inside.state.size()); ++i)
    EXPECT_TRUE(test::sameBits(inside.state[i], after.state[i]));
  EXPECT_TRUE(test::sameBits(inside.losses, after.losses)) << "losses";
  EXPECT_EQ(inside.steps, after.steps);
  return fused;
}

const std::vector<std::pair<std::string, MakeOpt>>& sgdRules() {
  static const std::vector<std::pair<std::string, MakeOpt>> rules{
      {"plain", [](Model& m) { return optim::SGD(m, optim::SgdOptions{0.05f}); }},
      {"momentum", [](Model& m) { return optim::SGD(m, optim::SgdOptions{0.05f, 0.9f}); }},
      {"dampening, decay", [](Model& m) { return optim::SGD(m, optim::SgdOptions{0.05f, 0.9f, 0.3f, 1e-3f}); }},
      {"nesterov, decay", [](Model& m) { return optim::SGD(m, optim::SgdOptions{0.05f, 0.9f, 0.f, 1e-3f, true}); }}};
  return rules;
}

TEST(StepInBackward, SgdThroughTheLinearLayersPassIsTheStepAfterBackward) {
  // Batches of 1 to 4 vectors (the kernels' R = 8 or 6 rows), a short last row group and columns
  // ragged against the tiles (1,050 = 65 x 16 + 10). Then over 4M parameters: two column blocks
  // of the pass at 3 vectors (2,400 inputs, blocks of 1,536), and bf16's mirror streamed past the
  // cache view by view, the linear layer's bits from 32 bytes off a cache line (after the
  // convolution's 4 + 1 blocks of 16). Last, a linear layer that makes no input gradient.
  const std::vector<std::pair<BigLinear, std::vector<int>>> shapes{{{4, 16, 16, 1030}, {32, 5}},
                                                                   {{5, 15, 14, 1001}, {64, 40}},
                                                                   {{6, 20, 20, 1800}, {16, 40}},
                                                                   {{0, 32, 32, 1030}, {24}}};
  for (const auto& [geom, batches] : shapes)
    for (int batch : batches)
      for (const Mode& m : kModes)
        for (const auto& [name, make] : sgdRules()) {
          SCOPED_TRACE(name + ", batch " + std::to_string(batch) + ", " + m.name() + ", " +
                       std::to_string(geom.hidden) + " hidden");
          const bool fused = expectSame([g = geom] { return bigLinear(g); }, m, make, batch);
          EXPECT_EQ(fused, bigLinearFuses(m));
        }
}

TEST(StepInBackward, TheFusedPassRunsWhereTheLayerTakesTheRowsKernels) {
  // fp32 at AlexNet's classifier shape: linear_rows.cpp's kernels with AVX-512 (the test above
  // then compares the fused pass); elsewhere the layer steps its weights from their gradient.
  Device dev;
  const int batch = 32, in = 1024, out = 1030;
  auto x = test::pattern(static_cast<std::size_t>(batch) * in, 1),
       dy = test::pattern(static_cast<std::size_t>(batch) * out, 2);
  std::vector<float> w = test::pattern(static_cast<std::size_t>(out) * in, 3), m(w.size(), 0.f), dx(x.size()), db(out);
  detail::FusedStep step;
  step.rule = detail::FusedStep::Rule::kSgdMomentum;
  step.values = w.data(), step.first = m.data(), step.sgd = detail::SgdArgs{0.1f, 0.f, 0.f, 1.f, 0.9f};
  const bool fused =
      linearBackwardStepped(dev, dx.data(), db.data(), dy.data(), x.data(), w.data(), batch, in, out, nullptr, step, 0);
  EXPECT_EQ(fused, cpuHasAvx512() && gemmBackend() == GemmBackend::kOneDnn);
  // The momentum buffer then holds the gradient (the first step's), which linearWeightGradientRows makes.
  if (fused) {
    std::vector<float> g(w.size());
    linearWeightGradientRows(dev, g.data(), dy.data(), x.data(), batch, in, out, true);
    EXPECT_TRUE(test::sameBits(m, g));
  }
}

TEST(StepInBackward, EveryOptimizerStepsInsideBackwardAsAfterIt) {
  const std::vector<std::pair<std::string, MakeOpt>> rules{
      {"momentum", [](Model& m) { return optim::SGD(m, optim::SgdOptions{0.05f, 0.9f}); }},
      {"adam", [](Model& m) { return optim::Adam(m, optim::AdamOptions{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f}); }},
      {"adamw", [](Model& m) { return optim::AdamW(m); }},
      {"adadelta", [](Model& m) { return optim::Adadelta(m, optim::AdadeltaOptions{1.f, 0.9f, 1e-6f, 1e-4f}); }}};
  // Three built-in networks; one of over 4M parameters (bf16's mirror streamed past the cache);
  // and one whose big linear layer is ragged in rows and columns, at a batch of 3 vectors. The
  // last two's big layers fuse SGD, Adam and AdamW into their pass in fp32 and emulated bf16, and
  // SGD in native bf16 where it runs on vdpbf16ps.
  struct Net {
    std::string name;
    std::function<Network()> network;
    int batch;
    bool big;
  };
  std::vector<Net> networks;
  for (const char* name : {"mlp", "lenet5", "convnet"})
    networks.push_back({name, [name] { return models::network(models::ModelConfig{.name = name}); }, 16, false});
  networks.push_back({"4M parameters", [] { return bigLinear({6, 20, 20, 1800}); }, 16, true});
  networks.push_back({"ragged", [] { return bigLinear({5, 15, 14, 1001}); }, 40, true});
  // Adam's fused pass on every CPU, though AMD's runs Adam after the gradient (fusesAdamInTiles).
  struct AdamInTiles {
    bool before = std::exchange(fusesAdamInTiles(), true);
    ~AdamInTiles() { fusesAdamInTiles() = before; }
  } adamInTiles;
  for (const Net& net : networks)
    for (const Mode& m : kModes)
      for (const auto& [rule, make] : rules) {
        SCOPED_TRACE(net.name + ", " + rule + ", " + m.name());
        const bool fused = expectSame(net.network, m, make, net.batch);
        EXPECT_EQ(fused, net.big && rule != "adadelta" && bigLinearFuses(m, rule == "momentum"));
      }
}

TEST(StepInBackward, AdamFusesIntoTheTilesExceptOnAmd) {
  __builtin_cpu_init();
  EXPECT_EQ(fusesAdamInTiles(), !__builtin_cpu_is("amd"));
}

TEST(StepInBackward, GradientsDoNotAccumulateAcrossBackwards) {
  // Without zeroGrad in between, each backward() is still one whole step.
  models::ModelConfig c;
  Device dev;
  Model a(dev, models::network(c), 3), b(dev, models::network(c), 3);
  auto oa = optim::SGD(a, optim::SgdOptions{0.05f, 0.9f}), ob = optim::SGD(b, optim::SgdOptions{0.05f, 0.9f});
  b.setOptimizerInBackward(ob.get());
  const auto x = test::pattern(8 * a.inputShape().numel(), 4);
  const std::vector<std::int32_t> y{1, 2, 3, 4, 5, 6, 7, 8};
  for (int s = 0; s < 2; ++s) {
    a.trainStep(x.data(), y.data(), 8);
    oa->step();
    b.setBatch(x.data(), y.data(), 8);
    b.forward(true);
    b.loss();
    b.backward();
  }
  const ParamStore &pa = a.params(), &pb = b.params();
  EXPECT_TRUE(test::sameBits({pa.values(), pa.values() + pa.size()}, {pb.values(), pb.values() + pb.size()}));
  EXPECT_EQ(ob->steps(), 2u);
}

// An optimizer of one's own that steps only all at once.
class WholeOnly : public optim::Optimizer {
 public:
  explicit WholeOnly(ParamStore& ps) : Optimizer(ps) {}
  void step() override { ++steps_; }
  const char* kind() const override { return "whole-only"; }
};

TEST(StepInBackward, MisusesAreUsageErrorsThatLeaveTheParameters) {
  models::ModelConfig c;
  Device dev;
  Model model(dev, models::network(c), 3), other(dev, models::network(c), 3);
  const auto x = test::pattern(4 * model.inputShape().numel(), 5);
  const std::vector<std::int32_t> y{1, 2, 3, 4};
  const ParamStore& ps = model.params();
  const std::vector<float> before(ps.values(), ps.values() + ps.size());
  auto unchanged = [&] { return test::sameBits(before, {ps.values(), ps.values() + ps.size()}); };

  auto foreign = optim::SGD(other);
  EXPECT_THROW(model.setOptimizerInBackward(foreign.get()), UsageError);
  EXPECT_EQ(model.optimizerInBackward(), nullptr);

  auto opt = optim::SGD(model, optim::SgdOptions{0.1f, 0.9f});
  model.setOptimizerInBackward(opt.get());
  EXPECT_TRUE(opt->inBackward());
  EXPECT_THROW(opt->step(), UsageError);  // backward() already steps it
  model.setGradReadyHook([](std::size_t, std::size_t) {});
  EXPECT_THROW(model.trainStep(x.data(), y.data(), 4), UsageError);  // ranks all-reduce first
  EXPECT_TRUE(unchanged());
  EXPECT_EQ(opt->steps(), 0u);
  model.setGradReadyHook({});

  WholeOnly whole(model.params());
  EXPECT_THROW(model.setOptimizerInBackward(&whole), UsageError);  // it cannot step view by view
  EXPECT_EQ(model.optimizerInBackward(), opt.get());
  EXPECT_FALSE(whole.inBackward());

  auto adam = optim::Adam(model);
  model.setOptimizerInBackward(adam.get());  // replaces opt
  EXPECT_FALSE(opt->inBackward());
  EXPECT_TRUE(adam->inBackward());
  adam.reset();  // destroying the optimizer turns it off
  EXPECT_EQ(model.optimizerInBackward(), nullptr);
}

TEST(StepInBackward, DestroyingTheModelTurnsItOff) {
  models::ModelConfig c;
  Device dev;
  auto model = std::make_unique<Model>(dev, models::network(c), 3);
  auto opt = optim::SGD(*model);
  model->setOptimizerInBackward(opt.get());
  model.reset();
  EXPECT_FALSE(opt->inBackward());
}

}  // namespace
}  // namespace xs::engine
