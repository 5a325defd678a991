// failure_test.cpp: a worker that crashes, throws, exits non-zero, is killed inside a
// rendezvous, diverges, never arrives, or leaves early (faults injected with --inject-fault,
// as a user's CI would): the others end promptly, the report names the right rank first, the
// exit status is right, nothing is left behind.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "job_fixture.hpp"

namespace xs::test {
namespace {

// The other ranks ended within `seconds` of the root cause.
void expectOthersEndedWithin(const Job& job, double seconds) {
  double root = job.report["root_cause"]["end_seconds"];
  for (const auto& r : job.report["ranks"]) {
    EXPECT_LT(static_cast<double>(r["end_seconds"]) - root, seconds) << r.dump();
  }
}

// Every number following `key` in the rank logs.
std::vector<long long> stamps(const Job& job, int world, const std::string& key) {
  std::vector<long long> out;
  for (int r = 0; r < world; ++r) {
    std::istringstream in(readFile(fmt::format("{}/rank-{}.log", job.logDir, r)));
    for (std::string line; std::getline(in, line);)
      if (line.rfind(key + " ", 0) == 0) out.push_back(std::stoll(line.substr(key.size() + 1)));
  }
  return out;
}

TEST_F(LauncherTest, SegfaultingWorker) {
  Job job = runJob({"--nprocs", "4", "--inject-fault", "rank=1,at=next,kind=segv"}, {"run", "--", worker(), "chain"});
  EXPECT_EQ(job.run.exitCode, 128 + 11);
  EXPECT_NE(job.run.err.find("failed: rank 1 killed by signal SIGSEGV"), std::string::npos) << job.run.err;
  EXPECT_EQ(job.report["root_cause"]["rank"], 1);
  EXPECT_EQ(job.report["root_cause"]["signal"], "SIGSEGV");
  EXPECT_EQ(job.report["root_cause"]["last_rendezvous"], "past 'init'#1");
  // The others were waiting in 'next' and name the dead rank.
  EXPECT_EQ(linesWith(job.run.out, "rank 1 (pid").size(), 3u) << job.run.out;
  EXPECT_NE(job.run.err.find("| xspawn: injecting fault kind=segv on rank 1 at 'next'"), std::string::npos) << job.run.err;
  expectOthersEndedWithin(job, 1.0);
  expectClean(job);
}

TEST_F(LauncherTest, ThrowingWorkerReportsItsException) {
  Job job = runJob({"--nprocs", "4", "--inject-fault", "rank=2,at=next,kind=throw"}, {"run", "--", worker(), "chain"});
  // An uncaught exception ends a C++ program through std::terminate (SIGABRT).
  EXPECT_EQ(job.run.exitCode, 128 + 6);
  EXPECT_EQ(job.report["root_cause"]["rank"], 2);
  const std::string error = job.report["root_cause"]["error"];
  EXPECT_EQ(error.rfind("xs::FaultInjectedError: injected fault: kind=throw on rank 2 at 'next'", 0), 0u) << error;
  EXPECT_NE(job.run.err.find("error: xs::FaultInjectedError: injected fault"), std::string::npos) << job.run.err;
  // Last lines of the failing rank's own output are in the report.
  EXPECT_NE(job.run.err.find("| xspawn: injecting fault kind=throw"), std::string::npos) << job.run.err;
  expectOthersEndedWithin(job, 1.0);
  expectClean(job);
}

TEST_F(LauncherTest, WorkerExitingWithCode3) {
  Job job = runJob({"--nprocs", "4", "--inject-fault", "rank=3,at=next,kind=exit:3"}, {"run", "--", worker(), "chain"});
  EXPECT_EQ(job.run.exitCode, 3);
  EXPECT_EQ(job.report["root_cause"]["rank"], 3);
  EXPECT_EQ(job.report["root_cause"]["exit_code"], 3);
  expectOthersEndedWithin(job, 1.0);
  expectClean(job);
}

TEST_F(LauncherTest, WorkerKilledInsideARendezvousAbortsThePeersWithin100ms) {
  const int n = 4;
  Job job = runJob({"--nprocs", std::to_string(n)}, {"run", "--", worker(), "kill-self", "0"});
  EXPECT_EQ(job.run.exitCode, 128 + 9);
  EXPECT_EQ(job.report["root_cause"]["rank"], 0);
  EXPECT_EQ(job.report["root_cause"]["signal"], "SIGKILL");
  auto victim = stamps(job, n, "victim-at");
  auto aborted = stamps(job, n, "aborted-at");
  ASSERT_FALSE(victim.empty());
  ASSERT_EQ(aborted.size(), static_cast<std::size_t>(n - 1)) << job.run.out;
  long long worst = *std::max_element(aborted.begin(), aborted.end()) - victim.back();
  EXPECT_LT(worst, 100'000'000) << "slowest peer noticed the death after " << worst / 1e6 << " ms";
  for (const auto& r : job.report["ranks"]) {
    if (r["rank"] == 0) continue;
    EXPECT_EQ(r["secondary"], true);
    EXPECT_NE(std::string(r["error"]).find("rank 0 (pid"), std::string::npos) << r.dump();
  }
  expectClean(job);
}

TEST_F(LauncherTest, TagMismatchFailsAtOnceSayingWhoIsWhere) {
  Job job = runJob({"--nprocs", "8"}, {"run", "--", worker(), "mismatch", "3"});
  EXPECT_NE(job.run.exitCode, 0);
  EXPECT_NE(job.run.err.find("rank 3 at 'save'#12; ranks 0-2,4-7 at 'epoch_end'#12"), std::string::npos)
      << job.run.err;
  EXPECT_EQ(job.report["abort"]["reason"], "divergence");
  EXPECT_LT(job.run.seconds, 10.0);
  expectClean(job);
}

TEST_F(LauncherTest, DeadlineListsEveryRanksLastTag) {
  Job job = runJob({"--nprocs", "4", "--timeout", "1", "--inject-fault", "rank=2,at=next,kind=hang"},
                   {"run", "--", worker(), "chain"});
  EXPECT_EQ(job.run.exitCode, 124) << job.run.err;
  EXPECT_EQ(job.report["abort"]["reason"], "timeout");
  std::string msg = job.report["abort"]["message"];
  // The wait measured: the 1000 ms deadline and the moment the rank noticed it.
  const std::size_t at = msg.find("timed out after ");
  ASSERT_NE(at, std::string::npos) << msg;
  const long waitedMs = std::stol(msg.substr(at + 16));
  EXPECT_GE(waitedMs, 1000) << msg;
  EXPECT_LT(waitedMs, 3000) << msg;
  EXPECT_NE(msg.find("rank 2 past 'init'#1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at 'next'#2"), std::string::npos) << msg;
  EXPECT_LT(job.run.seconds, 8.0);
  expectClean(job);
}

TEST_F(LauncherTest, RankThatExitsEarlyIsNamedByThoseWaitingForIt) {
  Job job = runJob({"--nprocs", "3", "--inject-fault", "rank=1,at=next,kind=exit:0"}, {"run", "--", worker(), "chain"});
  EXPECT_NE(job.run.exitCode, 0);
  EXPECT_NE(job.run.err.find("rank 1 exited before reaching 'next'#2"), std::string::npos) << job.run.err;
  EXPECT_LT(job.run.seconds, 5.0);
  expectClean(job);
}

}  // namespace
}  // namespace xs::test
