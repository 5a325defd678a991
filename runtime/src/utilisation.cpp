// utilisation.cpp: the utilisation report from the ranks' figures, as text and JSON (see
// utilisation.hpp).
#include "utilisation.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "telemetry.hpp"

namespace xs::detail {
namespace {

constexpr double kStragglerPercent = 5.0;  // slower than the others' median by less: no straggler

double seconds(std::uint64_t ns) { return static_cast<double>(ns) * 1e-9; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile of the step histogram, clamped to the exact extremes.
double stepQuantile(const RankFigures& f, double q) {
  if (f.stepsTimed == 0) return 0;
  const auto want = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(f.stepsTimed)));
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < kStepBuckets; ++b) {
    seen += f.stepHistogram[b];
    if (seen >= std::max<std::uint64_t>(want, 1))
      return std::clamp(telemetry::bucketSeconds(b), seconds(f.stepMinNs), seconds(f.stepMaxNs));
  }
  return seconds(f.stepMaxNs);
}

RankUtilisation rankUtilisation(const RankFigures& f) {
  RankUtilisation u;
  u.rank = f.rank;
  u.pid = f.pid;
  u.windowSeconds = seconds(f.windowNs);
  auto at = [&](Category c) { return seconds(f.categoryNs[static_cast<std::size_t>(c)]); };
  u.forward = at(Category::kForward);
  u.backward = at(Category::kBackward);
  u.update = at(Category::kUpdate);
  u.data = at(Category::kData);
  u.collectiveWait = at(Category::kCollectiveWait);
  u.collectiveMove = at(Category::kCollectiveMove);
  u.rendezvous = at(Category::kRendezvous);
  u.injected = at(Category::kFault);
  u.other = std::max(0.0, u.windowSeconds - u.compute() - u.data - u.collectives() - u.injected);
  u.cpuSeconds = f.cpuSeconds;
  u.runqueueSeconds = f.runqueueSeconds;
  u.cpuTurnsPerStep = f.cpuTurnsPerStep;
  u.steps = static_cast<std::int64_t>(f.steps);
  u.samples = static_cast<std::int64_t>(f.samples);
  u.stepMin = seconds(f.stepMinNs);
  u.stepMax = seconds(f.stepMaxNs);
  u.stepMedian = stepQuantile(f, 0.5);
  u.stepP99 = stepQuantile(f, 0.99);
  u.devicePeakBytes = f.devicePeak;
  u.deviceCapacityBytes = f.deviceCapacity;
  return u;
}

// The phases a rank's own time (not waiting for the others) is made of, by name.
std::vector<std::pair<const char*, double>> ownPhases(const RankUtilisation& u) {
  return {{"forward", u.forward},         {"backward", u.backward}, {"update", u.update},
          {"data", u.data},               {"moving bytes", u.collectiveMove},
          {"injected delay", u.injected}, {"other (the program's own code)", u.other}};
}

Straggler findStraggler(const std::vector<RankUtilisation>& ranks) {
  Straggler s;
  if (ranks.size() < 2) return s;
  auto own = [](const RankUtilisation& u) { return u.windowSeconds - u.collectiveWait - u.rendezvous; };
  auto perStep = [](const RankUtilisation& u, double v) { return u.steps > 0 ? v / static_cast<double>(u.steps) : v; };
  std::size_t slowest = 0;
  for (std::size_t i = 1; i < ranks.size(); ++i)
    if (perStep(ranks[i], own(ranks[i])) > perStep(ranks[slowest], own(ranks[slowest]))) slowest = i;
  const RankUtilisation& me = ranks[slowest];
  std::vector<double> others;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (i != slowest) others.push_back(perStep(ranks[i], own(ranks[i])));
  const double base = median(others), mine = perStep(me, own(me));
  const double percent = base > 0 ? 100.0 * (mine - base) / base : 0;
  if (percent < kStragglerPercent) {
    s.text = fmt::format("no straggler: every rank's own time per step is within {:.0f}% of the others' median "
                         "(the slowest, rank {}, by {:+.1f}%)",
                         kStragglerPercent, me.rank, percent);
    return s;
  }
  // The phase where the slowest rank spends the most more than the others' median.
  const auto mePhases = ownPhases(me);
  double worst = -1e300;
  for (std::size_t p = 0; p < mePhases.size(); ++p) {
    std::vector<double> theirs;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (i != slowest) theirs.push_back(perStep(ranks[i], ownPhases(ranks[i])[p].second));
    const double extra = perStep(me, mePhases[p].second) - median(theirs);
    if (extra > worst) worst = extra, s.phase = mePhases[p].first;
  }
  s.rank = me.rank;
  s.extraPerStep = mine - base;
  s.slowerPercent = percent;
  const char* unit = me.steps > 0 ? " per step" : "";
  s.text = fmt::format("straggler: rank {}, {:.1f} ms{} (+{:.0f}%) more than the others' median outside waiting for "
                       "them, most of it in {} (+{:.1f} ms{}); the others wait for it in their collectives",
                       me.rank, 1e3 * s.extraPerStep, unit, percent, s.phase, 1e3 * worst, unit);
  return s;
}

std::string mib(std::uint64_t bytes) { return fmt::format("{:.0f}", static_cast<double>(bytes) / 1048576.0); }

std::string percentOrDash(double part, double whole) {
  return part >= 0 && whole > 0 ? fmt::format("{:.0f}%", 100.0 * part / whole) : "-";
}

}  // namespace

void RankFigures::addStep(std::uint64_t ns) {
  stepHistogram[telemetry::stepBucket(ns)] += 1;
  if (stepsTimed == 0 || ns < stepMinNs) stepMinNs = ns;
  stepMaxNs = std::max(stepMaxNs, ns);
  ++stepsTimed;
}

RankFigures readFigures(const RankTelemetry& t, int rank, int pid) {
  RankFigures f;
  f.rank = rank;
  f.pid = pid;
  const std::uint64_t start = t.windowStartNs.load(std::memory_order_relaxed);
  const std::uint64_t end = t.windowEndNs.load(std::memory_order_relaxed);
  f.windowNs = start && end > start ? end - start : 0;
  for (std::size_t c = 0; c < kCountedCategories; ++c) f.categoryNs[c] = t.categoryNs[c].load(std::memory_order_relaxed);
  f.steps = t.steps.load(std::memory_order_relaxed);
  f.samples = t.samples.load(std::memory_order_relaxed);
  f.stepsTimed = t.stepsTimed.load(std::memory_order_relaxed);
  f.stepMinNs = t.stepMinNs.load(std::memory_order_relaxed);
  f.stepMaxNs = t.stepMaxNs.load(std::memory_order_relaxed);
  for (std::size_t b = 0; b < kStepBuckets; ++b) f.stepHistogram[b] = t.stepHistogram[b].load(std::memory_order_relaxed);
  f.devicePeak = t.devicePeak.load(std::memory_order_relaxed);
  f.deviceCapacity = t.deviceCapacity.load(std::memory_order_relaxed);
  return f;
}

std::vector<std::pair<double, double>> throughputSeries(const std::vector<std::pair<double, std::uint64_t>>& all) {
  std::vector<std::pair<double, double>> out;
  // From the last sample before training started to the first after it ended.
  std::size_t first = 0, last = all.size();
  while (first + 1 < all.size() && all[first + 1].second == all[0].second) ++first;
  while (last > first + 1 && all[last - 2].second == all.back().second) --last;
  const std::vector<std::pair<double, std::uint64_t>> samples(all.begin() + static_cast<std::ptrdiff_t>(first),
                                                               all.begin() + static_cast<std::ptrdiff_t>(last));
  if (samples.size() < 2) return out;
  const double span = samples.back().first - samples.front().first;
  const double every = std::max(1.0, span / static_cast<double>(kThroughputPoints));
  std::size_t from = 0;
  for (std::size_t i = 1; i < samples.size(); ++i) {
    const double dt = samples[i].first - samples[from].first;
    if (dt < every && i + 1 < samples.size()) continue;
    if (dt > 0) {
      const double images = static_cast<double>(samples[i].second - samples[from].second);
      out.emplace_back(samples[i].first, images / dt);
    }
    from = i;
  }
  return out;
}

UtilisationReport buildUtilisation(const std::vector<RankFigures>& figures, int cores,
                                   std::vector<std::pair<double, double>> throughput, std::string source) {
  UtilisationReport r;
  r.cores = cores;
  r.worldSize = static_cast<int>(figures.size());
  r.source = std::move(source);
  double window = 0, wait = 0, move = 0, rdv = 0, runq = 0, turns = 0;
  bool runqKnown = true, turnsKnown = true;
  for (const RankFigures& f : figures) {
    r.ranks.push_back(rankUtilisation(f));
    const RankUtilisation& u = r.ranks.back();
    r.present = r.present || u.steps > 0;
    window += u.windowSeconds, wait += u.collectiveWait, move += u.collectiveMove, rdv += u.rendezvous;
    runqKnown = runqKnown && u.runqueueSeconds >= 0;
    runq += std::max(0.0, u.runqueueSeconds);
    turnsKnown = turnsKnown && u.cpuTurnsPerStep >= 0;
    turns += std::max(0.0, u.cpuTurnsPerStep);
  }
  if (turnsKnown && !figures.empty()) r.cpuTurnsPerStep = turns / static_cast<double>(figures.size());
  if (window > 0) {
    r.waitShare = 100 * wait / window, r.moveShare = 100 * move / window, r.rendezvousShare = 100 * rdv / window;
    r.collectiveShare = r.waitShare + r.moveShare + r.rendezvousShare;
    if (runqKnown) r.runqueueShare = 100 * runq / window;
  }
  r.straggler = findStraggler(r.ranks);
  r.throughput = std::move(throughput);
  return r;
}

}  // namespace xs::detail

namespace xs {

using detail::median;
using detail::mib;
using detail::percentOrDash;

std::string UtilisationReport::text() const {
  std::string out = fmt::format("utilisation of {} emulated core{} on {} CPU{} (from {}):\n", worldSize,
                                worldSize == 1 ? "" : "s", cores, cores == 1 ? "" : "s", source);
  out += "  rank  window  compute  collectives (wait+move+rdv)  data  other |  step ms min/median/p99/max |"
         "  on CPU  no CPU | device MiB peak/cap\n";
  for (const RankUtilisation& u : ranks) {
    const std::string coll = fmt::format("{:.1f}% ({:.1f}+{:.1f}+{:.1f})", u.share(u.collectives()),
                                         u.share(u.collectiveWait), u.share(u.collectiveMove), u.share(u.rendezvous));
    const std::string steps = fmt::format("{:.1f} / {:.1f} / {:.1f} / {:.1f}", 1e3 * u.stepMin, 1e3 * u.stepMedian,
                                          1e3 * u.stepP99, 1e3 * u.stepMax);
    out += fmt::format("  {:>4}  {:>5.1f}s  {:>6.1f}%  {:<27}  {:>4.1f}%  {:>4.1f}% | {:>27} |  {:>6}  {:>6} | {}/{}\n",
                       u.rank, u.windowSeconds, u.share(u.compute()), coll, u.share(u.data), u.share(u.other + u.injected),
                       steps, percentOrDash(u.cpuSeconds, u.windowSeconds),
                       percentOrDash(u.runqueueSeconds, u.windowSeconds), mib(u.devicePeakBytes),
                       mib(u.deviceCapacityBytes));
  }
  out += "  " + straggler.text + "\n";
  std::string slicing;
  if (runqueueShare >= 0) {
    slicing = fmt::format("; the ranks were runnable but without a CPU {:.1f}% of the time", runqueueShare);
    if (cpuTurnsPerStep >= 0) slicing += fmt::format(" and were given one {:.1f} times a step", cpuTurnsPerStep);
    if (worldSize > cores)
      slicing += fmt::format(" ({} ranks on {} CPUs: a rank arrives last because it waited for a core, so the wait "
                             "is time-slicing, not the collective; moving bytes is the collective itself)",
                             worldSize, cores);
  }
  out += fmt::format("  collectives: {:.1f}% of the ranks' time: {:.1f}% waiting for the last rank to arrive, {:.1f}% "
                     "moving bytes, {:.1f}% in rendezvous{}\n",
                     collectiveShare, waitShare, moveShare, rendezvousShare, slicing);
  if (!throughput.empty()) {
    std::vector<double> rates;
    for (const auto& p : throughput) rates.push_back(p.second);
    const auto [lo, hi] = std::minmax_element(rates.begin(), rates.end());
    out += fmt::format("  images/s over time: median {:.0f} (from {:.0f} to {:.0f}) over {:.0f} s, {} points\n",
                       median(rates), *lo, *hi, throughput.back().first - throughput.front().first, rates.size());
  }
  return out;
}

std::string UtilisationReport::json() const {
  using nlohmann::json;
  json doc{{"cores", cores}, {"world_size", worldSize}, {"source", source}};
  doc["ranks"] = json::array();
  for (const RankUtilisation& u : ranks) {
    json seconds{{"forward", u.forward},  {"backward", u.backward},
                 {"update", u.update},    {"data", u.data},
                 {"collective_wait", u.collectiveWait}, {"collective_move", u.collectiveMove},
                 {"rendezvous", u.rendezvous}, {"injected", u.injected},
                 {"other", u.other}};
    json shares{{"compute", u.share(u.compute())}, {"collectives", u.share(u.collectives())},
                {"data", u.share(u.data)}, {"other", u.share(u.other + u.injected)}};
    doc["ranks"].push_back(
        {{"rank", u.rank}, {"pid", u.pid}, {"window_seconds", u.windowSeconds}, {"steps", u.steps},
         {"samples", u.samples}, {"seconds", seconds}, {"shares", shares},
         {"cpu_seconds", u.cpuSeconds < 0 ? json(nullptr) : json(u.cpuSeconds)},
         {"runqueue_seconds", u.runqueueSeconds < 0 ? json(nullptr) : json(u.runqueueSeconds)},
         {"cpu_turns_per_step", u.cpuTurnsPerStep < 0 ? json(nullptr) : json(u.cpuTurnsPerStep)},
         {"step_ms", {{"min", 1e3 * u.stepMin}, {"median", 1e3 * u.stepMedian}, {"p99", 1e3 * u.stepP99}, {"max", 1e3 * u.stepMax}}},
         {"device_memory", {{"peak_bytes", u.devicePeakBytes}, {"capacity_bytes", u.deviceCapacityBytes}}}});
  }
  doc["straggler"] = {{"rank", straggler.rank < 0 ? json(nullptr) : json(straggler.rank)},
                      {"phase", straggler.phase.empty() ? json(nullptr) : json(straggler.phase)},
                      {"extra_ms_per_step", 1e3 * straggler.extraPerStep},
                      {"slower_percent", straggler.slowerPercent},
                      {"text", straggler.text}};
  doc["collectives"] = {{"share", collectiveShare},
                        {"waiting_for_last_rank", waitShare},
                        {"moving_bytes", moveShare},
                        {"rendezvous", rendezvousShare},
                        {"runqueue", runqueueShare < 0 ? json(nullptr) : json(runqueueShare)},
                        {"cpu_turns_per_step", cpuTurnsPerStep < 0 ? json(nullptr) : json(cpuTurnsPerStep)}};
  doc["throughput"] = json::array();
  for (const auto& [t, v] : throughput) doc["throughput"].push_back({t, v});
  doc["text"] = text();
  return doc.dump();
}

}  // namespace xs
