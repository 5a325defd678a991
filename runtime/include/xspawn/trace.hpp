// trace.hpp: a program's own spans on its rank's track of the job's trace timeline, as
// torch_xla's xp.Trace gives them, and what `xspawn top` shows of a training run's progress.
//
// `xspawn --trace trace.json ...` (or SpawnOptions::traceFile) writes one Chrome trace event
// file for the whole job, which Perfetto (ui.perfetto.dev) and chrome://tracing open as it is:
// one track per rank with xspawn's own spans (waiting for data, forward, backward, every
// collective with its bytes and algorithm, the optimizer's update, evaluations, checkpoints,
// rendezvous) and the launcher's. A program adds its own:
//
//   void map_fn(int index, const xs::Flags& flags) {
//     xs::Trace span("augment");   // from here to the end of the scope
//     ...
//   }
//
// When the job is not traced a Trace costs one predictable branch and records nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace xs {

class Trace {
 public:
  // Opens a span named `name` (copied) on the calling thread's track; it closes when the
  // object is destroyed. Spans nest (a span opened inside another shows beneath it).
  explicit Trace(std::string_view name);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

 private:
  std::string name_;
  std::uint64_t startNs_ = 0;
};

// Whether this job is traced (started with --trace): a program may skip work that only feeds
// its own spans.
bool tracing();

// Tells xspawn how many optimizer steps this run will take in all, so `xspawn top` shows the
// job's ETA (xspawn train does it; optional for a program's own loop).
void expect_steps(std::int64_t steps);

}  // namespace xs
