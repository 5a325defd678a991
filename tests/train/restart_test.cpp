// restart_test.cpp: `xspawn --max-restarts 1 train --checkpoint-dir D`: a rank killed at a
// random step, the restarted gang resumes from the last checkpoint by itself and ends with the
// uninterrupted run's weights, bit for bit.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "train_test_util.hpp"

namespace xs::train::test {
namespace {
namespace fs = std::filesystem;

// 2 ranks x 16 steps per epoch x 2 epochs.
const std::string kTrain = "train --model mlp --dataset synthetic --train-size 1024 --test-size 256 --optimizer sgd "
                           "--lr 0.05 --momentum 0.9 --batch-size 32 --epochs 2 --eval-every 0 ";

std::string restartedRun(const fs::path& dir, const std::string& tag, int killStep, int every) {
  const fs::path ck = dir / ("ck-" + tag), metrics = dir / (tag + ".jsonl");
  CommandResult r = runXspawn(fmt::format("--nprocs 2 -q --max-restarts 1 --inject-fault rank=1,step={},kind=crash {}"
                                          "--checkpoint-dir {} --checkpoint-every {} --metrics {}",
                                          killStep, kTrain, ck.string(), every, metrics.string()));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(fmt::format("injecting fault kind=crash on rank 1 at step {}", killStep)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("restarting the gang: restart 1 of at most 1"), std::string::npos) << r.err;
  return summaryHash(metrics) + "\n" + r.out;
}

TEST(TrainRestart, KilledRankRestartsFromTheLastCheckpointToTheSameBits) {
  const fs::path dir = freshDir("restart");
  CommandResult full = runXspawn("--nprocs 2 -q " + kTrain + "--metrics " + (dir / "full.jsonl").string());
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string want = summaryHash(dir / "full.jsonl");
  ASSERT_FALSE(want.empty());
  std::random_device rd;
  const int randomStep = 2 + static_cast<int>(rd() % 29);  // any step of the 32 but the first
  for (int killStep : {randomStep, 7, 17, 30}) {
    SCOPED_TRACE(fmt::format("rank 1 killed at step {}", killStep));
    const std::string run = restartedRun(dir, std::to_string(killStep), killStep, 4);
    EXPECT_EQ(run.substr(0, run.find('\n')), want);
    // Checkpoints every 4 steps: the new gang resumes at most 4 steps back (the step the
    // fault fires at was not done).
    const int from = (killStep - 1) / 4 * 4;
    if (from > 0) {
      EXPECT_NE(run.find(fmt::format("restart 1: resumed from {} at step {}", (dir / ("ck-" + std::to_string(killStep))).string(), from)),
                std::string::npos) << run;
    }
  }
  fs::remove_all(dir);
}

TEST(TrainRestart, FailureBeforeTheFirstCheckpointStartsOver) {
  const fs::path dir = freshDir("restart-early");
  CommandResult full = runXspawn("--nprocs 2 -q " + kTrain + "--metrics " + (dir / "full.jsonl").string());
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string run = restartedRun(dir, "early", 3, 8);
  EXPECT_EQ(run.substr(0, run.find('\n')), summaryHash(dir / "full.jsonl"));
  EXPECT_NE(run.find("restart 1: no checkpoint in"), std::string::npos) << run;
  EXPECT_NE(run.find("yet: training from the start"), std::string::npos) << run;
  fs::remove_all(dir);
}

TEST(TrainRestart, AWorkersFatalErrorIsItsRecordedError) {
  const fs::path dir = freshDir("recorded-error");
  std::ofstream(dir / "file") << "not a directory";
  const fs::path logs = dir / "logs", ck = dir / "file" / "ck";
  CommandResult r = runXspawn("--nprocs 2 -q --log-dir " + logs.string() + " " + kTrain + "--max-steps 4 --checkpoint-dir " +
                              ck.string() + " --checkpoint-every 2");
  EXPECT_EQ(r.status, 2) << r.err;
  std::ifstream in(logs / "report.json");
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["root_cause"]["rank"], 0) << report.dump(2);
  const std::string error = report["root_cause"]["error"].is_string() ? std::string(report["root_cause"]["error"]) : "";
  EXPECT_NE(error.find("xs::UsageError: --checkpoint-dir " + ck.string() + ": cannot create it"), std::string::npos) << error;
  EXPECT_EQ(r.err.find("(none recorded)"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TrainRestart, AFailedCheckpointWriteIsTheRootCausesError) {
  const fs::path dir = freshDir("failed-write");
  const fs::path logs = dir / "logs", ck = dir / "ck", blocker = ck / "step-00000002.xsckpt";
  fs::create_directories(blocker);  // the step-2 weights cannot be renamed into place
  CommandResult r = runXspawn("--nprocs 2 -q --log-dir " + logs.string() + " " + kTrain + "--max-steps 4 --checkpoint-dir " +
                              ck.string() + " --checkpoint-every 2");
  EXPECT_EQ(r.status, 1) << r.err;
  const std::string error = "xs::CheckpointError: cannot rename '" + (ck / "step-00000002.xsckpt.tmp").string() + "' to '" +
                            blocker.string() + "': Is a directory; check that nothing else has that name";
  EXPECT_NE(r.err.find("root cause (first failure):\n  rank 0 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  error: " + error), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(none recorded)"), std::string::npos) << r.err;
  std::ifstream in(logs / "report.json");
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["root_cause"]["rank"], 0) << report.dump(2);
  const std::string recorded = report["root_cause"]["error"].is_string() ? std::string(report["root_cause"]["error"]) : "";
  EXPECT_EQ(recorded.rfind(error, 0), 0u) << recorded;
  // The failed save left nothing behind, and removed nothing it had not written.
  for (const auto& e : fs::directory_iterator(ck)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  EXPECT_TRUE(fs::is_directory(blocker));
  fs::remove_all(dir);
}

TEST(TrainRestart, CheckpointEveryNeedsACheckpointDir) {
  CommandResult r = runXspawn("--nprocs 2 -q " + kTrain + "--checkpoint-every 5");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--checkpoint-every needs --checkpoint-dir DIR"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace xs::train::test
