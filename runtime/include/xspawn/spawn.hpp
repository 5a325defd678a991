// spawn.hpp: xs::spawn and xs::run: start N worker processes and supervise them to the end
// (the same code the `xspawn` launcher runs). The worker function runs as
// fn(int index, const Flags&) in each process, as torch_xla's xmp.spawn(map_fn) does.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "xspawn/flags.hpp"
#include "xspawn/report.hpp"

namespace xs {

enum class StartMethod { kFork, kExec };
enum class BindTo { kNone, kCore };
// How waits inside rendezvous and collectives wait (kHybrid: spin briefly, then futex).
enum class WaitPolicy { kHybrid, kSpin, kFutex };

struct SpawnOptions {
  int nprocs = 0;                    // 0: usableCores()
  StartMethod startMethod = StartMethod::kFork;
  BindTo bindTo = BindTo::kNone;     // kCore: worker i pinned to core i mod cores
  std::chrono::milliseconds timeout{300000};  // deadline of every rendezvous and collective
  std::string logDir;                // one log per rank, the launcher's log, report.json
  bool tagOutput = false;            // "[rank i] " before every console line
  bool quiet = false;                // no start/end lines from the supervisor
  bool printReport = true;           // the failure report on stderr
  std::string jobId;                 // empty: generated
  Flags flags;                       // handed to every worker function
  std::vector<std::string> program;  // kExec: the program and its arguments (empty: this one)
  std::chrono::milliseconds killGrace{10000};  // after SIGTERM, how long until SIGKILL
  WaitPolicy waitPolicy = WaitPolicy::kHybrid;
  std::size_t rendezvousChunk = 32 * 1024;  // bytes per rank and round of rendezvous payload
  // Shared memory of the collectives, per rank: staging buffers (two of stageBytes), a ring
  // FIFO (ringSlots x ringSlotBytes) and the shared heap for zero-copy tensors.
  std::size_t stageBytes = 2 * 1024 * 1024;
  std::size_t ringSlots = 8;
  std::size_t ringSlotBytes = 128 * 1024;
  // The shared heap per rank (xs::shared_alloc, xs::optimizer_step's gradients): reserved, not
  // used: its pages come from /dev/shm only as allocations take them, so the default needs no
  // sizing for any network up to 250M parameters.
  std::size_t sharedHeapBytes = std::size_t{1} << 30;
  // Jobs spanning machines (under mpirun): the buffer that carries rendezvous payloads
  // between this machine's ranks and the launcher's MPI proxy.
  std::size_t machineBufferBytes = 4 * 1024 * 1024;
  std::vector<std::string> extraEnv; // "NAME=value" for every worker
  // After a failure, stop and clean up the gang, then start a new one, up to this many times
  // (torchrun's --max-restarts). Workers see the attempt in xs::restart_count() and
  // XSPAWN_RESTART_COUNT. Not for jobs spanning machines. A Ctrl-C is never restarted.
  int maxRestarts = 0;
  // Faults to act out (fault injection for CI), e.g. "rank=2,step=100,kind=crash": see
  // docs/process-model.md. Empty: those of XSPAWN_INJECT_FAULT in the environment, if any.
  std::string injectFault;
  // Writes the job's trace timeline to this file: a Chrome trace event file (Perfetto,
  // chrome://tracing) with a track per rank and the launcher's (see xspawn/trace.hpp). Empty:
  // no trace, and no tracing cost. Under mpirun machine 0 writes the whole job's (docs/observability.md).
  std::string traceFile;
  // Spans kept per rank for the trace (the newest; 64 bytes each in the job's shared memory: 8 MiB per rank by default).
  std::size_t traceEvents = 131072;
};

struct JobResult {
  // 0 only when every rank exited 0; else the first failure's code or 128+signal, 124 when
  // ranks stalled (the others timed out waiting for them). With restarts: the last attempt's.
  int exitCode = 0;
  JobReport report;
  bool succeeded() const { return exitCode == 0; }
};

namespace detail {
// spawn's worker function, with an int result whatever the caller's returns.
using WorkerFn = std::function<int(int index, const Flags& flags)>;
JobResult spawnWorkers(WorkerFn fn, SpawnOptions options);
}  // namespace detail

// Runs fn(index, options.flags) in `nprocs` processes (0: one per usable core, usableCores()), supervises
// them and returns when all have ended. A worker process ends when fn returns: exit code 0
// (or fn's int result), 1 if fn throws. Inside a worker (the process was started by xspawn),
// spawn runs fn as this worker and ends the process. Call it before starting threads.
template <class Fn>
JobResult spawn(Fn&& fn, int nprocs, SpawnOptions options = {}) {
  options.nprocs = nprocs;
  detail::WorkerFn wrapped = [f = std::forward<Fn>(fn)](int index, const Flags& flags) -> int {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, int, const Flags&>>) {
      f(index, flags);
      return 0;
    } else {
      return static_cast<int>(f(index, flags));
    }
  };
  return detail::spawnWorkers(std::move(wrapped), std::move(options));
}

namespace detail {
// Flags from argv and the options spawn_main starts with; prints a usage error and returns
// false when the command line is not understood.
bool mainOptions(int argc, const char* const* argv, SpawnOptions& options);
}

// A training program's main in one line: its flags from the command line (Flags::fromArgs:
// --key value), `--nprocs N` workers (default: defaultNprocs; 0: one per usable core), started
// quietly by spawn; `--max-restarts N` and `--inject-fault SPEC` as the launcher's options. Returns the job's exit status (2 for a command line it cannot read), for
// main to return.
template <class Fn>
int spawn_main(Fn&& fn, int argc, char** argv, int defaultNprocs = 0) {
  SpawnOptions options;
  if (!detail::mainOptions(argc, argv, options)) return 2;
  const int nprocs = options.flags.get("nprocs", defaultNprocs);  // before options is moved
  return spawn(std::forward<Fn>(fn), nprocs, std::move(options)).exitCode;
}

// Runs options.program (argv) as the N workers: each gets XSPAWN_RANK, XSPAWN_LOCAL_RANK,
// XSPAWN_WORLD_SIZE, XSPAWN_JOB_ID and what xs::init() needs to attach.
JobResult run(SpawnOptions options);

// The number of the machine's online cores.
int onlineCores();

// The cores this process may use: the CPUs of its affinity mask (taskset, a container's
// cpuset, mpirun's binding), capped by a cgroup CPU quota (docker --cpus, a Kubernetes CPU
// limit) rounded up; at most onlineCores(). The default nprocs; a job with more ranks than this
// is oversubscribed (its waits sleep at once instead of spinning).
int usableCores();

}  // namespace xs
