// torch_run_test.cpp: Python and PyTorch programs under `xspawn run`, as real processes: an
// unchanged DDP program trains with torchrun's environment and its replicas agree, MASTER_PORT
// is held for the job, a Python exception is the root cause with its traceback, and a SIGKILLed
// torch worker ends the job in the usual time with nothing left.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "python_job.hpp"

namespace xs::test {
namespace {

using TorchRunTest = PythonJobTest;

TEST_F(TorchRunTest, WorkersSeeTorchrunsEnvironmentAndAHeldMasterPort) {
  RunResult r = run(3, "torch_env.py", {"--max-restarts", "2"});
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string want = "env RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
                             " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 GROUP_WORLD_SIZE=1 ROLE_NAME=default ROLE_RANK=" +
                             std::to_string(rank) + " ROLE_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=";
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\nmissing in:\n" << r.out;
  }
  EXPECT_NE(r.out.find("TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=2 TORCHELASTIC_RUN_ID=" + jobId_ +
                       " OMP_NUM_THREADS=1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("port held"), std::string::npos) << "another program could take MASTER_PORT:\n" << r.out;
  EXPECT_NE(r.out.find("store listens"), std::string::npos) << r.out;
  expectClean();
}

TEST_F(TorchRunTest, AnUnchangedDdpProgramTrainsAndItsReplicasAgree) {
  requireTorch();
  RunResult r = run(4, "ddp_train.py");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("replicas: 1 distinct of 4"), std::string::npos) << r.out;
  expectClean();
}

TEST_F(TorchRunTest, APythonExceptionIsTheRootCauseWithItsTraceback) {
  TempDir logs("py-logs");
  RunResult r = run(3, "raise.py", {"--log-dir", logs.path});
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_LT(r.seconds, 20) << "the others should have been stopped";
  EXPECT_NE(r.err.find("rank 1 (local rank 1, pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error: ValueError: no images in batch 2"), std::string::npos) << r.err;
  // The chain, in one traceback: the KeyError it came from, then where the ValueError was raised.
  for (const char* want : {"| KeyError: 'images'", "| The above exception was the direct cause",
                           "in load_batch", "| ValueError: no images in batch 2"}) {
    EXPECT_NE(r.err.find(want), std::string::npos) << want << " missing in:\n" << r.err;
  }
  const nlohmann::json report = nlohmann::json::parse(readFile(logs.path + "/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object()) << readFile(logs.path + "/report.json");
  bool found = false;
  for (const nlohmann::json& rank : report["ranks"]) {
    if (rank["rank"] != 1) continue;
    found = true;
    ASSERT_FALSE(rank["traceback"].empty());
    EXPECT_EQ(rank["traceback"].back(), "ValueError: no images in batch 2");
    EXPECT_EQ(rank["error"], "ValueError: no images in batch 2");
  }
  EXPECT_TRUE(found) << report.dump();
  expectClean();
}

TEST_F(TorchRunTest, ASigkilledTorchWorkerEndsTheJobAndLeavesNothing) {
  requireTorch();
  RunResult r = run(3, "sigkill.py", {"--timeout", "20"});
  EXPECT_EQ(r.exitCode, 137) << r.out << r.err;
  EXPECT_LT(r.seconds, 30) << r.err;
  EXPECT_NE(r.err.find("rank 1 (local rank 1, pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
  expectClean();
}

}  // namespace
}  // namespace xs::test
