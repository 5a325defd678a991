// trace_report.cpp: the utilisation report of a trace file written by --trace (`xspawn report
// trace.json`): each rank's main-thread spans summed by category, its step times from its
// optimizer_step spans, images/s from the launcher's counter.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "utilisation.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

using nlohmann::json;

std::uint64_t nsOf(const json& e, const char* key) {
  return static_cast<std::uint64_t>(std::max(0.0, e.value(key, 0.0)) * 1e3);
}

// One rank's spans (main thread) as figures.
struct RankSpans {
  RankFigures figures;
  std::vector<std::pair<std::uint64_t, bool>> ends;  // (end ns, is a step) of steps, evaluations, checkpoints
  std::uint64_t first = ~0ULL, last = 0;
};

void addSpan(RankSpans& r, const json& e) {
  const std::string cat = e.value("cat", "");
  const std::uint64_t start = nsOf(e, "ts"), dur = nsOf(e, "dur");
  auto& ns = r.figures.categoryNs;
  bool counted = true;
  if (cat == "collective") {
    const std::uint64_t wait = std::min(dur, static_cast<std::uint64_t>(e.value("args", json::object()).value("wait_us", 0.0) * 1e3));
    ns[static_cast<std::size_t>(Category::kCollectiveWait)] += wait;
    ns[static_cast<std::size_t>(Category::kCollectiveMove)] += dur - wait;
  } else {
    counted = false;
    for (std::size_t c = 0; c < kCountedCategories && !counted; ++c) {
      if (cat == categoryName(static_cast<Category>(c))) ns[c] += dur, counted = true;
    }
  }
  if (counted) r.first = std::min(r.first, start), r.last = std::max(r.last, start + dur);
  if (cat == "step" || cat == "eval" || cat == "checkpoint") r.ends.emplace_back(start + dur, cat == "step");
}

void finishRank(RankSpans& r) {
  std::sort(r.ends.begin(), r.ends.end());
  std::uint64_t clock = 0;  // 0 until the first step: the first step is not timed
  for (const auto& [end, isStep] : r.ends) {
    if (isStep) {
      ++r.figures.steps;
      if (clock) r.figures.addStep(end - clock);
      clock = end;
    } else if (clock) {
      clock = end;  // the step clock restarts after an evaluation or checkpoint
    }
  }
  r.figures.windowNs = r.last > r.first ? r.last - r.first : 0;
}

json readTrace(const std::string& path) {
  std::ifstream in(path);
  XS_CHECK(in.good(), UsageError, fmt::format("{}: cannot read it; give a trace file written by --trace", path));
  json doc = json::parse(in, nullptr, false);
  XS_CHECK(!doc.is_discarded() && doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array(),
           UsageError,
           fmt::format("{} is not a Chrome trace event file (a JSON object with a traceEvents array); give the file "
                       "--trace wrote, or a --log-dir",
                       path));
  return doc;
}

}  // namespace

UtilisationReport utilisationFromTrace(const std::string& path) {
  const json doc = readTrace(path);
  const json summary = doc.value("xspawn", json::object());
  // The ranks of the last attempt, as the summary lists them, and every other "rank N" process.
  std::map<int, RankSpans> byPid;
  for (const json& r : summary.value("ranks", json::array())) {
    RankSpans& s = byPid[r.value("pid", 0)];
    s.figures.rank = r.value("rank", 0);
    s.figures.pid = r.value("pid", 0);
    s.figures.samples = r.value("samples", std::uint64_t{0});
    s.figures.devicePeak = r.value("device_peak_bytes", std::uint64_t{0});
    s.figures.deviceCapacity = r.value("device_capacity_bytes", std::uint64_t{0});
    if (r.contains("cpu_seconds") && r["cpu_seconds"].is_number()) s.figures.cpuSeconds = r["cpu_seconds"];
    if (r.contains("runqueue_seconds") && r["runqueue_seconds"].is_number()) s.figures.runqueueSeconds = r["runqueue_seconds"];
    if (r.contains("cpu_turns_per_step") && r["cpu_turns_per_step"].is_number())
      s.figures.cpuTurnsPerStep = r["cpu_turns_per_step"];
  }
  std::set<int> listed;
  for (const auto& [pid, r] : byPid) listed.insert(r.figures.rank);
  int launcherPid = -1;
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "M" || e.value("name", "") != "process_name") continue;
    const std::string name = e.value("args", json::object()).value("name", "");
    if (name.rfind("launcher", 0) == 0) launcherPid = e.value("pid", -1);
    int rank = -1;
    // A rank the summary does not list (a program without the trainer's counters) still
    // counts by its track (one of an earlier attempt's does not: the summary lists its rank).
    if (!byPid.count(e.value("pid", 0)) && std::sscanf(name.c_str(), "rank %d", &rank) == 1 && !listed.count(rank)) {
      byPid[e.value("pid", 0)].figures.rank = rank;
      byPid[e.value("pid", 0)].figures.pid = e.value("pid", 0);
    }
  }
  std::vector<std::pair<double, double>> throughput;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    const int pid = e.value("pid", 0);
    if (ph == "C" && pid == launcherPid && e.value("name", "") == "images/s") {
      throughput.emplace_back(e.value("ts", 0.0) * 1e-6, e.value("args", json::object()).value("images/s", 0.0));
      continue;
    }
    if (ph != "X" || e.value("tid", 0) != 0) continue;
    auto it = byPid.find(pid);
    if (it != byPid.end()) addSpan(it->second, e);
  }
  XS_CHECK(!byPid.empty(), UsageError,
           fmt::format("{} has no rank tracks (processes named \"rank N\"): it was not written by xspawn --trace", path));
  std::vector<RankFigures> figures;
  for (auto& [pid, r] : byPid) {
    finishRank(r);
    figures.push_back(r.figures);
  }
  std::sort(figures.begin(), figures.end(), [](const RankFigures& a, const RankFigures& b) { return a.rank < b.rank; });
  return buildUtilisation(figures, summary.value("cores", 0), std::move(throughput), fmt::format("trace {}", path));
}

}  // namespace xs::detail
