// test_module_times.cpp: Model::setModuleTimes: each module's own forward and backward time and
// FLOPs, nested modules counted once, and training unchanged by the timing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/models.hpp"
#include "xspawn/nn.hpp"

namespace xs::engine {
namespace {

using Clock = std::chrono::steady_clock;

void spin(std::chrono::microseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

// Passes x and dy through after spinning a known time each way.
class Busy : public nn::Module {
 public:
  static constexpr std::chrono::microseconds kForward{2000}, kBackward{3000};
  Shape build(const Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  const Tensor& forward(const Tensor& x, nn::Context&) override {
    spin(kForward);
    return x;
  }
  const Tensor& backward(const Tensor& dy, nn::Context&) override {
    spin(kBackward);
    return dy;
  }
};

// Passes x and dy through after sleeping (waiting, using no CPU) a known time each way.
class Sleepy : public nn::Module {
 public:
  static constexpr std::chrono::microseconds kForward{4000}, kBackward{6000};
  Shape build(const Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  const Tensor& forward(const Tensor& x, nn::Context&) override {
    std::this_thread::sleep_for(kForward);
    return x;
  }
  const Tensor& backward(const Tensor& dy, nn::Context&) override {
    std::this_thread::sleep_for(kBackward);
    return dy;
  }
};

// A residual block (a module with modules inside), then a busy module inside a Sequential of its
// own, then the classifier.
Network network() {
  auto wrap = std::make_unique<nn::Sequential>();
  wrap->add("busy", std::make_unique<Busy>());
  auto n = std::make_unique<nn::Sequential>();
  n->add("stem", nn::Conv2d(3, 8, 3, 1, 1)).add("block", nn::BasicBlock(8, 16, 2)).add("wrap", std::move(wrap))
      .add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
  return {std::move(n), {3, 8, 8}, 10, "timed"};
}

struct Batch {
  std::vector<float> x = test::pattern(4 * 3 * 8 * 8, 5);
  std::vector<std::int32_t> y{1, 2, 3, 4};
};

const ModuleTime& named(const std::vector<ModuleTime>& times, const std::string& name) {
  for (const ModuleTime& t : times)
    if (t.name == name) return t;
  ADD_FAILURE() << "no module " << name;
  return times.front();
}

TEST(ModuleTimes, OwnTimesCountEachModuleOnceAndFlopsAddUpToTheModels) {
  Device dev;
  Model m(dev, network(), 3);
  EXPECT_TRUE(m.moduleTimes().empty());  // off by default
  m.setModuleTimes(true);
  Batch b;
  m.trainStep(b.x.data(), b.y.data(), 4);  // first sight: every module gets its entry
  m.resetModuleTimes();
  const auto t0 = Clock::now();
  m.trainStep(b.x.data(), b.y.data(), 4);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::vector<ModuleTime>& times = m.moduleTimes();
  std::vector<std::string> names;
  for (const ModuleTime& t : times) names.push_back(t.name);
  // In the order their first forward ended: a block after the modules inside it.
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "block.conv1", "block.bn1", "block.conv2", "block.bn2", "block",
                                             "wrap.busy", "wrap", "flatten", "fc"}));
  const ModuleTime &busy = named(times, "wrap.busy"), &wrap = named(times, "wrap");
  EXPECT_GE(busy.forwardSeconds, 0.002);
  EXPECT_GE(busy.backwardSeconds, 0.003);
  EXPECT_LT(wrap.forwardSeconds + wrap.backwardSeconds, 0.001);  // its module's time is not its own
  double own = 0, forwardFlops = 0;
  for (const ModuleTime& t : times) {
    EXPECT_GE(t.forwardSeconds, 0) << t.name;
    EXPECT_GE(t.backwardSeconds, 0) << t.name;
    own += t.forwardSeconds + t.backwardSeconds;
    forwardFlops += t.forwardFlops;
  }
  EXPECT_LE(own, wall);  // the block's convolutions are not counted twice
  EXPECT_DOUBLE_EQ(forwardFlops, m.forwardFlopsPerSample());
  // The block's own FLOPs: its shortcut's 1x1 convolution, 8 -> 16 channels on 4 x 4 pixels.
  EXPECT_DOUBLE_EQ(named(times, "block").forwardFlops, 2.0 * 16 * 4 * 4 * 8);
  // The first layer computes no input gradient: its backward is the weight gradient's alone.
  const ModuleTime &stem = named(times, "stem"), &fc = named(times, "fc");
  EXPECT_DOUBLE_EQ(stem.backwardFlops, stem.forwardFlops);
  EXPECT_DOUBLE_EQ(fc.backwardFlops, 2 * fc.forwardFlops);
  m.resetModuleTimes();
  for (const ModuleTime& t : m.moduleTimes()) EXPECT_EQ(t.forwardSeconds + t.backwardSeconds, 0) << t.name;
  m.setModuleTimes(false);
  EXPECT_TRUE(m.moduleTimes().empty());
}

// The thread's CPU time leaves out a module's waits, elapsed time counts them; a busy module
// counts on either clock; a change of clock starts the times afresh.
TEST(ModuleTimes, ThreadCpuTimeLeavesOutWhatAModuleWaited) {
  auto n = std::make_unique<nn::Sequential>();
  // After a layer with weights: a backward runs through both (none is made for the input).
  n->add("stem", nn::Conv2d(3, 4, 3, 1, 1)).add("sleepy", std::make_unique<Sleepy>())
      .add("busy", std::make_unique<Busy>()).add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
  Device dev;
  Model m(dev, {std::move(n), {3, 8, 8}, 10, "waits"}, 3);
  Batch b;
  EXPECT_EQ(m.moduleTimeBase(), ModuleTimeBase::kWall);
  for (ModuleTimeBase base : {ModuleTimeBase::kWall, ModuleTimeBase::kThreadCpu}) {
    m.setModuleTimes(true, base);
    EXPECT_EQ(m.moduleTimeBase(), base);
    EXPECT_TRUE(m.moduleTimes().empty());  // a clock of its own: nothing carried over
    m.trainStep(b.x.data(), b.y.data(), 4);
    const ModuleTime &sleepy = named(m.moduleTimes(), "sleepy"), &busy = named(m.moduleTimes(), "busy");
    if (base == ModuleTimeBase::kWall) {
      EXPECT_GE(sleepy.forwardSeconds, 0.004);
      EXPECT_GE(sleepy.backwardSeconds, 0.006);
    } else {
      EXPECT_LT(sleepy.forwardSeconds + sleepy.backwardSeconds, 0.002);  // asleep: no CPU
    }
    // Spinning counts on both (its CPU time less what a busy machine took of its wall time).
    EXPECT_GE(busy.forwardSeconds, base == ModuleTimeBase::kWall ? 0.002 : 0.0005);
    EXPECT_GE(busy.backwardSeconds, base == ModuleTimeBase::kWall ? 0.003 : 0.0005);
  }
}

TEST(ModuleTimes, TimingLeavesTheGradientsBitForBit) {
  Batch b;
  std::vector<std::vector<float>> grads;
  for (bool timed : {false, true}) {
    Device dev;
    Model m = test::build(dev, [] {
      models::ModelConfig c;
      c.name = "lenet5";
      return c;
    }());
    m.setModuleTimes(timed);
    std::vector<float> x = test::pattern(4 * 28 * 28, 9);
    m.trainStep(x.data(), b.y.data(), 4);
    const float* g = m.params().grads();
    grads.emplace_back(g, g + m.params().size());
    EXPECT_EQ(m.moduleTimes().empty(), !timed);
  }
  EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)));
}

}  // namespace
}  // namespace xs::engine
