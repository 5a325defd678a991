// supervisor_run.cpp: a job's life across attempts (restarts), its stalls, and its report;
// spawn() and run().
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "context.hpp"
#include "control.hpp"
#include "file_replace.hpp"
#include "flags_text.hpp"
#include "supervisor.hpp"
#include "telemetry.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

// The time the stack tool gets for each stalled rank, and for how many of them.
constexpr std::chrono::milliseconds kStackBudget{3000};
constexpr std::size_t kMaxStacks = 4;

}  // namespace

void Supervisor::sampleProgress() {
  std::vector<pid_t> pids;
  for (const Worker& w : workers_) pids.push_back(w.reaped ? 0 : w.pid);
  progress_->sample(*segment_, pids);
  observeSample();
}

void Supervisor::onStall() {
  stallHandled_ = true;
  std::vector<bool> running;
  for (const Worker& w : workers_) running.push_back(!w.reaped && w.pid > 0);
  const std::vector<int> behind = findLaggards(*segment_, running);
  if (behind.empty()) return;  // nobody behind: the deadline itself is the cause
  std::vector<int> global;
  for (int r : behind) global.push_back(globalRank(r));
  log_->warn("{} did not arrive where the others waited: describing {} before stopping the job",
             formatRanks(global), behind.size() == 1 ? "it" : "them");
  stallText_ = fmt::format("{} stalled (did not arrive; stopped by xspawn): {}", formatRanks(global),
                           segment_->header().abortText.load());
  for (std::size_t i = 0; i < behind.size(); ++i) {
    const int r = behind[i];
    Worker& w = workers_[r];
    const ProcSample now = sampleProcess(w.pid);
    w.stall = describeLaggard(*segment_, r, w.pid, progress_->sinceProgress(r, now.cpuSeconds),
                              i < kMaxStacks ? kStackBudget : std::chrono::milliseconds(0));
    w.stalled = true;
    w.stoppedByUs = true;
    // Stalled ranks may be stopped or ignore SIGTERM: they end now, so the report comes at
    // the deadline and not a kill grace later.
    ::kill(w.pid, SIGKILL);
  }
}

RankOutcome Supervisor::rankOutcome(int r) const {
  const Worker& w = workers_[r];
  const RankSlot& slot = segment_->slot(r);
  RankOutcome o;
  o.rank = globalRank(r);
  o.localRank = r;
  o.pid = w.pid;
  o.started = w.pid > 0;
  o.exited = w.reaped;
  o.exitCode = w.exitCode;
  o.signal = w.signal;
  o.endSeconds = w.endSeconds;
  o.killedBySupervisor = w.stoppedByUs;
  o.boundCpu = slot.boundCpu.load(std::memory_order_relaxed);
  auto kind = static_cast<ErrorKind>(slot.errorKind.load(std::memory_order_acquire));
  if (kind != ErrorKind::kNone) o.error = slot.errorText.load();
  o.secondary = kind == ErrorKind::kSecondary || (w.stoppedByUs && kind != ErrorKind::kPrimary);
  o.stalled = w.stalled;
  o.stall = w.stall;
  // At a stall, the ranks that timed out waiting are victims of the stalled ones.
  if (stallHandled_ && !w.stalled) o.secondary = true;
  if (w.stalled) o.secondary = false;
  OpSnapshot op = ControlPlane::snapshot(slot);
  if (op.seq != 0) o.lastOp = (op.state == OpState::kWaiting ? "at " : "past ") + op.describe();
  o.outputTail = output_->tail(r);
  if (w.reaped && (w.signal != 0 || w.exitCode != 0)) {
    o.traceback = output_->traceback(r).traceback();
    if (o.error.empty()) o.error = output_->traceback(r).exception();
  }
  return o;
}

JobReport Supervisor::buildReport() const {
  JobReport rep;
  rep.jobId = jobId_;
  rep.worldSize = world_;
  rep.startMethod = options_.startMethod == StartMethod::kFork ? "fork" : "exec";
  rep.seconds = elapsed();
  rep.processGroup = pgid_;
  rep.interruptedBy = interruptedBy_;
  const SegmentHeader& h = segment_->header();
  rep.usableCores = static_cast<int>(h.usableCpus);
  std::uint64_t word = h.abortWord.load(std::memory_order_acquire);
  if (word != 0 && word != kAbortPending) {
    switch (abortReasonOf(word)) {
      case AbortReason::kRankFailed: rep.abortReason = "rank failed"; break;
      case AbortReason::kDivergence: rep.abortReason = "divergence"; break;
      case AbortReason::kTimeout: rep.abortReason = "timeout"; break;
      case AbortReason::kInterrupted: rep.abortReason = "interrupted"; break;
      case AbortReason::kMachineFailed: rep.abortReason = "machine failed"; break;
      default: rep.abortReason = "unknown"; break;
    }
    rep.abortText = h.abortText.load();
  }
  rep.ranksAt = ControlPlane::describeRanks(*segment_);
  bool allZero = true;
  double bestTime = 0;
  bool bestSecondary = true;
  bool bestStalled = false;
  for (int r = 0; r < world_; ++r) {
    RankOutcome o = rankOutcome(r);
    if (o.failed()) {
      allZero = false;
      // The root cause: a rank behind the others at a stall; else the earliest failure that
      // was the rank's own (not a consequence of the abort), else the earliest failure.
      const double t = workers_[r].endSeconds;
      const bool better = rep.rootCause < 0 || (o.stalled && !bestStalled) ||
                          (o.stalled == bestStalled && ((bestSecondary && !o.secondary) ||
                                                        (bestSecondary == o.secondary && t < bestTime)));
      if (better) {
        rep.rootCause = r;
        bestTime = t;
        bestSecondary = o.secondary;
        bestStalled = o.stalled;
      }
    }
    rep.ranks.push_back(std::move(o));
  }
  rep.machine = place_.machine;
  rep.machines = place_.machines;
  if (proxy_) {
    auto hosts = proxy_->hosts();
    if (place_.machine < static_cast<int>(hosts.size())) rep.host = hosts[place_.machine];
    rep.machinesFinished = proxy_->finishedMachines();
  }
  // Another machine's failure is the root cause when no rank here failed on its own.
  if (!machineCause_.empty() && (rep.rootCause < 0 || (bestSecondary && !bestStalled))) {
    rep.machineCause = machineCause_;
    rep.rootCause = -1;
    allZero = false;
  }
  if (allZero && interruptedBy_.empty()) {
    rep.status = "succeeded";
    rep.exitCode = 0;
  } else {
    rep.status = interruptedBy_.empty() ? "failed" : "interrupted";
    if (rep.rootCause >= 0 && rep.ranks[rep.rootCause].stalled) {
      rep.exitCode = kStallExitCode;
    } else if (rep.rootCause >= 0) {
      const RankOutcome& root = rep.ranks[rep.rootCause];
      rep.exitCode = root.signal ? 128 + root.signal : root.exitCode;
    } else if (!rep.machineCause.empty()) {
      rep.exitCode = machineCauseCode_;
    } else {
      rep.exitCode = 128 + (interrupts_ ? SIGINT : 0);
    }
  }
  rep.restartCount = attempt_;
  rep.attempts = attempts_;
  AttemptOutcome attempt{attempt_, rep.status, rep.exitCode, attemptStart_, rep.seconds - attemptStart_, rep.headline()};
  std::uint64_t lastFirstOp = 0;
  for (int r = 0; r < world_; ++r) {
    const std::uint64_t ns = segment_->slot(r).firstOpNs.load(std::memory_order_relaxed);
    lastFirstOp = ns == 0 || lastFirstOp == ~0ULL ? ~0ULL : std::max(lastFirstOp, ns);
  }
  if (lastFirstOp != ~0ULL && lastFirstOp != 0) {
    attempt.readySeconds = (static_cast<double>(lastFirstOp) - static_cast<double>(startNs())) * 1e-9;
  }
  if (rep.rootCause >= 0) attempt.failureSeconds = rep.ranks[rep.rootCause].endSeconds;
  rep.attempts.push_back(attempt);
  return rep;
}

JobReport Supervisor::runAttempt() {
  prepareAttempt();
  log_->info("job '{}': {} {} workers ({}), shared memory /dev/shm/{} ({} KiB, and {} MiB of shared heap "
             "reserved, taken as allocated)",
             jobId_, attempt_ == 0 ? "starting" : fmt::format("restart {}: starting", attempt_), world_,
             options_.startMethod == StartMethod::kFork ? "fork" : "exec", segment_->name(),
             (segment_->size() - heapReservedBytes_) / 1024, heapReservedBytes_ >> 20);
  try {
    const std::uint64_t spawnNs = telemetry::nowNs();
    startWorkers();
    observeSpawn(spawnNs);
    if (attempt_ == 0) joinMachines();
    loop();
  } catch (...) {
    // Never leave workers or the segment behind, whatever went wrong here.
    if (pgid_ > 0) ::killpg(pgid_, SIGKILL);
    for (Worker& w : workers_)
      if (w.pid > 0 && !w.reaped) ::waitpid(w.pid, nullptr, 0);
    finishAttempt();
    throw;
  }
  finishAttempt();
  JobReport report = buildReport();
  observeAttempt(report);
  return report;
}

bool Supervisor::restartAfter(const JobReport& report) {
  if (report.succeeded() || attempt_ >= options_.maxRestarts) return false;
  drainSignals();  // a Ctrl-C that came as the attempt ended
  if (!interruptedBy_.empty()) return false;
  if (options_.printReport) {
    std::string text = report.text();
    std::fflush(stdout);
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
  if (fileLog_) fileLog_->error("job report of attempt {}:\n{}", attempt_, report.text());
  log_->warn("job '{}': attempt {} failed ({}); restarting the gang: restart {} of at most {} (--max-restarts)",
             jobId_, attempt_, report.headline(), attempt_ + 1, options_.maxRestarts);
  attempts_.push_back(report.attempts.back());
  ++attempt_;
  return true;
}

void Supervisor::saveReport(const JobReport& report) {
  const std::string path = options_.logDir + "/report.json";
  const std::string json = report.json();
  const ReplaceResult written = replaceFile(path, {json, "\n"});
  if (written) return;
  // Not lost: the report goes to stderr instead.
  log_->error("cannot write the job report to {} ({}): check the free space and the permissions of --log-dir; "
              "the report follows on stderr",
              path, std::strerror(written.err));
  const std::string text = json + "\n";
  std::fflush(stdout);
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

JobResult Supervisor::run() {
  start_ = Clock::now();
  prepareJob();
  observeStart();
  installSignals();
  JobResult result;
  try {
    do {
      result.report = runAttempt();
    } while (restartAfter(result.report));
  } catch (...) {
    restoreSignals();
    throw;
  }
  restoreSignals();
  result.exitCode = result.report.exitCode;
  observeEnd(result.report);
  if (!options_.logDir.empty()) saveReport(result.report);
  if (result.report.succeeded()) {
    std::string line = result.report.text();
    log_->info("{}", line.substr(std::string("xspawn: ").size(), line.size() - std::string("xspawn: ").size() - 1));
  } else {
    std::string text = result.report.text();
    if (options_.printReport) {
      std::fflush(stdout);
      ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
      (void)ignored;
    }
    if (fileLog_) fileLog_->error("job report:\n{}", text);
  }
  return result;
}

bool mainOptions(int argc, const char* const* argv, SpawnOptions& options) {
  try {
    options.flags = Flags::fromArgs(argc, argv);
    options.quiet = true;
    options.flags.get("nprocs", 0);  // a bad count is a usage error now, not in every worker
    options.maxRestarts = options.flags.get("max-restarts", 0);
    options.injectFault = options.flags.get("inject-fault", std::string());
    return true;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "xspawn", e.what());
    return false;
  }
}

JobResult spawnWorkers(WorkerFn fn, SpawnOptions options) {
  if (startedByXspawn()) {
    // This process is one of the workers already (an exec'd start, or `xspawn run`): be it.
    attachFromEnvironment();
    // The program's own flags, with those a launcher handed down (an exec'd start of
    // xs::spawn, where they are the same) on top; `xspawn run` hands down none.
    Flags flags = options.flags;
    if (const char* f = std::getenv(kEnvFlags)) {
      const Flags handed = deserializeFlags(f);
      for (const auto& [key, value] : handed.values()) flags.set(key, value);
    }
    int code = runWorkerFunction(fn, get_ordinal(), flags);
    std::fflush(stdout);
    std::fflush(stderr);
    // The worker's life is the function's; its end is this process's end.
    std::exit(code & 0xff);
  }
  Supervisor supervisor(std::move(options), std::move(fn));
  return supervisor.run();
}

}  // namespace xs::detail

namespace xs {

JobResult run(SpawnOptions options) {
  options.startMethod = StartMethod::kExec;
  if (options.program.empty()) XS_THROW(UsageError, "run: no program given");
  detail::Supervisor supervisor(std::move(options), {});
  return supervisor.run();
}

}  // namespace xs
