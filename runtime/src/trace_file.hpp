// trace_file.hpp: the job's trace timeline as a Chrome trace event file (the JSON object format
// Perfetto and chrome://tracing open as it is). The launcher builds it at the end of each
// attempt from every rank's trace ring in the segment (so the spans of a rank that was killed
// are there too) and its own events, then writes it once, atomically, when the job ends.
//
//   pid: the OS pid of each rank ("rank 3") and of the launcher; tid: the rank's thread (0: its
//   main thread; the bucket thread has its own); ts/dur: microseconds since the job started,
//   on the machine's CLOCK_MONOTONIC, which every process of the machine shares.
//
// A job spanning machines has one file, written by machine 0: every other machine sends its
// part (machinePart) when the job ends cleanly, and machine 0 moves its events onto its own
// axis with the offset its proxy measured between the clocks. A machine whose job failed
// writes its own file instead, moved onto machine 0's axis too (shift).
#pragma once

#include <cstdint>
#include <set>
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
  // worldSize: the ranks whose tracks the file holds.
  void setSummary(const UtilisationReport& report, std::uint64_t ringCapacity, int worldSize);
  // The machines of the job and their clocks (a JSON array), for the summary.
  void setMachines(std::string machinesJson) { machines_ = std::move(machinesJson); }

  // This machine's part of a job spanning machines, for machine 0: the figures of its ranks
  // and its events (timed from this machine's start, on its clock).
  std::string machinePart(const UtilisationReport& report) const;
  // Machine 0: another machine's part, its events moved by shiftNs onto this file's axis and
  // its processes renumbered where a pid is already taken here. UsageError if it is garbled.
  void addMachinePart(const std::string& part, std::int64_t shiftNs);
  // Moves this machine's events to shiftNs from where they were recorded (a machine's own
  // file, onto machine 0's axis); again with the same shift, nothing moves.
  void shift(std::int64_t shiftNs);

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
  std::set<int> pids_;                 // the processes with a track here
  std::string remoteRanks_;            // the other machines' ranks (JSON objects, comma-joined)
  int remoteCores_ = 0;
  std::string machines_;               // JSON array, empty on one machine
  std::int64_t shiftedNs_ = 0;         // how far shift() moved the events
};

// "a \"b\"" -> a JSON string literal.
std::string jsonString(std::string_view text);

}  // namespace xs::detail
