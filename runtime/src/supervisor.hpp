// supervisor.hpp: the supervisor state machine that starts N workers (fork or exec), forwards
// their output and signals, notices the first failure, aborts the job's waits, stops the
// rest (SIGTERM, then SIGKILL), removes the segment and reports the root cause.
//
//   kRunning --first failure--> kStopping --all reaped--> kDone
//   kRunning --SIGINT/SIGTERM--> kStopping (signal forwarded; a second one: SIGKILL)
//   kRunning --all exited 0----------------------------> kDone
//   kDone (failed, restarts left, not interrupted) --new segment, new gang--> kRunning
//
// A failure whose abort is a timeout is a stall: the ranks behind the others are described
// (stall.hpp) and killed at once, and the report names them as the root cause.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "machine_proxy.hpp"
#include "output.hpp"
#include "segment.hpp"
#include "stall.hpp"
#include "trace_file.hpp"
#include "torch_env.hpp"
#include "xspawn/spawn.hpp"

namespace spdlog { class logger; }

namespace xs::detail {

class Supervisor {
 public:
  // fn: the worker function (fork, or exec of this program); empty for `run` of a program.
  Supervisor(SpawnOptions options, WorkerFn fn);
  ~Supervisor();
  JobResult run();

 private:
  enum class Phase { kRunning, kStopping, kDone };
  struct Worker {
    pid_t pid = 0;
    bool reaped = false;
    int exitCode = 0;
    int signal = 0;
    double endSeconds = 0;
    bool stoppedByUs = false;
    bool stalled = false;  // behind the others at a stall, killed by us
    std::string stall;     // what the system said of it
  };
  using Clock = std::chrono::steady_clock;

  void prepareJob();
  void prepareAttempt();
  void installSignals();
  void restoreSignals();
  void startWorkers();
  void joinMachines();
  void onMachineEvents();
  [[noreturn]] void childMain(int rank, int outFd, int errFd);
  // Under mpirun: machine 0's MASTER_ADDR and MASTER_PORT, once the machines' handshake passed.
  void awaitMaster(TorchPlace& torch);
  void loop();
  void onSignal(int sig);
  void drainSignals();
  void reap();
  void onWorkerEnd(int rank);
  void onStall();
  void sampleProgress();
  void stopAfterFailure();
  void signalLiving(int sig, bool markStopped);
  void finishAttempt();
  JobReport runAttempt();
  bool restartAfter(const JobReport& report);
  JobReport buildReport() const;
  RankOutcome rankOutcome(int r) const;
  double elapsed() const;
  // The job's start on CLOCK_MONOTONIC, in nanoseconds (the trace's and the telemetry's clock).
  std::uint64_t startNs() const {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count());
  }
  // Local rank r's rank in the whole job, and the job's size (machines x N under mpirun).
  int globalRank(int r) const { return place_.machine * world_ + r; }
  int globalWorld() const { return place_.machines * world_; }

  SpawnOptions options_;
  WorkerFn fn_;
  int world_ = 0;
  std::string jobId_;
  std::shared_ptr<spdlog::logger> log_;      // console (stderr) and launcher.log
  std::shared_ptr<spdlog::logger> fileLog_;  // launcher.log only
  std::unique_ptr<Segment> segment_;
  std::uint64_t heapReservedBytes_ = 0;  // the sparse shared heap of all ranks
  std::unique_ptr<OutputForwarder> output_;
  std::vector<Worker> workers_;
  MachinePlace place_;                   // this machine among the job's (one machine: 0 of 1)
  std::unique_ptr<MachineTransport> transport_;  // until the proxy takes it
  std::unique_ptr<MachineProxy> proxy_;  // jobs spanning machines only
  std::string machineCause_;             // another machine's failure, or the proxy's own
  int machineCauseCode_ = 1;
  std::vector<int> cpus_;  // the CPUs this process may run on, for --bind-to core
  std::vector<std::string> execArgv_;
  static constexpr const char* kMasterAddr = "127.0.0.1";
  static constexpr const char* kAnyAddr = "0.0.0.0";  // machine 0's held port, under mpirun
  MasterPort masterPort_;  // MASTER_PORT of `run` on one machine, held for the job
  std::string pythonDir_;  // this xspawn's Python package, first on the workers' PYTHONPATH
  pid_t pgid_ = 0;
  pid_t selfPid_ = 0;
  int signalFd_ = -1;
  sigset_t oldMask_{};
  struct sigaction oldPipe_ {};
  Phase phase_ = Phase::kRunning;
  std::string interruptedBy_;
  int interrupts_ = 0;
  Clock::time_point start_;
  Clock::time_point termAt_ = Clock::time_point::max();
  Clock::time_point killAt_ = Clock::time_point::max();
  bool termSent_ = false;
  bool killSent_ = false;
  int attempt_ = 0;                          // restarts so far
  double attemptStart_ = 0;                  // elapsed() when this attempt started
  std::vector<AttemptOutcome> attempts_;     // the attempts before this one
  std::unique_ptr<ProgressTracker> progress_;
  Clock::time_point nextSample_{};
  bool stallHandled_ = false;
  std::string stallText_;  // the stall in one line, for the other machines

  // Observability (supervisor_observe.cpp): the utilisation report and the trace timeline.
  void observeStart();
  void observeSample();
  void observeSpawn(std::uint64_t startNs);
  void observeWorkerEnd(int rank);
  void observeAttempt(JobReport& report);
  void observeEnd(const JobReport& report);
  // --log-dir's report.json; one that cannot be written is said and printed on stderr instead.
  void saveReport(const JobReport& report);
  UtilisationReport attemptUtilisation();
  void traceAttempt(const UtilisationReport& u);  // the attempt's ranks and images/s into the trace, once
  void traceBeforeLeaving();        // a job spanning machines that ended cleanly here
  // The file, on one time axis across machines; provisional: this machine's own, in case the
  // others never send theirs (said at debug level only).
  void writeTrace(const JobReport& report, bool provisional = false);
  static std::int64_t clockSkewNs();  // XSPAWN_CLOCK_SKEW_US, checked
  std::int64_t clockSkewNs_ = 0;
  bool finalSampled_ = false, traceAdded_ = false;
  std::unique_ptr<TraceWriter> trace_;  // --trace
  struct SchedTimes {
    // Last sample: seconds on a CPU and runnable without one, times given a CPU, optimizer steps.
    double cpu = -1, runqueue = -1, turns = -1, steps = 0;
    double cpuBase = -1, runqueueBase = -1, turnsBase = -1, stepsBase = 0;  // when the rank's window began
  };
  std::vector<SchedTimes> sched_;
  std::vector<std::pair<double, std::uint64_t>> samplesSeen_;  // (elapsed, samples of all ranks)
};

// The exit status of a job whose root cause is a stall (as timeout(1)'s).
inline constexpr int kStallExitCode = 124;

// Checks a user-given job id: 1-48 characters from [A-Za-z0-9._-].
void validateJobId(const std::string& jobId);
std::string generateJobId();

}  // namespace xs::detail
