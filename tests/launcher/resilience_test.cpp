// resilience_test.cpp: jobs that survive failures and say who stalled them: restarts
// (--max-restarts), the culprit of a stall named with what the system says of it, and fault
// injection (--inject-fault, XSPAWN_INJECT_FAULT), all driven as a user would.
#include <fmt/format.h>

#include <string>

#include "job_fixture.hpp"

namespace xs::test {
namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// Launcher options that stall rank 2 of 4 by `kind` at 'next'.
std::vector<std::string> stallOptions(const std::string& kind) {
  return {"--nprocs", "4", "--timeout", "1.5", "--inject-fault", "rank=2,at=next,kind=" + kind};
}

// Rank 2 is the root cause, with `state` and `cpu` in its description; the others are its
// victims; the report comes at the deadline.
void expectStall(const Job& job, const std::string& state, const std::string& cpu) {
  EXPECT_EQ(job.run.exitCode, 124) << job.run.err;
  EXPECT_TRUE(contains(job.run.err, "failed: rank 2 stalled: ranks 0-1,3 timed out waiting for it")) << job.run.err;
  const auto& root = job.report["root_cause"];
  EXPECT_EQ(root["rank"], 2) << job.report.dump(2);
  EXPECT_EQ(root["stalled"], true);
  const std::string stall = root["stall"].is_string() ? std::string(root["stall"]) : "";
  EXPECT_TRUE(contains(stall, "state: " + state)) << stall;
  EXPECT_TRUE(contains(stall, cpu)) << stall;
  EXPECT_TRUE(contains(stall, "last progress: entered and left 'init'#1")) << stall;
  // Debian's elfutils (scripts/setup.sh) gives the stack.
  EXPECT_TRUE(contains(stall, "stack:\n  PID ") && contains(stall, "#0 ")) << stall;
  for (const auto& r : job.report["ranks"]) {
    if (r["rank"] != 2) EXPECT_EQ(r["secondary"], true) << r.dump();
  }
  // At the deadline (1.5 s) plus the stack, not a kill grace (10 s) later.
  EXPECT_LT(job.run.seconds, 6.0);
}

TEST_F(LauncherTest, StoppedRankIsTheRootCauseNotTheRanksThatTimedOut) {
  Job job = runJob(stallOptions("stop"), {"run", "--", worker(), "chain"});
  expectStall(job, "stopped (T", ": idle: blocked or stopped)");
  EXPECT_TRUE(contains(job.run.err, "root cause (did not arrive: rank 2)")) << job.run.err;
  EXPECT_TRUE(contains(job.run.err, "(a victim: it waited for the stalled rank)")) << job.run.err;
  expectClean(job);
}

TEST_F(LauncherTest, RankAsleepSpinningOrSlowIsTheRootCause) {
  struct Case {
    const char *kind, *state, *cpu;
  };
  for (const Case& c : {Case{"hang", "sleeping (S", ": idle: blocked or stopped)"},
                        Case{"spin", "running", ": busy: a loop or a long computation)"},
                        Case{"slow:30s", "sleeping (S", "CPU time since its last progress"}}) {
    SCOPED_TRACE(c.kind);
    Job job = runJob(stallOptions(c.kind), {"run", "--", worker(), "chain"});
    expectStall(job, c.state, c.cpu);
    expectClean(job);
  }
}

TEST_F(LauncherTest, FaultAtTheKthCollective) {
  Job job = runJob({"--nprocs", "3", "--inject-fault", "rank=1,collective=5,kind=crash"},
                   {"run", "--", worker(), "collectives", "10"});
  EXPECT_EQ(job.run.exitCode, 128 + 9) << job.run.err;
  EXPECT_EQ(job.report["root_cause"]["rank"], 1);
  // 'init' is op 1, the four all-reduces before the fifth are ops 2-5.
  EXPECT_EQ(job.report["root_cause"]["last_rendezvous"], "past all_reduce 'grads: sum float[1000] one-shot'#5")
      << job.report.dump(2);
  expectClean(job);
}

TEST_F(LauncherTest, FaultKindsEndAsTheRealFailuresWould) {
  struct Case {
    const char* kind;
    int exitCode;
    const char* error;  // in the root cause's recorded error, or ""
  };
  for (const Case& c : {Case{"crash", 128 + 9, ""}, Case{"abort", 128 + 6, ""},
                        Case{"oom", 128 + 6, "std::bad_alloc"}}) {
    Job job = runJob({"--nprocs", "2", "--inject-fault", fmt::format("rank=0,at=next,kind={}", c.kind)},
                     {"run", "--", worker(), "chain"});
    EXPECT_EQ(job.run.exitCode, c.exitCode) << c.kind << "\n" << job.run.err;
    EXPECT_EQ(job.report["root_cause"]["rank"], 0) << c.kind;
    if (*c.error) {
      const auto& error = job.report["root_cause"]["error"];
      EXPECT_TRUE(error.is_string() && contains(error, c.error)) << c.kind << ": " << error.dump();
    }
    expectClean(job);
  }
}

TEST_F(LauncherTest, FaultFromTheEnvironmentForProgramsStartedByOthers) {
  RunOptions o;
  o.env = {"XSPAWN_INJECT_FAULT=rank=1,at=next,kind=exit:5"};
  Job job = runJob({"--nprocs", "2"}, {"run", "--", worker(), "chain"}, o);
  EXPECT_EQ(job.run.exitCode, 5) << job.run.err;
  EXPECT_EQ(job.report["root_cause"]["rank"], 1);
  expectClean(job);
}

TEST_F(LauncherTest, BadFaultSpecsAreUsageErrors) {
  struct Case {
    std::string spec, message;
  };
  for (const Case& c : {Case{"rank=1,kind=boom", "unknown kind 'boom'; kinds: crash, segv"},
                        Case{"kind=crash", "missing rank="},
                        Case{"rank=1,kind=crash,step=0", "step=0 is not a whole number of at least 1"},
                        Case{"rank=1,kind=slow:fast", "slow:fast needs a duration such as 200ms"},
                        Case{"rank=1,kind=crash,step=3,at=x", "give at most one of step=, at= and collective="},
                        Case{"rank=1,when=3,kind=crash", "unknown key 'when'"}}) {
    RunResult r = runProcess({xspawn(), "--nprocs", "2", "--inject-fault", c.spec, "hello"});
    EXPECT_EQ(r.exitCode, 2) << c.spec;
    EXPECT_TRUE(contains(r.err, "--inject-fault '" + c.spec + "': " + c.message)) << r.err;
    EXPECT_TRUE(oneLine(r.err)) << r.err;
  }
  RunOptions o;
  o.env = {"XSPAWN_INJECT_FAULT=rank=x,kind=crash"};
  RunResult r = runProcess({xspawn(), "--nprocs", "2", "hello"}, o);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "XSPAWN_INJECT_FAULT 'rank=x,kind=crash': rank=x is not a whole number")) << r.err;
  RunResult bad = runProcess({xspawn(), "--max-restarts", "-1", "hello"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_TRUE(contains(bad.err, "--max-restarts must be a whole number from 0 to 1000 (got '-1')")) << bad.err;
}

TEST_F(LauncherTest, RestartAfterACrashSucceedsAndReportsEveryAttempt) {
  Job job = runJob({"--nprocs", "3", "--max-restarts", "2", "--inject-fault", "rank=1,at=next,kind=crash"},
                   {"run", "--", worker(), "chain"});
  EXPECT_EQ(job.run.exitCode, 0) << job.run.err;
  EXPECT_EQ(job.report["status"], "succeeded");
  EXPECT_EQ(job.report["restart_count"], 1);
  ASSERT_EQ(job.report["attempts"].size(), 2u) << job.report.dump(2);
  EXPECT_EQ(job.report["attempts"][0]["status"], "failed");
  EXPECT_EQ(job.report["attempts"][0]["exit_code"], 137);
  EXPECT_EQ(job.report["attempts"][0]["root_cause"], "rank 1 killed by signal SIGKILL (Killed)");
  EXPECT_EQ(job.report["attempts"][1]["status"], "succeeded");
  EXPECT_TRUE(contains(job.run.err, "attempt 0 failed (rank 1 killed by signal SIGKILL (Killed)); restarting the "
                                    "gang: restart 1 of at most 2")) << job.run.err;
  // Every worker of the new gang sees the restart count; each rank's log holds both gangs.
  const std::string log = readFile(job.logDir + "/rank-2.log");
  EXPECT_TRUE(contains(log, "restart 0\n") && contains(log, "restart 1\n")) << log;
  EXPECT_TRUE(contains(log, "---- xspawn: restart 1: a new gang starts ----")) << log;
  expectClean(job);
}

TEST_F(LauncherTest, RestartsExhaustedEndWithTheLastAttemptsStatus) {
  Job job = runJob({"--nprocs", "2", "--max-restarts", "2", "--inject-fault", "rank=0,at=next,kind=exit:7,attempt=any"},
                   {"run", "--", worker(), "chain"});
  EXPECT_EQ(job.run.exitCode, 7) << job.run.err;
  EXPECT_EQ(job.report["restart_count"], 2);
  ASSERT_EQ(job.report["attempts"].size(), 3u);
  for (const auto& a : job.report["attempts"]) EXPECT_EQ(a["root_cause"], "rank 0 exited with code 7") << a.dump();
  EXPECT_TRUE(contains(job.run.err, "attempts:\n  attempt 0 at ")) << job.run.err;
  EXPECT_EQ(linesWith(job.run.err, "restarting the gang").size(), 2u) << job.run.err;
  expectClean(job);
}

TEST_F(LauncherTest, StallIsRestartedToo) {
  Job job = runJob({"--nprocs", "3", "--timeout", "1", "--max-restarts", "1", "--inject-fault", "rank=2,at=next,kind=stop"},
                   {"run", "--", worker(), "chain"});
  EXPECT_EQ(job.run.exitCode, 0) << job.run.err;
  ASSERT_EQ(job.report["attempts"].size(), 2u);
  EXPECT_EQ(job.report["attempts"][0]["exit_code"], 124);
  EXPECT_EQ(job.report["attempts"][0]["root_cause"], "rank 2 stalled: ranks 0-1 timed out waiting for it");
  expectClean(job);
}

TEST_F(LauncherTest, CtrlCIsNeverRestarted) {
  RunOptions o;
  o.signalWhen = "ready";
  o.signal = SIGINT;
  Job job = runJob({"--nprocs", "2", "--max-restarts", "3"}, {"run", "--", worker(), "sleep"}, o);
  EXPECT_EQ(job.run.exitCode, 128 + SIGINT) << job.run.err;
  EXPECT_EQ(job.report["restart_count"], 0);
  EXPECT_FALSE(contains(job.run.err, "restarting")) << job.run.err;
  expectClean(job);
}

}  // namespace
}  // namespace xs::test
