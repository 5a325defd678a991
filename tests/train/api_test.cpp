// api_test.cpp: the public training API (xspawn/train.hpp) in real jobs started with xs::spawn:
// a resumed run's bits, and bad use giving a clear error instead of a hang or a crash:
// optimizer_step on some ranks only, models of different shapes on different ranks, an
// optimizer of another model, a batch of the wrong shape, a checkpoint of another network; an
// optimizer stepping inside backward, alone (the same bits) and with two ranks (refused).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "process_runner.hpp"
#include "xspawn/data/loader.hpp"
#include "xspawn/data/synthetic.hpp"
#include "xspawn/models.hpp"
#include "xspawn/nn.hpp"
#include "xspawn/train.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::test {
namespace {

SpawnOptions quiet(const std::string& tag) {
  SpawnOptions o;
  o.quiet = true;
  o.printReport = false;
  o.jobId = uniqueJobId(tag);
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// A tiny MLP on 1x8x8 synthetic images; `hidden` changes its shape.
engine::Network tinyNet(int hidden = 32) {
  auto layers = std::make_unique<nn::Sequential>();
  layers->add("flatten", nn::Flatten()).add("fc1", nn::Linear(64, hidden)).add("relu", nn::ReLU())
      .add("fc2", nn::Linear(hidden, 4));
  return {std::move(layers), {1, 8, 8}, 4, "tiny"};
}

data::Dataset tinyData(int side = 8) {
  data::SyntheticConfig c;
  c.trainCount = 256;
  c.height = c.width = side;
  c.numClasses = 4;
  return data::makeSynthetic(c, data::Split::kTrain);
}

// `steps` data-parallel steps of batch 16 from `first`; returns the weights hash.
std::uint64_t train(engine::Model& model, optim::Optimizer& opt, const data::Dataset& d, int first, int steps) {
  const data::Transform t({}, d.channels, d.height, d.width);
  data::ParallelLoader loader(d, t, data::DistributedSampler({d.size(), world_size(), get_ordinal(), true, 3}),
                              {.batchSize = 16, .seed = 3});
  loader.restore({0, static_cast<std::int64_t>(first) * 16});
  loader.startEpoch(0);
  for (int s = 0; s < steps; ++s) {
    auto b = loader.next();
    train_step(model, *b);
    optimizer_step(model, opt);
  }
  return weights_hash(model);
}

TEST(TrainApi, SaveAndLoadResumeBitForBit) {
  const std::string path = std::filesystem::temp_directory_path() / (uniqueJobId("ckpt") + ".xsckpt");
  JobResult r = spawn(
      [path](int, const Flags&) {
        const data::Dataset d = tinyData();
        engine::Device dev(device_options());
        engine::Model straight(dev, tinyNet(), 5);
        auto o1 = optim::AdamW(straight, {.lr = 1e-2f});
        const std::uint64_t want = train(straight, *o1, d, 0, 6);
        // The default shared heap holds the gradients: in place, no sizing by hand.
        if (!gradients_zero_copy(straight) || gradient_buckets(straight) != 1) return 12;

        engine::Model first(dev, tinyNet(), 5);
        auto o2 = optim::AdamW(first, {.lr = 1e-2f});
        train(first, *o2, d, 0, 3);
        save(path, first, *o2, {.epoch = 0, .step = 3, .sampler = {0, 48}, .user = "note"});
        engine::Model resumed(dev, tinyNet(), 99);  // other initial weights: the load replaces them
        auto o3 = optim::AdamW(resumed, {.lr = 1e-2f});
        const TrainingState s = load(path, resumed, *o3);
        if (s.step != 3 || s.sampler.position != 48 || s.user != "note") return 10;
        return train(resumed, *o3, d, 3, 3) == want ? 0 : 11;
      },
      2, quiet("resume"));
  std::filesystem::remove(path);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
}

TEST(TrainApi, OptimizerInBackwardGivesTheSameBitsAloneAndIsRefusedWithTwoRanks) {
  JobResult alone = spawn(
      [](int, const Flags&) {
        const data::Dataset d = tinyData();
        engine::Device dev(device_options());
        engine::Model after(dev, tinyNet(), 5), inside(dev, tinyNet(), 5);
        auto o1 = optim::SGD(after, {.lr = 0.1f, .momentum = 0.9f});
        auto o2 = optim::SGD(inside, {.lr = 0.1f, .momentum = 0.9f});
        inside.setOptimizerInBackward(o2.get());
        const std::uint64_t want = train(after, *o1, d, 0, 4);
        if (train(inside, *o2, d, 0, 4) != want) return 10;
        return o2->steps() == 4 ? 0 : 11;
      },
      1, quiet("in-backward"));
  EXPECT_EQ(alone.exitCode, 0) << alone.report.text();
  JobResult two = spawn(
      [](int, const Flags&) {
        const data::Dataset d = tinyData();
        engine::Device dev(device_options());
        engine::Model model(dev, tinyNet(), 5);
        auto opt = optim::SGD(model);
        model.setOptimizerInBackward(opt.get());
        try {
          train(model, *opt, d, 0, 1);
        } catch (const UsageError& e) {
          return std::string(e.what()).find("only a job of one rank") != std::string::npos ? 7 : 8;
        }
        return 9;
      },
      2, quiet("in-backward-2"));
  EXPECT_EQ(two.exitCode, 7) << two.report.text();
}

TEST(TrainApi, OptimizerStepOnSomeRanksOnlyIsNamed) {
  JobResult r = spawn(
      [](int index, const Flags&) {
        engine::Device dev(device_options());
        engine::Model model(dev, tinyNet(), 1);
        auto opt = optim::SGD(model);
        if (index == 1) {
          rendezvous("evaluation");  // rank 1 went elsewhere
          return 0;
        }
        optimizer_step(model, *opt);
        return 0;
      },
      2, quiet("some-ranks"));
  EXPECT_NE(r.exitCode, 0);
  const std::string text = r.report.text();
  EXPECT_NE(text.find("optimizer_step"), std::string::npos) << text;
  EXPECT_NE(text.find("evaluation"), std::string::npos) << text;
}

TEST(TrainApi, ModelsOfDifferentShapesOnRanksAreNamed) {
  JobResult r = spawn(
      [](int index, const Flags&) {
        engine::Device dev(device_options());
        engine::Model model(dev, tinyNet(index == 1 ? 16 : 32), 1);
        auto opt = optim::SGD(model);
        try {
          optimizer_step(model, *opt);
        } catch (const ShapeError& e) {
          master_print("{}", e.what());
          return std::string(e.what()).find("rank 1's model has") != std::string::npos ? 7 : 8;
        }
        return 0;
      },
      2, quiet("shapes"));
  EXPECT_EQ(r.exitCode, 7) << r.report.text();
}

TEST(TrainApi, OptimizerOfAnotherModelBatchOfAnotherShapeCheckpointOfAnotherNetwork) {
  const std::string path = std::filesystem::temp_directory_path() / (uniqueJobId("other") + ".xsckpt");
  JobResult r = spawn(
      [path](int, const Flags&) {
        engine::Device dev(device_options());
        engine::Model a(dev, tinyNet(), 1), b(dev, tinyNet(), 1);
        auto optB = optim::SGD(b);
        try {
          optimizer_step(a, *optB);
          return 20;
        } catch (const UsageError& e) {
          if (std::string(e.what()).find("built for another model") == std::string::npos) return 21;
        }
        const data::Dataset wide = tinyData(10);  // 1x10x10 images for a 1x8x8 network
        const data::Transform t({}, 1, 10, 10);
        data::ParallelLoader loader(wide, t, data::DistributedSampler({wide.size(), 1, 0, false, 0}), {.batchSize = 4});
        loader.startEpoch(0);
        try {
          train_step(a, *loader.next());
          return 22;
        } catch (const ShapeError& e) {
          if (std::string(e.what()).find("takes samples of [1, 8, 8]") == std::string::npos) return 23;
        }
        auto optA = optim::SGD(a);
        save(path, a, *optA);
        engine::Model other(dev, models::network({.name = "mlp", .imageSize = 8, .numClasses = 4}), 1);
        auto optOther = optim::SGD(other);
        try {
          load(path, other, *optOther);
          return 24;
        } catch (const CheckpointError& e) {
          if (std::string(e.what()).find("layout differs") == std::string::npos) return 25;
        }
        return 0;
      },
      1, quiet("other"));
  std::filesystem::remove(path);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
}

}  // namespace
}  // namespace xs::test
