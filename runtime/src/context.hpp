// context.hpp: the worker-side state of a process attached to a job (its rank, the mapped
// segment, its control plane) and the worker's life: attach, run the worker function,
// record an error in its status slot.
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "control.hpp"
#include "segment.hpp"
#include "xspawn/spawn.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::detail {

class Collectives;
class MachineClient;

struct Context {
  Segment* segment = nullptr;              // the job's segment
  std::unique_ptr<Segment> ownedSegment;   // set when this process mapped it itself
  std::unique_ptr<ControlPlane> control;
  int rank = 0;
  int localRank = 0;
  int worldSize = 1;
  int localWorldSize = 1;
  std::string jobId;
  int restartCount = 0;
  DeviceInfo device;
  std::unique_ptr<Collectives> collectives;  // created on first use
  std::unique_ptr<MachineClient> machineClient;  // created on first use
  ~Context();
};

// The process's context, or nullptr before init.
Context* currentContext();
// The context, or NotInitializedError naming the API that needed it.
Context& requireContext(const char* api);

// What a worker knows about its place in the job (from the environment or the supervisor).
struct WorkerPlace {
  int rank = 0;
  int localRank = 0;
  int worldSize = 1;
  int localWorldSize = 1;
  int cpu = -1;
  std::string jobId;
  std::chrono::milliseconds timeout{300000};
  WaitMode waitMode = WaitMode::kHybrid;
  int restartCount = 0;
};

// In a forked worker: use the inherited mapping.
void attachInherited(Segment& segment, const WorkerPlace& place);
// In an exec'd worker: map the segment named by XSPAWN_SHM. Returns false when the process
// was not started by xspawn (no XSPAWN_* environment).
bool attachFromEnvironment();
// True when the environment says this process is an xspawn worker.
bool startedByXspawn();

// Runs fn and turns its end into an exit code, recording an exception in the status slot
// (and aborting the job so that peers stop waiting for this rank).
int runWorkerFunction(const WorkerFn& fn, int index, const Flags& flags);
// Records the exception as this rank's error (primary or, for an abort, secondary).
void recordWorkerError(std::exception_ptr error);
// Records a plain message as this rank's primary error.
void recordWorkerMessage(const std::string& message);
// "std::runtime_error: boom" for any exception.
std::string describeException(std::exception_ptr error);

// Names of the environment variables the launcher sets.
inline constexpr const char* kEnvRank = "XSPAWN_RANK";
inline constexpr const char* kEnvLocalRank = "XSPAWN_LOCAL_RANK";
inline constexpr const char* kEnvWorldSize = "XSPAWN_WORLD_SIZE";
inline constexpr const char* kEnvLocalWorldSize = "XSPAWN_LOCAL_WORLD_SIZE";
inline constexpr const char* kEnvJobId = "XSPAWN_JOB_ID";
inline constexpr const char* kEnvShm = "XSPAWN_SHM";
inline constexpr const char* kEnvTimeoutMs = "XSPAWN_TIMEOUT_MS";
inline constexpr const char* kEnvCpu = "XSPAWN_BIND_CPU";
inline constexpr const char* kEnvWait = "XSPAWN_WAIT";
inline constexpr const char* kEnvFlags = "XSPAWN_FLAGS";
// The restart this gang belongs to (0: the first start); see SpawnOptions::maxRestarts.
inline constexpr const char* kEnvRestartCount = "XSPAWN_RESTART_COUNT";
// Faults to act out (fault.hpp): set by --inject-fault, or by whoever starts the job.
inline constexpr const char* kEnvInjectFault = "XSPAWN_INJECT_FAULT";
// For tests of a job spanning machines on one machine: this launcher's clock reads that many
// microseconds ahead when the machines' clocks are aligned for the trace (a whole number,
// negative for behind).
inline constexpr const char* kEnvClockSkewUs = "XSPAWN_CLOCK_SKEW_US";

}  // namespace xs::detail
