// module_clock.hpp: the per-module times of Model::setModuleTimes. Sequential opens a span
// around each child's forward and backward; a span's own time is its elapsed time less that of
// the spans opened inside it (a residual block's convolutions are theirs, not the block's), so
// the modules' own times add up to the time spent in modules, each counted once. Its own FLOPs
// likewise: its count less that of the modules inside it. Elapsed time or the thread's CPU time
// (ModuleTimeBase).
#pragma once

#include <time.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "xspawn/engine/model.hpp"

namespace xs::engine::detail {

// This thread's CPU time in seconds: the clock of ModuleTimeBase::kThreadCpu (and of the engine
// bench's steps).
inline double threadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

class ModuleClock {
 public:
  explicit ModuleClock(ModuleTimeBase base) : base_(base) {}

  void begin() { open_.push_back({now()}); }
  // Closes the span begin() opened last, for module m (named name; forwardFlops and
  // backwardFlops a sample, its modules' included, as Sequential counts them), in its forward or
  // its backward.
  void end(const void* m, const std::string& name, double forwardFlops, double backwardFlops, bool backward) {
    const Span span = open_.back();
    open_.pop_back();
    const double elapsed = now() - span.start;
    if (!open_.empty()) {
      Span& outer = open_.back();
      outer.inner += elapsed;
      outer.innerForwardFlops += forwardFlops;
      outer.innerBackwardFlops += backwardFlops;
    }
    auto [it, added] = slots_.try_emplace(m, times_.size());
    if (added)
      times_.push_back(
          ModuleTime{name, forwardFlops - span.innerForwardFlops, backwardFlops - span.innerBackwardFlops});
    ModuleTime& t = times_[it->second];
    (backward ? t.backwardSeconds : t.forwardSeconds) += elapsed - span.inner;
  }
  const std::vector<ModuleTime>& times() const { return times_; }
  void reset() {
    for (ModuleTime& t : times_) t.forwardSeconds = t.backwardSeconds = 0;
  }

 private:
  // Seconds on the chosen clock.
  double now() const {
    if (base_ == ModuleTimeBase::kThreadCpu) return threadCpuSeconds();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  struct Span {
    double start;
    double inner = 0;  // seconds of the spans closed inside it, and their FLOPs
    double innerForwardFlops = 0, innerBackwardFlops = 0;
  };
  ModuleTimeBase base_;
  std::vector<Span> open_;
  std::unordered_map<const void*, std::size_t> slots_;
  std::vector<ModuleTime> times_;  // in the order first seen: the forward's
};

}  // namespace xs::engine::detail
