// bench_engine.cpp: xspawn-bench-engine: one emulated core trains a model (forward, backward,
// SGD step) on synthetic data; prints images/s, GFLOP/s and share of the measured peak, and
// runs PyTorch (1 thread) on the identical model and batch in the same run for the ratio;
// --all: every built-in model in both precisions in one table.
#include <algorithm>
#include <sched.h>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/models.hpp"
#include "xspawn/error.hpp"
#include "gemm.hpp"
#include "module_clock.hpp"
#include "xspawn/engine/model.hpp"
#include "ops.hpp"
#include "xspawn/optim.hpp"
#include "rng.hpp"

namespace po = boost::program_options;
using namespace xs::engine;
using xs::UsageError;
namespace models = xs::models;
namespace optim = xs::optim;

namespace {

struct Args {
  std::string model = "convnet", precision = "fp32", json, torchScript;
  int batch = 100, imageSize = 0, iters = 10;
  int stepInBackward = 1;  // the SGD step inside backward (Model::setOptimizerInBackward)
  int rounds = 1;          // --all: the whole table this many times, each row's median
  bool all = false, itersGiven = false;
  bool modules = false;  // each module's own forward and backward time (Model::setModuleTimes)
  bool peers = false;    // --all: each row's PyTorch peer too, and the row's ratio to it
  // Give the CPU up after every step (sched_yield): copies of the bench started on one core then
  // take turns a step each, as oversubscribed ranks do between their all-reduces.
  bool yieldEachStep = false;
  // Before each step, outside its timing, write a byte in every cache line of this many MiB of
  // other memory: the step then starts with its own data pushed out of the caches, as a rank's
  // does after other ranks ran on its core.
  int touchMib = 0;
  // Timed steps go on past --iters until they add up to this many seconds (of thread CPU time):
  // short steps (LeNet-5, the MLP) then span several of a shared machine's moments.
  double minSeconds = 0;
};

using xs::engine::detail::threadCpuSeconds;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// One module's median own times over the timed steps (--modules), and its FLOPs a sample.
struct ModuleRow {
  ModuleTime t;
  std::vector<double> forward, backward;  // seconds, a step each
};
// And a step's wall time outside every module, a step each.
struct ModuleTimes {
  std::vector<ModuleRow> rows;
  std::vector<double> outside;
};

bench::Figures runEngine(const Args& a, Model& model, optim::Optimizer& opt, double flopsPerImage,
                         ModuleTimes* modules = nullptr) {
  Shape in = model.inputShape();
  model.setModuleTimes(modules != nullptr);
  std::vector<float> images(static_cast<std::size_t>(a.batch) * in.numel());
  std::vector<std::int32_t> labels(a.batch);
  fillPattern(images.data(), images.size(), 7, 1.f);
  for (int i = 0; i < a.batch; ++i) labels[i] = i % model.numClasses();
  // The core's own compute time (this thread's CPU time) is the measure: on a shared machine
  // wall time also counts the time other processes hold the CPU.
  std::vector<double> cpu, wall;
  double timed = 0;
  std::vector<char> other(static_cast<std::size_t>(a.touchMib) << 20);
  for (int it = 0; it < a.iters + 2 || timed < a.minSeconds; ++it) {
    if (a.yieldEachStep) sched_yield();
    for (std::size_t i = 0; i < other.size(); i += 64) other[i] = static_cast<char>(it);
    double c0 = threadCpuSeconds();
    auto t0 = std::chrono::steady_clock::now();
    model.trainStep(images.data(), labels.data(), a.batch);
    if (!opt.inBackward()) opt.step();
    if (it >= 2) {  // after two warm-up steps
      cpu.push_back(threadCpuSeconds() - c0);
      timed += cpu.back();
      wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!modules) continue;
    const std::vector<ModuleTime>& times = model.moduleTimes();
    std::vector<ModuleRow>& rows = modules->rows;
    for (std::size_t i = rows.size(); i < times.size(); ++i) rows.push_back({times[i], {}, {}});  // names, FLOPs
    double outside = it >= 2 ? wall.back() : 0;
    for (std::size_t i = 0; it >= 2 && i < times.size(); ++i) {
      rows[i].forward.push_back(times[i].forwardSeconds);
      rows[i].backward.push_back(times[i].backwardSeconds);
      outside -= times[i].forwardSeconds + times[i].backwardSeconds;
    }
    if (it >= 2) modules->outside.push_back(outside);
    model.resetModuleTimes();
  }
  model.setModuleTimes(false);
  double t = median(cpu);
  return {a.batch / t, t * 1e3, flopsPerImage * a.batch / t / 1e9, median(wall) * 1e3, static_cast<int>(cpu.size())};
}

void writeJson(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream f(path);
  XS_CHECK(f, UsageError, "cannot write --json file '" + path + "': check the directory");
  f << j.dump(2) << "\n";
}

nlohmann::json figuresJson(const bench::Figures& f) {
  return {{"images_per_s", f.imagesPerSecond}, {"ms_per_step", f.msPerStep}, {"gflops", f.gflops},
          {"wall_ms_per_step", f.wallMsPerStep}};
}

// The peak of the unit a precision runs on: AVX-512 FMA for fp32 and for emulated bf16; AMX (or
// else vdpbf16ps) for native bf16.
struct Peak {
  double gflops = 0;
  std::string unit;
};
Peak measurePeak(const Device& dev) {
  if (!nativeBf16(dev))
    return {bench::measurePeakGflops(false), emulatesBf16(dev) ? "AVX-512 FMA, bf16 emulated" : "AVX-512 FMA"};
  const double vector = bench::measurePeakGflops(true), amx = bench::measureAmxPeakGflops();
  return {std::max(vector, amx), amx > 0 ? "AMX tdpbf16ps" : "vdpbf16ps"};
}

// One model at one precision: the engine's figures and the peak measured around them.
struct Result {
  bench::Figures eng;
  Peak peak;
  double flopsPerImage = 0;
  int imageSize = 0;
  std::string device;
  double peakMiB = 0;
  ModuleTimes modules;  // --modules
};
Result benchModel(const Args& a) {
  DeviceOptions dopt;
  dopt.precision = parsePrecision(a.precision);
  dopt.memoryBytes = std::size_t{16} << 30;
  Device dev(dopt);
  models::ModelConfig cfg;
  cfg.name = a.model;
  cfg.imageSize = a.imageSize;
  cfg.seed = 1234;
  Model model(dev, models::network(cfg), (cfg).seed);
  auto opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.01f, 0.9f});
  if (a.stepInBackward) model.setOptimizerInBackward(opt.get());
  Result r;
  r.imageSize = model.inputShape()[1];
  r.flopsPerImage = 3.0 * model.forwardFlopsPerSample();  // forward + two backward products
  r.peak = measurePeak(dev);
  r.eng = runEngine(a, model, *opt, r.flopsPerImage, a.modules ? &r.modules : nullptr);
  // The peak probed again after the steps, the better of the two kept: a probe that fell in a
  // slow moment of a shared machine would otherwise inflate the row's % of peak.
  const Peak after = measurePeak(dev);
  if (after.gflops > r.peak.gflops) r.peak = after;
  r.device = dev.name();
  r.peakMiB = dev.peak() / 1048576.0;
  return r;
}

const char* stepWhere(const Args& a) { return a.stepInBackward ? "inside" : "after"; }

// gflops as % of the peak (0 without a measured peak), and as printed ("n/a" without one).
double percentOfPeak(double gflops, const Peak& p) { return p.gflops > 0 ? 100 * gflops / p.gflops : 0; }
std::string percentOf(double gflops, const Peak& p) {
  return p.gflops > 0 ? fmt::format("{:.1f}", percentOfPeak(gflops, p)) : "n/a";
}

// --modules: each module's median own times, its share of the step (wall time) and the % of
// peak of its FLOPs; then what the step spends outside every module (the batch's copy, the loss).
nlohmann::json printModules(const Args& a, const Result& res) {
  const double step = res.eng.wallMsPerStep / 1e3;
  fmt::print("per module, own time (modules inside one count as theirs), median of {} steps; % of the step's "
             "wall time:\n{:<22} {:>9} {:>9} {:>7} {:>10} {:>10}\n",
             res.eng.steps, "module", "fwd ms", "bwd ms", "% step", "fwd % pk", "bwd % pk");
  auto peakShare = [&](double flops, double seconds) {
    return flops > 0 && seconds > 0 ? percentOf(flops * a.batch / seconds / 1e9, res.peak) : std::string("-");
  };
  nlohmann::json out = nlohmann::json::array();
  for (const ModuleRow& m : res.modules.rows) {
    const double f = median(m.forward), b = median(m.backward);
    fmt::print("{:<22} {:>9.4f} {:>9.4f} {:>7.1f} {:>10} {:>10}\n", m.t.name, f * 1e3, b * 1e3,
               100 * (f + b) / step, peakShare(m.t.forwardFlops, f), peakShare(m.t.backwardFlops, b));
    out.push_back({{"name", m.t.name}, {"forward_ms", f * 1e3}, {"backward_ms", b * 1e3},
                   {"forward_gflop_per_image", m.t.forwardFlops / 1e9},
                   {"backward_gflop_per_image", m.t.backwardFlops / 1e9}});
  }
  const double outside = median(res.modules.outside);
  fmt::print("{:<22} {:>19.4f} {:>7.1f}   (the batch's copy, the loss, the timing itself)\n", "outside the modules",
             outside * 1e3, 100 * outside / step);
  out.push_back({{"name", "outside the modules"}, {"ms", outside * 1e3}});
  return out;
}

int run(const Args& a) {
  const bool bf16 = parsePrecision(a.precision) == Precision::kBf16;
  Result res = benchModel(a);
  const bench::Figures& eng = res.eng;
  const double flops = res.flopsPerImage;
  const int size = res.imageSize;

  // PyTorch at the same precision; a bf16 run also shows PyTorch's fp32 baseline.
  std::string script = a.torchScript.empty() ? bench::defaultTorchScript() : a.torchScript;
  std::vector<std::pair<std::string, bench::PeerResult>> peers;
  for (const std::string& p : bf16 ? std::vector<std::string>{"bf16", "fp32"} : std::vector<std::string>{"fp32"}) {
    peers.emplace_back(p, bench::runTorchPeer(script, a.model, a.batch, size, p, a.iters));
    if (auto& f = peers.back().second.figures) f->gflops = flops * f->imagesPerSecond / 1e9;
  }

  fmt::print("engine bench: {} batch {} image {}x{} {}{} on {} (conv {}, gemm {}), SGD step {} backward, {} steps, "
             "median\n",
             a.model, a.batch, size, size, a.precision, bf16 ? fmt::format(" ({})", bf16ModeName(bf16Mode())) : "",
             res.device, convBackendName(convBackend()), gemmBackendName(gemmBackend()), stepWhere(a), eng.steps);
  fmt::print("{:<14} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9}\n", "", "images/s", "ms/step", "GFLOP/s",
             "% peak", "ratio", "wall ms");
  auto row = [&](const std::string& who, const bench::Figures& f) {
    fmt::print("{:<14} {:>9.1f} {:>9.2f} {:>9.1f} {:>8} {:>6.2f}x {:>9.2f}\n", who, f.imagesPerSecond,
               f.msPerStep, f.gflops, percentOf(f.gflops, res.peak), eng.imagesPerSecond / f.imagesPerSecond,
               f.wallMsPerStep);
  };
  row("xspawn " + a.precision, eng);
  nlohmann::json j = {{"model", a.model}, {"batch", a.batch}, {"image_size", size},
                      {"precision", a.precision}, {"iters", eng.steps}, {"step_in_backward", a.stepInBackward == 1},
                      {"conv", convBackendName(convBackend())}, {"gemm", gemmBackendName(gemmBackend())},
                      {"bf16_mode", bf16ModeName(bf16Mode())},
                      {"peak_gflops", res.peak.gflops}, {"peak_unit", res.peak.unit}, {"gflop_per_image", flops / 1e9},
                      {"engine", figuresJson(eng)}};
  for (auto& [p, r] : peers) {
    std::string key = p == a.precision ? "pytorch" : "pytorch_" + p;
    if (r.figures) {
      row("pytorch " + p, *r.figures);
      j[key] = figuresJson(*r.figures);
      j[key]["ratio"] = eng.imagesPerSecond / r.figures->imagesPerSecond;
      j[key]["note"] = r.note;
    } else {
      fmt::print("note: {}\n", r.note);
      j[key + "_note"] = r.note;
    }
  }
  if (!peers.empty() && peers.front().second.figures) fmt::print("peer: {}\n", peers.front().second.note);
  if (a.modules) j["modules"] = printModules(a, res);
  fmt::print("images/s and ms/step from each step's thread CPU time (median); ratio = xspawn images/s / "
             "row images/s; peak of this core: {:.1f} GFLOP/s measured ({}); "
             "{:.4f} GFLOP per image (fwd+bwd); device peak memory {:.1f} MiB\n",
             res.peak.gflops, res.peak.unit, flops / 1e9, res.peakMiB);
  writeJson(a.json, j);
  return 0;
}

// --all: every built-in model at its `xspawn train` batch (AlexNet also at 64x64), fp32 then
// bf16, each against the peak of the unit it runs on, with bf16's speed over fp32's. --rounds N
// runs the whole table N times over and prints each row's median: a shared machine's memory
// speed changes in phases of minutes (the FMA probe does not see them, the memory-bound rows
// do), so every row takes its turn in each phase; each round opens with a memory probe, and each
// row of a round is printed to stderr as it is measured.
struct Case {
  const char* model;
  int batch, imageSize, iters;
};
constexpr Case kAllCases[] = {{"mlp", 64, 0, 50},      {"lenet5", 64, 0, 50},  {"convnet", 16, 0, 50},
                              {"alexnet", 32, 64, 10}, {"alexnet", 32, 224, 3}, {"resnet18", 128, 32, 3}};
constexpr const char* kPrecisions[] = {"fp32", "bf16"};
constexpr std::size_t kPrecisionCount = std::size(kPrecisions);

// One row of one round.
struct Measured {
  Result r;
  double percent = 0, bf16OverFp32 = 0, memoryGBs = 0;
  double overPeer = 0;   // --peers: xspawn's images/s over PyTorch's at the row's precision (0: none)
  std::string peerNote;  // --peers: why the peer did not run, or its version
  int iters = 0;
};

template <class Field>
double medianOf(const std::vector<Measured>& rounds, Field field) {
  std::vector<double> v;
  for (const Measured& m : rounds) v.push_back(field(m));
  return median(v);
}
double medianOf(const std::vector<Measured>& rounds, double Measured::*field) {
  return medianOf(rounds, [field](const Measured& m) { return m.*field; });
}
// The medians of the rounds' engine figures and peak.
bench::Figures medianFigures(const std::vector<Measured>& rounds) {
  return {medianOf(rounds, [](const Measured& m) { return m.r.eng.imagesPerSecond; }),
          medianOf(rounds, [](const Measured& m) { return m.r.eng.msPerStep; }),
          medianOf(rounds, [](const Measured& m) { return m.r.eng.gflops; }),
          medianOf(rounds, [](const Measured& m) { return m.r.eng.wallMsPerStep; })};
}
double medianPeak(const std::vector<Measured>& rounds) {
  return medianOf(rounds, [](const Measured& m) { return m.r.peak.gflops; });
}

void printAllHeader(const Args& base) {
  fmt::print("engine bench --all: one core, forward + backward + SGD step {} backward; bf16 is {} here "
             "(XS_ENGINE_BF16); median step of each row's thread CPU time{}\n",
             stepWhere(base), bf16ModeName(bf16Mode()),
             base.rounds > 1 ? fmt::format("; medians of {} rounds (bf16/fp32: of each round's ratio)", base.rounds)
                             : "");
  fmt::print("{:<9} {:>5} {:>5} {:<5} {:>9} {:>9} {:>8} {:>7}  {:<28} {:>9}{}{}\n", "model", "batch", "image", "prec",
             "images/s", "ms/step", "GFLOP/s", "% peak", "peak (GFLOP/s, unit)", "bf16/fp32",
             base.peers ? fmt::format(" {:>10}", "x PyTorch") : "", base.rounds > 1 ? "  % peak range" : "");
}

// The median of the rounds' ratios to PyTorch, over the rounds where the peer ran (0: none did).
double medianOverPeer(const std::vector<Measured>& rounds) {
  std::vector<double> v;
  for (const Measured& m : rounds)
    if (m.overPeer > 0) v.push_back(m.overPeer);
  return v.empty() ? 0 : median(v);
}

// A row: one round's figures, or the medians of several (with the range of their % of peak).
void printAllRow(const Case& c, const char* precision, const std::vector<Measured>& rounds, bool peers) {
  const Measured& first = rounds.front();
  const bool isBf16 = std::string(precision) == "bf16";
  const bench::Figures med = medianFigures(rounds);
  const Peak peak{medianPeak(rounds), first.r.peak.unit};
  std::string range;
  if (rounds.size() > 1 && peak.gflops > 0) {
    auto [lo, hi] = std::minmax_element(rounds.begin(), rounds.end(),
                                        [](const Measured& a, const Measured& b) { return a.percent < b.percent; });
    range = fmt::format("  {:.1f}-{:.1f}", lo->percent, hi->percent);
  }
  const double overPeer = medianOverPeer(rounds);
  const std::string peer =
      !peers ? "" : fmt::format(" {:>10}", overPeer > 0 ? fmt::format("{:.2f}x", overPeer) : "n/a");
  fmt::print("{:<9} {:>5} {:>5} {:<5} {:>9.1f} {:>9.2f} {:>8.1f} {:>7}  {:<28} {:>9}{}{}\n", c.model, c.batch,
             first.r.imageSize, precision, med.imagesPerSecond, med.msPerStep, med.gflops,
             peak.gflops > 0 ? fmt::format("{:.1f}", medianOf(rounds, &Measured::percent)) : "n/a",
             fmt::format("{:.1f} {}", peak.gflops, peak.unit),
             isBf16 ? fmt::format("{:.2f}x", medianOf(rounds, &Measured::bf16OverFp32)) : "", peer, range);
  std::fflush(stdout);
}

nlohmann::json allRowJson(const Case& c, const char* precision, const Args& base,
                          const std::vector<Measured>& rounds) {
  const Measured& first = rounds.front();
  const bool isBf16 = std::string(precision) == "bf16";
  auto orNull = [](bool has, double v) { return has ? nlohmann::json(v) : nlohmann::json(); };
  const double overPeer = medianOverPeer(rounds);
  nlohmann::json each = nlohmann::json::array();
  for (const Measured& m : rounds)
    each.push_back({{"engine", figuresJson(m.r.eng)}, {"peak_gflops", m.r.peak.gflops},
                    {"percent_of_peak", orNull(m.r.peak.gflops > 0, m.percent)},
                    {"bf16_over_fp32", orNull(isBf16, m.bf16OverFp32)}, {"memory_gbs", m.memoryGBs},
                    {"over_pytorch", orNull(m.overPeer > 0, m.overPeer)}, {"pytorch_note", m.peerNote}});
  return {{"model", c.model}, {"batch", c.batch}, {"image_size", first.r.imageSize}, {"precision", precision},
          {"iters", first.iters}, {"step_in_backward", base.stepInBackward == 1},
          {"bf16_mode", bf16ModeName(bf16Mode())},
          {"peak_gflops", medianPeak(rounds)},
          {"peak_unit", first.r.peak.unit}, {"gflop_per_image", first.r.flopsPerImage / 1e9},
          {"percent_of_peak", orNull(medianPeak(rounds) > 0, medianOf(rounds, &Measured::percent))},
          {"bf16_over_fp32", orNull(isBf16, medianOf(rounds, &Measured::bf16OverFp32))},
          {"over_pytorch", orNull(overPeer > 0, overPeer)},
          {"engine", figuresJson(medianFigures(rounds))},
          {"rounds", each}};
}

// With --rounds N, each row of a round as it is measured (the table of medians comes at the end).
void printRoundRow(int round, int rounds, const Case& c, const char* precision, const Measured& m) {
  fmt::print(stderr, "round {}/{}: {} {} {} {}: {:.2f} ms/step, {}% of peak{}\n", round + 1, rounds, c.model, c.batch,
             c.imageSize, precision, m.r.eng.msPerStep,
             m.r.peak.gflops > 0 ? fmt::format("{:.1f}", m.percent) : std::string("n/a"),
             m.overPeer > 0 ? fmt::format(", {:.2f}x PyTorch", m.overPeer) : "");
}

int runAll(const Args& base) {
  constexpr std::size_t kRows = std::size(kAllCases) * kPrecisionCount;
  std::vector<std::vector<Measured>> rows(kRows);  // [case * 2 + precision][round]
  if (base.rounds == 1) printAllHeader(base);
  std::vector<std::string> memory;
  const std::string script = base.torchScript.empty() ? bench::defaultTorchScript() : base.torchScript;
  for (int round = 0; round < base.rounds; ++round) {
    const double gbs = bench::measureMemoryGBs();
    memory.push_back(fmt::format("{:.1f}", gbs));
    if (base.rounds > 1) fmt::print(stderr, "round {}/{}: memory {} GB/s\n", round + 1, base.rounds, memory.back());
    for (std::size_t i = 0; i < kRows; ++i) {
      const Case& c = kAllCases[i / kPrecisionCount];
      Args a = base;
      a.model = c.model, a.batch = c.batch, a.imageSize = c.imageSize, a.precision = kPrecisions[i % kPrecisionCount];
      a.iters = base.itersGiven ? base.iters : c.iters;
      Measured m;
      m.r = benchModel(a);
      m.iters = m.r.eng.steps, m.memoryGBs = gbs;
      m.percent = percentOfPeak(m.r.eng.gflops, m.r.peak);
      if (i % kPrecisionCount) m.bf16OverFp32 = m.r.eng.imagesPerSecond / rows[i - 1].back().r.eng.imagesPerSecond;
      if (base.peers) {
        const bench::PeerResult peer =
            bench::runTorchPeer(script, c.model, c.batch, m.r.imageSize, a.precision, a.iters);
        if (peer.figures) m.overPeer = m.r.eng.imagesPerSecond / peer.figures->imagesPerSecond;
        m.peerNote = peer.note;
      }
      rows[i].push_back(m);
      if (base.rounds == 1) printAllRow(c, kPrecisions[i % kPrecisionCount], rows[i], base.peers);
      else printRoundRow(round, base.rounds, c, kPrecisions[i % kPrecisionCount], m);
    }
  }
  if (base.rounds > 1) {
    printAllHeader(base);
    for (std::size_t i = 0; i < kRows; ++i)
      printAllRow(kAllCases[i / kPrecisionCount], kPrecisions[i % kPrecisionCount], rows[i], base.peers);
  }
  fmt::print("% peak: nominal FLOPs (3x the forward's multiply-adds x 2) over the peak the bench measured on "
             "this core right before and after the row (the better of the two); x PyTorch (--peers): xspawn's "
             "images/s over PyTorch's at the row's precision, one thread, the step after backward\n"
             "memory, one core, read + written ({}): {} GB/s\n",
             base.rounds > 1 ? "at each round's start" : "at the start", fmt::join(memory, ", "));
  if (base.peers) {  // the peer's version where it ran, else why it did not
    const Measured* shown = &rows.front().front();
    for (const auto& row : rows)
      for (const Measured& m : row)
        if (m.overPeer > 0 && shown->overPeer <= 0) shown = &m;
    fmt::print("{}: {}\n", shown->overPeer > 0 ? "peer" : "note", shown->peerNote);
  }
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < kRows; ++i)
    out.push_back(allRowJson(kAllCases[i / kPrecisionCount], kPrecisions[i % kPrecisionCount], base, rows[i]));
  writeJson(base.json, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  po::options_description desc(
      "xspawn bench engine: one emulated core, forward + backward + SGD step, vs PyTorch\nOptions");
  desc.add_options()("help,h", "show this help")
      ("model", po::value(&a.model)->default_value(a.model), "mlp, convnet, lenet5, alexnet, resnet18")
      ("batch", po::value(&a.batch)->default_value(a.batch), "images per step")
      ("image-size", po::value(&a.imageSize)->default_value(a.imageSize), "image side; 0 = the model's default")
      ("precision", po::value(&a.precision)->default_value(a.precision), "fp32 or bf16")
      ("iters", po::value(&a.iters)->default_value(a.iters), "timed steps (after 2 warm-up steps)")
      ("json", po::value(&a.json), "also write the results to this JSON file")
      ("torch-script", po::value(&a.torchScript), "PyTorch peer script (default: ../scripts/bench_engine_torch.py)")
      ("step-in-backward", po::value(&a.stepInBackward)->default_value(a.stepInBackward),
       "1: xspawn's SGD step inside backward (Model::setOptimizerInBackward); 0: after it, as the PyTorch peer")
      ("all", "every built-in model at its training batch, fp32 and bf16, % of peak and bf16/fp32 (--iters then "
              "applies to every row)")
      ("peers", "with --all: also run each row's PyTorch peer at its precision and print the row's ratio to it")
      ("min-seconds", po::value(&a.minSeconds),
       "time more steps than --iters until they take this many seconds (default: 1 with --all, else 0)")
      ("modules", "also time each module's forward and backward (Model::setModuleTimes) and print its own "
                  "time, share of the step and % of peak")
      ("yield-each-step", "give the CPU up after every step: copies started on one core (taskset) then take "
                          "turns a step each, as oversubscribed ranks do")
      ("touch-mib", po::value(&a.touchMib)->default_value(a.touchMib),
       "before each step, outside its timing, write a byte in every cache line of this many MiB of other memory: "
       "the step starts with its data pushed out of the caches, as after other ranks ran on its core")
      ("rounds", po::value(&a.rounds)->default_value(a.rounds),
       "with --all: run the whole table this many times (each row to stderr as it is measured), then print each "
       "row's median and the range of its % of peak (a shared machine's memory speed changes in phases)");
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    a.all = vm.count("all") > 0;
    a.itersGiven = !vm["iters"].defaulted();
    a.modules = vm.count("modules") > 0;
    a.peers = vm.count("peers") > 0;
    XS_CHECK(!a.peers || a.all, UsageError,
             "--peers adds PyTorch to the --all table: add --all (a single model's run has its peer already)");
    a.yieldEachStep = vm.count("yield-each-step") > 0;
    XS_CHECK(a.touchMib >= 0 && a.touchMib <= 4096, UsageError,
             "--touch-mib must be between 0 and 4096 MiB, got " + std::to_string(a.touchMib));
    if (!vm.count("min-seconds")) a.minSeconds = a.all ? 1.0 : 0.0;
    XS_CHECK(a.minSeconds >= 0 && a.minSeconds <= 600, UsageError,
             "--min-seconds must be between 0 and 600, got " + std::to_string(a.minSeconds));
    XS_CHECK(!(a.modules && a.all), UsageError,
             "--modules times one model's modules: drop --all, and give --model (and --precision)");
    XS_CHECK(a.batch > 0, UsageError, "--batch must be positive");
    XS_CHECK(a.iters > 0, UsageError, "--iters must be positive");
    XS_CHECK(a.rounds > 0, UsageError, "--rounds must be positive, got " + std::to_string(a.rounds));
    XS_CHECK(a.all || vm["rounds"].defaulted(), UsageError,
             "--rounds repeats the --all table: add --all, or repeat a single model's run yourself");
    XS_CHECK(a.imageSize >= 0, UsageError, "--image-size must be 0 or positive");
    XS_CHECK(a.stepInBackward == 0 || a.stepInBackward == 1, UsageError,
             "--step-in-backward must be 0 or 1, got " + std::to_string(a.stepInBackward));
    // Tried before the runs (writeJson writes it after them): a path it cannot write fails now,
    // not after minutes of measuring. The try appends nothing and leaves no file it made.
    if (!a.json.empty()) {
      const bool existed = std::filesystem::exists(a.json);
      XS_CHECK(std::ofstream(a.json, std::ios::app), UsageError,
               "cannot write --json file '" + a.json + "': check the directory");
      if (!existed) std::filesystem::remove(a.json);
    }
    return a.all ? runAll(a) : run(a);
  } catch (const po::error& e) {
    std::fprintf(stderr, "xspawn-bench-engine: error: %s (try --help)\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "xspawn-bench-engine: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xspawn-bench-engine: error: %s\n", e.what());
    return 1;
  }
}
