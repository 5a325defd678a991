// options_test.cpp: option parsing, per-model defaults and the shared-heap plan, in process.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "options.hpp"
#include "plan.hpp"
#include "xspawn/data/dataset.hpp"
#include "xspawn/train.hpp"
#include "xspawn/error.hpp"

namespace xs::train {
namespace {

TEST(TrainOptions, DefaultsFollowTheModel) {
  TrainOptions o = parseOptions({});
  EXPECT_EQ(o.model, "convnet");
  EXPECT_EQ(o.optimizer, "adam");
  EXPECT_EQ(o.lrSchedule, "onecycle");
  EXPECT_EQ(o.epochs, 3);
  EXPECT_NE(describe(o).find("adam lr 0.003 betas 0.9,0.99 weight decay 0, label smoothing 0.2, one cycle"),
            std::string::npos) << describe(o);
  TrainOptions a = parseOptions({"--model", "alexnet", "--dataset", "synthetic"});
  resolveDefaults(a);
  EXPECT_EQ(a.imageSize, 224);
  EXPECT_EQ(a.batchSize, 32);
  EXPECT_EQ(a.epochs, 1);
  EXPECT_DOUBLE_EQ(a.beta2, 0.999);
  EXPECT_DOUBLE_EQ(a.labelSmoothing, 0.0);
  TrainOptions r = parseOptions({"--model", "resnet18", "--data-dir", "/somewhere"});
  resolveDefaults(r);
  EXPECT_EQ(r.dataset, "cifar10");
  EXPECT_EQ(r.optimizer, "sgd");
  EXPECT_FLOAT_EQ(static_cast<float>(r.momentum), 0.9f);
  EXPECT_FLOAT_EQ(static_cast<float>(r.weightDecay), 5e-4f);
  EXPECT_TRUE(r.augment);
  EXPECT_EQ(r.imageSize, 32);
}

TEST(TrainOptions, ExplicitValuesWin) {
  TrainOptions o = parseOptions({"--model", "convnet", "--optimizer", "sgd", "--lr", "1e-4", "--batch-size", "100",
                                 "--epochs", "3", "--dataset", "synthetic", "--image-size", "32"});
  resolveDefaults(o);
  EXPECT_EQ(o.optimizer, "sgd");
  EXPECT_DOUBLE_EQ(o.lr, 1e-4);
  EXPECT_EQ(o.batchSize, 100);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.imageSize, 32);
}

TEST(TrainOptions, BetasAndLabelSmoothing) {
  TrainOptions o = parseOptions({"--betas", "0.8,0.95", "--label-smoothing", "0.05"});
  EXPECT_DOUBLE_EQ(o.beta1, 0.8);
  EXPECT_DOUBLE_EQ(o.beta2, 0.95);
  EXPECT_DOUBLE_EQ(o.labelSmoothing, 0.05);
  EXPECT_DOUBLE_EQ(parseOptions({"--optimizer", "sgd"}).labelSmoothing, 0.2);  // the model's, whatever the optimizer
  // Each bad value says what is wrong and what to give instead.
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--betas", "0.9"}, "--betas 0.9: give two numbers in [0, 1) separated by a comma, e.g. 0.9,0.999"},
      {{"--betas", "0.9,1"}, "--betas 0.9,1: give two numbers"},
      {{"--betas", "0.9,x"}, "--betas 0.9,x: give two numbers"},
      {{"--betas", "0.9,0.99,0.9"}, "--betas 0.9,0.99,0.9: give two numbers"},
      {{"--betas", "-0.1,0.9"}, "--betas -0.1,0.9: give two numbers"},
      {{"--optimizer", "sgd", "--betas", "0.9,0.99"}, "--betas: they are Adam's; with --optimizer sgd use --momentum"},
      {{"--label-smoothing", "1.5"}, "--label-smoothing 1.5: use a value in [0, 1] (0: plain cross-entropy)"},
      {{"--label-smoothing", "-0.1"}, "--label-smoothing -0.1: use a value in [0, 1]"},
  };
  for (const auto& [args, message] : bad) {
    try {
      parseOptions(args);
      ADD_FAILURE() << "no error for " << args.back();
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(TrainOptions, LearningRateSchedules) {
  // --lr-step alone means the step schedule; another optimizer than the model's drops the
  // model's schedule; a bad name says which ones exist.
  EXPECT_EQ(parseOptions({"--lr-step", "2"}).lrSchedule, "step");
  EXPECT_EQ(parseOptions({"--optimizer", "sgd"}).lrSchedule, "step");
  EXPECT_EQ(parseOptions({"--model", "resnet18", "--lr-schedule", "onecycle"}).lrSchedule, "onecycle");
  try {
    parseOptions({"--lr-schedule", "cosine"});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-schedule cosine: unknown schedule; use step or onecycle"),
              std::string::npos) << e.what();
  }
}

TEST(TrainOptions, BadValuesThrow) {
  EXPECT_THROW(parseOptions({"--batch-size", "0"}), UsageError);
  EXPECT_THROW(parseOptions({"--model", "vgg"}), UsageError);
  EXPECT_THROW(parseOptions({"--epochs", "x"}), UsageError);
  EXPECT_THROW(parseOptions({"--augment", "maybe"}), UsageError);
  EXPECT_THROW(parseOptions({"--stop-at-accuracy", "101"}), UsageError);
  EXPECT_THROW(parseOptions({"--stop-at-accuracy", "-1"}), UsageError);
  EXPECT_THROW(parseOptions({"--bucket-mb", "-1"}), UsageError);
  EXPECT_THROW(parseOptions({"--bucket-mb", "5000"}), UsageError);
  EXPECT_DOUBLE_EQ(parseOptions({"--bucket-mb", "25"}).bucketMb, 25.0);
  EXPECT_DOUBLE_EQ(parseOptions({"--stop-at-accuracy", "90"}).stopAtAccuracy, 90.0);
  TrainOptions o = parseOptions({"--dataset", "cifar10"});
  EXPECT_THROW(resolveDefaults(o), UsageError);
}

// The loader's threads: the worker's own choice unless given; 0 to 16 when given.
TEST(TrainOptions, LoaderThreads) {
  EXPECT_EQ(parseOptions({}).loaderThreads, -1);
  EXPECT_EQ(parseOptions({"--loader-threads", "0"}).loaderThreads, 0);
  EXPECT_EQ(parseOptions({"--loader-threads", "16"}).loaderThreads, 16);
  for (const char* bad : {"-1", "17"}) {
    try {
      parseOptions({"--loader-threads", bad});
      ADD_FAILURE() << "no error for " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--loader-threads ") + bad +
                                           ": use 0 (each worker builds its batches itself) to 16"),
                std::string::npos) << e.what();
    }
  }
}

TEST(TrainPlan, SharedHeapHoldsTheDatasetsAndTheGradients) {
  TrainOptions o = parseOptions({"--dataset", "synthetic", "--train-size", "1000", "--test-size", "100"});
  resolveDefaults(o);
  std::size_t floats = gradientFloats(o);
  EXPECT_GT(floats, 90000u);  // seed 004's convnet: about 93k parameters
  const std::uint64_t data = xs::data::sharedDatasetBytes(1000, 784, 9) + xs::data::sharedDatasetBytes(100, 784, 9);
  EXPECT_GE(data, 1100u * (784 + 4) + 2 * 9);  // pixels, labels and the name "synthetic"
  std::size_t bytes = sharedHeapBytes(floats, data);
  EXPECT_GE(bytes, data + (floats + xs::kStepStats) * sizeof(float));
  auto j = nlohmann::json::parse(makePlan(o));
  EXPECT_EQ(j["shared_heap_bytes"].get<std::size_t>(), bytes);
}

TEST(TrainPlan, ErrorsLoseTheirSourceLocation) {
  TrainOptions o = parseOptions({"--model", "alexnet", "--dataset", "synthetic", "--image-size", "40"});
  resolveDefaults(o);
  try {
    makePlan(o);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    std::string m = std::string(e.what());
    EXPECT_NE(m.find("63"), std::string::npos) << m;
    EXPECT_EQ(m.find(".cpp:"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace xs::train
