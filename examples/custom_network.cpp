// custom_network.cpp: a network of one's own (a small residual net with batch-norm, pools,
// dropout and two layers of one's own) on a dataset of one's own (made by a function, once for the
// machine with shareDataset, and held in a pixelBuffer for fromMemory), with the loader's own
// choice of threads, trained with SGD + nesterov and a cosine schedule, gradients all-reduced in
// buckets while backward runs; a checkpoint every epoch, and --resume continues from it bit for
// bit; so does a restarted job.
//
//   ./custom_network --nprocs 4 --epochs 4 --checkpoint ckpt.xsckpt --stop-after 2
//   ./custom_network --nprocs 4 --epochs 4 --checkpoint ckpt.xsckpt --resume 1   # epochs 3 and 4
//   ./custom_network --nprocs 4 --epochs 4 --checkpoint ckpt.xsckpt --max-restarts 1 \
//       --inject-fault rank=1,step=100,kind=crash   # rank 1 dies in epoch 2; the new gang resumes
//   ./custom_network --nprocs 4 --precision bf16      # bf16 products (fp32 by default)
//   ./custom_network --nprocs 4 --module-times 1      # where rank 0's passes spent their time
//   ./custom_network --nprocs 8 --module-times cpu    # the same in its thread's CPU time: without
//                                                     # the waits for a core of 8 ranks on fewer
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include <xspawn/data/dataset.hpp>
#include <xspawn/data/loader.hpp>
#include <xspawn/nn.hpp>
#include <xspawn/optim.hpp>
#include <xspawn/trace.hpp>
#include <xspawn/train.hpp>
#include <xspawn/xspawn.hpp>

namespace nn = xs::nn;
namespace data = xs::data;

constexpr int kClasses = 4, kSide = 16;

// Stripes: class k has stripes in direction k (|, -, /, \), at a per-image phase and contrast.
// Draws image i into pixels [3, kSide, kSide] and returns its label.
int drawStripes(std::int64_t i, std::uint64_t salt, std::uint8_t* pixels) {
  const int label = static_cast<int>(i % kClasses);
  const double phase = std::fmod(i * 0.618 * static_cast<double>(salt), 1.0) * 6.28, gain = 60 + (i * 7) % 60;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < kSide; ++y)
      for (int x = 0; x < kSide; ++x) {
        const int u = label == 0 ? x : label == 1 ? y : label == 2 ? x + y : x - y;
        const std::uint64_t h = (i * 2654435761u + (c * kSide + y) * kSide + x) * 40503u;
        const double noise = static_cast<double>(h % 97) - 48;  // +-48 grey levels
        const double v = std::clamp(128 + gain * std::sin(u * 1.2 + phase + c) + noise, 0.0, 255.0);
        pixels[(c * kSide + y) * kSide + x] = static_cast<std::uint8_t>(v);
      }
  return label;
}

// The training set one image at a time (fromFunction); the test set the other way, as a program
// holding its images already would: a pixelBuffer filled, then fromMemory.
data::Dataset stripes(data::Split split, std::int64_t count) {
  const std::uint64_t salt = split == data::Split::kTrain ? 1 : 2;
  if (split == data::Split::kTrain)
    return data::fromFunction("stripes", split, count, 3, kSide, kSide, kClasses,
                              [salt](std::int64_t i, std::uint8_t* pixels) { return drawStripes(i, salt, pixels); });
  const std::size_t image = 3 * kSide * kSide;
  std::vector<std::uint8_t> pixels = data::pixelBuffer(static_cast<std::size_t>(count) * image);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) labels[i] = drawStripes(i, salt, pixels.data() + i * image);
  return data::fromMemory("stripes", split, 3, kSide, kSide, kClasses, std::move(pixels), std::move(labels));
}

// A layer of one's own that only watches: the mean of the features it sees. It hands on its
// input and its gradient as they are (the same tensors, so what the layers around it say on them,
// the layout and Tensor::bf16Values, passes through) and answers roundsInputToBf16 and
// takesPlanarInput for the layer after it, so the layers around it keep their bf16 shortcuts and
// their layouts (a mean reads any layout).
class FeatureMean : public nn::Module {
 public:
  xs::engine::Shape build(const xs::engine::Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  void fuseWithNext(nn::Module& next) override {
    nextRounds_ = next.roundsInputToBf16();
    nextPlanes_ = next.takesPlanarInput();
  }
  bool roundsInputToBf16() const override { return nextRounds_; }
  bool takesPlanarInput() const override { return nextPlanes_; }
  const xs::engine::Tensor& forward(const xs::engine::Tensor& x, nn::Context&) override {
    double sum = 0;
    for (std::size_t i = 0; i < x.numel(); ++i) sum += x.data()[i];
    mean_ = x.numel() ? static_cast<float>(sum / static_cast<double>(x.numel())) : 0.f;
    return x;
  }
  const xs::engine::Tensor& backward(const xs::engine::Tensor& dy, nn::Context&) override { return dy; }
  float mean() const { return mean_; }

 private:
  bool nextRounds_ = false, nextPlanes_ = false;
  float mean_ = 0.f;
};

// A layer of one's own that writes a tensor of its own: torch's Hardtanh(-kClip, kClip). A bf16
// value clipped to kClip (a bf16 value) is a bf16 value, and the gradient is dy or 0, so it carries
// what the layers around it say on their tensors from x to y and from dy to dx: Tensor::bf16Values
// (the values are bf16 already: a bf16 layer skips rounding them) and Tensor::bf16Grad (the writer
// of x rounds its gradient anyway, so whoever reads y may hand the gradient back rounded). With
// --precision bf16 the layers around it keep their rounding shortcuts.
class Clip : public nn::Module {
 public:
  static constexpr float kClip = 4.f;
  xs::engine::Shape build(const xs::engine::Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  void fuseWithNext(nn::Module& next) override { nextRounds_ = next.roundsInputToBf16(); }
  bool roundsInputToBf16() const override { return nextRounds_; }  // its output keeps rounded input rounded
  const xs::engine::Tensor& forward(const xs::engine::Tensor& x, nn::Context& ctx) override {
    x_ = &x;
    y_.ensure(ctx.dev, x.shape(), "activations");
    y_.setLayout(x.layout());
    for (std::size_t i = 0; i < x.numel(); ++i) y_.data()[i] = std::clamp(x.data()[i], -kClip, kClip);
    y_.setBf16Values(x.bf16Values());
    y_.setBf16Grad(chained_ && x.bf16Grad());  // only when its dx goes straight to x's writer
    return y_;
  }
  // dy is read here and nowhere later: the built-in layer after this one wrote it into a buffer
  // the model lends for the backward (nn::Context::gradients), which the Sequential takes back
  // once this returns. dx_ is this layer's own, kept from step to step.
  const xs::engine::Tensor& backward(const xs::engine::Tensor& dy, nn::Context& ctx) override {
    dx_.ensure(ctx.dev, dy.shape(), "activation gradients");
    dx_.setLayout(dy.layout());
    for (std::size_t i = 0; i < dy.numel(); ++i)
      dx_.data()[i] = std::fabs(x_->data()[i]) < kClip ? dy.data()[i] : 0.f;  // a NaN passes none
    dx_.setBf16Values(dy.bf16Values());
    return dx_;
  }

 private:
  bool nextRounds_ = false;
};

// A layer of one's own with a parameter: a learned scale per feature (as LayerScale), y = x * s
// over [batch, features]. It registers its weight at build, and its backward writes the weight's
// whole gradient in one pass: ParamStore::gradSlot says whether to overwrite it (the first write
// since zeroGrad, which left the zeros unfilled) or to add to it (a second backward before the
// next zeroGrad). It then reports the gradient final, for the all-reduce buckets. It reads its
// weight through a const store: a mutable value(i) would count the weight as changed.
class Scale : public nn::Module {
 public:
  xs::engine::Shape build(const xs::engine::Shape& in, const std::string& prefix, nn::BuildInfo& info) override {
    features_ = in.numel();
    w_ = info.params.add(prefix + ".weight", xs::engine::Shape{static_cast<int>(features_)}, xs::engine::Init::kOnes);
    return in;
  }
  const xs::engine::Tensor& forward(const xs::engine::Tensor& x, nn::Context& ctx) override {
    x_ = &x;
    y_.ensure(ctx.dev, x.shape(), "activations");
    const float* s = std::as_const(ctx.params).value(w_);
    for (std::size_t i = 0; i < x.numel(); ++i) y_.data()[i] = x.data()[i] * s[i % features_];
    return y_;
  }
  const xs::engine::Tensor& backward(const xs::engine::Tensor& dy, nn::Context& ctx) override {
    dx_.ensure(ctx.dev, dy.shape(), "activation gradients");
    const float* s = std::as_const(ctx.params).value(w_);
    const xs::engine::ParamStore::GradSlot ds = ctx.params.gradSlot(w_);
    if (ds.overwrite) std::fill(ds.data, ds.data + features_, 0.f);  // a sum over the batch starts at 0
    for (std::size_t i = 0; i < dy.numel(); ++i) {
      dx_.data()[i] = dy.data()[i] * s[i % features_];
      ds.data[i % features_] += dy.data()[i] * x_->data()[i];
    }
    ctx.gradsReady(w_, w_);  // after the last read of s: an optimizer in backward steps it here
    return dx_;
  }

 private:
  std::size_t features_ = 0;
  std::size_t w_ = 0;
};

std::unique_ptr<nn::Sequential> residualNet(FeatureMean*& watch) {
  // [3,16,16] -conv3p1-> [32,16,16] -block-> [32,16,16] -block s2-> [64,8,8] -avg2-> [64,4,4]
  // -global avg-> [64,1,1] -> 64 (x a learned scale) -> 64 -> classes
  auto net = std::make_unique<nn::Sequential>();
  net->add("stem", nn::Conv2d(3, 32, 3, 1, 1, false)).add("bn", nn::BatchNorm2d(32, true))
      .add("block1", nn::BasicBlock(32, 32, 1)).add("block2", nn::BasicBlock(32, 64, 2))
      .add("pool", nn::AvgPool2d(2)).add("gap", nn::AdaptiveAvgPool2d(1, 1)).add("flatten", nn::Flatten());
  auto mean = std::make_unique<FeatureMean>();
  watch = mean.get();
  // The head: a hidden layer clipped, then rectified (min(max(x, 0), kClip), as ReLU6 with 4). In bf16
  // hidden's backward rounds its dy, so the ReLU hands its dx back rounded through the clip, and
  // the ReLU writes its output rounded for fc: Clip passes both on (Tensor::bf16Grad, bf16Values).
  net->add("features", std::move(mean)).add("scale", std::make_unique<Scale>()).add("dropout", nn::Dropout(0.1f))
      .add("hidden", nn::Linear(64, 64))
      .add("clip", std::make_unique<Clip>()).add("relu", nn::ReLU()).add("fc", nn::Linear(64, kClasses));
  return net;
}

void map_fn(int, const xs::Flags& flags) {
  const int epochs = flags.get("epochs", 3), stopAfter = flags.get("stop-after", epochs);
  const std::string checkpoint = flags.get("checkpoint", "");
  // A restarted gang (--max-restarts) picks up the last checkpoint, as --resume does.
  const bool restarted = xs::restart_count() > 0 && !checkpoint.empty() && std::filesystem::exists(checkpoint);
  const bool resume = flags.get("resume", 0) != 0 || restarted;
  // The training set drawn once for the machine, in shared memory for every rank (shareDataset).
  const data::Dataset train = data::shareDataset([] { return stripes(data::Split::kTrain, 2048); });
  const data::Dataset test = stripes(data::Split::kTest, 512);
  // The ranks that did not write the shared pixels read them through a read-only mapping of their
  // own (Dataset::sharedView, made by xs::shared_view).
  const int viewers = xs::mesh_reduce("read-only views", train.sharedView ? 1 : 0, [](int a, int b) { return a + b; });
  xs::master_print("training set: {} images, {} bytes of pixels {} ({} bytes of shared heap when shared), read "
                   "through a read-only mapping on {} ranks",
                   train.size(), train.pixelCount(), train.sharedPixels.empty() ? "on each rank" : "shared by the machine",
                   data::sharedDatasetBytes(train.size(), train.imageSize(), train.name.size()), viewers);

  xs::engine::Device device(xs::device_options(xs::engine::parsePrecision(flags.get("precision", "fp32"))));
  FeatureMean* features = nullptr;  // owned by the model
  xs::engine::Model model(device, {residualNet(features), {3, kSide, kSide}, kClasses, "stripes_resnet"}, 7);
  auto optimizer = xs::optim::SGD(model, {.lr = 0.05f, .momentum = 0.9f, .weightDecay = 5e-4f, .nesterov = true});
  const xs::optim::CosineAnnealingLR schedule{0.05f, epochs};
  xs::data_parallel(model, {.bucketBytes = 64 << 10});  // buckets reduced while backward runs
  // Each module's own time, its modules' apart: elapsed, or (cpu) the thread's CPU time.
  const std::string moduleTimes = flags.get("module-times", std::string("0"));
  model.setModuleTimes(moduleTimes != "0", moduleTimes == "cpu" ? xs::engine::ModuleTimeBase::kThreadCpu
                                                                : xs::engine::ModuleTimeBase::kWall);

  data::TransformConfig t;
  t.mean = {0.5f, 0.5f, 0.5f};
  t.std = {0.25f, 0.25f, 0.25f};
  t.horizontalFlip = true;
  const data::Transform augment(t, 3, kSide, kSide);
  t.horizontalFlip = false;
  const data::Transform plain(t, 3, kSide, kSide);
  data::DistributedSampler sampler({train.size(), xs::world_size(), xs::get_ordinal(), true, 7});
  data::ParallelLoader loader(train, augment, sampler, {.batchSize = 32, .seed = 7});
  // Its threads by default (kAutoThreads): none where the machine's ranks take every core.
  xs::master_print("each worker's loader: {} thread(s)", loader.threads());

  xs::TrainingState state;
  if (resume) {
    state = xs::load(checkpoint, model, *optimizer);
    loader.restore(state.sampler);
    xs::master_print("{}resumed from {} at step {} (epoch {})",
                     restarted ? fmt::format("restart {}: ", xs::restart_count()) : "", checkpoint, state.step,
                     state.epoch + 1);
  }
  xs::expect_steps(static_cast<std::int64_t>(loader.batchesPerEpoch()) * epochs);  // `xspawn top` shows the ETA
  for (int epoch = static_cast<int>(state.epoch); epoch < std::min(epochs, stopAfter); ++epoch) {
    optimizer->setLr(schedule.at(epoch));
    loader.startEpoch(epoch);
    float loss[1];
    while (auto batch = loader.next()) {
      loss[0] = xs::train_step(model, *batch).loss;
      xs::optimizer_step(model, *optimizer, loss);
      ++state.step;
      loader.recycle(std::move(*batch));
    }
    xs::Trace span("epoch end");  // the program's own span on its rank's track under --trace
    const xs::EvalResult e = xs::evaluate(model, test, plain, 128);
    xs::master_print("epoch {}: loss {:.4f}, test accuracy {:.2f}%, {} gradient buckets per step, mean feature {:.3f}",
                     epoch + 1, loss[0], 100 * e.accuracy, xs::gradient_buckets(model), features->mean());
    state.epoch = epoch + 1;
    state.sampler = {epoch + 1, 0};
    if (!checkpoint.empty()) xs::save(checkpoint, model, *optimizer, state);
  }
  for (const xs::engine::ModuleTime& t : model.moduleTimes())  // training and evaluation passes alike
    xs::master_print("module {:<18} forward {:8.2f} ms, backward {:8.2f} ms, {:.1f} MFLOP an image{}", t.name,
                     1e3 * t.forwardSeconds, 1e3 * t.backwardSeconds, (t.forwardFlops + t.backwardFlops) / 1e6,
                     model.moduleTimeBase() == xs::engine::ModuleTimeBase::kThreadCpu ? " (CPU time)" : "");
  xs::master_print("weights hash {:016x}", xs::weights_hash(model));
}

int main(int argc, char** argv) { return xs::spawn_main(map_fn, argc, argv, 4); }
