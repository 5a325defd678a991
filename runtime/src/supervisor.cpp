// supervisor.cpp: starting, watching and stopping a job's workers (one attempt of the job).
#include "supervisor.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "context.hpp"
#include "cpus.hpp"
#include "control.hpp"
#include "fault.hpp"
#include "flags_text.hpp"
#include "subprocess.hpp"
#include "torch_env.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

// After the first failure, how long the other ranks get to notice the abort and end on
// their own (recording why) before they are sent SIGTERM.
constexpr std::chrono::milliseconds kTermDelay{500};
// Once every worker is reaped, how long to keep reading pipes a worker's own child may hold.
constexpr int kDrainMs = 200;
// How often the launcher samples its ranks' progress (ops and CPU time) for stall reports.
constexpr std::chrono::milliseconds kSampleEvery{500};

std::vector<std::string> selfArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  return argv;
}

// Only async-signal-safe calls between fork and exec/_exit in a child: write(2) a message.
void childFail(const char* what, const char* detail) {
  std::string msg = fmt::format("xspawn: {}: {}\n", what, detail);
  ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
  (void)ignored;
}

}  // namespace

void validateJobId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 48;
  for (char c : id) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok) {
    XS_THROW(UsageError, fmt::format("--job-id '{}' is not valid: use 1 to 48 characters from "
                                     "letters, digits, '.', '_' and '-'",
                                     id));
  }
}

std::string generateJobId() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

Supervisor::Supervisor(SpawnOptions options, WorkerFn fn)
    : options_(std::move(options)), fn_(std::move(fn)) {}

Supervisor::~Supervisor() {
  if (signalFd_ >= 0) ::close(signalFd_);
}

double Supervisor::elapsed() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void Supervisor::prepareJob() {
  world_ = options_.nprocs == 0 ? usableCores() : options_.nprocs;
  if (world_ < 1) {
    XS_THROW(UsageError, fmt::format("the number of processes must be at least 1 (got {})", world_));
  }
  place_ = detectMachines();
  if (place_.machines > 1) {
    // One job id for all machines (mpirun's job), and a segment per machine.
    const char* mpiJob = std::getenv("PMIX_NAMESPACE");
    std::string base = !options_.jobId.empty() ? options_.jobId
                       : mpiJob                 ? fmt::format("mpi{}", std::hash<std::string>{}(mpiJob) % 100000000)
                                                : generateJobId();
    validateJobId(base);
    jobId_ = fmt::format("{}.m{}", base, place_.machine);
    transport_ = loadMpiTransport();
    clockSkewNs_ = clockSkewNs();
  } else {
    jobId_ = options_.jobId.empty() ? generateJobId() : options_.jobId;
  }
  validateJobId(jobId_);
  if (options_.startMethod == StartMethod::kExec) {
    execArgv_ = options_.program.empty() ? selfArgv() : options_.program;
    if (execArgv_.empty()) XS_THROW(UsageError, "no program to run");
    // Rank 0's store for a PyTorch program (torch_env.hpp): on one machine at 127.0.0.1; under
    // mpirun machine 0 holds a port on every address, and the handshake tells the others.
    if (place_.machines == 1) masterPort_.reserve(kMasterAddr);
    else if (place_.machine == 0) masterPort_.reserve(kAnyAddr);
    pythonDir_ = pythonPackageDir();
  } else if (!fn_) {
    XS_THROW(UsageError, "the fork start method needs a worker function; run a program with exec");
  }

  if (options_.maxRestarts < 0) {
    XS_THROW(UsageError, fmt::format("--max-restarts must be 0 or more (got {})", options_.maxRestarts));
  }
  if (options_.maxRestarts > 0 && place_.machines > 1) {
    XS_THROW(UsageError, "--max-restarts is for jobs on one machine: under mpirun, restart the whole job from its "
                         "last checkpoint instead (docs/cluster.md)");
  }
  // A bad fault spec is a usage error here, not N copies of it in the workers.
  if (!options_.injectFault.empty()) {
    parseFaults(options_.injectFault, "--inject-fault");
  } else if (const char* spec = std::getenv(kEnvInjectFault); spec && *spec) {
    parseFaults(spec, kEnvInjectFault);
  }
  // Under mpirun every machine writes its own logs: DIR/machine-<k> (DIR may be shared).
  if (place_.machines > 1 && !options_.logDir.empty()) {
    options_.logDir += fmt::format("/machine-{}", place_.machine);
  }
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  console->set_level(options_.quiet ? spdlog::level::warn : spdlog::level::info);
  console->set_pattern("xspawn: %v");
  sinks.push_back(console);
  if (!options_.logDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.logDir, ec);
    if (ec || ::access(options_.logDir.c_str(), W_OK) != 0) {
      XS_THROW(UsageError, fmt::format("--log-dir {}: cannot create or write it{}", options_.logDir,
                                       ec ? ": " + ec.message() : std::string()));
    }
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(options_.logDir + "/launcher.log", true);
    file->set_level(spdlog::level::debug);
    file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    sinks.push_back(file);
    fileLog_ = std::make_shared<spdlog::logger>("xspawn-file", file);
    fileLog_->flush_on(spdlog::level::debug);
  }
  log_ = std::make_shared<spdlog::logger>("xspawn", sinks.begin(), sinks.end());
  log_->set_level(spdlog::level::debug);
  log_->flush_on(spdlog::level::debug);

  for (const StaleSegment& s : sweepStaleSegments()) {
    if (s.name.empty()) {
      log_->warn("removed the stale MPI files of job '{}' in {}: {}", s.jobId, s.transportDir, s.why);
    } else {
      log_->warn("removed stale shared memory /dev/shm/{} of job '{}'{}: {}", s.name, s.jobId,
                 s.transportDir.empty() ? "" : fmt::format(" and its MPI files in {}", s.transportDir), s.why);
    }
  }

  output_ = std::make_unique<OutputForwarder>(world_, options_.tagOutput, options_.logDir, 20,
                                              globalRank(0));
  cpus_ = allowedCpus();
  if (place_.machines > 1 && static_cast<int>(cpus_.size()) < std::min(world_, onlineCores())) {
    log_->warn("machine {}: {} binds this launcher to {} of {} CPUs, so its {} workers share them: start "
               "mpirun with --bind-to none (docs/cluster.md)",
               place_.machine, place_.via, cpus_.size(), onlineCores(), world_);
  }
}

void Supervisor::prepareAttempt() {
  segment_.reset();
  workers_.assign(static_cast<std::size_t>(world_), Worker{});
  phase_ = Phase::kRunning;
  termAt_ = killAt_ = Clock::time_point::max();
  termSent_ = killSent_ = false;
  pgid_ = 0;
  stallHandled_ = false;
  stallText_.clear();
  progress_ = std::make_unique<ProgressTracker>(world_);
  nextSample_ = Clock::now();
  attemptStart_ = elapsed();
  if (attempt_ > 0) output_->newAttempt(attempt_);
  SegmentConfig config;
  config.jobId = jobId_;
  config.geometry.worldSize = static_cast<std::uint32_t>(world_);
  config.geometry.payloadChunk = (std::max<std::size_t>(options_.rendezvousChunk, 64) + 63) / 64 * 64;
  if (options_.ringSlots < 2 || options_.ringSlots > kMaxRingSlots) {
    XS_THROW(UsageError, fmt::format("ring slots must be from 2 to {} (got {})", kMaxRingSlots, options_.ringSlots));
  }
  auto roundTo64 = [](std::size_t v) { return (std::max<std::size_t>(v, 4096) + 63) / 64 * 64; };
  config.geometry.coll.stageBytes = roundTo64(options_.stageBytes);
  config.geometry.coll.ringSlots = options_.ringSlots;
  config.geometry.coll.ringSlotBytes = roundTo64(options_.ringSlotBytes);
  config.geometry.coll.heapBytes = options_.sharedHeapBytes;
  if (place_.machines > 1) config.geometry.coll.machineBufferBytes = roundTo64(options_.machineBufferBytes);
  if (!options_.traceFile.empty()) config.geometry.coll.traceEvents = options_.traceEvents;
  sched_.assign(static_cast<std::size_t>(world_), SchedTimes{});
  samplesSeen_.clear();
  config.timeoutMs = options_.timeout.count();
  config.waitMode = static_cast<std::uint32_t>(options_.waitPolicy);
  segment_ = Segment::create(config);
  heapReservedBytes_ = config.geometry.worldSize * config.geometry.heapStride();
  if (MachineChannel* ch = segment_->machineChannel()) {
    ch->machine = static_cast<std::uint32_t>(place_.machine);
    ch->machines = static_cast<std::uint32_t>(place_.machines);
    ch->bufferBytes = config.geometry.coll.machineBufferBytes;
  }
}

void Supervisor::childMain(int rank, int outFd, int errFd) {
  // Join the job's process group (its leader is rank 0), so a terminal's Ctrl-C reaches only
  // the launcher, which forwards it, and the job can be signalled as one.
  ::setpgid(0, pgid_);
  // Die with the launcher: a worker must never outlive the process that cleans up after it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != selfPid_) ::_exit(1);  // the launcher died before prctl
  ::sigprocmask(SIG_SETMASK, &oldMask_, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  if (signalFd_ >= 0) ::close(signalFd_);
  int devNull = ::open("/dev/null", O_RDONLY);
  if (devNull >= 0) ::dup2(devNull, STDIN_FILENO);
  ::dup2(outFd, STDOUT_FILENO);
  ::dup2(errFd, STDERR_FILENO);

  int cpu = -1;
  if (options_.bindTo == BindTo::kCore) {
    cpu = cpus_[rank % cpus_.size()];
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) childFail("cannot bind to core", std::strerror(errno));
  }
  const int global = globalRank(rank);
  ::setenv(kEnvRank, std::to_string(global).c_str(), 1);
  ::setenv(kEnvLocalRank, std::to_string(rank).c_str(), 1);
  ::setenv(kEnvWorldSize, std::to_string(globalWorld()).c_str(), 1);
  ::setenv(kEnvLocalWorldSize, std::to_string(world_).c_str(), 1);
  ::setenv(kEnvJobId, jobId_.c_str(), 1);
  ::setenv(kEnvShm, segment_->name().c_str(), 1);
  ::setenv(kEnvTimeoutMs, std::to_string(options_.timeout.count()).c_str(), 1);
  ::setenv(kEnvCpu, std::to_string(cpu).c_str(), 1);
  ::setenv(kEnvWait, std::to_string(static_cast<int>(options_.waitPolicy)).c_str(), 1);
  ::setenv(kEnvRestartCount, std::to_string(attempt_).c_str(), 1);
  if (!options_.injectFault.empty()) ::setenv(kEnvInjectFault, options_.injectFault.c_str(), 1);
  // MPI belongs to the launcher: a worker that starts an MPI program must not take its place.
  if (place_.machines > 1) {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"}) ::unsetenv(v);
  }
  // One thread per emulated core, as torchrun does, unless the user said otherwise.
  ::setenv("OMP_NUM_THREADS", "1", 0);
  if (options_.startMethod == StartMethod::kExec) {
    TorchPlace torch{global, rank, globalWorld(), world_, place_.machine, place_.machines, attempt_,
                     options_.maxRestarts, jobId_, kMasterAddr, masterPort_.port(), pythonDir_};
    if (place_.machines > 1) awaitMaster(torch);
    setTorchEnv(torch);
  }
  for (const std::string& kv : options_.extraEnv) ::putenv(const_cast<char*>(kv.c_str()));

  if (options_.startMethod == StartMethod::kExec) {
    ::setenv(kEnvFlags, serializeFlags(options_.flags).c_str(), 1);
    std::vector<char*> argv;
    for (std::string& a : execArgv_) argv.push_back(a.data());
    argv.push_back(nullptr);
    const char* program = options_.program.empty() ? "/proc/self/exe" : argv[0];
    ::execvp(program, argv.data());
    int err = errno;
    std::string why = fmt::format("cannot run '{}': {}", execArgv_[0], std::strerror(err));
    childFail("exec failed", why.c_str());
    RankSlot& slot = segment_->slot(rank);
    slot.errorText.store(why);
    slot.errorKind.store(static_cast<std::uint32_t>(ErrorKind::kPrimary), std::memory_order_release);
    ::_exit(127);
  }
  WorkerPlace place;
  place.rank = global;
  place.localRank = rank;
  place.worldSize = globalWorld();
  place.localWorldSize = world_;
  place.cpu = cpu;
  place.jobId = jobId_;
  place.timeout = options_.timeout;
  place.waitMode = static_cast<WaitMode>(options_.waitPolicy);
  place.restartCount = attempt_;
  attachInherited(*segment_, place);
  int code = runWorkerFunction(fn_, global, options_.flags);
  std::fflush(stdout);
  std::fflush(stderr);
  // The worker's process ends with its function; _exit, not exit: the parent's atexit
  // handlers and static objects belong to the parent.
  ::_exit(code & 0xff);
}

void Supervisor::awaitMaster(TorchPlace& torch) {
  // Machine 0's address is known once the proxies' handshake passed, after the workers were
  // forked: wait for it here, before exec (the worker is no MPI process; its launcher is).
  // Acquire: pairs with the proxy's release of `joined` (the address and port are in place).
  const char* addr = std::getenv("MASTER_ADDR");  // the user's (mpirun -x) win
  const char* port = std::getenv("MASTER_PORT");
  const MachineChannel& channel = *segment_->machineChannel();
  const bool given = addr && *addr && port && *port;
  // At most the job's deadline: a machine that never joins is then named by the program's
  // first collective (its own deadline), as for any program.
  const auto deadline = Clock::now() + options_.timeout;
  while (!given && channel.joined.load(std::memory_order_acquire) == 0) {
    if (segment_->header().abortWord.load(std::memory_order_acquire) != 0) break;  // the job failed
    if (Clock::now() >= deadline) {
      childFail("machines not joined", "MASTER_ADDR and MASTER_PORT are not set: the launchers' handshake did "
                                       "not pass within --timeout");
      break;
    }
    ::usleep(1000);
  }
  const bool joined = channel.joined.load(std::memory_order_acquire) != 0;
  torch.masterAddr = addr && *addr ? addr : joined ? channel.masterAddr : "";
  torch.masterPort = port && *port ? std::atoi(port) : joined ? channel.masterPort : 0;
  if (torch.masterPort == 0) torch.masterAddr.clear();
}

void Supervisor::installSignals() {
  // Signals arrive through a signalfd in the poll loop, never in a handler.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, &oldMask_);
  signalFd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signalFd_ < 0) XS_THROW(SystemError, fmt::format("signalfd: {}", std::strerror(errno)));
  // A closed console (xspawn ... | head) must not kill the launcher: it still has to clean up.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &oldPipe_);
  selfPid_ = ::getpid();
}

void Supervisor::restoreSignals() {
  ::sigaction(SIGPIPE, &oldPipe_, nullptr);
  if (signalFd_ >= 0) {
    ::close(signalFd_);
    signalFd_ = -1;
  }
  // Pending SIGCHLDs of our (reaped) workers would otherwise hit the caller after unblocking.
  sigset_t pending;
  sigpending(&pending);
  if (sigismember(&pending, SIGCHLD)) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    timespec zero{};
    sigtimedwait(&chld, nullptr, &zero);
  }
  ::sigprocmask(SIG_SETMASK, &oldMask_, nullptr);
}

void Supervisor::startWorkers() {
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < world_; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      XS_THROW(SystemError, fmt::format("pipe: {}", std::strerror(errno)));
    }
    pid_t pid = ::fork();
    if (pid < 0) XS_THROW(SystemError, fmt::format("fork of rank {}: {}", r, std::strerror(errno)));
    if (pid == 0) {
      ::close(out[0]);
      ::close(err[0]);
      childMain(r, out[1], err[1]);
    }
    if (pgid_ == 0) pgid_ = pid;
    ::setpgid(pid, pgid_);  // also here: whichever of parent and child runs first
    ::close(out[1]);
    ::close(err[1]);
    output_->addRank(r, out[0], err[0]);
    workers_[r].pid = pid;
    RankSlot& slot = segment_->slot(r);
    slot.pid.store(pid, std::memory_order_relaxed);
    slot.state.store(static_cast<std::uint32_t>(RankState::kRunning), std::memory_order_release);
  }
  log_->debug("job '{}': {} workers started, process group {}", jobId_, world_, pgid_);
}

void Supervisor::signalLiving(int sig, bool markStopped) {
  for (Worker& w : workers_) {
    if (w.reaped || w.pid <= 0) continue;
    if (markStopped) w.stoppedByUs = true;
  }
  // The whole group: a worker's own children go too.
  if (pgid_ > 0) ::killpg(pgid_, sig);
}

void Supervisor::stopAfterFailure() {
  if (phase_ != Phase::kRunning) return;
  phase_ = Phase::kStopping;
  termAt_ = Clock::now() + kTermDelay;
  killAt_ = termAt_ + options_.killGrace;
}

void Supervisor::onSignal(int sig) {
  ++interrupts_;
  if (interrupts_ == 1) {
    interruptedBy_ = signalName(sig);
    log_->warn("{} received: forwarding it to the {} workers (again to kill them)",
               interruptedBy_, world_);
    // Under mpirun, SIGKILL follows one second after its SIGTERM (odls_base_sigkill_timeout),
    // which a loaded host can use up before the workers are reaped: the segment's name and the
    // transport's files go now (the mappings stay valid; the job is ending on every machine).
    if (proxy_) {
      segment_->unlink();
      proxy_->removeTransportFiles(false);
    }
    signalLiving(sig, false);
    phase_ = Phase::kStopping;
    killAt_ = Clock::now() + options_.killGrace;
    termAt_ = Clock::time_point::max();
  } else {
    log_->warn("{} received again: killing the workers", signalName(sig));
    signalLiving(SIGKILL, true);
    killSent_ = true;
  }
}

void Supervisor::drainSignals() {
  signalfd_siginfo info;
  while (::read(signalFd_, &info, sizeof info) == sizeof info) {
    if (info.ssi_signo != SIGCHLD) onSignal(static_cast<int>(info.ssi_signo));
  }
}

void Supervisor::onWorkerEnd(int r) {
  Worker& w = workers_[r];
  RankSlot& slot = segment_->slot(r);
  bool failed = w.signal != 0 || w.exitCode != 0;
  slot.exitCode.store(w.exitCode, std::memory_order_relaxed);
  slot.termSignal.store(w.signal, std::memory_order_relaxed);
  slot.state.store(static_cast<std::uint32_t>(failed ? RankState::kFailed : RankState::kExited),
                   std::memory_order_seq_cst);
  observeWorkerEnd(r);
  if (!failed) {
    log_->debug("rank {} (pid {}) exited 0 after {:.3f} s", r, w.pid, w.endSeconds);
    // Peers waiting for this rank must re-check: it will never arrive again.
    ControlPlane::wakeSleepers(*segment_);
    return;
  }
  RankOutcome outcome;
  outcome.started = outcome.exited = true;
  outcome.exitCode = w.exitCode;
  outcome.signal = w.signal;
  std::string text = place_.machines > 1
                         ? fmt::format("rank {} (local rank {}, pid {}) {}", globalRank(r), r, w.pid,
                                       outcome.describeEnd())
                         : fmt::format("rank {} (pid {}) {}", r, w.pid, outcome.describeEnd());
  if (slot.errorKind.load(std::memory_order_acquire) != 0) text += ": " + slot.errorText.load();
  log_->debug("{} after {:.3f} s", text, w.endSeconds);
  // Every rank waiting in a rendezvous or collective gives up now, naming this rank.
  ControlPlane::raiseAbort(*segment_, AbortReason::kRankFailed, r, text);
  if (!stallHandled_ && abortReasonOf(segment_->header().abortWord.load(std::memory_order_acquire)) ==
                            AbortReason::kTimeout) {
    onStall();
  }
  if (proxy_ && machineCause_.empty()) {
    // The other machines hear of this machine's root cause: the job's first abort (which a
    // failing rank raises itself, before a peer it woke can fail and be reaped first),
    // else this rank's end. Another machine's failure is not news to them.
    const SegmentHeader& h = segment_->header();
    const std::uint64_t word = h.abortWord.load(std::memory_order_acquire);
    std::string line = word != 0 && word != kAbortPending && abortReasonOf(word) != AbortReason::kMachineFailed
                           ? h.abortText.load()
                           : text;
    if (!stallText_.empty()) line = stallText_;
    // A timeout goes out as a stall (124): a machine that receives it looks for laggards of
    // its own, who are then the root cause there (the culprit may be on any machine).
    const bool timedOut = word != 0 && word != kAbortPending && abortReasonOf(word) == AbortReason::kTimeout;
    proxy_->reportFailure(timedOut ? kStallExitCode : w.signal ? 128 + w.signal : w.exitCode, line);
  }
  stopAfterFailure();
}

void Supervisor::reap() {
  for (int r = 0; r < world_; ++r) {
    Worker& w = workers_[r];
    if (w.reaped || w.pid <= 0) continue;
    int status = 0;
    pid_t got = ::waitpid(w.pid, &status, WNOHANG);
    if (got != w.pid) continue;
    w.reaped = true;
    w.endSeconds = elapsed();
    if (WIFSIGNALED(status)) w.signal = WTERMSIG(status);
    else w.exitCode = WEXITSTATUS(status);
    onWorkerEnd(r);
  }
}

void Supervisor::loop() {
  auto allReaped = [&] {
    for (const Worker& w : workers_)
      if (!w.reaped) return false;
    return true;
  };
  while (!allReaped()) {
    auto now = Clock::now();
    if (phase_ == Phase::kStopping) {
      if (!termSent_ && now >= termAt_) {
        log_->debug("sending SIGTERM to the workers still running");
        signalLiving(SIGTERM, true);
        termSent_ = true;
      }
      if (!killSent_ && now >= killAt_) {
        log_->warn("workers still running {} ms after SIGTERM: killing them",
                   options_.killGrace.count());
        signalLiving(SIGKILL, true);
        killSent_ = true;
      }
    }
    auto next = std::min(termSent_ ? Clock::time_point::max() : termAt_,
                         killSent_ ? Clock::time_point::max() : killAt_);
    if (phase_ == Phase::kRunning && now >= nextSample_) {
      sampleProgress();
      nextSample_ = now + kSampleEvery;
    }
    if (phase_ == Phase::kRunning) next = std::min(next, nextSample_);
    int timeoutMs = 1000;
    if (next != Clock::time_point::max()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
      timeoutMs = static_cast<int>(std::clamp<long long>(ms, 0, 1000));
    }
    std::vector<pollfd> fds{pollfd{signalFd_, POLLIN, 0}};
    if (proxy_) fds.push_back(pollfd{proxy_->eventFd(), POLLIN, 0});
    const std::size_t firstOutput = fds.size();
    output_->appendPollFds(fds);
    int n = ::poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) XS_THROW(SystemError, fmt::format("poll: {}", std::strerror(errno)));
    if (fds[0].revents & POLLIN) {
      drainSignals();
      reap();
    }
    if (proxy_ && (fds[1].revents & POLLIN)) onMachineEvents();
    for (std::size_t i = firstOutput; i < fds.size(); ++i)
      if (fds[i].revents) output_->onReadable(fds[i].fd);
    // SIGCHLD may coalesce or race with the read above; reaping is cheap and idempotent.
    reap();
  }
}

void Supervisor::joinMachines() {
  if (!transport_) return;
  // Open MPI's shared-memory files in a directory of this job's, which a sweep can remove if
  // mpirun is killed (docs/cluster.md); set here, on the main thread, before MPI_Init reads it.
  std::string dir = Segment::createTransportDir(segment_->name());
  if (dir.empty()) {
    log_->warn("machine {}: cannot make {} for Open MPI's shared-memory files (it exists already, or /dev/shm "
               "refused it): Open MPI keeps them in its default place, where a killed mpirun leaves them",
               place_.machine, Segment::transportDirFor(segment_->name()));
  }
  transport_->prepare(dir);
  proxy_ = std::make_unique<MachineProxy>(*segment_, std::move(transport_), std::move(dir), startNs(), clockSkewNs_,
                                          masterPort_.port());
  proxy_->start();
  log_->debug("machine {} of {}: MPI proxy started", place_.machine, place_.machines);
}

void Supervisor::onMachineEvents() {
  for (MachineProxy::Event& e : proxy_->takeEvents()) {
    if (machineCause_.empty()) {
      machineCause_ = e.text;
      machineCauseCode_ = e.remote && e.notice.exitCode != 0 ? e.notice.exitCode : 1;
    }
    log_->error("{}", e.text);
    // Another machine timed out waiting: if ranks here are behind, they are what it waited for.
    if (e.remote && e.notice.exitCode == kStallExitCode && !stallHandled_ && interruptedBy_.empty()) onStall();
    stopAfterFailure();
  }
}

void Supervisor::finishAttempt() {
  // The segment's name goes first: under mpirun a failed job's launchers get SIGKILL one
  // second after SIGTERM, and the mapping stays valid for the report anyway.
  segment_->unlink();
  // mpirun signals a launcher's whole process group: the workers may die of its SIGTERM before
  // the loop has read the launcher's own, still pending here. Read now, it removes the
  // transport's files before the drain and the proxy's stop below (onSignal), which can
  // outlast mpirun's second on a loaded host.
  drainSignals();
  output_->drain(kDrainMs);
  // Anything a worker left behind in the job's process group (a daemonised helper, a
  // grandchild still holding a pipe) goes with the job.
  if (pgid_ > 0) ::killpg(pgid_, SIGKILL);
  if (proxy_) {
    bool clean = machineCause_.empty() && interruptedBy_.empty();
    for (const Worker& w : workers_) clean = clean && w.reaped && w.signal == 0 && w.exitCode == 0;
    // Clean: leave MPI with the others (MPI_Finalize waits for the slowest machine).
    if (clean) {
      log_->info("machine {}: all {} ranks exited 0; waiting for the other machines to finish: a failure there "
                 "can no longer reach this machine, and mpirun's exit status is the whole job's",
                 place_.machine, world_);
    }
    if (clean && trace_) traceBeforeLeaving();
    // The transport's files go after MPI_Finalize: until then another launcher on this host
    // may still open them. If a failure elsewhere ends the job meanwhile, mpirun sends SIGTERM
    // and, a second later, SIGKILL: they go at the SIGTERM, in either kind of stop.
    proxy_->stop(clean, [this] {
      signalfd_siginfo info;
      while (::read(signalFd_, &info, sizeof info) == sizeof info) {
        if (info.ssi_signo != SIGCHLD) proxy_->removeTransportFiles(false);
      }
    });
    proxy_->removeTransportFiles();
    onMachineEvents();
  }
  phase_ = Phase::kDone;
}

}  // namespace xs::detail
