// bucket_test.cpp: gradients all-reduced in buckets during backward (--bucket-mb): the same
// weights as one all-reduce after backward, a network whose layers finish out of order
// (resnet18's shortcuts), and a rank killed while the buckets are in flight.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "process_runner.hpp"
#include "train_test_util.hpp"

namespace xs::train::test {
namespace {
namespace fs = std::filesystem;

// Runs `args` without buckets and with --bucket-mb `mb`: both give the same weights, to the bit.
// Each element is reduced over the ranks in the same order whatever bucket holds it.
void expectSameWeightsWithBuckets(const std::string& name, const std::string& args, const std::string& mb) {
  fs::path dir = freshDir(name);
  CommandResult whole = runXspawn(args + " --metrics " + (dir / "whole.jsonl").string());
  CommandResult bucketed = runXspawn(args + " --bucket-mb " + mb + " --metrics " + (dir / "buckets.jsonl").string());
  ASSERT_EQ(whole.status, 0) << whole.err;
  ASSERT_EQ(bucketed.status, 0) << bucketed.err;
  EXPECT_NE(bucketed.out.find("buckets during backward"), std::string::npos) << bucketed.out;
  EXPECT_EQ(whole.out.find("buckets during backward"), std::string::npos) << whole.out;
  EXPECT_FALSE(summaryHash(dir / "whole.jsonl").empty());
  EXPECT_EQ(summaryHash(dir / "whole.jsonl"), summaryHash(dir / "buckets.jsonl"));
  fs::remove_all(dir);
}

TEST(TrainBuckets, SameWeightsAsOneAllReduceAfterBackward) {
  // mlp: 3 layers; 0.004 MB buckets cut its gradients into several all-reduces.
  expectSameWeightsWithBuckets("buckets",
                               "--nprocs 3 train --model mlp --dataset synthetic --train-size 1536 --test-size 256 "
                               "--optimizer adam --max-steps 10 --eval-every 0",
                               "0.004");
}

TEST(TrainBuckets, ResidualNetworkWithBatchNorm) {
  // resnet18's shortcut convolutions finish out of the layers' order, and its running
  // statistics are averaged after the buckets.
  expectSameWeightsWithBuckets("buckets-resnet",
                               "--nprocs 2 train --model resnet18 --dataset synthetic --train-size 64 --test-size 32 "
                               "--image-size 32 --batch-size 4 --max-steps 3 --eval-every 0",
                               "2");
}

TEST(TrainBuckets, KilledRankStopsTheJobWhileBucketsAreInFlight) {
  fs::path dir = freshDir("buckets-kill");
  const std::string job = xs::test::uniqueJobId("bkt");
  CommandResult r;
  std::thread run([&] {
    r = runXspawn("--nprocs 3 --job-id " + job + " --log-dir " + (dir / "logs").string() +
                  " -q train --model convnet --dataset synthetic --batch-size 8 --epochs 50 --bucket-mb 0.02"
                  " --log-every 5 --metrics " + (dir / "m.jsonl").string());
  });
  // Kill a worker once training is under way (a progress line is in the metrics file).
  std::vector<int> pids;
  for (int i = 0; i < 600; ++i) {
    pids = xs::test::processesOfJob(job);
    if (pids.size() >= 3 && !metricLines(dir / "m.jsonl", "progress").empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(pids.size(), 3u);
  const auto killedAt = std::chrono::steady_clock::now();
  ::kill(pids.back(), SIGKILL);
  run.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killedAt).count();
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.out << r.err;
  EXPECT_LT(seconds, 20.0) << "the other ranks did not stop";
  std::ifstream in(dir / "logs" / "report.json");
  nlohmann::json report = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["root_cause"]["signal"], "SIGKILL") << report.dump();
  for (int i = 0; i < 100 && !xs::test::processesOfJob(job).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(xs::test::processesOfJob(job).empty()) << "a worker of the job is still running";
  EXPECT_FALSE(xs::test::segmentExists(job)) << "the job left its segment in /dev/shm";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xs::train::test
