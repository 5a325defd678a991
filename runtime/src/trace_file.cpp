// trace_file.cpp: the Chrome trace event file of a job (see trace_file.hpp).
#include "trace_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "xspawn/collectives.hpp"
#include "xspawn/error.hpp"
#include "file_replace.hpp"

namespace xs::detail {
namespace {

// Microseconds since the origin, as the trace's "ts" (negative before it: a clock of another
// process read before the launcher's start never happens on one machine).
std::string micros(std::uint64_t ns, std::uint64_t originNs) {
  const double us = (static_cast<double>(ns) - static_cast<double>(originNs)) * 1e-3;
  return fmt::format("{:.3f}", us);
}

std::string nameAt(const char* names, std::uint32_t used, std::uint32_t id) {
  if (id == 0 || id > used) return "(name table full)";
  return std::string(names + id - 1);
}

// A record's span as one JSON event.
// nameJson: the span's name as a JSON string literal.
std::string recordEvent(const TraceRecord& r, const std::string& nameJson, int pid, std::uint64_t originNs) {
  const auto category = static_cast<Category>(r.category);
  std::string args;
  if (category == Category::kCollective || category == Category::kRendezvous) {
    args = fmt::format(R"(,"args":{{"op":"{}","bytes":{},"wait_us":{:.3f})", opKindName(static_cast<OpKind>(r.opKind)),
                       r.bytes, static_cast<double>(r.waitNs) * 1e-3);
    if (r.algorithm != 0) args += fmt::format(R"(,"algorithm":"{}")", algorithmName(static_cast<Algorithm>(r.algorithm)));
    args += "}";
  }
  return fmt::format(R"({{"ph":"X","name":{},"cat":"{}","ts":{},"dur":{:.3f},"pid":{},"tid":{}{}}})", nameJson,
                     categoryName(category), micros(r.startNs, originNs), static_cast<double>(r.durNs) * 1e-3, pid,
                     static_cast<int>(r.thread), args);
}

}  // namespace

namespace {
// Invalid UTF-8 (a name cut by the table's end, a program's own bytes) is replaced, not thrown.
std::string dumpJson(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }
}  // namespace

std::string jsonString(std::string_view text) { return dumpJson(nlohmann::json(std::string(text))); }

TraceWriter::TraceWriter(std::uint64_t originNs, int launcherPid, int machine)
    : originNs_(originNs), launcherPid_(launcherPid) {
  processName(launcherPid, machine > 0 ? fmt::format("launcher (machine {})", machine) : "launcher", -1);
}

void TraceWriter::event(std::string_view json) {
  if (!events_.empty()) events_ += ",\n";
  events_ += json;
}

void TraceWriter::processName(int pid, const std::string& name, int sortIndex) {
  pids_.insert(pid);
  event(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})", pid, jsonString(name)));
  event(fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})", pid,
                    sortIndex));
}

void TraceWriter::addRanks(const Segment& segment, const std::vector<int>& pids, int rankBase, int attempt) {
  for (int r = 0; r < segment.worldSize(); ++r) {
    TraceRingHeader* ring = segment.traceRing(r);
    if (!ring || pids[r] <= 0) continue;
    const int pid = pids[r];
    const int global = rankBase + r;
    processName(pid, attempt > 0 ? fmt::format("rank {} (restart {})", global, attempt) : fmt::format("rank {}", global),
                global);
    const char* names = Segment::traceNames(ring);
    const std::uint32_t used = ring->namesUsed.load(std::memory_order_acquire);
    for (std::size_t t = 0; t < kTraceThreads; ++t) {
      const std::uint32_t id = ring->threadName[t].load(std::memory_order_relaxed);
      if (id == 0) continue;
      event(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})", pid, t,
                        jsonString(nameAt(names, used, id))));
    }
    std::unordered_map<std::uint32_t, std::string> escaped;  // name id -> JSON string
    const TraceRecord* records = Segment::traceRecords(ring);
    const std::uint64_t capacity = segment.header().traceEvents;
    const std::uint64_t head = ring->head.load(std::memory_order_acquire);
    const std::uint64_t first = head > capacity ? head - capacity : 0;
    dropped_ += first;
    for (std::uint64_t i = first; i < head; ++i) {
      const TraceRecord& rec = records[i % capacity];
      if (rec.seq.load(std::memory_order_acquire) != i + 1) continue;  // never completed, or overwritten
      // A few names recur in every step: each is escaped once per rank.
      std::string& nameJson = escaped[rec.name];
      if (nameJson.empty()) nameJson = jsonString(nameAt(names, used, rec.name));
      event(recordEvent(rec, nameJson, pid, originNs_));
      ++spans_;
    }
  }
}

void TraceWriter::launcherSpan(std::string_view name, std::uint64_t startNs, std::uint64_t endNs, std::string_view args) {
  event(fmt::format(R"({{"ph":"X","name":{},"cat":"launcher","ts":{},"dur":{:.3f},"pid":{},"tid":0{}{}}})",
                    jsonString(name), micros(startNs, originNs_),
                    static_cast<double>(endNs > startNs ? endNs - startNs : 0) * 1e-3, launcherPid_,
                    args.empty() ? "" : R"(,"args":)", args));
}

void TraceWriter::launcherInstant(std::string_view name, std::uint64_t ns, std::string_view args) {
  event(fmt::format(R"({{"ph":"i","s":"p","name":{},"cat":"launcher","ts":{},"pid":{},"tid":0{}{}}})", jsonString(name),
                    micros(ns, originNs_), launcherPid_, args.empty() ? "" : R"(,"args":)", args));
}

void TraceWriter::counter(std::string_view name, std::uint64_t ns, double value) {
  event(fmt::format(R"({{"ph":"C","name":{},"ts":{},"pid":{},"tid":0,"args":{{{}:{:.1f}}}}})", jsonString(name),
                    micros(ns, originNs_), launcherPid_, jsonString(name), value));
}

namespace {

nlohmann::json ranksJson(const UtilisationReport& report) {
  using nlohmann::json;
  json ranks = json::array();
  for (const RankUtilisation& u : report.ranks) {
    ranks.push_back({{"rank", u.rank},
                     {"pid", u.pid},
                     {"samples", u.samples},
                     {"device_peak_bytes", u.devicePeakBytes},
                     {"device_capacity_bytes", u.deviceCapacityBytes},
                     {"cpu_seconds", u.cpuSeconds < 0 ? json(nullptr) : json(u.cpuSeconds)},
                     {"runqueue_seconds", u.runqueueSeconds < 0 ? json(nullptr) : json(u.runqueueSeconds)},
                     {"cpu_turns_per_step", u.cpuTurnsPerStep < 0 ? json(nullptr) : json(u.cpuTurnsPerStep)}});
  }
  return ranks;
}

// Applies fn to each event of the array and joins them as the file holds them.
template <typename Fn>
std::string rewriteEvents(nlohmann::json& events, Fn&& fn) {
  std::string out;
  for (nlohmann::json& e : events) {
    fn(e);
    if (!out.empty()) out += ",\n";
    out += dumpJson(e);
  }
  return out;
}

void moveEvent(nlohmann::json& e, std::int64_t shiftNs) {
  if (e.contains("ts") && e["ts"].is_number()) {
    const double us = e["ts"].get<double>() + static_cast<double>(shiftNs) * 1e-3;
    e["ts"] = std::round(us * 1e3) / 1e3;
  }
}

}  // namespace

void TraceWriter::setSummary(const UtilisationReport& report, std::uint64_t ringCapacity, int worldSize) {
  using nlohmann::json;
  json ranks = ranksJson(report);
  if (!remoteRanks_.empty()) {
    for (json& r : json::parse("[" + remoteRanks_ + "]")) ranks.push_back(std::move(r));
  }
  json doc{{"cores", report.cores + remoteCores_},
           {"world_size", worldSize},
           {"ring_capacity", ringCapacity},
           {"spans", spans_},
           {"dropped_spans", dropped_},
           {"ranks", ranks}};
  if (!machines_.empty()) doc["machines"] = json::parse(machines_);
  summary_ = doc.dump();
}

std::string TraceWriter::machinePart(const UtilisationReport& report) const {
  const nlohmann::json head{{"cores", report.cores}, {"spans", spans_}, {"dropped_spans", dropped_},
                            {"ranks", ranksJson(report)}};
  return fmt::format("{{\"summary\":{},\"events\":[\n{}\n]}}", head.dump(), events_);
}

void TraceWriter::addMachinePart(const std::string& part, std::int64_t shiftNs) {
  using nlohmann::json;
  json doc = json::parse(part, nullptr, false);
  XS_CHECK(!doc.is_discarded() && doc.is_object() && doc.contains("events") && doc["events"].is_array(), UsageError,
           "a machine's part of the trace is not valid JSON");
  // A pid of the other machine that is taken here gets a number no process here can have
  // (above Linux's largest pid).
  std::map<int, int> renumber;
  for (const json& e : doc["events"]) {
    const int pid = e.value("pid", 0);
    if (!pids_.count(pid) || renumber.count(pid)) continue;
    int fresh = pid + (1 << 23);
    while (pids_.count(fresh)) fresh += 1 << 23;
    renumber[pid] = fresh;
  }
  const std::string moved = rewriteEvents(doc["events"], [&](json& e) {
    moveEvent(e, shiftNs);
    if (auto it = renumber.find(e.value("pid", 0)); it != renumber.end()) e["pid"] = it->second;
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") pids_.insert(e.value("pid", 0));
  });
  if (!moved.empty()) event(moved);
  const json summary = doc.value("summary", json::object());
  for (json r : summary.value("ranks", json::array())) {
    if (auto it = renumber.find(r.value("pid", 0)); it != renumber.end()) r["pid"] = it->second;
    if (!remoteRanks_.empty()) remoteRanks_ += ",";
    remoteRanks_ += r.dump();
  }
  remoteCores_ += summary.value("cores", 0);
  spans_ += summary.value("spans", std::uint64_t{0});
  dropped_ += summary.value("dropped_spans", std::uint64_t{0});
}

void TraceWriter::shift(std::int64_t shiftNs) {
  const std::int64_t by = shiftNs - shiftedNs_;
  if (by == 0 || events_.empty()) return;
  nlohmann::json all = nlohmann::json::parse("[" + events_ + "]", nullptr, false);
  XS_CHECK(!all.is_discarded(), UsageError, "this machine's trace events are not valid JSON");
  events_ = rewriteEvents(all, [&](nlohmann::json& e) { moveEvent(e, by); });
  shiftedNs_ = shiftNs;
}

void TraceWriter::write(const std::string& path) const {
  const std::string head = R"({"displayTimeUnit":"ms","traceEvents":[)" "\n";
  const std::string tail = fmt::format("\n],\"xspawn\":{}}}\n", summary_);
  const ReplaceResult written = replaceFile(path, {head, events_, tail});
  XS_CHECK(written, SystemError,
           fmt::format("--trace {}: writing it failed ({}); check that its directory exists and is writable, and "
                       "its free space",
                       path, std::strerror(written.err)));
}

}  // namespace xs::detail
