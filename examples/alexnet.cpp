// alexnet.cpp: seed 000's map_fn: torchvision's AlexNet trained on Fashion-MNIST resized to
// 224x224, repeated to 3 channels and normalised with ImageNet's statistics; Adam (lr 1e-3),
// batch 32 per core, 1 epoch, 8 cores, seed 1234; the master loads the data first while the
// others wait at rendezvous 'download_only_once', as the seed does.
//
//   ./alexnet                                       # the seed's run
//   ./alexnet --nprocs 2 --image-size 64 --max-steps 5 --precision bf16
//   ./alexnet --huge-pages 0                        # the device memory on 4 KiB pages
//   ./alexnet --nprocs 1 --step-in-backward 1       # alone: Adam's step inside backward
#include <chrono>
#include <cstdio>

#include <xspawn/data/catalog.hpp>
#include <xspawn/data/loader.hpp>
#include <xspawn/error.hpp>
#include <xspawn/models.hpp>
#include <xspawn/optim.hpp>
#include <xspawn/train.hpp>
#include <xspawn/xspawn.hpp>

namespace data = xs::data;

void map_fn(int index, const xs::Flags& flags) {
  using Clock = std::chrono::steady_clock;
  const int size = flags.get("image-size", 224), batchSize = flags.get("batch-size", 32);
  const int epochs = flags.get("epochs", 1);
  const long maxSteps = flags.get("max-steps", 0L);
  const std::uint64_t seed = flags.get("seed", std::uint64_t{1234});
  const auto precision = xs::engine::parsePrecision(flags.get("precision", "fp32"));
  // AlexNet's weights, gradients and Adam's state: about 700 MiB a core, on 2 MiB pages unless
  // --huge-pages 0 (fewer TLB misses; docs/engine.md).
  xs::engine::DeviceOptions options = xs::device_options(precision);
  options.hugePages = flags.get("huge-pages", 1) != 0;
  xs::engine::Device device(options);
  std::printf("Process %d is using %s\n", index, device.name().c_str());
  if (xs::is_master_ordinal())
    std::printf("device memory advised for 2 MiB pages: %s\n", device.hugePages() ? "yes" : "no");

  // Only the master reads the files first (the seed downloads them there); the others wait.
  if (!xs::is_master_ordinal()) xs::rendezvous("download_only_once");
  data::DatasetSpec spec;
  spec.dir = flags.get("data-dir", data::kFashionMnistSystemDir);
  const data::Dataset train = data::loadDataset(spec, data::Split::kTrain);
  const data::Dataset test = data::loadDataset(spec, data::Split::kTest);
  if (xs::is_master_ordinal()) xs::rendezvous("download_only_once");

  // The network is the built-in one: an ordinary function building xs::nn layers.
  xs::engine::Model model(device, {xs::models::alexnet(3, 10), {3, size, size}, 10, "alexnet"}, seed);
  auto optimizer = xs::optim::Adam(model, {.lr = 1e-3f});
  // Alone, the step can be made inside backward, each layer's while its gradient is in cache (the
  // same bits; optimizer_step then only counts it). With several ranks optimizer_step refuses
  // it: their gradients must be all-reduced first.
  if (flags.get("step-in-backward", 0) != 0) {
    XS_CHECK(xs::world_size() == 1, xs::UsageError, "--step-in-backward 1 needs --nprocs 1: ranks all-reduce first");
    model.setOptimizerInBackward(optimizer.get());
  }
  if (xs::is_master_ordinal())
    std::printf("optimizer step: %s backward\n", optimizer->inBackward() ? "inside" : "after");

  data::TransformConfig t;
  t.resize = size;
  t.toRgb = true;
  t.mean = data::kImagenetMean;
  t.std = data::kImagenetStd;
  const data::Transform transform(t, 1, 28, 28);
  data::DistributedSampler sampler({train.size(), xs::world_size(), xs::get_ordinal(), true, seed});
  data::ParallelLoader loader(train, transform, sampler, {.batchSize = batchSize, .seed = seed});

  const auto start = Clock::now();
  long steps = 0;
  for (int epoch = 0; epoch < epochs && (maxSteps == 0 || steps < maxSteps); ++epoch) {
    loader.startEpoch(epoch);
    float stats[2];
    while (auto batch = loader.next()) {
      const auto r = xs::train_step(model, *batch);
      stats[0] = r.loss, stats[1] = static_cast<float>(r.correct);
      xs::optimizer_step(model, *optimizer, stats);
      if (++steps % 100 == 0) xs::master_print("step {}: loss {:.4f}", steps, stats[0]);
      loader.recycle(std::move(*batch));
      if (maxSteps > 0 && steps >= maxSteps) break;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const xs::EvalResult e = xs::evaluate(model, test, transform, batchSize);
  xs::master_print("train time {:.1f} s for {} steps; test accuracy {:.2f}% ({} of {}); master's share {} of {}",
                   seconds, steps, 100 * e.accuracy, e.correct, e.count, e.masterCorrect, e.masterCount);
}

int main(int argc, char** argv) { return xs::spawn_main(map_fn, argc, argv, 8); }
