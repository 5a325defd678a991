// stall.cpp: following the ranks' progress and describing the laggards of a stall.
#include "stall.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "control.hpp"
#include "subprocess.hpp"

namespace xs::detail {
namespace {

double monotonicSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string readSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A program on PATH, or "".
std::string findOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

ProcSample sampleProcess(pid_t pid) {
  ProcSample s;
  const std::string stat = readSmallFile(fmt::format("/proc/{}/stat", pid));
  // pid (comm) state ppid ... : comm may hold spaces and parentheses; the state follows the last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return s;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field) fields.push_back(field);
  if (fields.size() < 13) return s;
  s.state = fields[0][0];
  // Fields 14 and 15 of stat (utime, stime), counted from the state as field 3.
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  s.cpuSeconds = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
  s.ok = true;
  return s;
}

std::string processStateName(char state) {
  switch (state) {
    case 'R': return "running";
    case 'S': return "sleeping (S, waiting in a system call)";
    case 'D': return "in uninterruptible sleep (D)";
    case 'T': return "stopped (T, by a signal such as SIGSTOP)";
    case 't': return "stopped by a debugger (t)";
    case 'Z': return "a zombie (Z, exited, not yet reaped)";
    case 'X': return "dead (X)";
    default: return fmt::format("in state {}", state);
  }
}

void ProgressTracker::sample(const Segment& segment, const std::vector<pid_t>& pids) {
  for (std::size_t r = 0; r < ranks_.size() && r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    const RankSlot& slot = segment.slot(static_cast<int>(r));
    const std::uint64_t seq = slot.opSeq.load(std::memory_order_acquire);
    const std::uint32_t state = slot.opState.load(std::memory_order_relaxed);
    Rank& rank = ranks_[r];
    if (seq == rank.seq && state == rank.opState && rank.cpuAtProgress >= 0) continue;
    const ProcSample p = sampleProcess(pids[r]);
    if (!p.ok) continue;
    rank.seq = seq;
    rank.opState = state;
    rank.cpuAtProgress = p.cpuSeconds;
    rank.seenAt = monotonicSeconds();
  }
}

ProgressTracker::Since ProgressTracker::sinceProgress(int rank, double cpuNow) const {
  const Rank& r = ranks_[static_cast<std::size_t>(rank)];
  if (r.cpuAtProgress < 0) return {};
  return {std::max(0.0, cpuNow - r.cpuAtProgress), monotonicSeconds() - r.seenAt};
}

std::vector<int> findLaggards(const Segment& segment, const std::vector<bool>& running) {
  using Key = std::tuple<std::uint64_t, std::uint64_t>;  // (op sequence, collective syncs)
  std::vector<Key> keys;
  Key furthest{0, 0};
  for (int r = 0; r < segment.worldSize(); ++r) {
    const RankSlot& slot = segment.slot(r);
    OpSnapshot op = ControlPlane::snapshot(slot, false);
    keys.emplace_back(op.seq, slot.syncCount.load(std::memory_order_acquire));
    furthest = std::max(furthest, keys.back());
  }
  std::vector<int> behind;
  for (int r = 0; r < segment.worldSize(); ++r) {
    if (running[static_cast<std::size_t>(r)] && keys[static_cast<std::size_t>(r)] < furthest) behind.push_back(r);
  }
  return behind;
}

std::string describeLaggard(const Segment& segment, int rank, pid_t pid, ProgressTracker::Since cpu,
                            std::chrono::milliseconds stackBudget) {
  const RankSlot& slot = segment.slot(rank);
  const ProcSample p = sampleProcess(pid);
  OpSnapshot op = ControlPlane::snapshot(slot);
  std::string out = fmt::format("state: {}\n", p.ok ? processStateName(p.state) : "gone");
  const std::uint64_t enteredNs = slot.opEnterNs.load(std::memory_order_relaxed);
  const double since = enteredNs ? monotonicSeconds() - static_cast<double>(enteredNs) * 1e-9 : -1;
  if (op.seq == 0) {
    out += "last progress: none (it never reached a rendezvous or collective)\n";
  } else {
    out += fmt::format("last progress: {} {}{}\n", op.state == OpState::kWaiting ? "entered" : "entered and left",
                       op.describe(), since >= 0 ? fmt::format(", {:.2f} s ago", since) : "");
  }
  if (cpu.cpu >= 0 && p.ok) {
    // Sampled every half second: the share is over the time since the launcher saw the progress.
    const double share = cpu.wall > 0.1 ? cpu.cpu / cpu.wall : 0;
    out += fmt::format("CPU time since its last progress: {:.2f} s in {:.2f} s ({:.0f}% of a core{})\n", cpu.cpu,
                       cpu.wall, 100 * share,
                       share > 0.5 ? ": busy: a loop or a long computation" : share < 0.05 ? ": idle: blocked or stopped" : "");
  }
  std::string wchan = readSmallFile(fmt::format("/proc/{}/wchan", pid));
  if (!wchan.empty() && wchan != "0") out += fmt::format("kernel wait channel: {}\n", wchan);
  std::string stack = stackBudget.count() > 0 ? captureStack(pid, stackBudget)
                                              : std::string("  (not taken: the report shows the first stalled ranks' stacks only)\n");
  out += "stack:\n" + stack;
  if (!stack.empty() && stack.back() != '\n') out += "\n";
  return out;
}

std::string captureStack(pid_t pid, std::chrono::milliseconds budget, std::size_t maxLines) {
  std::vector<std::string> argv;
  if (std::string tool = findOnPath("eu-stack"); !tool.empty()) {
    argv = {tool, "-p", std::to_string(pid), "-n", "24"};
  } else if (std::string gdb = findOnPath("gdb"); !gdb.empty()) {
    argv = {gdb, "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt 24"};
  } else {
    return "  (no stack tool: install elfutils (eu-stack) or gdb to see it)\n";
  }
  const Captured run = runCaptured(argv, true, budget);
  std::istringstream lines(run.out);
  std::string out;
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (++n > maxLines) {
      out += "  ...\n";
      break;
    }
    out += "  " + line + "\n";
  }
  if (run.timedOut) out += fmt::format("  ({} took longer than {} ms: cut short)\n", argv[0], budget.count());
  if (out.empty()) out = fmt::format("  ({} printed nothing)\n", argv[0]);
  return out;
}

}  // namespace xs::detail
