// run_test.cpp: real training jobs through `xspawn`: synthetic data and an IDX dataset written
// by the test, the console output, determinism and N workers x b against 1 worker x N*b.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "train_checkpoint.hpp"
#include "train_test_util.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/models.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/optim.hpp"

namespace xs::train::test {
namespace {
namespace fs = std::filesystem;

const std::string kSmall = "--model mlp --dataset synthetic --train-size 2048 --test-size 512 ";

int countLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (const std::string& l : lines(text)) n += l.rfind(prefix, 0) == 0;
  return n;
}

TEST(TrainRun, SyntheticEndToEnd) {
  fs::path dir = freshDir("synthetic");
  CommandResult r = runXspawn("--nprocs 2 -q train " + kSmall + "--epochs 2 --metrics " + (dir / "m.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(countLines(r.out, "epoch 1/2  step"), 1) << r.out;  // not a terminal: one line per epoch
  EXPECT_EQ(countLines(r.out, "epoch 2/2  step"), 1) << r.out;
  EXPECT_NE(r.out.find("weights identical on all 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-reduce"), std::string::npos) << r.out;
  auto evals = metricLines(dir / "m.jsonl", "eval");
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals.back()["count"].get<int>(), 512);  // the whole test set, split across ranks
  EXPECT_GT(evals.back()["test_accuracy"].get<double>(), 0.8);
  ASSERT_EQ(metricLines(dir / "m.jsonl", "summary").size(), 1u);
  fs::remove_all(dir);
}

TEST(TrainRun, ConvnetOnIdxFiles) {
  fs::path dir = freshDir("idx");
  writeIdxDataset(dir / "data", 600, 203);
  CommandResult r = runXspawn("--nprocs 3 -q train --model convnet --dataset mnist --data-dir " + (dir / "data").string() +
                              " --epochs 1 --batch-size 20 --metrics " + (dir / "m.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto evals = metricLines(dir / "m.jsonl", "eval");
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0]["count"].get<int>(), 203);  // uneven shares still cover every image once
  // Rank 0's share (images 0, 3, 6, ...: 68 of them) in whole batches of 20, as a PyTorch
  // script printing the master's accuracy with drop_last=True would count it.
  EXPECT_EQ(evals[0]["master_count"].get<int>(), 60);
  EXPECT_LE(evals[0]["master_correct"].get<int>(), 60);
  EXPECT_GT(evals[0]["test_accuracy"].get<double>(), 0.5);
  fs::remove_all(dir);
}

TEST(TrainRun, Resnet18OnCifarFiles) {
  // Seed 003's settings are resnet18's defaults: SGD, momentum 0.9, weight decay 5e-4, lr 0.1
  // decayed by 0.1 every 10 epochs, random crop and flip.
  fs::path dir = freshDir("cifar");
  writeCifarDataset(dir / "data", 20, 30);
  CommandResult r = runXspawn("--nprocs 2 -q train --model resnet18 --dataset cifar10 --data-dir " + (dir / "data").string() +
                              " --batch-size 8 --max-steps 2 --metrics " + (dir / "m.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resnet18 on cifar10 32x32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sgd lr 0.1 momentum 0.9 weight decay 0.0005, x0.1 every 10 epochs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("100 train / 30 test images"), std::string::npos) << r.out;
  auto evals = metricLines(dir / "m.jsonl", "eval");
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0]["count"].get<int>(), 30);
  fs::remove_all(dir);
}

TEST(TrainRun, Resnet18LearnsCifarFormatData) {
  // Seed 003's network, optimizer (SGD, momentum 0.9, weight decay 5e-4) and augmentation on
  // generated CIFAR-10 binary files whose classes are striped patterns with noise. Kept short:
  // 8x8 images and lr 0.02 (seed 003: 32x32, lr 0.1, 30 epochs); chance is 10%.
  fs::path dir = freshDir("cifar-learns");
  writeCifarDataset(dir / "data", 64, 200);
  CommandResult r = runXspawn("--nprocs 2 -q train --model resnet18 --dataset cifar10 --data-dir " + (dir / "data").string() +
                              " --image-size 8 --batch-size 16 --epochs 6 --lr 0.02 --eval-every 0 --metrics " +
                              (dir / "m.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto evals = metricLines(dir / "m.jsonl", "eval");
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0]["count"].get<int>(), 200);
  const double accuracy = evals[0]["test_accuracy"].get<double>();
  RecordProperty("test_accuracy", std::to_string(accuracy));
  std::printf("resnet18, 60 steps on generated CIFAR-10 files: test accuracy %.2f%%\n", 100.0 * accuracy);
  EXPECT_GT(accuracy, 0.3) << r.out;  // three times chance
  fs::remove_all(dir);
}

TEST(TrainRun, StopsAtTheTargetAccuracy) {
  fs::path dir = freshDir("stop");
  CommandResult r = runXspawn("--nprocs 2 -q train " + kSmall + "--epochs 5 --stop-at-accuracy 50 --metrics " +
                              (dir / "m.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("reached --stop-at-accuracy 50"), std::string::npos) << r.out;
  auto evals = metricLines(dir / "m.jsonl", "eval");
  ASSERT_EQ(evals.size(), 1u);  // the synthetic set is above 50% after the first epoch
  EXPECT_GE(evals[0]["test_accuracy"].get<double>(), 0.5);
  fs::remove_all(dir);
}

TEST(TrainRun, SameCommandSameWeights) {
  fs::path dir = freshDir("determinism");
  const std::string args = "--nprocs 4 -q train " + kSmall + "--optimizer adam --max-steps 12 --eval-every 0 --metrics ";
  CommandResult a = runXspawn(args + (dir / "a.jsonl").string());
  CommandResult b = runXspawn(args + (dir / "b.jsonl").string());
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_FALSE(summaryHash(dir / "a.jsonl").empty());
  EXPECT_EQ(summaryHash(dir / "a.jsonl"), summaryHash(dir / "b.jsonl"));
  fs::remove_all(dir);
}

// --module-times: rank 0's own time a training step of every module, in the console and the
// metrics; the weights are those of the same run without it.
TEST(TrainRun, ModuleTimesListEveryModuleAndChangeNoWeight) {
  fs::path dir = freshDir("module_times");
  const std::string args = "--nprocs 2 -q train " + kSmall + "--max-steps 8 --eval-every 0 --metrics ";
  CommandResult timed = runXspawn(args + (dir / "t.jsonl").string() + " --module-times");
  CommandResult plain = runXspawn(args + (dir / "p.jsonl").string());
  ASSERT_EQ(timed.status, 0) << timed.out << timed.err;
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(timed.out.find("module times (rank 0, own time a training step after the first"), std::string::npos)
      << timed.out;
  for (const char* m : {"  flatten ", "  fc1 ", "  relu1 ", "  fc2 ", "  relu2 ", "  fc3 "})
    EXPECT_EQ(countLines(timed.out, m), 1) << m << "\n" << timed.out;
  EXPECT_NE(timed.out.find("GFLOP/s"), std::string::npos) << timed.out;  // the linear layers' rate
  EXPECT_EQ(plain.out.find("module times"), std::string::npos) << plain.out;
  const auto modules = metricLines(dir / "t.jsonl", "modules");
  ASSERT_EQ(modules.size(), 1u);
  EXPECT_EQ(modules[0]["modules"].size(), 6u);
  EXPECT_GT(modules[0]["modules"][1]["forward_ms"].get<double>(), 0);  // fc1
  EXPECT_EQ(modules[0]["clock"], "wall");
  EXPECT_EQ(summaryHash(dir / "t.jsonl"), summaryHash(dir / "p.jsonl"));
  fs::remove_all(dir);
}

// --module-clock cpu: the same table in rank 0's thread CPU time (and turns the times on); a
// clock it does not know is a usage error before any worker starts.
TEST(TrainRun, ModuleTimesInThreadCpuTime) {
  fs::path dir = freshDir("module_clock");
  CommandResult cpu = runXspawn("--nprocs 3 -q train " + kSmall + "--max-steps 6 --eval-every 0 --metrics " +
                                (dir / "c.jsonl").string() + " --module-clock cpu");
  ASSERT_EQ(cpu.status, 0) << cpu.out << cpu.err;
  EXPECT_NE(cpu.out.find("module times (rank 0, own thread CPU time a training step after the first"),
            std::string::npos)
      << cpu.out;
  EXPECT_EQ(countLines(cpu.out, "  fc1 "), 1) << cpu.out;
  const auto modules = metricLines(dir / "c.jsonl", "modules");
  ASSERT_EQ(modules.size(), 1u);
  EXPECT_EQ(modules[0]["clock"], "cpu");
  EXPECT_GT(modules[0]["step_ms"].get<double>(), 0);
  CommandResult bad = runXspawn("--nprocs 2 -q train " + kSmall + "--module-clock fast");
  EXPECT_EQ(bad.status, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--module-clock fast: use wall (elapsed time) or cpu (the thread's CPU time)"),
            std::string::npos)
      << bad.err;
  fs::remove_all(dir);
}

// The datasets' one copy goes into the shared heap before the gradients: the plan sizes the heap
// for both, so the smallest --shared-heap still trains, and to the same weights.
TEST(TrainRun, TheSharedHeapHoldsTheDatasetsAndTheGradients) {
  fs::path dir = freshDir("sharedheap");
  const std::string args = "--nprocs 3 -q train " + kSmall + "--max-steps 6 --eval-every 0 --metrics ";
  CommandResult a = runXspawn(args + (dir / "a.jsonl").string());
  CommandResult b = runXspawn("--shared-heap 64K " + args + (dir / "b.jsonl").string());
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_FALSE(summaryHash(dir / "a.jsonl").empty());
  EXPECT_EQ(summaryHash(dir / "a.jsonl"), summaryHash(dir / "b.jsonl"));
  fs::remove_all(dir);
}

// The same with more labels (80 KB) than the plan's slack: they are in the shared heap too.
TEST(TrainRun, TheSharedHeapHoldsTheDatasetsLabels) {
  CommandResult r = runXspawn(
      "--nprocs 2 -q --shared-heap 64K train --model mlp --dataset synthetic --train-size 20000 --test-size 512 "
      "--max-steps 2 --eval-every 0");
  EXPECT_EQ(r.status, 0) << r.err;
}

// The flat parameters of the checkpoint in dir.
std::vector<float> weightsOf(const fs::path& dir) {
  TrainState s = readTrainState(dir.string());
  engine::Device dev;
  models::ModelConfig cfg;
  cfg.name = s.model;
  engine::Model model(dev, models::network(cfg), (cfg).seed);
  auto opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.05f, 0.9f});
  loadTrainCheckpoint(dir.string(), model, *opt);
  return std::vector<float>(model.params().values(), model.params().values() + model.params().size());
}

TEST(TrainRun, WorkersTimesBatchEqualsOneWorkerWithTheWholeBatch) {
  fs::path dir = freshDir("equivalence");
  const std::string common = kSmall + "--optimizer sgd --lr 0.05 --momentum 0.9 --max-steps 6 --eval-every 0 ";
  CommandResult four = runXspawn("--nprocs 4 -q train " + common + "--batch-size 8 --checkpoint-dir " + (dir / "n4").string());
  CommandResult one = runXspawn("--nprocs 1 -q train " + common + "--batch-size 32 --checkpoint-dir " + (dir / "n1").string());
  ASSERT_EQ(four.status, 0) << four.err;
  ASSERT_EQ(one.status, 0) << one.err;
  std::vector<float> a = weightsOf(dir / "n4"), b = weightsOf(dir / "n1");
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, moved = 0;
  std::vector<float> init = [] {
    engine::Device dev;
    models::ModelConfig cfg;
    cfg.name = "mlp";
    cfg.seed = 1234;
    engine::Model m(dev, models::network(cfg), (cfg).seed);
    return std::vector<float>(m.params().values(), m.params().values() + m.params().size());
  }();
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    moved = std::max(moved, static_cast<double>(std::fabs(a[i] - init[i])));
  }
  EXPECT_GT(moved, 1e-3);   // training changed the weights
  EXPECT_LT(worst, 1e-5);   // and both ways the same, up to float rounding
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xs::train::test
