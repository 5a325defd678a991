// report.hpp: what happened to a job: every rank's end and the root cause of a failure
// (first failure first: rank, pid, exit code or signal, its own error message, the last
// rendezvous every rank reached, the failing rank's last output lines), as text and JSON.
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

  bool failed() const { return exited && (signal != 0 || exitCode != 0); }
  // "exited with code 3", "killed by signal SIGSEGV (Segmentation fault)".
  std::string describeEnd() const;
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

  bool succeeded() const { return status == "succeeded"; }
  // The human report, for stderr.
  std::string text() const;
  // The same as a JSON document.
  std::string json() const;
};

// "SIGSEGV" for 11.
std::string signalName(int signal);

}  // namespace xs
