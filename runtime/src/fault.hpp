// fault.hpp: fault injection: a failure acted out on purpose by a chosen rank at a chosen
// moment, so that a pipeline's CI (and xspawn's own tests) can prove it copes with crashes,
// hangs, stalls and slow ranks. The spec comes from --inject-fault / SpawnOptions::injectFault
// or the XSPAWN_INJECT_FAULT environment variable (programs started by others):
//
//   SPEC  := FAULT [';' FAULT ...]
//   FAULT := 'rank=' R ',kind=' KIND [',step=' N | ',at=' TAG | ',collective=' K]
//            [',attempt=' A | ',attempt=any']
//   KIND  := crash | segv | abort | exit:CODE | throw | hang | spin | stop | slow:DURATION | oom
//
// With no trigger the fault fires when the worker starts; step=N at the rank's N-th
// xs::optimizer_step, at=TAG when it enters the rendezvous or collective TAG (first time),
// collective=K when it enters its K-th collective. attempt (default 0) is the restart the
// fault belongs to, so a job with --max-restarts recovers from it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "segment_layout.hpp"

namespace xs::detail {

enum class FaultKind { kCrash, kSegv, kAbort, kExit, kThrow, kHang, kSpin, kStop, kSlow, kOom };
enum class FaultTrigger { kStart, kStep, kTag, kCollective };

struct Fault {
  int rank = -1;  // global rank; -1: every rank
  FaultKind kind = FaultKind::kCrash;
  int exitCode = 1;                      // kExit
  std::chrono::milliseconds delay{0};    // kSlow: added at this trigger and every later one
  FaultTrigger trigger = FaultTrigger::kStart;
  std::int64_t count = 0;                // kStep, kCollective: 1-based
  std::string tag;                       // kTag
  int attempt = 0;                       // -1: every attempt
  // "kind=crash on rank 2 at step 100"
  std::string describe() const;
};

// Parses a spec; UsageError naming the bad part, the accepted forms and `source` (the option
// or variable it came from).
std::vector<Fault> parseFaults(std::string_view spec, std::string_view source);

namespace fault {
// True when this process has a fault to act out (checked inline on the hot paths).
extern bool gArmed;
// Keeps the faults of `spec` that belong to this rank and attempt.
void arm(std::string_view spec, int rank, int attempt);
// The trigger points; each acts out the matching faults (and returns unless it ended the
// process, threw or hung).
void atStart();
void atStep();
void atOp(OpKind kind, std::string_view tag);
}  // namespace fault

}  // namespace xs::detail
