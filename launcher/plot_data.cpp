// plot_data.cpp: reads the inputs of `xspawn plot` (a metrics file of JSON lines, the launcher's
// report.json, a Chrome trace.json) into the series the picture is drawn from. Every bad input
// is a one-line UsageError saying which file, what is wrong and what plot accepts.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "plot.hpp"
#include "xspawn/error.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace xs::cli::plot {
namespace {

constexpr const char* kAccepted =
    "plot reads a metrics file (JSON lines from 'xspawn train --metrics FILE'), a report.json or a "
    "trace.json (from 'xspawn --log-dir DIR'), or a directory holding metrics.jsonl, report.json, trace.json";
constexpr const char* kDirectoryFiles[] = {"metrics.jsonl", "report.json", "trace.json"};

enum class Kind { kMetrics, kReport, kTrace };

const char* kindName(Kind k) {
  switch (k) {
    case Kind::kMetrics: return "metrics file";
    case Kind::kReport: return "report";
    case Kind::kTrace: return "trace";
  }
  return "?";
}

std::string readText(const std::string& path) {
  std::error_code ec;
  XS_CHECK(fs::exists(path, ec), UsageError,
           fmt::format("plot: no such file or directory '{}'; {}", path, kAccepted));
  XS_CHECK(!fs::is_directory(path, ec), UsageError, fmt::format("plot: '{}' is a directory", path));
  std::ifstream in(path, std::ios::binary);
  XS_CHECK(in, UsageError, fmt::format("plot: cannot read '{}': {}; check its permissions", path, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  XS_CHECK(!in.bad(), UsageError, fmt::format("plot: cannot read '{}': {}", path, std::strerror(errno)));
  return text.str();
}

// A string the object may hold, or "" (also when it holds something else).
std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A number the object may hold: kMissing when absent or null, an error when not a number.
double optionalNumber(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return kMissing;
  XS_CHECK(it->is_number(), UsageError,
           fmt::format("plot: {}: \"{}\" is {} where a number belongs; was the file edited by hand?", where, key,
                       it->dump()));
  return it->get<double>();
}

double requiredNumber(const json& j, const char* key, const std::string& where) {
  const double v = optionalNumber(j, key, where);
  XS_CHECK(v != kMissing, UsageError,
           fmt::format("plot: {}: \"{}\" is missing; was the file written by another version of xspawn?", where, key));
  return v;
}

const json& requiredObject(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  XS_CHECK(it != j.end() && it->is_object(), UsageError,
           fmt::format("plot: {}: \"{}\" is missing or not an object", where, key));
  return *it;
}

// The first line of `text` that is not blank, or "".
std::string firstLine(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
  }
  return "";
}

Kind detect(const std::string& path, const std::string& text, json& doc) {
  XS_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, UsageError,
           fmt::format("plot: '{}' is empty; {}", path, kAccepted));
  doc = json::parse(text, nullptr, false);
  if (!doc.is_discarded()) {
    if (doc.is_array() || (doc.is_object() && doc.contains("traceEvents"))) return Kind::kTrace;
    if (doc.is_object() && doc.contains("event")) return Kind::kMetrics;  // a one-line metrics file
    if (doc.is_object() && (doc.contains("utilisation") || (doc.contains("job_id") && doc.contains("status")))) {
      return Kind::kReport;
    }
    XS_THROW(UsageError, fmt::format("plot: '{}' is JSON but none of the formats plot knows; {}", path, kAccepted));
  }
  const json first = json::parse(firstLine(text), nullptr, false);
  XS_CHECK(first.is_object() && first.contains("event"), UsageError,
           fmt::format("plot: '{}' is not JSON nor JSON lines with an \"event\"; {}", path, kAccepted));
  return Kind::kMetrics;
}

// ---- metrics -----------------------------------------------------------------------------

// Reads the lines of a metrics file in order. Lines without "wall_seconds" take the sum of
// the earlier epochs' "seconds" plus their own.
class MetricsReader {
 public:
  MetricsReader(const std::string& path, PlotData& out) : path_(path), out_(out) {}

  void read(const std::string& text) {
    std::istringstream in(text);
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json j = json::parse(line, nullptr, false);
      const bool last = in.peek() == EOF;
      if (j.is_discarded() && last && !text.ends_with('\n')) break;  // cut short by a killed run
      const std::string where = fmt::format("{} line {}", path_, number);
      XS_CHECK(j.is_object(), UsageError,
               fmt::format("plot: {} is not a JSON object; a metrics file has one object per line", where));
      take(j, where);
    }
    out_.train = progress_.empty() ? epochs_ : progress_;
    out_.eval = eval_;
  }

 private:
  double wall(const json& j, double offset, const std::string& where) {
    const double w = optionalNumber(j, "wall_seconds", where);
    if (w != kMissing) return w;
    const double s = optionalNumber(j, "seconds", where);
    return offset + (s == kMissing ? 0 : s);
  }

  TrainPoint trainPoint(const json& j, const std::string& where) {
    TrainPoint p;
    p.step = requiredNumber(j, "step", where);
    p.wallSeconds = wall(j, epochOffset_, where);
    p.loss = optionalNumber(j, "train_loss", where);
    p.accuracy = optionalNumber(j, "train_accuracy", where);
    p.imagesPerSecond = optionalNumber(j, "images_per_second", where);
    return p;
  }

  void take(const json& j, const std::string& where) {
    const std::string event = text(j, "event");
    if (event == "progress") {
      progress_.push_back(trainPoint(j, where));
    } else if (event == "epoch") {
      epochs_.push_back(trainPoint(j, where));
      const double s = optionalNumber(j, "seconds", where);
      epochOffset_ += s == kMissing ? 0 : s;
    } else if (event == "eval") {
      EvalPoint p;
      p.step = requiredNumber(j, "step", where);
      p.wallSeconds = wall(j, epochOffset_, where);
      p.loss = optionalNumber(j, "test_loss", where);
      p.accuracy = optionalNumber(j, "test_accuracy", where);
      eval_.push_back(p);
    } else if (event == "summary") {
      summary(j, where);
    }
  }

  void summary(const json& j, const std::string& where) {
    std::vector<std::string> parts;
    if (double v = optionalNumber(j, "steps", where); v != kMissing) parts.push_back(fmt::format("{:.0f} steps", v));
    if (double v = optionalNumber(j, "wall_seconds", where); v != kMissing) parts.push_back(fmt::format("{:.1f} s", v));
    if (double v = optionalNumber(j, "images_per_second", where); v != kMissing) {
      parts.push_back(fmt::format("{:.0f} images/s", v));
    }
    if (double v = optionalNumber(j, "test_accuracy", where); v != kMissing) {
      parts.push_back(fmt::format("test accuracy {:.2f}%", 100 * v));
    }
    out_.summary = fmt::format("{}", fmt::join(parts, ", "));
  }

  std::string path_;
  PlotData& out_;
  double epochOffset_ = 0;
  std::vector<TrainPoint> progress_, epochs_;
  std::vector<EvalPoint> eval_;
};

// ---- report ------------------------------------------------------------------------------

std::vector<std::pair<double, double>> throughputSeries(const json& list, const std::string& where) {
  std::vector<std::pair<double, double>> out;
  XS_CHECK(list.is_array(), UsageError, fmt::format("plot: {}: \"throughput\" is not a list", where));
  for (const json& p : list) {
    XS_CHECK(p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number(), UsageError,
             fmt::format("plot: {}: \"throughput\" holds {} where [seconds, images/s] belongs", where, p.dump()));
    out.emplace_back(p[0].get<double>(), p[1].get<double>());
  }
  return out;
}

RankUsage reportUsage(int rank, const json& r, const std::string& where) {
  const json& shares = requiredObject(r, "shares", where);
  RankUsage u;
  u.rank = rank;
  u.compute = std::max(0.0, requiredNumber(shares, "compute", where));
  u.collectives = std::max(0.0, requiredNumber(shares, "collectives", where));
  u.data = std::max(0.0, requiredNumber(shares, "data", where));
  u.other = std::max(0.0, requiredNumber(shares, "other", where));
  // The split of the collectives' share: in the proportion of the seconds waiting and moving.
  auto seconds = r.find("seconds");
  if (seconds != r.end() && seconds->is_object()) {
    const double wait = optionalNumber(*seconds, "collective_wait", where);
    const double move = optionalNumber(*seconds, "collective_move", where);
    if (wait != kMissing && move != kMissing && wait + move > 0) {
      u.waiting = u.collectives * wait / (wait + move);
      u.moving = u.collectives - u.waiting;
      u.collectives = 0;
    }
  }
  return u;
}

std::string stragglerText(const json& s, const std::string& where) {
  if (!s.is_object()) return "";
  const double rank = optionalNumber(s, "rank", where);
  const double extra = optionalNumber(s, "extra_ms_per_step", where);
  if (rank == kMissing || extra == kMissing) return text(s, "text");
  std::string line = fmt::format("slowest: rank {:.0f}, {:.1f} ms per step more", rank, extra);
  if (!text(s, "phase").empty()) line += fmt::format(" in {}", text(s, "phase"));
  if (double p = optionalNumber(s, "slower_percent", where); p != kMissing) line += fmt::format(" ({:.0f}% slower)", p);
  return line;
}

void readReport(const std::string& path, const json& doc, PlotData& out) {
  auto u = doc.find("utilisation");
  if (u == doc.end() || u->is_null()) return;
  const std::string where = fmt::format("{} \"utilisation\"", path);
  XS_CHECK(u->is_object(), UsageError, fmt::format("plot: {} is not an object", where));
  if (auto ranks = u->find("ranks"); ranks != u->end()) {
    XS_CHECK(ranks->is_array(), UsageError, fmt::format("plot: {}: \"ranks\" is not a list", where));
    for (const json& r : *ranks) {
      XS_CHECK(r.is_object(), UsageError, fmt::format("plot: {}: a rank is {}, not an object", where, r.dump()));
      const int rank = static_cast<int>(requiredNumber(r, "rank", where));
      const std::string at = fmt::format("{} rank {}", where, rank);
      if (r.contains("shares")) out.usage.push_back(reportUsage(rank, r, at));
      if (auto ms = r.find("step_ms"); ms != r.end() && ms->is_object()) {
        out.stepTimes.push_back({rank, requiredNumber(*ms, "min", at), requiredNumber(*ms, "median", at),
                                 requiredNumber(*ms, "p99", at), requiredNumber(*ms, "max", at)});
      }
    }
  }
  if (auto t = u->find("throughput"); t != u->end() && !t->is_null()) out.jobThroughput = throughputSeries(*t, where);
  if (auto s = u->find("straggler"); s != u->end()) out.straggler = stragglerText(*s, where);
}

// ---- trace -------------------------------------------------------------------------------

// One process's spans in a trace (times in microseconds).
struct TraceProcess {
  double first = INFINITY, last = -INFINITY;
  double compute = 0, data = 0, waiting = 0, moving = 0, collectives = 0;
  std::vector<double> stepEnds;
  bool counted = false;  // holds a span of a category the bars count
};

double percentile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
}

void addSpan(TraceProcess& p, const json& e, double ts, double dur) {
  p.first = std::min(p.first, ts);
  p.last = std::max(p.last, ts + dur);
  if (text(e, "name") == "optimizer_step") p.stepEnds.push_back(ts + dur);
  const std::string cat = text(e, "cat");
  p.counted = p.counted || cat == "forward" || cat == "backward" || cat == "update" || cat == "data" ||
              cat == "collective" || cat == "rendezvous";
  if (cat == "forward" || cat == "backward" || cat == "update") p.compute += dur;
  if (cat == "data") p.data += dur;
  if (cat != "collective" && cat != "rendezvous") return;
  const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
  if (args && args->contains("wait_us") && (*args)["wait_us"].is_number()) {
    const double wait = std::clamp((*args)["wait_us"].get<double>(), 0.0, dur);
    p.waiting += wait;
    p.moving += dur - wait;
  } else {
    p.collectives += dur;
  }
}

// The rank a "process_name" such as "rank 3" names, or -1.
int rankOfName(const std::string& name) {
  int rank = -1;
  char tail = 0;
  return std::sscanf(name.c_str(), "rank %d%c", &rank, &tail) == 1 ? rank : -1;
}

RankUsage traceUsage(int rank, const TraceProcess& p) {
  const double window = p.last - p.first;
  RankUsage u;
  u.rank = rank;
  u.compute = 100 * p.compute / window, u.data = 100 * p.data / window;
  u.waiting = 100 * p.waiting / window, u.moving = 100 * p.moving / window;
  u.collectives = 100 * p.collectives / window;
  u.other = std::max(0.0, 100 - u.compute - u.data - u.waiting - u.moving - u.collectives);
  return u;
}

void addRank(int rank, TraceProcess& p, PlotData& out) {
  if (p.counted && p.last > p.first) out.usage.push_back(traceUsage(rank, p));
  if (p.stepEnds.size() < 2) return;
  std::sort(p.stepEnds.begin(), p.stepEnds.end());
  std::vector<double> ms;
  for (std::size_t i = 1; i < p.stepEnds.size(); ++i) ms.push_back((p.stepEnds[i] - p.stepEnds[i - 1]) / 1000);
  std::sort(ms.begin(), ms.end());
  out.stepTimes.push_back({rank, ms.front(), percentile(ms, 0.5), percentile(ms, 0.99), ms.back()});
}

// Ranks named by "process_name" metadata ("rank 3"); without any, every process with spans the
// bars count or step spans, numbered in order.
std::map<std::string, int> traceRanks(const json& events, const std::map<std::string, TraceProcess>& processes) {
  std::map<std::string, int> ranks;
  for (const json& e : events) {
    if (!e.is_object() || text(e, "ph") != "M" || text(e, "name") != "process_name") continue;
    if (!e.contains("args") || !e["args"].is_object()) continue;
    const int rank = rankOfName(text(e["args"], "name"));
    if (rank >= 0) ranks[e.value("pid", json()).dump()] = rank;
  }
  if (!ranks.empty()) return ranks;
  for (const auto& [pid, p] : processes) {
    if (p.counted || p.stepEnds.size() >= 2) ranks.emplace(pid, static_cast<int>(ranks.size()));
  }
  return ranks;
}

void readTrace(const std::string& path, const json& doc, PlotData& out) {
  const json& events = doc.is_array() ? doc : doc["traceEvents"];
  XS_CHECK(events.is_array(), UsageError, fmt::format("plot: {}: \"traceEvents\" is not a list", path));
  std::map<std::string, TraceProcess> processes;
  std::vector<std::pair<double, double>> counters;
  double origin = INFINITY;
  for (const json& e : events) {
    if (!e.is_object() || !e.contains("ts") || !e["ts"].is_number()) continue;
    const std::string ph = text(e, "ph");
    const double ts = e["ts"].get<double>();
    if (ph == "X" && e.contains("dur") && e["dur"].is_number()) {
      origin = std::min(origin, ts);
      addSpan(processes[e.value("pid", json()).dump()], e, ts, std::max(0.0, e["dur"].get<double>()));
    } else if (ph == "C" && text(e, "name") == "images/s" && e.contains("args") && e["args"].is_object()) {
      origin = std::min(origin, ts);
      const json v = e["args"].value("images/s", json());
      if (v.is_number()) counters.emplace_back(ts, v.get<double>());
    }
  }
  for (const auto& [pid, rank] : traceRanks(events, processes)) {
    if (auto p = processes.find(pid); p != processes.end()) addRank(rank, p->second, out);
  }
  std::sort(out.stepTimes.begin(), out.stepTimes.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  std::sort(out.usage.begin(), out.usage.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  std::sort(counters.begin(), counters.end());
  for (const auto& [ts, v] : counters) out.jobThroughput.emplace_back((ts - origin) / 1e6, v);
}

// ---- inputs ------------------------------------------------------------------------------

std::vector<std::string> expandInputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](const std::string& f) {
    std::error_code ec;
    if (seen.insert(fs::weakly_canonical(f, ec).string()).second) files.push_back(f);
  };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      add(in);
      continue;
    }
    int found = 0;
    for (const char* name : kDirectoryFiles) {
      if (fs::exists(fs::path(in) / name, ec)) add((fs::path(in) / name).string()), ++found;
    }
    XS_CHECK(found > 0, UsageError,
             fmt::format("plot: directory '{}' holds none of metrics.jsonl, report.json, trace.json; give the "
                         "--log-dir of a job or the files themselves", in));
  }
  return files;
}

bool drawable(const PlotData& d) {
  return !d.train.empty() || !d.eval.empty() || !d.jobThroughput.empty() || !d.stepTimes.empty() ||
         !d.usage.empty();
}

const char* nothingIn(Kind k) {
  switch (k) {
    case Kind::kMetrics: return "has no progress, epoch or eval lines";
    case Kind::kReport: return "has no \"utilisation\" with ranks or throughput";
    case Kind::kTrace: return "has no spans of ranks nor images/s counters";
  }
  return "";
}

}  // namespace

PlotData loadInputs(const std::vector<std::string>& inputs) {
  XS_CHECK(!inputs.empty(), UsageError,
           "plot: no input; give a metrics file, report.json, trace.json or a --log-dir directory, "
           "e.g. 'xspawn plot logs/ -o run.png'; try 'xspawn plot --help'");
  PlotData out, fromTrace;
  std::map<Kind, std::string> taken;
  std::vector<std::string> empty;  // why each input gave nothing
  for (const std::string& path : expandInputs(inputs)) {
    json doc;
    const std::string text = readText(path);
    const Kind kind = detect(path, text, doc);
    auto [it, fresh] = taken.emplace(kind, path);
    XS_CHECK(fresh, UsageError,
             fmt::format("plot: two {}s ('{}' and '{}'); a picture shows one run: give one of each kind",
                         kindName(kind), it->second, path));
    out.inputs.push_back(path);
    PlotData& into = kind == Kind::kTrace ? fromTrace : out;
    const bool had = drawable(into);
    if (kind == Kind::kMetrics) MetricsReader(path, out).read(text);
    if (kind == Kind::kReport) readReport(path, doc, out);
    if (kind == Kind::kTrace) readTrace(path, doc, fromTrace);
    if (!had && !drawable(into)) empty.push_back(fmt::format("'{}' {}", path, nothingIn(kind)));
  }
  // The trace holds every step time; the report splits the collectives' time by its own clocks.
  if (!fromTrace.stepTimes.empty()) out.stepTimes = fromTrace.stepTimes;
  if (out.usage.empty()) out.usage = fromTrace.usage;
  if (out.jobThroughput.empty()) out.jobThroughput = fromTrace.jobThroughput;
  XS_CHECK(drawable(out), UsageError,
           fmt::format("plot: nothing to draw: {}; give the files of a job that ran at least one step",
                       fmt::join(empty, ", ")));
  return out;
}

}  // namespace xs::cli::plot
