// trace_file.cpp: the Chrome trace event file of a job (see trace_file.hpp).
#include "trace_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "xspawn/collectives.hpp"
#include "xspawn/error.hpp"

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
std::string recordEvent(const TraceRecord& r, const std::string& name, int pid, std::uint64_t originNs) {
  const auto category = static_cast<Category>(r.category);
  std::string args;
  if (category == Category::kCollective || category == Category::kRendezvous) {
    args = fmt::format(R"(,"args":{{"op":"{}","bytes":{},"wait_us":{:.3f})", opKindName(static_cast<OpKind>(r.opKind)),
                       r.bytes, static_cast<double>(r.waitNs) * 1e-3);
    if (r.algorithm != 0) args += fmt::format(R"(,"algorithm":"{}")", algorithmName(static_cast<Algorithm>(r.algorithm)));
    args += "}";
  }
  return fmt::format(R"({{"ph":"X","name":{},"cat":"{}","ts":{},"dur":{:.3f},"pid":{},"tid":{}{}}})", jsonString(name),
                     categoryName(category), micros(r.startNs, originNs), static_cast<double>(r.durNs) * 1e-3, pid,
                     static_cast<int>(r.thread), args);
}

}  // namespace

std::string jsonString(std::string_view text) { return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

TraceWriter::TraceWriter(std::uint64_t originNs, int launcherPid, int machine)
    : originNs_(originNs), launcherPid_(launcherPid) {
  processName(launcherPid, machine > 0 ? fmt::format("launcher (machine {})", machine) : "launcher", -1);
}

void TraceWriter::event(std::string_view json) {
  if (!events_.empty()) events_ += ",\n";
  events_ += json;
}

void TraceWriter::processName(int pid, const std::string& name, int sortIndex) {
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
    const TraceRecord* records = Segment::traceRecords(ring);
    const std::uint64_t capacity = segment.header().traceEvents;
    const std::uint64_t head = ring->head.load(std::memory_order_acquire);
    const std::uint64_t first = head > capacity ? head - capacity : 0;
    dropped_ += first;
    for (std::uint64_t i = first; i < head; ++i) {
      const TraceRecord& rec = records[i % capacity];
      if (rec.seq.load(std::memory_order_acquire) != i + 1) continue;  // never completed, or overwritten
      event(recordEvent(rec, nameAt(names, used, rec.name), pid, originNs_));
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

void TraceWriter::setSummary(const UtilisationReport& report, std::uint64_t ringCapacity) {
  using nlohmann::json;
  json ranks = json::array();
  for (const RankUtilisation& u : report.ranks) {
    ranks.push_back({{"rank", u.rank},
                     {"pid", u.pid},
                     {"samples", u.samples},
                     {"device_peak_bytes", u.devicePeakBytes},
                     {"device_capacity_bytes", u.deviceCapacityBytes},
                     {"cpu_seconds", u.cpuSeconds < 0 ? json(nullptr) : json(u.cpuSeconds)},
                     {"runqueue_seconds", u.runqueueSeconds < 0 ? json(nullptr) : json(u.runqueueSeconds)}});
  }
  summary_ = json{{"cores", report.cores},
                  {"world_size", report.worldSize},
                  {"ring_capacity", ringCapacity},
                  {"spans", spans_},
                  {"dropped_spans", dropped_},
                  {"ranks", ranks}}
                 .dump();
}

void TraceWriter::write(const std::string& path) const {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  XS_CHECK(f != nullptr, SystemError,
           fmt::format("--trace {}: cannot write it ({}); check that its directory exists and is writable", path,
                       std::strerror(errno)));
  const std::string head = R"({"displayTimeUnit":"ms","traceEvents":[)" "\n";
  const std::string tail = fmt::format("\n],\"xspawn\":{}}}\n", summary_);
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            std::fwrite(events_.data(), 1, events_.size(), f) == events_.size() &&
            std::fwrite(tail.data(), 1, tail.size(), f) == tail.size();
  const int writeErrno = errno;
  ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return;
  const int err = ok ? errno : writeErrno;
  std::remove(tmp.c_str());  // nothing half-written stays behind
  XS_THROW(SystemError, fmt::format("--trace {}: writing it failed ({}); check the free space of its directory", path,
                                    std::strerror(err)));
}

}  // namespace xs::detail
