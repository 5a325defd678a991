// module_test.cpp: the `xspawn` Python module, in real jobs: its collectives against NumPy
// references for every type, op and algorithm; a program alone (a world of one); the DDP hook
// and optimizer_step against Gloo; divergence, deadlines and a dead peer, each named with the
// Python traceback, and nothing left behind.
#include <string>

#include <nlohmann/json.hpp>

#include "python_job.hpp"

namespace xs::test {
namespace {

class ModuleTest : public PythonJobTest {
 protected:
  void SetUp() override {
    if (!pythonHas("numpy")) GTEST_SKIP() << PYTHON_BIN << " has no numpy: apt-get install python3-numpy";
  }
  // python <script> alone, not under xspawn (a world of one), importing the build tree's package.
  static RunResult runAlone(const std::string& script) {
    RunOptions o;
    o.timeoutSeconds = 120;
    o.env = {std::string("PYTHONPATH=") + PYTHON_PACKAGE_DIR};
    return runProcess({PYTHON_BIN, std::string(SCRIPTS_DIR) + "/" + script}, o);
  }
};

TEST_F(ModuleTest, CollectivesMatchNumpyForEveryTypeOpAndAlgorithm) {
  requireTorch();  // the script also reduces torch tensors through xspawn.torch
  RunResult r = run(3, "collectives.py");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("collectives ok: 112 all_reduce cases on 3 ranks"), std::string::npos) << r.out;
  expectClean();
}

TEST_F(ModuleTest, AProgramAloneIsAWorldOfOneAndImportsFromTheBuildTree) {
  requireTorch();
  RunResult r = runAlone("collectives.py");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("on 1 ranks"), std::string::npos) << r.out;
}

TEST_F(ModuleTest, ASharedCommonArrayIsOneArrayPerMachineReadOnlyButForItsOwner) {
  RunResult r = run(3, "shared_common.py");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("shared_common ok on 3 ranks"), std::string::npos) << r.out;
  expectClean();
  // A program alone: an ordinary array.
  RunResult alone = runAlone("shared_common.py");
  ASSERT_EQ(alone.exitCode, 0) << alone.out << alone.err;
  EXPECT_NE(alone.out.find("shared_common ok on 1 ranks"), std::string::npos) << alone.out;
}

TEST_F(ModuleTest, TheDdpHookAndOptimizerStepTrainAsGlooDoes) {
  requireTorch();
  RunResult r = run(4, "ddp_train.py", {}, {"--hook"});
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("xspawn ddp: replicas 1 distinct of 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("xspawn step: replicas 1 distinct of 4"), std::string::npos) << r.out;
  expectClean();
}

TEST_F(ModuleTest, ACollectiveOfAnotherSizeIsNamedAsDivergence) {
  TempDir logs("py-diverge");
  RunResult r = run(3, "module_faults.py", {"--log-dir", logs.path}, {"count"}, 60);
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_LT(r.seconds, 40) << "divergence is seen at once, not at the deadline";
  const std::string named = "ranks diverged: rank 1 at all_reduce 'sum float[11]";
  EXPECT_NE(r.err.find("xspawn.DivergenceError: " + named), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("job aborted (divergence)"), std::string::npos) << r.err;
  // Every rank's traceback points at its own line of the program.
  EXPECT_NE(r.err.find("xspawn.all_reduce(np.ones(11 if rank == 1 else 10, np.float32))"), std::string::npos) << r.err;
  const auto report = nlohmann::json::parse(readFile(logs.path + "/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object());
  for (const nlohmann::json& rank : report["ranks"]) {
    ASSERT_FALSE(rank["traceback"].empty()) << rank.dump();
    EXPECT_NE(rank["traceback"].back().get<std::string>().find(named), std::string::npos) << rank.dump();
  }
  expectClean();
}

TEST_F(ModuleTest, RanksAtDifferentRendezvousTagsAreNamed) {
  RunResult r = run(3, "module_faults.py", {}, {"tag"}, 60);
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("xspawn.DivergenceError: ranks diverged: rank 2 at 'checkpoint'#4; ranks 0-1 at 'epoch_end'#4"),
            std::string::npos)
      << r.err;
  expectClean();
}

TEST_F(ModuleTest, ACallsOwnTimeoutRaisesTimeoutErrorAndNamesTheLateRank) {
  RunResult r = run(3, "module_faults.py", {"--timeout", "60"}, {"timeout"}, 90);
  EXPECT_EQ(r.exitCode, 124) << r.err;
  EXPECT_LT(r.seconds, 40) << "rank 0's timeout=1.0, not the job's 60 s, sets the deadline";
  EXPECT_NE(r.out.find("rank 0 caught xspawn.TimeoutError"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("root cause (did not arrive: rank 1)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("timed out after 60000 ms"), std::string::npos) << "the message names the wait, not --timeout";
  expectClean();
}

TEST_F(ModuleTest, ADeadPeerRaisesAbortedErrorInTheOthers) {
  RunResult r = run(3, "module_faults.py", {"--timeout", "60"}, {"kill"}, 90);
  EXPECT_EQ(r.exitCode, 137) << r.err;
  EXPECT_LT(r.seconds, 40) << r.err;
  EXPECT_NE(r.out.find("caught AbortedError: aborted: rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("root cause (first failure):\n  rank 1 (local rank 1"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("got past the fault"), std::string::npos) << r.out;
  expectClean();
}

}  // namespace
}  // namespace xs::test
