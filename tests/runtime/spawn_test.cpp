// spawn_test.cpp: xs::spawn from inside a program (fork start method): the API each worker
// sees, rendezvous payloads, mesh_reduce, worker failures and their report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>
#include <stdexcept>
#include <string>

#include "process_runner.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::test {
namespace {

SpawnOptions quiet() {
  SpawnOptions o;
  o.quiet = true;
  o.printReport = false;
  o.jobId = uniqueJobId("spawn");
  return o;
}

TEST(SpawnTest, WorkersSeeTheirPlaceInTheJob) {
  auto o = quiet();
  o.flags.set("answer", 42);
  JobResult r = spawn(
      [](int index, const Flags& flags) {
        if (get_ordinal() != index || get_local_ordinal() != index) return 10;
        if (world_size() != 3 || local_world_size() != 3) return 11;
        if (is_master_ordinal() != (index == 0)) return 12;
        if (device().name != "xcore:" + std::to_string(index)) return 13;
        if (flags.get<int>("answer", 0) != 42) return 14;
        return 0;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SpawnTest, MaxRestartsStartsANewGangThatSeesTheRestartCount) {
  auto o = quiet();
  o.maxRestarts = 2;
  JobResult r = spawn(
      [](int index, const Flags&) {
        rendezvous("start");
        // The first gang fails on rank 1 with an error of its own; the second succeeds.
        if (restart_count() == 0 && index == 1) throw std::runtime_error("first attempt fails");
        barrier("done");
        return restart_count() == 1 ? 0 : 30;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_EQ(r.report.restartCount, 1);
  ASSERT_EQ(r.report.attempts.size(), 2u);
  EXPECT_EQ(r.report.attempts[0].exitCode, 1);
  EXPECT_EQ(r.report.attempts[0].rootCause, "rank 1 exited with code 1");
  EXPECT_EQ(restart_count(), 0);  // outside a worker
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SpawnTest, InjectedFaultFromTheOptions) {
  auto o = quiet();
  o.injectFault = "rank=2,at=second,kind=exit:9";
  JobResult r = spawn(
      [](int, const Flags&) {
        rendezvous("first");
        rendezvous("second");
        return 0;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 9);
  ASSERT_EQ(r.report.rootCause, 2);
  EXPECT_EQ(r.report.ranks[2].lastOp, "past 'first'#1");
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SpawnTest, RendezvousReturnsEveryPayloadInRankOrder) {
  auto o = quiet();
  o.rendezvousChunk = 64;  // force many rounds
  JobResult r = spawn(
      [](int index, const Flags&) {
        for (int round = 0; round < 5; ++round) {
          std::string mine(static_cast<std::size_t>(index * 100 + round), static_cast<char>('a' + index));
          auto all = rendezvous("round" + std::to_string(round), mine);
          if (all.size() != 4u) return 20;
          for (int j = 0; j < 4; ++j) {
            if (all[j] != std::string(static_cast<std::size_t>(j * 100 + round), static_cast<char>('a' + j))) return 21;
          }
        }
        auto empty = rendezvous("empty");
        for (const auto& p : empty)
          if (!p.empty()) return 22;
        barrier();
        return 0;
      },
      4, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
}

TEST(SpawnTest, MeshReduceOverTheListOrPairwise) {
  auto o = quiet();
  JobResult r = spawn(
      [](int index, const Flags&) {
        double mean = mesh_reduce("acc", static_cast<double>(index), [](const std::vector<double>& v) {
          return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
        });
        if (mean != 2.0) return 30;
        int sum = mesh_reduce("sum", index + 1, [](int a, int b) { return a + b; });
        if (sum != 15) return 31;
        std::vector<float> vec{static_cast<float>(index), 1.0f};
        auto total = mesh_reduce("vec", vec, [](const std::vector<float>& a, const std::vector<float>& b) {
          return std::vector<float>{a[0] + b[0], a[1] + b[1]};
        });
        if (total[0] != 10.0f || total[1] != 5.0f) return 32;
        std::string joined = mesh_reduce("str", std::to_string(index),
                                         [](const std::string& a, const std::string& b) { return a + b; });
        if (joined != "01234") return 33;
        return 0;
      },
      5, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
}

TEST(SpawnTest, ExceptionInTheWorkerFunctionIsTheRootCause) {
  auto o = quiet();
  JobResult r = spawn(
      [](int index, const Flags&) {
        if (index == 1) throw std::invalid_argument("bad shape on rank 1");
        rendezvous("after");
      },
      3, o);
  EXPECT_EQ(r.exitCode, 1);
  ASSERT_GE(r.report.rootCause, 0);
  const RankOutcome& root = r.report.ranks[r.report.rootCause];
  EXPECT_EQ(root.rank, 1);
  EXPECT_EQ(root.error, "std::invalid_argument: bad shape on rank 1");
  EXPECT_FALSE(root.secondary);
  for (const RankOutcome& other : r.report.ranks) {
    if (other.rank == 1) continue;
    EXPECT_TRUE(other.secondary);
    EXPECT_NE(other.error.find("xs::AbortedError: aborted: rank 1"), std::string::npos) << other.error;
  }
  std::string text = r.report.text();
  EXPECT_NE(text.find("root cause (first failure):\n  rank 1"), std::string::npos) << text;
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SpawnTest, IntResultIsTheExitCode) {
  auto o = quiet();
  JobResult r = spawn([](int index, const Flags&) { return index == 2 ? 7 : 0; }, 3, o);
  EXPECT_EQ(r.exitCode, 7);
  EXPECT_EQ(r.report.ranks[r.report.rootCause].rank, 2);
}

TEST(SpawnTest, DivergentCollectivesFailInsteadOfHanging) {
  auto o = quiet();
  JobResult r = spawn(
      [](int index, const Flags&) {
        rendezvous("init");
        if (index == 0) rendezvous("checkpoint");  // only the master: a hang on a real TPU
        rendezvous("epoch_end");
      },
      4, o);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_EQ(r.report.abortReason, "divergence");
  EXPECT_NE(r.report.abortText.find("rank 0 at 'checkpoint'#2; ranks 1-3 at 'epoch_end'#2"),
            std::string::npos)
      << r.report.abortText;
}

TEST(SpawnTest, TooLittleSharedMemoryIsAClearErrorNotASigbus) {
  auto o = quiet();
  o.rendezvousChunk = std::size_t(1) << 48;  // 256 TiB per rank
  try {
    spawn([](int, const Flags&) {}, 2, o);
    FAIL() << "expected ShmSpaceError";
  } catch (const ShmSpaceError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("not enough shared memory: the job needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("docker run --shm-size"), std::string::npos) << msg;
  }
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SpawnTest, AWorldOfOneOutsideTheLauncher) {
  // The test process itself: not started by xspawn, so init() makes a private world of one.
  init();
  EXPECT_EQ(world_size(), 1);
  EXPECT_EQ(get_ordinal(), 0);
  EXPECT_TRUE(is_master_ordinal());
  auto all = rendezvous("alone", "me");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], "me");
  barrier("alone");
}

}  // namespace
}  // namespace xs::test
