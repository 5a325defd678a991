// telemetry.hpp: what a rank's time goes to, recorded where the time is spent (the engine's
// forward and backward, the optimizer's update, the loader's wait, every collective and
// rendezvous, evaluations, checkpoints, a program's own xs::Trace spans).
//
// Always on: the main thread's counted categories, steps, samples and device memory are kept in
// the rank's slot (RankTelemetry: a few relaxed stores per span) for the launcher's utilisation
// report and `xspawn top`. With --trace, every span is also written to the rank's trace ring in
// the segment (TraceRing), which the launcher turns into a Chrome trace file at the end; without
// it nothing else is done.
#pragma once

#include <cstdint>
#include <string_view>

#include "segment_layout.hpp"

namespace xs::detail {
class Segment;
}

namespace xs::detail::telemetry {

// CLOCK_MONOTONIC in nanoseconds (the launcher's std::chrono::steady_clock).
std::uint64_t nowNs();

// Binds this process to its rank's slot and trace ring (at attach; the calling thread is the
// rank's main thread). Before it, and outside a job, every call below does nothing.
void bind(Segment& segment, int localRank);
// Whether spans go to a trace ring (the job was started with --trace).
bool tracing();
// Names the calling thread's track in the trace ("bucket thread").
void nameThread(std::string_view name);

// A span of the calling thread: counted in the slot (main thread, counted categories) and
// traced. `name` must outlive the span (a literal, or a string the caller keeps).
class Span {
 public:
  Span(Category category, std::string_view name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Category category_;
  std::string_view name_;
  std::uint64_t startNs_ = 0;
  std::uint32_t outerSpan_ = 0;  // the enclosing span's RankTelemetry::spanCategory
  bool active_ = false;
};

// A finished span written to the trace only (nothing when not tracing).
void traceSpan(Category category, std::string_view name, std::uint64_t startNs, std::uint64_t endNs);

// A collective or rendezvous that ended: [startNs, endNs), the last rank arrived at syncNs (0:
// not known: the whole op counts as moving bytes). Counted as kCollectiveWait + kCollectiveMove
// (a rendezvous: kRendezvous) and traced with its tag, bytes and algorithm.
void collective(OpKind kind, std::string_view tag, std::uint64_t startNs, std::uint64_t syncNs,
                std::uint64_t endNs, std::uint64_t bytes, int algorithm);
// An optimizer step ended: counts it and its time since the previous step (or evaluation).
void stepDone();
// Restarts the step clock (after an evaluation or checkpoint between steps).
void resetStepClock();
void addSamples(std::uint64_t count);
void setStepTarget(std::uint64_t steps);
void deviceMemory(std::uint64_t inUse, std::uint64_t peak, std::uint64_t capacity);

// The histogram bucket of a step time, and the time a bucket stands for (its geometric middle).
std::size_t stepBucket(std::uint64_t ns);
double bucketSeconds(std::size_t bucket);

}  // namespace xs::detail::telemetry
