// machines_test.cpp: jobs spanning machines, with two or three launchers started by
// `mpirun --oversubscribe` on this machine (each launcher is a "machine" with its own
// segment and workers). Global ranks, every collective against the serial reference, a
// failure on one machine ending all of them with the root cause, divergence and mismatched
// machines reported, and nothing left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpi_launch.hpp"
#include "process_runner.hpp"

namespace xs::test {
namespace {

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class MachinesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!haveMpi(XSPAWN_MPI_MODULE_FILE, &why)) GTEST_SKIP() << why;
  }
  // mpirun -np M xspawn --job-id J --nprocs N <extra> run -- machines_worker <args>
  RunResult runWorkers(int machines, int nprocs, const std::vector<std::string>& workerArgs,
                       const std::vector<std::string>& extra = {}, double timeout = 120) {
    jobId_ = uniqueJobId("mach");
    auto argv = concat(mpirunArgs(machines), {XSPAWN_BIN, "--job-id", jobId_, "--nprocs", std::to_string(nprocs)});
    argv = concat(argv, extra);
    argv = concat(argv, {"run", "--", MACHINES_WORKER_BIN});
    argv = concat(argv, workerArgs);
    RunOptions o;
    o.timeoutSeconds = timeout;
    return runProcess(argv, o);
  }
  void expectClean(int machines) {
    for (int m = 0; m < machines; ++m) {
      const std::string id = fmt::format("{}.m{}", jobId_, m);
      for (int i = 0; i < 100 && !processesOfJob(id).empty(); ++i) usleep(20000);
      EXPECT_TRUE(processesOfJob(id).empty()) << "a worker of machine " << m << " is still running";
      EXPECT_FALSE(segmentExists(id)) << "machine " << m << " left its segment in /dev/shm";
      EXPECT_FALSE(std::filesystem::exists(transportDirOf(id))) << "machine " << m << " left its MPI files";
    }
  }
  // Two machines of `nprocs` all-reducing in a loop; mpirun gets `signal` once they do.
  RunResult runSignalled(const std::string& idPrefix, int nprocs, int signal, std::vector<std::string> env = {}) {
    jobId_ = uniqueJobId(idPrefix);
    auto argv = concat(mpirunArgs(2), {XSPAWN_BIN, "--job-id", jobId_, "--nprocs", std::to_string(nprocs), "run",
                                       "--", MACHINES_WORKER_BIN, "loop"});
    RunOptions o;
    o.timeoutSeconds = 60;
    o.signalWhen = "all-reducing";
    o.signal = signal;
    o.env = std::move(env);
    return runProcess(argv, o);
  }
  static std::string transportDirOf(const std::string& jobId) {
    return fmt::format("/dev/shm/xspawn-{}-{}@transport", getuid(), jobId);
  }
  std::string jobId_;
};

TEST_F(MachinesTest, RanksAreGlobalAndLocalOrdinalsStayLocal) {
  RunResult r = runWorkers(2, 2, {"identity"}, {"--quiet"});
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  // rank/local/world/local world/device, gathered across machines in global rank order.
  for (const char* want : {"place 0/0/4/2/xcore:0", "place 1/1/4/2/xcore:1", "place 2/0/4/2/xcore:2",
                           "place 3/1/4/2/xcore:3"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " missing in:\n" << r.out;
  }
  expectClean(2);
}

TEST_F(MachinesTest, EveryCollectiveMatchesTheReferenceOnTwoMachines) {
  // Small staging buffers: 5003 elements take many chunks, each one a round across machines.
  RunResult r = runWorkers(2, 2, {"everything"}, {"--quiet", "--stage-size", "4K", "--shared-heap", "1M"}, 240);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, EveryCollectiveMatchesTheReferenceWithOneRankPerMachine) {
  // A machine of one rank reduces nothing on itself: the staged chunks and the shared heap
  // cross machines as they are.
  RunResult r = runWorkers(2, 1, {"everything"}, {"--quiet", "--stage-size", "4K", "--shared-heap", "1M"}, 240);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, EveryCollectiveMatchesTheReferenceOnThreeMachines) {
  // Default staging: 5003 elements go in one chunk, above the single-allgather size.
  RunResult r = runWorkers(3, 2, {"everything"}, {"--quiet", "--shared-heap", "1M"}, 240);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectClean(3);
}

// data::shareDataset across machines: each machine's local rank 1 loads, the machine's ranks
// read its one copy in their segment.
TEST_F(MachinesTest, EachMachineKeepsOneCopyOfASharedDataset) {
  RunResult r = runWorkers(2, 2, {"share"}, {"--quiet"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("one copy per machine"), std::string::npos) << r.out << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, AFailureOnOneMachineEndsEveryMachineWithTheRootCause) {
  // Global rank 3 is local rank 1 of machine 1; it throws in its sixth all-reduce.
  RunResult r = runWorkers(2, 2, {"loop"}, {"--inject-fault", "rank=3,collective=6,kind=throw"}, 60);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_LT(r.seconds, 30) << "the machines took too long to stop";
  // Machine 1 reports its own rank; machine 0 reports machine 1's failure as its root cause.
  EXPECT_NE(r.err.find("injected fault: kind=throw on rank 3 at collective 6"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[machine 0 of 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("machine 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 3 (local rank 1"), std::string::npos) << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, AStalledRankIsNamedByItsGlobalRankOnItsMachine) {
  // Global rank 3 (local rank 1 of machine 1) hangs at the first rendezvous.
  RunResult r = runWorkers(2, 2, {"identity"}, {"--timeout", "2", "--inject-fault", "rank=3,at=identity,kind=hang"}, 60);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("[machine 1 of 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 3 stalled: rank 2 timed out waiting for it"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("root cause (did not arrive: rank 3)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 3 (local rank 1, pid"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30);
  expectClean(2);
}

TEST_F(MachinesTest, AFailureAfterAMachineFinishedSaysItCouldNotReachIt) {
  // Machine 0's ranks finish at once; rank 3 (machine 1) fails 1.5 s later.
  RunResult r = runWorkers(2, 2, {"finish-early", "3"}, {}, 60);
  EXPECT_EQ(r.exitCode, 128 + 6) << r.err;  // mpirun's status: the failed machine's
  EXPECT_NE(r.err.find("machine 0: all 2 ranks exited 0; waiting for the other machines to finish"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("late boom from rank 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("machine 0 had already finished cleanly (every rank exited 0) and did not hear of this failure"),
            std::string::npos) << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, CtrlCToMpirunStopsEveryMachineAndLeavesNothing) {
  RunResult r = runSignalled("int", 2, SIGINT);
  EXPECT_NE(r.exitCode, 0);
  // mpirun turns the interrupt into SIGTERM for each launcher, which stops its workers.
  EXPECT_NE(r.err.find("interrupted by SIGTERM"), std::string::npos) << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, AKilledMpirunLeavesOnlyWhatTheNextSweepRemoves) {
  // mpirun killed by SIGKILL removes nothing, and Open MPI ends each launcher at once (no
  // clean-up of ours runs): the segments stay, and Open MPI's shared-memory files with them, in
  // each launcher's transport directory. The next sweep (every xspawn run, or xspawn clean)
  // removes both.
  // mpirun's session directory, which it cannot remove either, in one of the test's own.
  char tmp[] = "/tmp/xspawn-killed-mpirun-XXXXXX";
  ASSERT_NE(mkdtemp(tmp), nullptr);
  RunResult r = runSignalled("kill", 1, SIGKILL, {std::string("OMPI_MCA_orte_tmpdir_base=") + tmp});
  std::filesystem::remove_all(tmp);
  EXPECT_EQ(r.exitCode, 128 + SIGKILL);
  std::vector<std::string> dirs;
  for (int m = 0; m < 2; ++m) dirs.push_back(transportDirOf(fmt::format("{}.m{}", jobId_, m)));
  // The launchers end when Open MPI notices mpirun is gone.
  RunResult dry;
  for (int i = 0; i < 150; ++i, usleep(100000)) {
    dry = runProcess({XSPAWN_BIN, "clean", "--dry-run"});
    if (dry.out.find(dirs[0] + ":") != std::string::npos && dry.out.find(dirs[1] + ":") != std::string::npos) break;
  }
  for (const std::string& d : dirs) {
    EXPECT_NE(dry.out.find("and its MPI files in " + d + ": its launcher"), std::string::npos) << dry.out;
    std::size_t files = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(d, ec)) files += e.path().filename() != "launcher";
    EXPECT_GE(files, 1u) << d << ": Open MPI's shared-memory file is not there";
  }
  RunResult clean = runProcess({XSPAWN_BIN, "clean"});
  EXPECT_EQ(clean.exitCode, 0) << clean.err;
  for (const std::string& d : dirs) EXPECT_FALSE(std::filesystem::exists(d)) << clean.out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    EXPECT_NE(e.path().filename().string().rfind("vader_segment", 0), 0u) << e.path() << " was left in /dev/shm";
  }
  expectClean(2);
  for (int m = 0; m < 2; ++m) {  // if the launchers outlived mpirun (another Open MPI), their workers go now
    for (int pid : processesOfJob(fmt::format("{}.m{}", jobId_, m))) ::kill(pid, SIGKILL);
  }
}

TEST_F(MachinesTest, MachinesAtDifferentRendezvousFailNamingWhereEachIs) {
  RunResult r = runWorkers(2, 2, {"diverge", "1"}, {}, 60);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("the machines reached different ops"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("machine 1 at 'save'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("machine 0 at 'epoch_end'"), std::string::npos) << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, MachinesAtDifferentKindsOfOpFailNamingBoth) {
  // Machine 0 enters a rendezvous while machine 1 all-reduces 4 KiB, and the other way round.
  for (const char* target : {"0", "1"}) {
    RunResult r = runWorkers(2, 2, {"diverge-kind", target}, {}, 60);
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.err.find("the machines reached different ops"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("at 'step'#1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("at 'sum float[1024]"), std::string::npos) << r.err;
    expectClean(2);
  }
}

TEST_F(MachinesTest, ARendezvousTooLargeForTheMachineBufferSaysWhatToDo) {
  RunResult r = runWorkers(2, 2, {"big-payload"}, {"--machine-buffer", "4M"}, 60);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("rendezvous 'big': this machine's payloads take"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("send bulk data with broadcast or all_gather"), std::string::npos) << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, MachinesStartedWithDifferentNprocsAreRefused) {
  jobId_ = uniqueJobId("shape");
  // mpirun's MPMD form: one launcher with 2 workers, one with 3.
  std::vector<std::string> argv = mpirunArgs(1);
  argv = concat(argv, {XSPAWN_BIN, "--job-id", jobId_, "--nprocs", "2", "run", "--", MACHINES_WORKER_BIN, ":",
                       "--oversubscribe", "--bind-to", "none", "-np", "1", XSPAWN_BIN, "--job-id", jobId_,
                       "--nprocs", "3", "run", "--", MACHINES_WORKER_BIN});
  RunOptions o;
  o.timeoutSeconds = 60;
  RunResult r = runProcess(argv, o);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("the machines run different jobs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--nprocs 3"), std::string::npos) << r.err;
  expectClean(2);
}

TEST_F(MachinesTest, AMachineThatNeverJoinsIsNamedAtTheDeadline) {
  jobId_ = uniqueJobId("join");
  // Process 1 of the mpirun job is not xspawn at all: it never joins MPI.
  std::vector<std::string> argv = mpirunArgs(1);
  argv = concat(argv, {XSPAWN_BIN, "--job-id", jobId_, "--nprocs", "2", "--timeout", "2", "run", "--",
                       MACHINES_WORKER_BIN, ":", "--oversubscribe", "--bind-to", "none", "-np", "1", "sleep", "60"});
  RunOptions o;
  o.timeoutSeconds = 60;
  RunResult r = runProcess(argv, o);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("machine 1 did not join the job within 2000 ms"), std::string::npos) << r.err;
  expectClean(1);
}

TEST_F(MachinesTest, BenchComparesTheHierarchicalAllReduceWithFlatMpi) {
  jobId_ = uniqueJobId("bench");
  auto argv = concat(mpirunArgs(2), {XSPAWN_BIN, "--job-id", jobId_, "--nprocs", "1", "bench", "allreduce",
                                     "--min-bytes", "4K", "--max-bytes", "64K", "--iters", "3", "--check",
                                     "--peers", "mpi"});
  RunOptions o;
  o.timeoutSeconds = 120;
  RunResult r = runProcess(argv, o);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 machines x 1, hierarchical; mpi = flat MPI over all 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Out of bounds values : 0 OK"), std::string::npos) << r.out;
  // Every row has the flat MPI figure beside it, at the faster of Open MPI's two shared-memory
  // paths (the note says so, and no note says the peer failed).
  EXPECT_NE(r.out.find("# mpi: the faster of Open MPI's single copy (CMA) and copy through its FIFOs"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("failed"), std::string::npos) << r.out;
  expectClean(2);
}

// The summary line of a metrics file.
nlohmann::json summaryOf(const std::string& path) {
  std::istringstream in(readFile(path));
  nlohmann::json summary;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == "summary") summary = j;
  }
  return summary;
}

TEST_F(MachinesTest, OneTraceHoldsEveryMachineOnMachineZerosClock) {
  // Machine 1's launcher reads its clock 7 s behind machine 0's: its spans must still line up
  // with machine 0's in the one trace machine 0 writes.
  TempDir dir("machines-trace");
  const std::string trace = dir.path + "/trace.json";
  jobId_ = uniqueJobId("mach");
  const std::vector<std::string> launcher{XSPAWN_BIN, "--job-id", jobId_, "--nprocs", "2", "--trace",
                                          trace, "run", "--", MACHINES_WORKER_BIN, "identity"};
  std::vector<std::string> argv = mpirunArgs(1);
  argv = concat(concat(argv, launcher), {":", "-np", "1", "/usr/bin/env", "XSPAWN_CLOCK_SKEW_US=-7000000"});
  argv = concat(argv, launcher);
  RunOptions o;
  o.timeoutSeconds = 120;
  RunResult r = runProcess(argv, o);
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("of 2 machines, their clocks aligned to machine 0's within"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(dir.path + "/trace.machine1.json").good()) << "machine 1 wrote a file of its own";
  std::ifstream in(trace);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(doc.is_object() && doc.contains("traceEvents")) << "no valid trace at " << trace;
  const nlohmann::json& machines = doc["xspawn"]["machines"];
  ASSERT_EQ(machines.size(), 2u) << doc["xspawn"].dump();
  const double offset = machines[1]["clock_offset_us"], error = machines[1]["clock_error_us"];
  EXPECT_LT(error, 50000) << "the best ping took " << machines[1]["round_trip_us"] << " us";
  EXPECT_NEAR(offset, -7e6, error + 1) << "the measured offset is not the skew";
  EXPECT_EQ(doc["xspawn"]["world_size"], 4);
  // Every rank leaves the job's last barrier once all have arrived: on one axis their ends
  // agree to within the scheduler's wake-ups, not 7 s apart.
  std::map<int, std::string> names;
  std::map<int, double> lastEnd;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") names[e["pid"]] = e["args"]["name"];
    if (e.value("ph", "") == "X" && e.value("cat", "") == "rendezvous" && e.value("name", "") == "done") {
      lastEnd[e["pid"]] = std::max(lastEnd[e["pid"]], e["ts"].get<double>() + e["dur"].get<double>());
    }
  }
  ASSERT_EQ(lastEnd.size(), 4u) << "the 4 ranks' 'done' barrier spans";
  double lo = 1e300, hi = -1e300;
  for (const auto& [pid, end] : lastEnd) {
    EXPECT_EQ(names[pid].rfind("rank ", 0), 0u) << names[pid];
    lo = std::min(lo, end), hi = std::max(hi, end);
  }
  EXPECT_LT(hi - lo, 200e3) << "the ranks left the last barrier " << (hi - lo) / 1e3 << " ms apart on the trace's axis";
  RunResult rep = runProcess({XSPAWN_BIN, "report", trace, "--json"}, o);
  ASSERT_EQ(rep.exitCode, 0) << rep.err;
  EXPECT_EQ(nlohmann::json::parse(rep.out)["ranks"].size(), 4u) << rep.out;
  expectClean(2);
}

TEST_F(MachinesTest, AFailedJobLeavesEachMachinesTraceOnMachineZerosClock) {
  // Machine 0's ranks finish at once; rank 3 (machine 1) fails later: no machine can count on
  // the others, so each keeps its own file.
  TempDir dir("machines-trace-failed");
  RunResult r = runWorkers(2, 2, {"finish-early", "3"}, {"--trace", dir.path + "/trace.json"});
  EXPECT_NE(r.exitCode, 0);
  for (const char* name : {"/trace.json", "/trace.machine1.json"}) {
    std::ifstream in(dir.path + name);
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    ASSERT_TRUE(doc.is_object() && doc.contains("traceEvents")) << name << " missing or invalid:\n" << r.err;
    EXPECT_EQ(doc["xspawn"]["world_size"], 2) << name;
    EXPECT_EQ(doc["xspawn"]["machines"].size(), 2u) << name;
  }
  expectClean(2);
}

class MachinesTrainingTest : public MachinesTest {
 protected:
  void SetUp() override {
    MachinesTest::SetUp();
    if (IsSkipped()) return;
    if (std::string(XSPAWN_TRAIN_BIN).empty()) GTEST_SKIP() << "the trainer (models and data) is not built";
  }
  // `xspawn --nprocs N train ...` on `machines` launchers (0: without mpirun); the summary.
  nlohmann::json train(int machines, int nprocs, const std::string& bucketMb = "0") {
    const std::string metrics = dir_.path + fmt::format("/m{}x{}-b{}.jsonl", machines, nprocs, bucketMb);
    std::vector<std::string> argv = machines ? mpirunArgs(machines) : std::vector<std::string>{};
    argv = concat(argv, {XSPAWN_BIN, "--quiet", "--nprocs", std::to_string(nprocs), "train", "--model", "mlp",
                         "--dataset", "synthetic", "--train-size", "1024", "--test-size", "256", "--epochs", "2",
                         "--batch-size", "16", "--precision", "fp32", "--seed", "11", "--bucket-mb", bucketMb,
                         "--metrics", metrics});
    RunOptions o;
    o.timeoutSeconds = 180;
    RunResult r = runProcess(argv, o);
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    return summaryOf(metrics);
  }
  TempDir dir_{"machines-train"};
};

TEST_F(MachinesTrainingTest, TwoMachinesOfTwoTrainLikeOneMachineOfFour) {
  nlohmann::json one = train(0, 4), two = train(2, 2);
  ASSERT_TRUE(one.is_object() && two.is_object());
  EXPECT_EQ(two["world_size"], 4);
  EXPECT_EQ(two["steps"], one["steps"]);
  // The sums run in another order (machine by machine), so equal within float tolerance.
  const double a = one["final_loss"], b = two["final_loss"];
  EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(a)));
  EXPECT_EQ(two["test_accuracy"], one["test_accuracy"]);
}

TEST_F(MachinesTrainingTest, GradientBucketsCrossMachinesToTheSameWeights) {
  // --bucket-mb: each bucket is a hierarchical all-reduce posted by the communication thread.
  nlohmann::json whole = train(2, 2), buckets = train(2, 2, "0.004");
  ASSERT_TRUE(whole.is_object() && buckets.is_object());
  EXPECT_EQ(buckets["weights_hash"], whole["weights_hash"]);
}

TEST_F(MachinesTrainingTest, TwoMachinesOfOneAreBitIdenticalToOneMachineOfTwo) {
  // With one worker per machine the sum of two gradients is the same addition either way.
  nlohmann::json one = train(0, 2), two = train(2, 1);
  ASSERT_TRUE(one.is_object() && two.is_object());
  EXPECT_EQ(two["weights_hash"], one["weights_hash"]);
  EXPECT_EQ(two["final_loss"], one["final_loss"]);
}

}  // namespace
}  // namespace xs::test
