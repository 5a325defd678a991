// signal_test.cpp: Ctrl-C and SIGTERM reach every worker; a second Ctrl-C kills them; a
// launcher killed with SIGKILL takes its workers along and its segment is swept by the next
// run; two jobs at once do not see each other.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "job_fixture.hpp"
#include "segment.hpp"

namespace xs::test {
namespace {

TEST_F(LauncherTest, CtrlCStopsEveryWorker) {
  RunOptions o;
  o.signalWhen = "ready";
  o.signal = SIGINT;
  Job job = runJob({"--nprocs", "4"}, {"run", "--", worker(), "sleep"}, o);
  EXPECT_EQ(job.run.exitCode, 128 + SIGINT) << job.run.err;
  EXPECT_EQ(job.report["status"], "interrupted");
  EXPECT_EQ(job.report["interrupted_by"], "SIGINT");
  EXPECT_NE(job.run.err.find("interrupted by SIGINT"), std::string::npos) << job.run.err;
  EXPECT_LT(job.run.seconds, 10.0);
  expectClean(job);
}

TEST_F(LauncherTest, SecondCtrlCKillsWorkersThatIgnoreTheFirst) {
  RunOptions o;
  o.signalWhen = "ready";
  o.signal = SIGINT;
  o.signalCount = 2;
  o.signalDelayMs = 200;
  Job job = runJob({"--nprocs", "3"}, {"run", "--", worker(), "ignore-int"}, o);
  EXPECT_EQ(job.run.exitCode, 128 + SIGKILL) << job.run.err;
  EXPECT_EQ(job.report["status"], "interrupted");
  EXPECT_LT(job.run.seconds, 8.0);
  expectClean(job);
}

TEST_F(LauncherTest, SigtermIsForwarded) {
  RunOptions o;
  o.signalWhen = "ready";
  o.signal = SIGTERM;
  Job job = runJob({"--nprocs", "2"}, {"run", "--", worker(), "sleep"}, o);
  EXPECT_EQ(job.run.exitCode, 128 + SIGTERM);
  expectClean(job);
}

TEST_F(LauncherTest, KilledLauncherTakesItsWorkersAndTheNextRunSweepsItsSegment) {
  RunOptions o;
  o.signalWhen = "ready";
  o.signal = SIGKILL;
  Job job = runJob({"--nprocs", "3"}, {"run", "--", worker(), "sleep"}, o);
  EXPECT_EQ(job.run.exitCode, 128 + SIGKILL);
  // PR_SET_PDEATHSIG: the workers die with the launcher.
  for (int i = 0; i < 100 && !processesOfJob(job.jobId).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(processesOfJob(job.jobId).empty());
  // Nobody was left to remove the segment; the next xspawn does, and says so.
  ASSERT_TRUE(segmentExists(job.jobId));
  Job next = runJob({"--nprocs", "1"}, {"hello"});
  EXPECT_EQ(next.run.exitCode, 0);
  EXPECT_NE(next.run.err.find("removed stale shared memory /dev/shm/xspawn-" +
                              std::to_string(getuid()) + "-" + job.jobId),
            std::string::npos)
      << next.run.err;
  EXPECT_FALSE(segmentExists(job.jobId));
}

// In a child process that then dies without removing anything: job `id`'s segment and, when
// `orphan` is not empty, a transport directory with a file in it and one for `orphan` alone.
void leaveSegment(const std::string& id, const std::string& orphan = "") {
  pid_t pid = fork();
  if (pid == 0) {
    detail::SegmentConfig c;
    c.jobId = id;
    c.geometry.worldSize = 2;
    c.geometry.payloadChunk = 64;
    auto seg = detail::Segment::create(c);
    seg->setOwner(false);
    if (!orphan.empty()) {
      const std::string dir = detail::Segment::createTransportDir(seg->name());
      if (dir.empty()) _exit(1);
      if (std::FILE* f = std::fopen((dir + "/vader_segment.test").c_str(), "w")) std::fclose(f);
      if (detail::Segment::createTransportDir(detail::Segment::nameFor(orphan)).empty()) _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(status, 0) << "the child could not make its leftovers";
}

TEST_F(LauncherTest, CleanRemovesSegmentsOfDeadLaunchers) {
  const std::string id = uniqueJobId("stale");
  leaveSegment(id);
  ASSERT_TRUE(segmentExists(id));
  RunResult dry = runProcess({xspawn(), "clean", "--dry-run"});
  EXPECT_NE(dry.out.find("would remove /dev/shm/xspawn-" + std::to_string(getuid()) + "-" + id),
            std::string::npos);
  EXPECT_TRUE(segmentExists(id));
  RunResult clean = runProcess({xspawn(), "clean"});
  EXPECT_EQ(clean.exitCode, 0);
  EXPECT_NE(clean.out.find("is no longer running"), std::string::npos) << clean.out;
  EXPECT_FALSE(segmentExists(id));
}

TEST_F(LauncherTest, CleanRemovesTransportDirectoriesWithTheirSegmentOrWhenTheirLauncherIsGone) {
  // Under mpirun a launcher keeps Open MPI's files in <segment>@transport. A dead launcher's
  // segment and directory go together; a directory whose segment is gone goes once the
  // launcher its note names is gone; a live launcher's stays (it is leaving MPI), and so does a
  // young directory without a note (being made, or not ours to judge).
  const std::string dead = uniqueJobId("tdead"), orphan = uniqueJobId("torphan"), live = uniqueJobId("tlive"),
                    planted = uniqueJobId("tplanted");
  auto dirOf = [](const std::string& id) { return detail::Segment::transportDirFor(detail::Segment::nameFor(id)); };
  leaveSegment(dead, orphan);
  ASSERT_FALSE(detail::Segment::createTransportDir(detail::Segment::nameFor(live)).empty());
  // Something already at the name is never used, nor its note followed.
  const std::string target = dirOf(planted) + ".target";
  std::filesystem::create_directory(dirOf(planted));
  std::filesystem::create_symlink(target, dirOf(planted) + "/launcher");
  EXPECT_TRUE(detail::Segment::createTransportDir(detail::Segment::nameFor(planted)).empty());
  EXPECT_FALSE(std::filesystem::exists(target));
  ASSERT_TRUE(std::filesystem::exists(dirOf(dead) + "/vader_segment.test"));
  RunResult clean = runProcess({xspawn(), "clean"});
  EXPECT_EQ(clean.exitCode, 0);
  EXPECT_NE(clean.out.find("and its MPI files in " + dirOf(dead) + ": its launcher"), std::string::npos) << clean.out;
  EXPECT_NE(clean.out.find("removed the MPI files of job '" + orphan + "' in " + dirOf(orphan) + ": its launcher"),
            std::string::npos) << clean.out;
  EXPECT_FALSE(segmentExists(dead));
  EXPECT_FALSE(std::filesystem::exists(dirOf(dead)));
  EXPECT_FALSE(std::filesystem::exists(dirOf(orphan)));
  EXPECT_TRUE(std::filesystem::exists(dirOf(live))) << clean.out;
  EXPECT_TRUE(std::filesystem::exists(dirOf(planted))) << clean.out;
  std::filesystem::remove_all(dirOf(live));
  std::filesystem::remove_all(dirOf(planted));
}

TEST_F(LauncherTest, TwoJobsAtOnceDoNotSeeEachOther) {
  Job a, b;
  std::thread ta([&] { a = runJob({"--nprocs", "3"}, {"run", "--", worker(), "payload", "40000"}); });
  std::thread tb([&] { b = runJob({"--nprocs", "4"}, {"run", "--", worker(), "payload", "30000"}); });
  ta.join();
  tb.join();
  EXPECT_EQ(a.run.exitCode, 0) << a.run.err;
  EXPECT_EQ(b.run.exitCode, 0) << b.run.err;
  EXPECT_EQ(linesWith(a.run.out, "payload ok").size(), 3u);
  EXPECT_EQ(linesWith(b.run.out, "payload ok").size(), 4u);
  expectClean(a);
  expectClean(b);
}

TEST_F(LauncherTest, ASecondJobWithTheSameIdIsRefused) {
  const std::string id = uniqueJobId("same");
  RunOptions o;
  o.signalWhen = "ready";
  o.signal = SIGINT;
  o.signalDelayMs = 1500;
  Job first;
  std::thread t([&] {
    first.run = runProcess({xspawn(), "--job-id", id, "--nprocs", "2", "run", "--", worker(), "sleep"}, o);
  });
  for (int i = 0; i < 200 && !segmentExists(id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  RunResult second = runProcess({xspawn(), "--job-id", id, "--nprocs", "2", "hello"});
  t.join();
  EXPECT_EQ(second.exitCode, 1);
  EXPECT_NE(second.err.find("job id '" + id + "' is already in use by a running job"), std::string::npos)
      << second.err;
  EXPECT_EQ(first.run.exitCode, 128 + SIGINT);
  EXPECT_FALSE(segmentExists(id));
}

}  // namespace
}  // namespace xs::test
