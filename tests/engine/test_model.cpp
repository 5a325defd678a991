// test_model.cpp: the five models: layouts, deterministic initialisation, training steps,
// external gradient buffers and clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <tuple>

#include "test_util.hpp"
#include "xspawn/error.hpp"
#include "xspawn/models.hpp"
#include "ops.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/nn.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine {
namespace {

models::ModelConfig config(const std::string& name, int size = 0, std::uint64_t seed = 1) {
  models::ModelConfig c;
  c.name = name;
  c.imageSize = size;
  c.seed = seed;
  return c;
}

TEST(Model, ParameterCountsMatchTheLayouts) {
  Device dev;
  EXPECT_EQ(models::create(dev, config("mlp"))->params().paramCount(), 235146u);
  EXPECT_EQ(models::create(dev, config("convnet"))->params().paramCount(), 113674u);
  EXPECT_EQ(models::create(dev, config("lenet5"))->params().paramCount(), 61706u);
  EXPECT_EQ(models::create(dev, config("alexnet", 63))->params().paramCount(), 57044810u);
  Model r = test::build(dev, config("resnet18"));
  EXPECT_EQ(r.params().paramCount(), 11176970u);
  EXPECT_EQ(r.params().views().front().name, "conv1.weight");
  EXPECT_EQ(r.buffers().views().front().name, "bn1.running_mean");
  EXPECT_NO_THROW(r.params().find("layer2.0.conv3.weight"));
  EXPECT_THROW(r.params().find("layer1.0.conv3.weight"), UsageError);
}

TEST(Model, SameSeedGivesIdenticalWeightsOnEveryDevice) {
  DeviceOptions a, b;
  b.ordinal = 5;
  Device d1(a), d2(b);
  Model m1 = test::build(d1, config("convnet", 0, 1234)), m2 = test::build(d2, config("convnet", 0, 1234)), m3 = test::build(d1, config("convnet", 0, 7));
  ASSERT_EQ(m1.params().size(), m2.params().size());
  EXPECT_EQ(0, std::memcmp(m1.params().values(), m2.params().values(), m1.params().size() * 4));
  EXPECT_NE(0, std::memcmp(m1.params().values(), m3.params().values(), m1.params().size() * 4));
  // PyTorch's default bounds: conv1 weights and bias within 1/sqrt(fan_in) = 1/5.
  const auto& v = m1.params().views()[0];
  float mx = 0;
  for (std::size_t i = 0; i < v.count; ++i) mx = std::max(mx, std::fabs(m1.params().values()[v.offset + i]));
  EXPECT_LE(mx, 0.2f);
  EXPECT_GT(mx, 0.19f);
}

// A few steps on one fixed batch must lower the loss.
void expectLearns(const std::string& name, int size, int batch, float lr,
                  Precision prec = Precision::kFp32, float factor = 0.9f) {
  DeviceOptions o;
  o.precision = prec;
  Device dev(o);
  Model m = test::build(dev, config(name, size, 3));
  auto opt = optim::SGD(m.params(), dev, optim::SgdOptions{lr, 0.9f});
  Shape in = m.inputShape();
  auto x = test::pattern(batch * in.numel(), 11);
  std::vector<std::int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 7) % 10;
  float first = 0, last = 0;
  for (int s = 0; s < 8; ++s) {
    StepResult r = m.trainStep(x.data(), y.data(), batch);
    ASSERT_TRUE(std::isfinite(r.loss)) << name;
    if (s == 0) first = r.loss;
    last = r.loss;
    opt->step();
  }
  EXPECT_LT(last, first * factor) << name << " " << precisionName(prec);
  StepResult e = m.evaluate(x.data(), y.data(), batch);
  EXPECT_TRUE(std::isfinite(e.loss));
  EXPECT_GE(e.correct, 0);
}

TEST(Model, MlpLearns) { expectLearns("mlp", 0, 16, 0.05f); }
TEST(Model, ConvnetLearns) { expectLearns("convnet", 0, 16, 0.05f); }
TEST(Model, ConvnetLearnsInBf16) { expectLearns("convnet", 0, 16, 0.05f, Precision::kBf16); }
TEST(Model, Resnet18LearnsInBf16) { expectLearns("resnet18", 16, 8, 0.02f, Precision::kBf16); }
// LeNet-5 starts slowly from PyTorch's small initial weights: ask only for progress.
TEST(Model, Lenet5Learns) { expectLearns("lenet5", 0, 16, 0.1f, Precision::kFp32, 0.995f); }
TEST(Model, Resnet18Learns) { expectLearns("resnet18", 16, 8, 0.02f); }

// Gradients handed between the Winograd convolutions and the max-pools in channel blocks (no
// reorders) give the same weights, bit for bit, as in channels-last: the convnet (all three
// pools tiled or overlapping next to such convolutions) and AlexNet (a 3x3 after a pool).
TEST(Model, LabelSmoothingIsTheModelsLoss) {
  // The model's loss and gradient follow setLabelSmoothing in train steps and evaluations; a
  // value outside [0, 1] is refused and leaves the loss as it was.
  Device dev;
  Model m = test::build(dev, config("mlp", 0, 3));
  const int batch = 4, C = m.numClasses();
  auto x = test::pattern(batch * m.inputShape().numel(), 11);
  std::vector<std::int32_t> y{1, 7, 3, 3};
  const float plain = m.evaluate(x.data(), y.data(), batch).loss;
  std::vector<float> lp(batch * C);
  logSoftmaxForward(lp.data(), m.forward(false).data(), batch, C);
  m.setLabelSmoothing(0.25f);
  EXPECT_FLOAT_EQ(m.labelSmoothing(), 0.25f);
  double mean = 0;  // mean over samples and classes of -log p
  for (float v : lp) mean -= v / (batch * C);
  EXPECT_NEAR(m.evaluate(x.data(), y.data(), batch).loss, 0.75 * plain + 0.25 * mean, 1e-5);
  EXPECT_NEAR(m.trainStep(x.data(), y.data(), batch).loss, 0.75 * plain + 0.25 * mean, 1e-5);
  try {
    m.setLabelSmoothing(1.5f);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("label smoothing 1.500000 is outside [0, 1]"), std::string::npos) << e.what();
  }
  EXPECT_FLOAT_EQ(m.labelSmoothing(), 0.25f);
}

// The weights after three train steps, an evaluation and a smaller step (other primitives, the
// same layout decisions), with tensors in channel blocks between layers where both sides can, or not.
std::vector<float> trainedWithBlocks(Precision p, const char* name, int size, int batch, bool blocked) {
  setBlockedGradients(blocked);
  Device dev(p == Precision::kBf16 ? golden::bf16Options() : DeviceOptions{});
  Model m = test::build(dev, config(name, size, 3));
  auto opt = optim::SGD(m.params(), dev, optim::SgdOptions{0.01f, 0.9f});
  auto x = test::pattern(batch * m.inputShape().numel(), 11);
  std::vector<std::int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 3) % 10;
  for (int s = 0; s < 3; ++s) {
    m.trainStep(x.data(), y.data(), batch);
    opt->step();
  }
  m.evaluate(x.data(), y.data(), batch - 1);
  m.trainStep(x.data(), y.data(), batch - 1);
  opt->step();
  setBlockedGradients(true);
  return {m.params().values(), m.params().values() + m.params().size()};
}

TEST(Model, BlockedGradientsGiveTheSameBits) {
  // fp32: gradients in channel blocks between the Winograd passes and the max-pools. Native bf16,
  // where the CPU's primitives pick that layout (PoolLayouts.Bf16ConvolutionsWriteBlocksAsTheir-
  // NhwcValues says whether they do here): the convolutions' outputs and input gradients too.
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    for (auto [name, size, batch] : {std::tuple{"convnet", 0, 8}, std::tuple{"alexnet", 63, 2}}) {
      SCOPED_TRACE(precisionName(p));
      EXPECT_TRUE(test::sameBits(trainedWithBlocks(p, name, size, batch, false),
                                 trainedWithBlocks(p, name, size, batch, true)))
          << name;
    }
  }
}

TEST(Model, AlexnetSmallestImageRunsAndTinyImageFails) {
  Device dev;
  models::ModelConfig c = config("alexnet", 63);
  c.dropout = 0.f;
  Model m = test::build(dev, c);
  auto x = test::pattern(2 * 3 * 63 * 63, 12);
  std::vector<std::int32_t> y{1, 2};
  StepResult r = m.trainStep(x.data(), y.data(), 2);
  EXPECT_NEAR(r.loss, std::log(10.f), 0.5f);
  EXPECT_THROW(models::create(dev, config("alexnet", 62)), UsageError);
  EXPECT_THROW(models::create(dev, config("convnet", 8)), ShapeError);
}

TEST(Model, AWindowLargerThanItsMapIsAShapeError) {
  // PyTorch's floor((size + 2 pad - k) / stride) + 1: no window at all where the window is
  // larger than the padded side (C++'s division toward zero had made that one window).
  EXPECT_EQ(windowsAlong(1, 2, 2, 0), 0);   // a 2 x 2 pool of stride 2 on a 1 x 1 map
  EXPECT_EQ(windowsAlong(5, 11, 4, 2), 0);  // AlexNet's conv 1 on a 5 x 5 image
  EXPECT_EQ(windowsAlong(7, 11, 4, 2), 1);
  EXPECT_EQ(windowsAlong(28, 5, 1, 1), 26);
  // The convnet on 3 x 3 images: conv 1 gives 1 x 1, which pool 1's 2 x 2 window does not fit.
  Device dev;
  try {
    models::create(dev, config("convnet", 3));
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("maxpool1: the feature map [32, 1, 1] is smaller than the pooling window"),
              std::string::npos)
        << e.what();
  }
  auto strided = std::make_unique<nn::Sequential>();  // a window of stride 4 past a 5 x 5 image
  strided->add("conv", nn::Conv2d(1, 4, 11, 4, 2)).add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
  EXPECT_THROW(Model(dev, {std::move(strided), Shape{1, 5, 5}, 10, "net"}, 1), ShapeError);
}

TEST(Model, GradientsLiveInCallerMemory) {
  Device dev;
  Model m = test::build(dev, config("mlp"));
  std::size_t n = m.gradientCount();
  float* ext = static_cast<float*>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64));
  auto x = test::pattern(4 * 784, 13);
  std::vector<std::int32_t> y{1, 2, 3, 4};
  m.bindGradients(ext, n);
  EXPECT_TRUE(m.params().gradientsExternal());
  m.trainStep(x.data(), y.data(), 4);
  EXPECT_EQ(m.params().grads(), ext);
  double norm = 0;
  for (std::size_t i = 0; i < n; ++i) norm += ext[i] * ext[i];
  EXPECT_GT(norm, 0);
  EXPECT_THROW(m.bindGradients(ext, n - 1), ShapeError);
  EXPECT_THROW(m.bindGradients(nullptr, n), UsageError);
  std::free(ext);
}

// zeroGrad only marks the gradients: the first backward writes them (no fill, no read of the
// zeros), a second backward adds to them, and a view read before any write reads as zeros.
void expectOverwriteThenAdd(const std::string& name, int size, int batch, Precision prec) {
  DeviceOptions o;
  o.precision = prec;
  Device dev(o);
  Model m = test::build(dev, config(name, size));
  auto x = test::pattern(batch * m.inputShape().numel(), 21);
  std::vector<std::int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 3) % 10;
  const std::size_t n = m.gradientCount();
  m.trainStep(x.data(), y.data(), batch);
  const std::vector<float> once(m.params().grads(), m.params().grads() + n);
  m.backward();  // no zeroGrad: adds the same gradient again (a GEMM may add it in another order)
  const float* g = m.params().grads();
  float scale = 0.f;
  for (float v : once) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_NEAR(g[i], 2 * once[i], 1e-4f * std::abs(once[i]) + 1e-6f * scale) << name << " float " << i;
  m.zeroGrad();  // the buffer still holds twice the gradient: the next backward must overwrite all
  m.backward();
  ASSERT_EQ(0, std::memcmp(m.params().grads(), once.data(), n * sizeof(float))) << name << " " << precisionName(prec);
  m.zeroGrad();
  const std::size_t last = m.params().views().size() - 1;
  const float* v = m.params().grad(last);
  for (std::size_t i = 0; i < m.params().views()[last].count; ++i) ASSERT_EQ(v[i], 0.f) << name;
  g = m.params().grads();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(g[i], 0.f) << name << " float " << i;
}

TEST(Model, ZeroGradThenBackwardOverwritesAndASecondBackwardAdds) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    expectOverwriteThenAdd("mlp", 0, 8, p);
    expectOverwriteThenAdd("convnet", 0, 8, p);   // oneDNN's convolutions
    expectOverwriteThenAdd("lenet5", 0, 8, p);
    expectOverwriteThenAdd("alexnet", 63, 2, p);  // small maps: the channels-last GEMM path
    expectOverwriteThenAdd("resnet18", 16, 4, p); // batch-norm adds through grad()
  }
}

// Counts its backward calls and passes x and dy through; with a parameter (never read) it is
// a module whose backward must run.
class CountingPassThrough : public nn::Module {
 public:
  CountingPassThrough(int* calls, bool param) : calls_(calls), param_(param) {}
  Shape build(const Shape& in, const std::string& prefix, nn::BuildInfo& info) override {
    if (param_) info.params.add(prefix + ".unused", Shape{1}, Init::kZeros);
    return in;
  }
  const Tensor& forward(const Tensor& x, nn::Context&) override { return x; }
  const Tensor& backward(const Tensor& dy, nn::Context&) override {
    ++*calls_;
    return dy;
  }

 private:
  int* calls_;
  bool param_;
};

// Leading modules without parameters (here a pass-through and a flatten, as the MLP's) need no
// backward when nothing reads the input's gradient, and the first linear no input gradient:
// the same weights as when the first module holds a parameter and every backward runs.
TEST(Model, LeadingModulesWithoutParametersSkipTheirBackward) {
  auto trained = [](bool param, int* calls) {
    auto net = std::make_unique<nn::Sequential>();
    net->add("lead", std::make_unique<CountingPassThrough>(calls, param))
        .add("flatten", nn::Flatten()).add("fc1", nn::Linear(0, 32)).add("relu", nn::ReLU())
        .add("fc2", nn::Linear(32, 10));
    Device dev;
    Model model(dev, {std::move(net), Shape{1, 6, 6}, 10, "net"}, 5);
    test::trainThreeSteps(model, dev);
    std::vector<std::vector<float>> weights;  // every view but the unused parameter, in order
    const ParamStore& ps = model.params();  // read through const: no change marked
    for (std::size_t i = 0; i < ps.views().size(); ++i)
      if (ps.views()[i].name != "lead.unused") weights.emplace_back(ps.value(i), ps.value(i) + ps.views()[i].count);
    return weights;
  };
  int skipped = 0, run = 0;
  const auto a = trained(false, &skipped), b = trained(true, &run);
  EXPECT_EQ(skipped, 0);
  EXPECT_EQ(run, 3);
  ASSERT_EQ(a.size(), 4u);
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << "view " << i;
}

TEST(ParamStore, ZeroGradMarksAndAnUnsetViewReadsAsZeros) {
  Device dev;
  ParamStore ps(true);
  std::size_t a = ps.add("a", Shape{3}, Init::kOnes), b = ps.add("b", Shape{20}, Init::kOnes);
  ps.allocate(dev);
  std::fill(ps.grad(a), ps.grad(a) + 3, 5.f);
  std::fill(ps.grad(b), ps.grad(b) + 20, 7.f);
  ps.zeroGrad();
  ParamStore::GradSlot s = ps.gradSlot(b);
  EXPECT_TRUE(s.overwrite);
  EXPECT_EQ(s.data, ps.grad(b));  // grad() does not fill a view gradSlot handed out
  EXPECT_EQ(ps.grad(b)[0], 7.f);
  EXPECT_FALSE(ps.gradSlot(b).overwrite);
  EXPECT_EQ(ps.grad(a)[2], 0.f);
  EXPECT_FALSE(ps.gradSlot(a).overwrite);
  ps.zeroGrad();
  const float* g = ps.grads();
  EXPECT_EQ(g[0], 0.f);
  EXPECT_EQ(g[ps.views()[b].offset + 19], 0.f);
}

TEST(Model, BatchSizeCanChangeBetweenCalls) {
  // Kernels cache per geometry: a smaller last batch must give the same per-sample logits.
  Device dev;
  Model m = test::build(dev, config("resnet18", 8));
  auto x = test::pattern(5 * 3 * 8 * 8, 15);
  std::vector<std::int32_t> y{1, 2, 3, 4, 5};
  m.setBatch(x.data(), y.data(), 5);
  std::vector<float> five(m.forward(false).data(), m.forward(false).data() + 2 * 10);
  m.setBatch(x.data(), y.data(), 2);
  const float* two = m.forward(false).data();
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(two[i], five[i], 1e-4f) << i;
}

TEST(Model, RunsOnAnotherThreadThanTheDevicesCreator) {
  Device dev;
  Model m = test::build(dev, config("convnet"));
  auto x = test::pattern(4 * 784, 16);
  std::vector<std::int32_t> y{1, 2, 3, 4};
  StepResult here = m.evaluate(x.data(), y.data(), 4), there;
  std::thread t([&] { there = m.evaluate(x.data(), y.data(), 4); });
  t.join();
  EXPECT_FLOAT_EQ(here.loss, there.loss);
}

TEST(Model, TwoDevicesTrainConcurrentlyOnTwoThreads) {
  // Kernel caches are per device and streams per thread: two cores in one process do not mix.
  auto x = test::pattern(4 * 784, 17);
  std::vector<std::int32_t> y{1, 2, 3, 4};
  auto lossOn = [&](int ordinal) {
    DeviceOptions o;
    o.ordinal = ordinal;
    o.precision = Precision::kBf16;
    Device dev(o);
    Model m = test::build(dev, config("convnet", 0, 5));
    float loss = 0;
    for (int s = 0; s < 3; ++s) loss = m.trainStep(x.data(), y.data(), 4).loss;
    return loss;
  };
  float alone = lossOn(0), a = 0, b = 0;
  std::thread t1([&] { a = lossOn(1); }), t2([&] { b = lossOn(2); });
  t1.join();
  t2.join();
  EXPECT_EQ(a, alone);
  EXPECT_EQ(b, alone);
}

TEST(Model, RestoredStepCounterContinuesTheSameDropoutMasks) {
  // Masks depend on (seed, step): a model set to step 3 draws the fourth step's masks.
  models::ModelConfig c = config("alexnet", 63, 9);
  Device dev;
  Model run = test::build(dev, c), resumed = test::build(dev, c);
  auto x = test::pattern(2 * 3 * 63 * 63, 21);
  std::vector<std::int32_t> y{3, 4};
  run.setBatch(x.data(), y.data(), 2);
  auto logits = [](Model& m) {
    const float* p = m.forward(true).data();
    return std::vector<float>(p, p + 20);
  };
  std::vector<float> first = logits(run);  // step 0
  logits(run);                             // steps 1 and 2
  logits(run);
  EXPECT_EQ(run.step(), 3u);
  std::vector<float> fourth = logits(run);  // step 3
  resumed.setStep(3);
  resumed.setBatch(x.data(), y.data(), 2);
  EXPECT_EQ(logits(resumed), fourth);
  EXPECT_EQ(resumed.step(), 4u);
  bool differs = false;
  for (int i = 0; i < 20; ++i) differs |= first[i] != fourth[i];
  EXPECT_TRUE(differs) << "masks must change from step to step";
}

TEST(Model, GradReadyHookCoversTheBufferOnceWithFinalValues) {
  for (const char* name : {"resnet18", "alexnet", "convnet"}) {
    Device dev;
    Model m = test::build(dev, config(name, std::string(name) == "resnet18" ? 8 : std::string(name) == "alexnet" ? 63 : 0));
    const std::size_t n = m.gradientCount();
    std::vector<int> seen(n, 0);
    std::vector<std::pair<std::size_t, std::vector<float>>> snapshots;
    m.setGradReadyHook([&](std::size_t offset, std::size_t count) {
      ASSERT_LE(offset + count, n) << name;
      for (std::size_t i = offset; i < offset + count; ++i) ++seen[i];
      const float* g = m.params().grads() + offset;
      snapshots.emplace_back(offset, std::vector<float>(g, g + count));
    });
    Shape in = m.inputShape();
    auto x = test::pattern(2 * in.numel(), 22);
    std::vector<std::int32_t> y{1, 2};
    m.trainStep(x.data(), y.data(), 2);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << name << ": gradient float " << i;
    // Each range held its final values when reported.
    for (auto& [offset, vals] : snapshots)
      ASSERT_EQ(0, std::memcmp(vals.data(), m.params().grads() + offset, vals.size() * 4)) << name << " @" << offset;
    EXPECT_GT(snapshots.size(), 2u);
    EXPECT_EQ(snapshots.front().first + snapshots.front().second.size(), n) << "the last layer comes first";
    m.setGradReadyHook({});
    m.trainStep(x.data(), y.data(), 2);  // no hook: nothing called
    EXPECT_EQ(seen[0], 1);
  }
}

TEST(Model, BadInputsAreClearErrors) {
  Device dev;
  EXPECT_THROW(models::create(dev, config("vgg")), UsageError);
  models::ModelConfig c = config("mlp");
  c.numClasses = 0;
  EXPECT_THROW(models::create(dev, c), UsageError);
  Model m = test::build(dev, config("mlp"));
  auto x = test::pattern(2 * 784, 14);
  std::vector<std::int32_t> bad{0, 10};
  EXPECT_THROW(m.trainStep(x.data(), bad.data(), 2), ShapeError);
  EXPECT_THROW(m.trainStep(x.data(), bad.data(), 0), ShapeError);
  Model fresh = test::build(dev, config("mlp"));
  EXPECT_THROW(fresh.forward(true), UsageError);
  DeviceOptions small;
  small.memoryBytes = 2 << 20;
  Device tiny(small);
  EXPECT_THROW(models::create(tiny, config("alexnet", 63)), OutOfMemoryError);
}

// A module of one's own that copies its input and hands its input's gradient back wrong: in the
// default layout (NCHW) whatever dy's, or marked as bf16 values.
class MislaidGradient : public nn::Module {
 public:
  explicit MislaidGradient(bool bf16) : bf16_(bf16) {}
  Shape build(const Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override {
    y_.ensure(ctx.dev, x.shape(), "copy");
    y_.setLayout(x.layout());
    std::memcpy(y_.data(), x.data(), x.numel() * sizeof(float));
    return y_;
  }
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override {
    dx_.ensure(ctx.dev, dy.shape(), "copy");
    std::memcpy(dx_.data(), dy.data(), dy.numel() * sizeof(float));
    if (bf16_) {
      dx_.setLayout(dy.layout());
      dx_.setDtype(DType::kBf16);
    }
    return dx_;
  }

 private:
  bool bf16_;
};

// A ReLU, a max-pool, a dropout, a batch-norm, a flatten or a linear layer handed back a gradient
// in another layout than its output's (channels last after a convolution), or one of bf16
// values, refuses it with a ShapeError that names the module (its name in the network and its
// kind) and the fix, instead of reading it in the wrong order; a convolution, which reads bf16
// gradients, refuses another layout. (A flatten's and a linear layer's output is flat: any
// layout a module of one's own leaves on a flat gradient is theirs.)
TEST(Model, AGradientInAnotherLayoutOrOfBf16ValuesIsRefused) {
  using Build = std::function<void(nn::Sequential&, nn::ModulePtr mine)>;
  const auto tested = [](std::function<nn::ModulePtr()> layer) {  // the layer after the convolution
    return Build([layer](nn::Sequential& n, nn::ModulePtr mine) {
      n.add("layer", layer()).add("mine", std::move(mine)).add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
    });
  };
  struct Case {
    const char* who;
    Build build;
    bool layout, bf16;  // which wrong gradients it must refuse
  };
  const std::vector<Case> cases{
      {"relu", tested([] { return nn::ReLU(); }), true, true},
      {"pooling", tested([] { return nn::MaxPool2d(2); }), true, true},
      {"dropout", tested([] { return nn::Dropout(0.25f); }), true, true},
      {"batch-norm", tested([] { return nn::BatchNorm2d(16); }), true, true},
      {"conv2d", tested([] { return nn::Conv2d(16, 16, 3, 1, 1); }), true, false},
      {"flatten",
       [](nn::Sequential& n, nn::ModulePtr mine) {
         n.add("layer", nn::Flatten()).add("mine", std::move(mine)).add("fc", nn::Linear(0, 10));
       },
       false, true},
      {"linear",
       [](nn::Sequential& n, nn::ModulePtr mine) {
         n.add("flatten", nn::Flatten()).add("layer", nn::Linear(0, 32)).add("mine", std::move(mine))
             .add("fc", nn::Linear(32, 10));
       },
       false, true}};
  for (const Case& c : cases) {
    for (bool bf16 : {false, true}) {
      if (!(bf16 ? c.bf16 : c.layout)) continue;
      SCOPED_TRACE(std::string(c.who) + (bf16 ? ", bf16 values" : ", layout"));
      auto net = std::make_unique<nn::Sequential>();
      net->add("conv", nn::Conv2d(3, 16, 3, 1, 1));
      c.build(*net, std::make_unique<MislaidGradient>(bf16));
      Device dev;
      Model model(dev, {std::move(net), Shape{3, 8, 8}, 10, "net"}, 5);
      auto x = test::pattern(4 * model.inputShape().numel(), 13);
      std::vector<std::int32_t> y{1, 2, 3, 4};
      try {
        model.trainStep(x.data(), y.data(), 4);
        ADD_FAILURE() << "no error";
      } catch (const ShapeError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("layer (" + std::string(c.who) + "): the gradient"), std::string::npos) << what;
        EXPECT_NE(what.find(bf16 ? "Tensor::setDtype(DType::kF32)" : "dx.setLayout(x.layout())"), std::string::npos)
            << what;
      }
    }
  }
}

}  // namespace
}  // namespace xs::engine

namespace xs::engine {
namespace {

// Runs the network it wraps with no gradient pool (Context::gradients null): every module
// keeps its own input gradient, as a module run outside a model does.
class WithoutGradientPool : public nn::Module {
 public:
  explicit WithoutGradientPool(std::unique_ptr<nn::Sequential> inner) : inner_(std::move(inner)) {}
  Shape build(const Shape& in, const std::string& prefix, nn::BuildInfo& info) override {
    inner_->setNeedInputGrad(needInputGrad_);
    return inner_->build(in, prefix, info);
  }
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override { return inner_->forward(x, ctx); }
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override {
    nn::Context own = ctx;
    own.gradients = nullptr;
    return inner_->backward(dy, own);
  }

 private:
  std::unique_ptr<nn::Sequential> inner_;
};

// Chains, pools (one fused into a convolution), residual blocks with and without a projection,
// a batch-norm with its ReLU, dropout, a flatten and a linear layer.
std::unique_ptr<nn::Sequential> poolTestNetwork() {
  auto n = std::make_unique<nn::Sequential>();
  n->add("conv1", nn::Conv2d(3, 16, 3, 1, 1)).add("relu1", nn::ReLU())
      .add("conv2", nn::Conv2d(16, 16, 3, 1, 1)).add("relu2", nn::ReLU()).add("pool", nn::MaxPool2d(2))
      .add("block1", nn::BasicBlock(16, 16, 1)).add("block2", nn::BasicBlock(16, 32, 2))
      .add("conv3", nn::Conv2d(32, 32, 3, 1, 1, false)).add("bn", nn::BatchNorm2d(32, true))
      .add("drop", nn::Dropout(0.25f)).add("avg", nn::AdaptiveAvgPool2d(1, 1)).add("flatten", nn::Flatten())
      .add("fc", nn::Linear(32, 10));
  return n;
}

// The weights after three steps and the device's peak memory.
std::pair<std::vector<float>, std::size_t> trainedWithPool(Precision p, bool pooled) {
  auto net = std::make_unique<nn::Sequential>();
  if (pooled) net->add("body", poolTestNetwork());
  else net->add("body", std::make_unique<WithoutGradientPool>(poolTestNetwork()));
  Device dev(p == Precision::kBf16 ? golden::bf16Options() : DeviceOptions{});
  Model model(dev, {std::move(net), Shape{3, 16, 16}, 10, "net"}, 5);
  test::trainThreeSteps(model, dev);
  return {{model.params().values(), model.params().values() + model.params().size()}, dev.peak()};
}

// A model's modules write their input gradients into buffers they give back once read
// (gradient_pool.hpp): the same weights, bit for bit, as when each keeps its own, in less memory.
TEST(Model, ActivationGradientsShareBuffersWithTheSameBits) {
  // One [8, 16, 16, 16] gradient: conv1's to block1's twelve input gradients are this size or a
  // quarter of it.
  const std::size_t gradient = 8 * 16 * 16 * 16 * sizeof(float);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(precisionName(p));
    const auto [pooled, pooledPeak] = trainedWithPool(p, true);
    const auto [own, ownPeak] = trainedWithPool(p, false);
    EXPECT_TRUE(test::sameBits(pooled, own));
    EXPECT_LT(pooledPeak + gradient, ownPeak) << pooledPeak << " against " << ownPeak << " bytes";
  }
}

}  // namespace
}  // namespace xs::engine
