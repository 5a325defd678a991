// supervisor_observe.cpp: what the launcher observes of a job for its utilisation report and
// trace: every rank's scheduler times and the job's training samples (sampled with its progress,
// every 0.5 s), the spawn and each rank's end on the launcher's track, and at the end of an
// attempt the ranks' telemetry and trace rings, read from the segment before it goes.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "supervisor.hpp"
#include "telemetry.hpp"
#include "utilisation.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

// /proc/<pid>/schedstat of the process's main thread: seconds on a CPU, and runnable but
// waiting for one. False when the process is gone.
bool readSchedstat(pid_t pid, double& cpu, double& runqueue) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/schedstat", pid).c_str(), "r");
  if (!f) return false;
  unsigned long long run = 0, wait = 0;
  const bool ok = std::fscanf(f, "%llu %llu", &run, &wait) == 2;
  std::fclose(f);
  if (ok) cpu = static_cast<double>(run) * 1e-9, runqueue = static_cast<double>(wait) * 1e-9;
  return ok;
}

std::uint64_t steadyNs(std::chrono::steady_clock::time_point t) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
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
  const std::string probe = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "w");
  XS_CHECK(f != nullptr, UsageError,
           fmt::format("--trace {}: cannot create it ({}); give a file in an existing, writable directory", path,
                       std::strerror(errno)));
  std::fclose(f);
  std::remove(probe.c_str());
  trace_ = std::make_unique<TraceWriter>(steadyNs(start_), static_cast<int>(::getpid()), place_.machine);
}

void Supervisor::observeSample() {
  std::uint64_t samples = 0;
  for (int r = 0; r < world_; ++r) {
    const RankTelemetry& t = segment_->slot(r).telemetry;
    samples += t.samples.load(std::memory_order_relaxed);
    const Worker& w = workers_[r];
    SchedTimes& s = sched_[static_cast<std::size_t>(r)];
    if (w.reaped || w.pid <= 0 || !readSchedstat(w.pid, s.cpu, s.runqueue)) continue;
    // The report's window starts at the rank's first accounted span: so do its scheduler times.
    if (s.cpuBase < 0 && t.windowStartNs.load(std::memory_order_relaxed) != 0) s.cpuBase = s.cpu, s.runqueueBase = s.runqueue;
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

void Supervisor::observeAttempt(JobReport& report) {
  observeSample();  // the final counters: every rank has ended
  std::vector<RankFigures> figures;
  std::vector<int> pids;
  for (int r = 0; r < world_; ++r) {
    pids.push_back(workers_[r].pid);
    RankFigures f = readFigures(segment_->slot(r).telemetry, globalRank(r), workers_[r].pid);
    const SchedTimes& s = sched_[static_cast<std::size_t>(r)];
    if (s.cpuBase >= 0) f.cpuSeconds = s.cpu - s.cpuBase, f.runqueueSeconds = s.runqueue - s.runqueueBase;
    figures.push_back(f);
  }
  const std::vector<std::pair<double, double>> series = throughputSeries(samplesSeen_);
  UtilisationReport u = buildUtilisation(figures, static_cast<int>(segment_->header().onlineCpus), series,
                                         "the ranks' counters");
  if (u.present) report.utilisation = std::move(u);
  if (!trace_) return;
  trace_->addRanks(*segment_, pids, globalRank(0), attempt_);
  const std::uint64_t origin = steadyNs(start_);
  for (const auto& [t, rate] : series) trace_->counter("images/s", origin + static_cast<std::uint64_t>(t * 1e9), rate);
  if (!report.succeeded()) {
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
  trace_->setSummary(report.utilisation, options_.traceEvents);
  const std::string path = machineTracePath(options_.traceFile, place_.machine, place_.machines);
  try {
    trace_->write(path);
  } catch (const Error& e) {
    log_->error("{}", e.what());  // the job's own outcome stands
    return;
  }
  log_->info("trace: {} ({} spans{}); open it in Perfetto (ui.perfetto.dev) or chrome://tracing, or run 'xspawn "
             "report {}'",
             path, trace_->spans(),
             trace_->dropped() ? fmt::format(", the oldest {} overwritten: raise --trace-events", trace_->dropped()) : "",
             path);
}

}  // namespace xs::detail
