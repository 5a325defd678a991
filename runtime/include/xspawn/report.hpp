// report.hpp: what happened to a job: every rank's end and the root cause of a failure
// (first failure first: rank, pid, exit code or signal, its own error message, the last
// rendezvous every rank reached, the failing rank's last output lines), as text and JSON.
// When ranks time out waiting for others, the root cause is the ranks that did not arrive
// (stalled), with what the system says of them; the ranks that waited are their victims.
// With restarts, every attempt's outcome.
#pragma once

#include <cstdint>
#include <string>
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

struct JobReport {
  std::string jobId;
  int worldSize = 0;
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

  bool succeeded() const { return status == "succeeded"; }
  // The root cause in one line (the headline of text()).
  std::string headline() const;
  // The human report, for stderr.
  std::string text() const;
  // The same as a JSON document.
  std::string json() const;
};

// "SIGSEGV" for 11.
std::string signalName(int signal);

}  // namespace xs
