// top.cpp: `xspawn top`: the user's running jobs on this machine, read from their shared memory
// (each rank's slot: its op, telemetry and pid) and /proc, without disturbing them: nothing is
// written to a job's segment. Another user's segments are 0600 and not even listed (their names
// carry the owner's uid).
#include "commands.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command_args.hpp"
#include "control.hpp"
#include "segment.hpp"
#include "stall.hpp"
#include "telemetry.hpp"
#include "xspawn/error.hpp"

namespace po = boost::program_options;

namespace xs::cli {
namespace {

using detail::RankSlot;
using detail::RankTelemetry;
using detail::Segment;

struct RankView {
  int rank = 0;
  int pid = 0;
  std::string state;       // "running", "sleeping", "exited 0", ...
  double cpuSeconds = -1;  // user + system, -1 when the process is gone
  std::string op;          // what it does now
  std::uint64_t steps = 0, samples = 0, deviceInUse = 0, deviceCapacity = 0;
  double sinceProgress = 0;  // seconds since it entered an op or ended a step
};

struct JobView {
  std::string jobId, segment;
  int launcherPid = 0;
  int world = 0;
  double elapsed = 0;       // since the job's segment was made
  std::uint64_t stepTarget = 0;
  double trainingSeconds = 0;  // since rank 0's first accounted span
  double sampledAt = 0;     // CLOCK_MONOTONIC seconds of this view
  std::vector<RankView> ranks;
};

double secondsOf(std::uint64_t ns) { return static_cast<double>(ns) * 1e-9; }

std::string whatItDoes(const RankSlot& slot) {
  const detail::OpSnapshot op = detail::ControlPlane::snapshot(slot);
  if (op.seq != 0 && op.state == detail::OpState::kWaiting) return "in " + op.describe();
  const RankTelemetry& t = slot.telemetry;
  if (const std::uint32_t span = t.spanCategory.load(std::memory_order_relaxed); span != 0) {
    const auto category = static_cast<detail::Category>(span - 1);
    return category == detail::Category::kFault ? "injected delay" : detail::categoryName(category);
  }
  return op.seq == 0 ? "starting" : "own code, past " + op.describe();
}

std::string shortState(char s) {
  switch (s) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "disk wait (D)";
    case 'T': case 't': return "stopped (T)";
    case 'Z': return "zombie";
    default: return std::string("state ") + s;
  }
}

RankView viewRank(const RankSlot& slot, int rank, std::uint64_t nowNs) {
  RankView v;
  v.rank = rank;
  v.pid = slot.pid.load(std::memory_order_relaxed);
  const auto state = static_cast<detail::RankState>(slot.state.load(std::memory_order_acquire));
  const RankTelemetry& t = slot.telemetry;
  v.steps = t.steps.load(std::memory_order_relaxed);
  v.samples = t.samples.load(std::memory_order_relaxed);
  v.deviceInUse = t.deviceInUse.load(std::memory_order_relaxed);
  v.deviceCapacity = t.deviceCapacity.load(std::memory_order_relaxed);
  const std::uint64_t progress =
      std::max(slot.opEnterNs.load(std::memory_order_relaxed), t.lastStepNs.load(std::memory_order_relaxed));
  v.sinceProgress = progress && nowNs > progress ? secondsOf(nowNs - progress) : 0;
  v.op = whatItDoes(slot);
  if (state == detail::RankState::kExited) v.state = "exited 0";
  else if (state == detail::RankState::kFailed) v.state = "failed";
  else if (state == detail::RankState::kNotStarted) v.state = "not started";
  if (!v.state.empty() || v.pid <= 0) return v;
  const detail::ProcSample p = detail::sampleProcess(v.pid);
  v.state = p.ok ? shortState(p.state) : "gone";
  v.cpuSeconds = p.ok ? p.cpuSeconds : -1;
  return v;
}

// This user's live jobs (a job whose launcher is gone is for `xspawn clean`, not shown).
std::vector<JobView> snapshot(const std::string& only) {
  std::vector<JobView> jobs;
  for (const std::string& name : detail::userSegmentNames()) {
    std::unique_ptr<Segment> seg;
    try {
      seg = Segment::open(name);
    } catch (const Error&) {
      continue;  // half-made, of another build, or gone meanwhile
    }
    const detail::SegmentHeader& h = seg->header();
    if (!only.empty() && only != h.jobId) continue;
    if (detail::processStartTicks(h.launcherPid) != h.launcherStartTicks) continue;
    JobView j;
    j.jobId = h.jobId;
    j.segment = name;
    j.launcherPid = h.launcherPid;
    j.world = seg->worldSize();
    const std::uint64_t now = detail::telemetry::nowNs();
    j.sampledAt = secondsOf(now);
    j.elapsed = secondsOf(detail::nowUnixNs() - h.createdUnixNs);
    const RankTelemetry& t0 = seg->slot(0).telemetry;
    j.stepTarget = t0.stepTarget.load(std::memory_order_relaxed);
    const std::uint64_t windowStart = t0.windowStartNs.load(std::memory_order_relaxed);
    j.trainingSeconds = windowStart && now > windowStart ? secondsOf(now - windowStart) : 0;
    const int base = detail::rankBase(*seg);
    for (int r = 0; r < j.world; ++r) j.ranks.push_back(viewRank(seg->slot(r), base + r, now));
    jobs.push_back(std::move(j));
  }
  return jobs;
}

struct Rates {
  double cpuPercent = -1, imagesPerSecond = 0;
};

// The rank's rates between two views of its job (none for the first view).
Rates ratesOf(const RankView& now, const JobView& job, const std::vector<JobView>& before) {
  Rates r;
  for (const JobView& b : before) {
    if (b.jobId != job.jobId) continue;
    for (const RankView& old : b.ranks) {
      if (old.rank != now.rank || old.pid != now.pid) continue;
      const double dt = job.sampledAt - b.sampledAt;
      if (dt <= 0) return r;
      if (now.cpuSeconds >= 0 && old.cpuSeconds >= 0) r.cpuPercent = 100 * (now.cpuSeconds - old.cpuSeconds) / dt;
      r.imagesPerSecond = static_cast<double>(now.samples - old.samples) / dt;
    }
  }
  return r;
}

// Seconds left: the master's steps against the target, at its average pace so far.
double etaOf(const JobView& j) {
  if (j.stepTarget == 0 || j.ranks.empty() || j.ranks[0].steps == 0 || j.trainingSeconds <= 0) return -1;
  const double steps = static_cast<double>(j.ranks[0].steps), target = static_cast<double>(j.stepTarget);
  return std::max(0.0, (target - steps) * j.trainingSeconds / steps);
}

std::string clockText(double s) {
  if (s < 0) return "-";
  const auto v = static_cast<long>(s + 0.5);
  return v >= 3600 ? fmt::format("{}:{:02d}:{:02d}", v / 3600, v / 60 % 60, v % 60) : fmt::format("{}:{:02d}", v / 60, v % 60);
}

std::string text(const std::vector<JobView>& jobs, const std::vector<JobView>& before) {
  if (jobs.empty()) return "no running xspawn jobs of this user on this machine\n";
  std::string out;
  for (const JobView& j : jobs) {
    std::string steps = j.stepTarget ? fmt::format("step {}/{}", j.ranks[0].steps, j.stepTarget)
                                     : fmt::format("step {}", j.ranks.empty() ? 0 : j.ranks[0].steps);
    out += fmt::format("job '{}' (launcher pid {}, {} ranks, /dev/shm/{}): up {}, {}, ETA {}\n", j.jobId, j.launcherPid,
                       j.world, j.segment, clockText(j.elapsed), steps, clockText(etaOf(j)));
    out += fmt::format("  {:>4} {:>7} {:<13} {:>5} {:>7} {:>9} {:>13} {:>6}  {}\n", "rank", "pid", "state", "cpu%", "step",
                       "images/s", "memory MiB", "idle s", "doing");
    for (const RankView& r : j.ranks) {
      const Rates rates = ratesOf(r, j, before);
      out += fmt::format("  {:>4} {:>7} {:<13} {:>5} {:>7} {:>9.0f} {:>13} {:>6.1f}  {}\n", r.rank, r.pid, r.state,
                         rates.cpuPercent < 0 ? std::string("-") : fmt::format("{:.0f}", rates.cpuPercent), r.steps,
                         rates.imagesPerSecond,
                         fmt::format("{:.0f}/{:.0f}", static_cast<double>(r.deviceInUse) / 1048576.0,
                                     static_cast<double>(r.deviceCapacity) / 1048576.0),
                         r.sinceProgress, r.op);
    }
  }
  return out;
}

std::string json(const std::vector<JobView>& jobs, const std::vector<JobView>& before) {
  using nlohmann::json;
  json doc{{"jobs", json::array()}};
  for (const JobView& j : jobs) {
    json ranks = json::array();
    for (const RankView& r : j.ranks) {
      const Rates rates = ratesOf(r, j, before);
      ranks.push_back({{"rank", r.rank}, {"pid", r.pid}, {"state", r.state},
                       {"cpu_percent", rates.cpuPercent < 0 ? json(nullptr) : json(rates.cpuPercent)},
                       {"doing", r.op}, {"step", r.steps}, {"samples", r.samples},
                       {"images_per_second", rates.imagesPerSecond}, {"device_bytes", r.deviceInUse},
                       {"device_capacity_bytes", r.deviceCapacity}, {"since_progress_seconds", r.sinceProgress}});
    }
    const double eta = etaOf(j);
    doc["jobs"].push_back({{"job_id", j.jobId}, {"segment", j.segment}, {"launcher_pid", j.launcherPid},
                           {"world_size", j.world}, {"elapsed_seconds", j.elapsed}, {"step_target", j.stepTarget},
                           {"eta_seconds", eta < 0 ? json(nullptr) : json(eta)}, {"ranks", ranks}});
  }
  return doc.dump() + "\n";
}

}  // namespace

int topCommand(const Invocation& inv) {
  po::options_description desc("top options");
  desc.add_options()("once", "print one view and exit (rates over --interval)")(
      "json", "print JSON (one document per view)")(
      "interval", po::value<double>()->default_value(1.0), "seconds between views (and the rates' window)")(
      "job", po::value<std::string>(), "only the job with this id");
  po::positional_options_description pos;
  pos.add("job", 1);
  po::variables_map vm;
  if (!parseCommandArgs("top", "usage: xspawn top [JOB] [--once] [--json] [--interval SECONDS]\n\n"
                        "Shows this user's running xspawn jobs on this machine, read from their shared memory:\n"
                        "per rank its pid, state, CPU, step, images/s, device memory, seconds since its last\n"
                        "progress and what it is doing; the job's elapsed time and ETA. Redraws in place on a\n"
                        "terminal, prints plain views otherwise; Ctrl-C ends it.",
                        desc, inv.args, vm, &pos)) {
    return 0;
  }
  const double interval = vm["interval"].as<double>();
  XS_CHECK(interval >= 0.05 && interval <= 3600, UsageError,
           fmt::format("--interval must be from 0.05 to 3600 seconds (got {})", interval));
  const std::string only = vm.count("job") ? vm["job"].as<std::string>() : "";
  const bool once = vm.count("once") > 0, asJson = vm.count("json") > 0;
  const bool redraw = !once && !asJson && ::isatty(STDOUT_FILENO);
  const auto pause = std::chrono::duration<double>(once ? std::min(interval, 0.5) : interval);
  std::vector<JobView> before = snapshot(only);
  for (;;) {
    std::this_thread::sleep_for(pause);
    std::vector<JobView> now = snapshot(only);
    const std::string view = asJson ? json(now, before) : text(now, before);
    std::fputs(redraw ? ("\033[H\033[2J" + view).c_str() : (once || asJson ? view : view + "\n").c_str(), stdout);
    std::fflush(stdout);
    if (once) return now.empty() && !only.empty() ? 1 : 0;
    before = std::move(now);
  }
}

}  // namespace xs::cli
