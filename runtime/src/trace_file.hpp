// trace_file.hpp: the job's trace timeline as a Chrome trace event file (the JSON object format
// Perfetto and chrome://tracing open as it is). The launcher builds it at the end of each
// attempt from every rank's trace ring in the segment (so the spans of a rank that was killed
// are there too) and its own events, then writes it once, atomically, when the job ends.
//
//   pid: the OS pid of each rank ("rank 3") and of the launcher; tid: the rank's thread (0: its
//   main thread; the bucket thread has its own); ts/dur: microseconds since the job started,
//   on the machine's CLOCK_MONOTONIC, which every process of the machine shares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "segment.hpp"
#include "xspawn/report.hpp"

namespace xs::detail {

class TraceWriter {
 public:
  // originNs: CLOCK_MONOTONIC of the job's start (ts 0).
  TraceWriter(std::uint64_t originNs, int launcherPid, int machine);

  // Every complete record of the ranks' rings as spans on their tracks, and their names.
  // pids[r]: local rank r's pid; rankBase: its global rank is rankBase + r.
  void addRanks(const Segment& segment, const std::vector<int>& pids, int rankBase, int attempt);
  // The launcher's own track.
  void launcherSpan(std::string_view name, std::uint64_t startNs, std::uint64_t endNs, std::string_view args = {});
  void launcherInstant(std::string_view name, std::uint64_t ns, std::string_view args = {});
  void counter(std::string_view name, std::uint64_t ns, double value);
  // The figures a trace reader needs beside the spans (the last attempt's ranks: pids, device
  // memory, samples, scheduler times), under the file's "xspawn" key.
  void setSummary(const UtilisationReport& report, std::uint64_t ringCapacity);

  std::uint64_t spans() const { return spans_; }
  std::uint64_t dropped() const { return dropped_; }
  // Writes the file (a temporary beside it, renamed over it); SystemError when it cannot.
  void write(const std::string& path) const;

 private:
  void event(std::string_view json);
  void processName(int pid, const std::string& name, int sortIndex);

  std::uint64_t originNs_;
  int launcherPid_;
  std::string events_;
  std::string summary_ = "{}";
  std::uint64_t spans_ = 0, dropped_ = 0;
};

// "a \"b\"" -> a JSON string literal.
std::string jsonString(std::string_view text);

}  // namespace xs::detail
