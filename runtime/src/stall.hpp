// stall.hpp: the culprit of a stall. When ranks time out waiting in a rendezvous or
// collective, the ranks they waited for (the laggards: behind the others in their ops) are
// the root cause, not the ranks that timed out. The launcher follows every rank's progress
// (its op sequence and CPU time, sampled as it supervises) and, at the stall, describes each
// laggard as the system sees it: its process state, the CPU time it used since its last
// progress, its kernel wait channel and, when elfutils' eu-stack or gdb is installed, its
// stack (as mpirun --get-stack-traces does).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "segment.hpp"

namespace xs::detail {

// A process as /proc shows it.
struct ProcSample {
  bool ok = false;
  char state = '?';        // R, S, D, T, t, Z...
  double cpuSeconds = 0;   // user + system time
};
ProcSample sampleProcess(pid_t pid);
// "running", "sleeping", "in uninterruptible sleep (D)", "stopped (T)", ...
std::string processStateName(char state);

// Follows each local rank's progress: the op it is in or past, and the CPU time it had used
// when the launcher first saw it there.
class ProgressTracker {
 public:
  explicit ProgressTracker(int world) : ranks_(static_cast<std::size_t>(world)) {}
  // Samples every running rank's op sequence and CPU time (cheap: one /proc read per rank).
  void sample(const Segment& segment, const std::vector<pid_t>& pids);
  // CPU seconds the rank used since the launcher saw its op change last, and the seconds
  // since it saw that (cpu -1: unknown).
  struct Since {
    double cpu = -1;
    double wall = 0;
  };
  Since sinceProgress(int rank, double cpuNow) const;

 private:
  struct Rank {
    std::uint64_t seq = ~0ULL;
    std::uint32_t opState = 0;
    double cpuAtProgress = -1;
    double seenAt = 0;  // CLOCK_MONOTONIC seconds of that sample
  };
  std::vector<Rank> ranks_;
};

// One rank found behind at a stall.
struct Laggard {
  int rank = 0;  // local rank
  std::string description;  // what the system says of it (several lines)
};

// The ranks behind the one that timed out (`waiter`): those whose op sequence (or, inside the
// same op, collective syncs) is behind the furthest rank's. Empty when nobody is behind.
std::vector<int> findLaggards(const Segment& segment, const std::vector<bool>& running);

// Describes a laggard: state, CPU since its last progress, where it was, its wait channel
// and stack (within `stackBudget` for the stack tool).
std::string describeLaggard(const Segment& segment, int rank, pid_t pid, ProgressTracker::Since since,
                            std::chrono::milliseconds stackBudget);

// The stack of every thread of `pid` from eu-stack or gdb (at most `maxLines` lines), or a
// note saying why there is none.
std::string captureStack(pid_t pid, std::chrono::milliseconds budget, std::size_t maxLines = 40);

}  // namespace xs::detail
