// report.hpp: what happened to a job: every rank's end and the root cause of a failure
// (first failure first: rank, pid, exit code or signal, its own error message, the last
// rendezvous every rank reached, the failing rank's last output lines), as text and JSON.
// When ranks time out waiting for others, the root cause is the ranks that did not arrive
// (stalled), with what the system says of them; the ranks that waited are their victims.
// With restarts, every attempt's outcome. For a training run, where every rank's time went.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xs {

struct RankOutcome {
  int rank = 0;
  int localRank = 0;
  int pid = 0;
  bool started = false;
  bool exited = false;      // reaped by the supervisor
  int exitCode = 0;         // valid when exited and signal == 0
  int signal = 0;           // the signal that killed it, 0 if it exited
  bool killedBySupervisor = false;  // it was still running when the job was being stopped
  std::string error;        // the worker's own error message, if it recorded one
  bool secondary = false;   // it failed because the job aborted, not on its own
  double endSeconds = 0;    // when it ended, seconds since the job started
  int boundCpu = -1;
  std::string lastOp;       // "past 'init'#3", "at 'epoch_end'#12", ...
  std::vector<std::string> outputTail;  // its last lines of output (stdout and stderr)
  // A failed rank's Python traceback, as it printed it on stderr (the exception's line last);
  // `error` is that line when the rank recorded no error of its own.
  std::vector<std::string> traceback;
  // The others timed out waiting for this rank: it was behind them and was killed by xspawn.
  bool stalled = false;
  std::string stall;        // what the system said of it then: state, CPU, stack (lines)

  bool failed() const { return exited && (signal != 0 || exitCode != 0); }
  // "exited with code 3", "killed by signal SIGSEGV (Segmentation fault)".
  std::string describeEnd() const;
};

// One start of the job's gang (the first, or a restart after a failure).
struct AttemptOutcome {
  int attempt = 0;          // 0: the first start
  std::string status;       // "succeeded", "failed", "interrupted"
  int exitCode = 0;
  double startSeconds = 0;  // since the job started
  double seconds = 0;       // how long the attempt ran
  std::string rootCause;    // one line: "rank 1 killed by signal SIGKILL (Killed)", or ""
  // Since the job started: when every rank had reached its first rendezvous or collective
  // (the gang is up), and when the root cause failed; -1 when it did not happen.
  double readySeconds = -1;
  double failureSeconds = -1;
};

// Where one rank's time went over its window: from the start of its first accounted span (a
// step, a collective, a batch) to the end of its last. Seconds; "other" is the rest of the
// window (the program's own code, checkpoints, start-up work between spans).
struct RankUtilisation {
  int rank = 0;
  int pid = 0;
  double windowSeconds = 0;
  double forward = 0, backward = 0, update = 0;  // compute
  double data = 0;                               // waiting for the data loader
  double collectiveWait = 0;  // inside collectives until the last rank arrived
  double collectiveMove = 0;  // inside collectives after that: moving and reducing bytes
  double rendezvous = 0;      // inside rendezvous and barriers
  double injected = 0;        // injected delays (--inject-fault kind=slow)
  double other = 0;
  // From the kernel's scheduler statistics: time on a CPU, and time runnable but waiting for one
  // (time-slicing when ranks outnumber cores); -1 when unknown.
  double cpuSeconds = -1, runqueueSeconds = -1;
  // The times the scheduler gave the rank a CPU per optimizer step (each one a switch to it; what
  // a switch costs on the machine: `xspawn bench switch`); -1 when unknown.
  double cpuTurnsPerStep = -1;
  std::int64_t steps = 0;    // optimizer steps
  std::int64_t samples = 0;  // training samples through forward
  // Step times (end of one optimizer step, or of an evaluation or checkpoint, to the end of the
  // next), seconds; the median and p99 come from a histogram with 4.4% wide buckets.
  double stepMin = 0, stepMedian = 0, stepP99 = 0, stepMax = 0;
  std::uint64_t devicePeakBytes = 0, deviceCapacityBytes = 0;

  double compute() const { return forward + backward + update; }
  double collectives() const { return collectiveWait + collectiveMove + rendezvous; }
  // Percent of the window.
  double share(double seconds) const { return windowSeconds > 0 ? 100.0 * seconds / windowSeconds : 0; }
};

// The slowest rank: the one whose time outside waiting for others is the longest.
struct Straggler {
  int rank = -1;              // -1: none (one rank, or all within 5% of each other)
  std::string phase;          // where its extra time went: "forward", "data", "injected delay", ...
  double extraPerStep = 0;    // seconds per step more than the others' median
  double slowerPercent = 0;   // that, relative to the others' median
  std::string text;           // one line
};

// Where a training job's time went, per emulated core and across the job: the report printed at
// the end of every training run, in report.json, and from `xspawn report`.
struct UtilisationReport {
  bool present = false;  // false: no rank took an optimizer step (not a training run)
  int cores = 0;         // online CPUs of the machine
  int worldSize = 0;
  std::vector<RankUtilisation> ranks;
  Straggler straggler;
  // Across the job, percent of all ranks' windows: collectives (waiting for the last rank,
  // moving bytes, rendezvous) and time runnable without a CPU (-1: unknown).
  double collectiveShare = 0, waitShare = 0, moveShare = 0, rendezvousShare = 0, runqueueShare = -1;
  // The ranks' mean of RankUtilisation::cpuTurnsPerStep (-1: unknown).
  double cpuTurnsPerStep = -1;
  // The job's images/s over time: (seconds since the job started, images/s).
  std::vector<std::pair<double, double>> throughput;
  std::string source;  // where the figures come from ("the ranks' counters", "trace t.json")

  // The table and its conclusions, as printed.
  std::string text() const;
  // The same as a JSON object (report.json's "utilisation").
  std::string json() const;
};

struct JobReport {
  std::string jobId;
  int worldSize = 0;
  int usableCores = 0;       // the launcher's usableCores(): with more ranks than this, they share cores
  std::string startMethod;
  std::string status;        // "succeeded", "failed", "interrupted"
  int exitCode = 0;
  double seconds = 0;
  int processGroup = 0;
  int rootCause = -1;        // index into ranks of the first failure, -1 if none
  std::string abortReason;   // "rank failed", "divergence", "timeout", "interrupted" or ""
  std::string abortText;     // the first abort's explanation
  std::string interruptedBy; // "SIGINT" when the launcher was asked to stop
  std::string ranksAt;       // where every rank was at the end ("ranks 0-7 past 'init'#1")
  std::vector<RankOutcome> ranks;  // this machine's ranks (rank: global, localRank: here)
  // Jobs spanning machines (mpirun): this machine's index, the machine count, its name, and
  // the root cause when it was another machine's failure (or the machines' transport).
  int machine = 0;
  int machines = 1;
  std::string host;
  std::string machineCause;
  // Machines whose ranks had all exited 0 and left before this machine's failure: it could not
  // reach them (mpirun's exit status still says the job failed).
  std::vector<int> machinesFinished;
  // Restarts (--max-restarts): the attempt this report is of, and every attempt so far
  // (this one last).
  int restartCount = 0;
  std::vector<AttemptOutcome> attempts;
  // Where the last attempt's time went, when it was a training run.
  UtilisationReport utilisation;

  bool succeeded() const { return status == "succeeded"; }
  // The root cause in one line (the headline of text()).
  std::string headline() const;
  // The human report, for stderr.
  std::string text() const;
  // The same as a JSON document.
  std::string json() const;
};

}  // namespace xs
