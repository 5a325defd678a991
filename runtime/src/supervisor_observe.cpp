// supervisor_observe.cpp: what the launcher observes of a job for its utilisation report and
// trace: every rank's scheduler times and the job's training samples (sampled with its progress,
// every 0.5 s), the spawn and each rank's end on the launcher's track, and at the end of an
// attempt the ranks' telemetry and trace rings, read from the segment before it goes.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "context.hpp"
#include "file_replace.hpp"
#include "machine_proxy.hpp"
#include "subprocess.hpp"
#include "supervisor.hpp"
#include "telemetry.hpp"
#include "utilisation.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

// /proc/<pid>/schedstat of the process's main thread: seconds on a CPU, runnable but waiting
// for one, and the times the scheduler gave it a CPU. False when the process is gone.
bool readSchedstat(pid_t pid, double& cpu, double& runqueue, double& turns) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/schedstat", pid).c_str(), "r");
  if (!f) return false;
  unsigned long long run = 0, wait = 0, slices = 0;
  const bool ok = std::fscanf(f, "%llu %llu %llu", &run, &wait, &slices) == 3;
  std::fclose(f);
  if (ok)
    cpu = static_cast<double>(run) * 1e-9, runqueue = static_cast<double>(wait) * 1e-9,
    turns = static_cast<double>(slices);
  return ok;
}

// trace.json -> trace.machine1.json for machine 1 of a job spanning machines.
std::string machineTracePath(const std::string& path, int machine, int machines) {
  if (machines <= 1 || machine == 0) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.machine{}{}", p.stem().string(), machine, p.extension().string())).string();
}

}  // namespace

void Supervisor::observeStart() {
  if (options_.traceFile.empty()) return;
  XS_CHECK(options_.traceEvents >= 1024 && options_.traceEvents <= (std::size_t{1} << 26), UsageError,
           fmt::format("the trace keeps {} spans per rank; give 1024 to 67108864", options_.traceEvents));
  // A trace that cannot be written is said now, not after the job ran for an hour.
  const std::string path = machineTracePath(options_.traceFile, place_.machine, place_.machines);
  const int err = probeReplaceable(path);
  XS_CHECK(err == 0, UsageError,
           fmt::format("--trace {}: cannot create it ({}); give a file in an existing, writable directory", path,
                       std::strerror(err)));
  trace_ = std::make_unique<TraceWriter>(startNs(), static_cast<int>(::getpid()), place_.machine);
}

void Supervisor::observeSample() {
  std::uint64_t samples = 0;
  for (int r = 0; r < world_; ++r) {
    const RankTelemetry& t = segment_->slot(r).telemetry;
    samples += t.samples.load(std::memory_order_relaxed);
    const Worker& w = workers_[r];
    SchedTimes& s = sched_[static_cast<std::size_t>(r)];
    if (w.reaped || w.pid <= 0 || !readSchedstat(w.pid, s.cpu, s.runqueue, s.turns)) continue;
    s.steps = static_cast<double>(t.steps.load(std::memory_order_relaxed));  // turns a step: the same interval
    // The report's window starts at the rank's first accounted span: so do its scheduler times.
    if (s.cpuBase < 0 && t.windowStartNs.load(std::memory_order_relaxed) != 0)
      s.cpuBase = s.cpu, s.runqueueBase = s.runqueue, s.turnsBase = s.turns, s.stepsBase = s.steps;
  }
  samplesSeen_.emplace_back(elapsed(), samples);
}

void Supervisor::observeSpawn(std::uint64_t startNs) {
  if (trace_) trace_->launcherSpan(fmt::format("spawn {} workers", world_), startNs, telemetry::nowNs());
}

void Supervisor::observeWorkerEnd(int r) {
  if (!trace_) return;
  const Worker& w = workers_[r];
  const std::string how = w.signal ? fmt::format("killed by {}", signalName(w.signal)) : fmt::format("exit {}", w.exitCode);
  trace_->launcherInstant(fmt::format("rank {} {}", globalRank(r), how), telemetry::nowNs(),
                          fmt::format(R"({{"rank":{},"pid":{}}})", globalRank(r), w.pid));
}

UtilisationReport Supervisor::attemptUtilisation() {
  if (!finalSampled_) observeSample();  // the final counters: every rank has ended
  finalSampled_ = true;
  std::vector<RankFigures> figures;
  for (int r = 0; r < world_; ++r) {
    RankFigures f = readFigures(segment_->slot(r).telemetry, globalRank(r), workers_[r].pid);
    const SchedTimes& s = sched_[static_cast<std::size_t>(r)];
    if (s.cpuBase >= 0) f.cpuSeconds = s.cpu - s.cpuBase, f.runqueueSeconds = s.runqueue - s.runqueueBase;
    if (s.cpuBase >= 0 && s.steps > s.stepsBase) f.cpuTurnsPerStep = (s.turns - s.turnsBase) / (s.steps - s.stepsBase);
    figures.push_back(f);
  }
  return buildUtilisation(figures, static_cast<int>(segment_->header().usableCpus), throughputSeries(samplesSeen_),
                          "the ranks' counters");
}

void Supervisor::traceAttempt(const UtilisationReport& u) {
  if (!trace_ || traceAdded_) return;
  traceAdded_ = true;
  std::vector<int> pids;
  for (const Worker& w : workers_) pids.push_back(w.pid);
  trace_->addRanks(*segment_, pids, globalRank(0), attempt_);
  const std::uint64_t origin = startNs();
  for (const auto& [t, rate] : u.throughput)
    trace_->counter("images/s", origin + static_cast<std::uint64_t>(t * 1e9), rate);
}

void Supervisor::traceBeforeLeaving() {
  // Machine 0 writes the job's one trace: the others' parts go to it as they leave. Each
  // machine first writes its own file, in case a machine fails while this one waits for the
  // others (mpirun then ends this one too): replaced by the whole job's, or removed once sent.
  JobReport now;
  now.utilisation = attemptUtilisation();
  traceAttempt(now.utilisation);
  if (place_.machine > 0) proxy_->setTracePart(trace_->machinePart(now.utilisation));
  try {
    writeTrace(now, true);
  } catch (const Error& e) {
    log_->debug("{}", e.what());  // said again, if it still fails, at the end
  }
}

void Supervisor::observeAttempt(JobReport& report) {
  UtilisationReport u = attemptUtilisation();
  traceAttempt(u);
  if (u.present) report.utilisation = std::move(u);
  finalSampled_ = traceAdded_ = false;  // the next attempt's
  if (trace_ && !report.succeeded()) {
    trace_->launcherInstant(fmt::format("failure: {}", report.headline()), telemetry::nowNs(),
                            fmt::format(R"({{"exit_code":{}}})", report.exitCode));
  }
}

void Supervisor::observeEnd(const JobReport& report) {
  if (report.utilisation.present && !options_.quiet) {
    const std::string text = report.utilisation.text();
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t nl = text.find('\n', at);
      log_->info("{}", text.substr(at, nl - at));
      at = nl == std::string::npos ? text.size() : nl + 1;
    }
  }
  if (!trace_) return;
  if (proxy_ && proxy_->tracePartSent()) {
    std::remove(machineTracePath(options_.traceFile, place_.machine, place_.machines).c_str());
    log_->info("trace: this machine's {} spans went to machine 0, which writes the job's trace", trace_->spans());
    return;
  }
  try {
    writeTrace(report);
  } catch (const Error& e) {
    log_->error("{}", e.what());  // the job's own outcome stands
  }
}

void Supervisor::writeTrace(const JobReport& report, bool provisional) {
  std::string path = options_.traceFile, machines;
  int worldInFile = world_;
  if (proxy_) {
    // One axis for the job: machine 0's clock, from machine 0's start.
    const std::vector<MachineProxy::MachineClock> clocks = proxy_->clocks();
    const std::vector<std::string> parts = place_.machine == 0 ? proxy_->traceParts() : std::vector<std::string>{};
    auto shiftOf = [&](std::size_t k) {
      return static_cast<std::int64_t>(clocks[k].originNs - clocks[0].originNs) - clocks[k].offsetNs;
    };
    int inFile = 1;
    std::uint64_t worst = 0;
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t k = 0; k < clocks.size(); ++k) {
      const bool merged = k > 0 && k < parts.size() && !parts[k].empty();
      if (merged) trace_->addMachinePart(parts[k], shiftOf(k)), ++inFile;
      if (static_cast<int>(k) == place_.machine && k > 0) trace_->shift(shiftOf(k));
      worst = std::max(worst, clocks[k].errorNs);
      list.push_back({{"machine", k}, {"host", clocks[k].host}, {"clock_offset_us", clocks[k].offsetNs * 1e-3},
                      {"clock_error_us", clocks[k].errorNs * 1e-3}, {"round_trip_us", clocks[k].roundTripNs * 1e-3},
                      {"in_this_file", merged || static_cast<int>(k) == place_.machine}});
    }
    trace_->setMachines(list.dump());
    if (inFile < place_.machines) path = machineTracePath(path, place_.machine, place_.machines);
    worldInFile = inFile * world_;
    machines = clocks.empty()
                   ? fmt::format(", machine {} only: the machines' clocks were never compared", place_.machine)
               : inFile == place_.machines
                   ? fmt::format(" of {} machines, their clocks aligned to machine 0's within {:.1f} us", inFile, worst * 1e-3)
                   : fmt::format(", machine {} only (the others wrote their own), on machine 0's clock within {:.1f} us",
                                 place_.machine, worst * 1e-3);
  }
  trace_->setSummary(report.utilisation, options_.traceEvents, worldInFile);
  trace_->write(path);
  log_->log(provisional ? spdlog::level::debug : spdlog::level::info, "trace: {} ({} spans{}{}); open it in Perfetto (ui.perfetto.dev) or chrome://tracing, or run 'xspawn "
             "report {}'",
             path, trace_->spans(), machines,
             trace_->dropped() ? fmt::format(", the oldest {} overwritten: raise --trace-events", trace_->dropped()) : "",
             path);
}

std::int64_t Supervisor::clockSkewNs() {
  const char* v = std::getenv(kEnvClockSkewUs);
  if (!v || !*v) return 0;
  char* end = nullptr;
  errno = 0;
  const long long us = std::strtoll(v, &end, 10);
  XS_CHECK(*end == '\0' && errno == 0 && us > -1000000000000LL && us < 1000000000000LL, UsageError,
           fmt::format("{}={}: give a whole number of microseconds (for tests only)", kEnvClockSkewUs, v));
  return us * 1000;
}

}  // namespace xs::detail
