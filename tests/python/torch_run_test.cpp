// torch_run_test.cpp: Python and PyTorch programs under `xspawn run`, as real processes: an
// unchanged DDP program trains with torchrun's environment and its replicas agree, MASTER_PORT
// is held for the job, a Python exception is the root cause with its traceback, and a SIGKILLed
// torch worker ends the job in the usual time with nothing left.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "mpi_launch.hpp"
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

// Two launchers under mpirun, each a "machine" of 2 ranks: torchrun's variables are global and
// MASTER_ADDR/MASTER_PORT are machine 0's, with nothing passed on mpirun's command line; an
// unchanged DDP program trains across them, and so does xspawn's hook (across machines, over MPI).
TEST_F(TorchRunTest, UnderMpirunEveryRankGetsMachineZerosMasterAndDdpTrains) {
  requireTorch();
  std::string why;
  if (!haveMpi(XSPAWN_MPI_MODULE_FILE, &why)) GTEST_SKIP() << why;
  auto launch = [&](const std::string& script, const std::string& arg) {
    jobId_ = uniqueJobId("pympi");
    std::vector<std::string> argv = mpirunArgs(2);
    argv.insert(argv.end(), {XSPAWN_BIN, "--job-id", jobId_, "--nprocs", "2", "-q", "run", "--", PYTHON_BIN,
                             std::string(SCRIPTS_DIR) + "/" + script});
    if (!arg.empty()) argv.push_back(arg);
    RunOptions o;
    o.timeoutSeconds = 180;
    o.env = {"MASTER_ADDR=", "MASTER_PORT="};  // none from the caller: the launchers find machine 0's
    return runProcess(argv, o);
  };
  RunResult env = launch("torch_env.py", "");
  ASSERT_EQ(env.exitCode, 0) << env.out << env.err;
  std::string port;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string want = fmt::format("env RANK={} LOCAL_RANK={} WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK={} "
                                         "GROUP_WORLD_SIZE=2", rank, rank % 2, rank / 2);
    const std::size_t at = env.out.find(want);
    ASSERT_NE(at, std::string::npos) << want << "\nmissing in:\n" << env.out;
    const std::size_t p = env.out.find("MASTER_PORT=", at);
    ASSERT_NE(p, std::string::npos) << env.out;
    const std::string mine = env.out.substr(p, env.out.find(' ', p) - p);
    EXPECT_NE(mine, "MASTER_PORT=-") << env.out;
    if (port.empty()) port = mine;
    EXPECT_EQ(mine, port) << "every rank must see machine 0's port:\n" << env.out;
  }
  EXPECT_EQ(env.out.find("MASTER_ADDR=-"), std::string::npos) << env.out;
  EXPECT_NE(env.out.find("port held"), std::string::npos) << env.out;
  EXPECT_NE(env.out.find("store listens"), std::string::npos) << env.out;

  RunResult ddp = launch("ddp_train.py", "--hook");
  ASSERT_EQ(ddp.exitCode, 0) << ddp.out << ddp.err;
  EXPECT_NE(ddp.out.find("replicas: 1 distinct of 4"), std::string::npos) << ddp.out;
  EXPECT_NE(ddp.out.find("xspawn ddp: replicas 1 distinct of 4"), std::string::npos) << ddp.out;
  EXPECT_NE(ddp.out.find("xspawn step: replicas 1 distinct of 4"), std::string::npos) << ddp.out;
  for (int m = 0; m < 2; ++m) EXPECT_FALSE(segmentExists(fmt::format("{}.m{}", jobId_, m)));
}

}  // namespace
}  // namespace xs::test
