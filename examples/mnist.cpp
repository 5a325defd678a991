// mnist.cpp: seed 002's program: PyTorch's MNIST example network trained data-parallel on 8
// emulated cores, as its map_fn / xmp.spawn does on a TPU (on Fashion-MNIST: Debian ships no
// MNIST). Adadelta lr 1.0 decayed by 0.7 every epoch, batch 64 per core, 10 epochs.
//
//   ./mnist                               # 8 workers, 10 epochs
//   ./mnist --nprocs 2 --epochs 1 --max-steps 20
//   xspawn --nprocs 8 run -- ./mnist      # the same, started by the launcher
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

// PyTorch's examples/mnist Net.
std::unique_ptr<nn::Sequential> mnistNet() {
  // [1,28,28] -conv3-> [32,26,26] -conv3-> [64,24,24] -pool2-> [64,12,12] -> 9216 -> 128 -> 10
  auto net = std::make_unique<nn::Sequential>();
  net->add("conv1", nn::Conv2d(1, 32, 3)).add("relu1", nn::ReLU())
      .add("conv2", nn::Conv2d(32, 64, 3)).add("relu2", nn::ReLU())
      .add("pool", nn::MaxPool2d(2)).add("dropout1", nn::Dropout(0.25f))
      .add("flatten", nn::Flatten())
      .add("fc1", nn::Linear(9216, 128)).add("relu3", nn::ReLU()).add("dropout2", nn::Dropout(0.5f))
      .add("fc2", nn::Linear(128, 10));
  return net;
}

void map_fn(int index, const xs::Flags& flags) {
  using Clock = std::chrono::steady_clock;
  const int epochs = flags.get("epochs", 10), batchSize = flags.get("batch-size", 64);
  const long maxSteps = flags.get("max-steps", 0L);
  const std::uint64_t seed = flags.get("seed", std::uint64_t{1234});

  data::DatasetSpec spec;
  spec.dir = flags.get("data-dir", data::kFashionMnistSystemDir);
  const data::Dataset train = data::loadDataset(spec, data::Split::kTrain);
  const data::Dataset test = data::loadDataset(spec, data::Split::kTest);

  xs::engine::Device device(xs::device_options());  // this worker's emulated core
  xs::engine::Model model(device, {mnistNet(), {1, 28, 28}, 10, "mnist_net"}, seed);
  auto optimizer = xs::optim::Adadelta(model, {.lr = 1.0f});
  const xs::optim::StepLR schedule{1.0, 1, 0.7};

  data::TransformConfig normalise;
  normalise.mean = {0.2860f};  // Fashion-MNIST's
  normalise.std = {0.3530f};
  const data::Transform transform(normalise, 1, 28, 28);
  data::DistributedSampler sampler({train.size(), xs::world_size(), xs::get_ordinal(), true, seed});
  data::ParallelLoader loader(train, transform, sampler, {.batchSize = batchSize, .seed = seed});

  xs::rendezvous("init");
  const auto start = Clock::now();
  long steps = 0;
  for (int epoch = 0; epoch < epochs && (maxSteps == 0 || steps < maxSteps); ++epoch) {
    optimizer->setLr(schedule.at(epoch));
    loader.startEpoch(epoch);
    float loss[1] = {0};
    double lossSum = 0;
    long epochSteps = 0;
    while (auto batch = loader.next()) {
      loss[0] = xs::train_step(model, *batch).loss;
      xs::optimizer_step(model, *optimizer, loss);  // loss comes back as the mean over cores
      lossSum += loss[0], ++epochSteps, ++steps;
      loader.recycle(std::move(*batch));
      if (maxSteps > 0 && steps >= maxSteps) break;
    }
    xs::master_print("epoch {}: train loss {:.4f}, lr {:.4f}, {:.1f} s", epoch + 1, lossSum / epochSteps,
                     optimizer->lr(), std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const xs::EvalResult eval = xs::evaluate(model, test, transform, 500);
  xs::master_print("test accuracy {:.2f}% ({}/{}) after {} steps on {} cores in {:.1f} s", 100 * eval.accuracy,
                   eval.correct, eval.count, steps, xs::world_size(), seconds);
  xs::master_print("RESULT {{\"nprocs\": {}, \"epochs\": {}, \"steps\": {}, \"train_seconds\": {:.3f}, "
                   "\"test_accuracy\": {:.4f}}}",
                   xs::world_size(), epochs, steps, seconds, eval.accuracy);
}

int main(int argc, char** argv) { return xs::spawn_main(map_fn, argc, argv, 8); }
