// convnet.cpp: `xspawn --nprocs 8 train`, written as a user program: seed 004's convnet built
// by hand from xs::nn layers, Fashion-MNIST normalised, Adam (betas 0.9, 0.99) with a one-cycle
// schedule (peak lr 3e-3, set before every step), label smoothing 0.2, bf16, batch 16 per core,
// 3 epochs, seed 1234. With the same settings it trains the same bits as the built-in trainer
// (the same weights hash) at the same speed.
//
//   ./convnet                       # 8 workers, as `xspawn --nprocs 8 train`
//   ./convnet --nprocs 2 --epochs 1 --max-steps 50
#include <chrono>
#include <memory>

#include <xspawn/data/catalog.hpp>
#include <xspawn/data/loader.hpp>
#include <xspawn/nn.hpp>
#include <xspawn/optim.hpp>
#include <xspawn/train.hpp>
#include <xspawn/xspawn.hpp>

namespace nn = xs::nn;
namespace data = xs::data;

std::unique_ptr<nn::Sequential> convnet() {
  // [1,28,28] -conv5p1-> [32,26,26] -pool2-> [32,13,13] -conv3-> [64,11,11] -pool2s1-> [64,10,10]
  // -conv3-> [128,8,8] -pool2-> [128,4,4] -> 2048 -> 10
  auto net = std::make_unique<nn::Sequential>();
  net->add("conv1", nn::Conv2d(1, 32, 5, 1, 1)).add("relu1", nn::ReLU()).add("maxpool1", nn::MaxPool2d(2))
      .add("conv2", nn::Conv2d(32, 64, 3)).add("relu2", nn::ReLU()).add("maxpool2", nn::MaxPool2d(2, 1))
      .add("conv3", nn::Conv2d(64, 128, 3)).add("relu3", nn::ReLU()).add("maxpool3", nn::MaxPool2d(2))
      .add("flatten", nn::Flatten()).add("fc1", nn::Linear(2048, 10));
  return net;
}

void map_fn(int, const xs::Flags& flags) {
  using Clock = std::chrono::steady_clock;
  const int epochs = flags.get("epochs", 3), batchSize = flags.get("batch-size", 16);
  const long maxSteps = flags.get("max-steps", 0L);
  const std::uint64_t seed = flags.get("seed", std::uint64_t{1234});
  data::DatasetSpec spec;
  spec.dir = flags.get("data-dir", data::kFashionMnistSystemDir);
  // Each split read by one rank and kept once for the machine, in shared memory (as the trainer).
  const data::Dataset train = data::shareDataset([&] { return data::loadDataset(spec, data::Split::kTrain); }, 0);
  const data::Dataset test = data::shareDataset([&] { return data::loadDataset(spec, data::Split::kTest); }, 1);

  const auto precision = xs::engine::parsePrecision(flags.get("precision", "bf16"));
  xs::engine::Device device(xs::device_options(precision));
  xs::engine::Model model(device, {convnet(), {1, 28, 28}, 10, "convnet"}, seed);
  model.setLabelSmoothing(0.2f);  // as torch.nn.CrossEntropyLoss(label_smoothing=0.2)
  auto optimizer = xs::optim::Adam(model, {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.99f});
  xs::data_parallel(model);

  data::TransformConfig normalise;
  normalise.mean = {0.2860f};
  normalise.std = {0.3530f};
  const data::Transform transform(normalise, 1, 28, 28);
  data::DistributedSampler sampler({train.size(), xs::world_size(), xs::get_ordinal(), true, seed});
  data::ParallelLoader loader(train, transform, sampler, {.batchSize = batchSize, .seed = seed});
  // Up from 1.2e-4 to 3e-3 over the first 30% of the steps, then down along a half cosine.
  const xs::optim::OneCycleLR schedule{.maxLr = 3e-3, .totalSteps = loader.batchesPerEpoch() * epochs};

  xs::rendezvous("train_start");
  double seconds = 0;  // training only, as `xspawn train` counts it (evaluations left out)
  long steps = 0;
  for (int epoch = 0; epoch < epochs && (maxSteps == 0 || steps < maxSteps); ++epoch) {
    loader.startEpoch(epoch);
    const auto start = Clock::now();
    while (auto batch = loader.next()) {
      optimizer->setLr(schedule.at(epoch * loader.batchesPerEpoch() + batch->index));
      xs::train_step(model, *batch);
      xs::optimizer_step(model, *optimizer);
      loader.recycle(std::move(*batch));
      if (maxSteps > 0 && ++steps >= maxSteps) break;
      if (maxSteps == 0) ++steps;
    }
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    const xs::EvalResult e = xs::evaluate(model, test, transform, batchSize);
    xs::master_print("epoch {}: test accuracy {:.2f}%", epoch + 1, 100 * e.accuracy);
  }
  const double images = static_cast<double>(steps) * batchSize * xs::world_size();
  const std::uint64_t hash = xs::weights_hash(model);
  xs::master_print("RESULT {{\"steps\": {}, \"seconds\": {:.3f}, \"images_per_second\": {:.1f}, \"weights_hash\": \"{:016x}\"}}",
                   steps, seconds, images / seconds, hash);
}

int main(int argc, char** argv) { return xs::spawn_main(map_fn, argc, argv, 8); }
