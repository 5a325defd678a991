// bench_engine.cpp: xspawn-bench-engine: one emulated core trains a model (forward, backward,
// SGD step) on synthetic data; prints images/s, GFLOP/s and share of the measured peak, and
// runs PyTorch (1 thread) on the identical model and batch in the same run for the ratio.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/models.hpp"
#include "xspawn/error.hpp"
#include "gemm.hpp"
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
};

double threadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

bench::Figures runEngine(const Args& a, Model& model, optim::Optimizer& opt, double flopsPerImage) {
  Shape in = model.inputShape();
  std::vector<float> images(static_cast<std::size_t>(a.batch) * in.numel());
  std::vector<std::int32_t> labels(a.batch);
  fillPattern(images.data(), images.size(), 7, 1.f);
  for (int i = 0; i < a.batch; ++i) labels[i] = i % model.numClasses();
  // The core's own compute time (this thread's CPU time) is the measure: on a shared machine
  // wall time also counts the time other processes hold the CPU.
  std::vector<double> cpu, wall;
  for (int it = 0; it < a.iters + 2; ++it) {
    double c0 = threadCpuSeconds();
    auto t0 = std::chrono::steady_clock::now();
    model.trainStep(images.data(), labels.data(), a.batch);
    opt.step();
    if (it < 2) continue;  // two warm-up steps
    cpu.push_back(threadCpuSeconds() - c0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double t = median(cpu);
  return {a.batch / t, t * 1e3, flopsPerImage * a.batch / t / 1e9, median(wall) * 1e3};
}

nlohmann::json figuresJson(const bench::Figures& f) {
  return {{"images_per_s", f.imagesPerSecond}, {"ms_per_step", f.msPerStep}, {"gflops", f.gflops},
          {"wall_ms_per_step", f.wallMsPerStep}};
}

int run(const Args& a) {
  Precision prec = parsePrecision(a.precision);
  const bool bf16 = prec == Precision::kBf16;
  DeviceOptions dopt;
  dopt.precision = prec;
  dopt.memoryBytes = std::size_t{16} << 30;
  Device dev(dopt);
  models::ModelConfig cfg;
  cfg.name = a.model;
  cfg.imageSize = a.imageSize;
  cfg.seed = 1234;
  Model model(dev, models::network(cfg), (cfg).seed);
  auto opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.01f, 0.9f});
  const int size = model.inputShape()[1];
  const double flops = 3.0 * model.forwardFlopsPerSample();  // forward + two backward products
  // The matrix unit's peak: AVX-512 FMA for fp32; AMX (or else vdpbf16ps) for bf16.
  const double vectorPeak = bench::measurePeakGflops(bf16);
  const double amxPeak = bf16 ? bench::measureAmxPeakGflops() : 0;
  const double peak = std::max(vectorPeak, amxPeak);
  const std::string peakName = !bf16 ? "AVX-512 FMA" : amxPeak > 0 ? "AMX tdpbf16ps" : "vdpbf16ps";
  bench::Figures eng = runEngine(a, model, *opt, flops);

  // PyTorch at the same precision; a bf16 run also shows PyTorch's fp32 baseline.
  std::string script = a.torchScript.empty() ? bench::defaultTorchScript() : a.torchScript;
  std::vector<std::pair<std::string, bench::PeerResult>> peers;
  for (const std::string& p : bf16 ? std::vector<std::string>{"bf16", "fp32"} : std::vector<std::string>{"fp32"}) {
    peers.emplace_back(p, bench::runTorchPeer(script, a.model, a.batch, size, p, a.iters));
    if (auto& f = peers.back().second.figures) f->gflops = flops * f->imagesPerSecond / 1e9;
  }

  fmt::print("engine bench: {} batch {} image {}x{} {} on {} (conv {}, gemm {}), {} steps, median\n",
             a.model, a.batch, size, size, a.precision, dev.name(), convBackendName(convBackend()),
             gemmBackendName(gemmBackend()), a.iters);
  fmt::print("{:<14} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9}\n", "", "images/s", "ms/step", "GFLOP/s",
             "% peak", "ratio", "wall ms");
  auto row = [&](const std::string& who, const bench::Figures& f) {
    fmt::print("{:<14} {:>9.1f} {:>9.2f} {:>9.1f} {:>8} {:>6.2f}x {:>9.2f}\n", who, f.imagesPerSecond,
               f.msPerStep, f.gflops, peak > 0 ? fmt::format("{:.1f}", 100 * f.gflops / peak) : "n/a",
               eng.imagesPerSecond / f.imagesPerSecond, f.wallMsPerStep);
  };
  row("xspawn " + a.precision, eng);
  nlohmann::json j = {{"model", a.model}, {"batch", a.batch}, {"image_size", size},
                      {"precision", a.precision}, {"iters", a.iters},
                      {"conv", convBackendName(convBackend())}, {"gemm", gemmBackendName(gemmBackend())},
                      {"peak_gflops", peak}, {"peak_unit", peakName}, {"gflop_per_image", flops / 1e9},
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
  fmt::print("images/s and ms/step from each step's thread CPU time (median); ratio = xspawn images/s / "
             "row images/s; peak of this core: {:.1f} GFLOP/s measured ({}); "
             "{:.4f} GFLOP per image (fwd+bwd); device peak memory {:.1f} MiB\n",
             peak, peakName, flops / 1e9, dev.peak() / 1048576.0);
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    XS_CHECK(f, UsageError, "cannot write --json file '" + a.json + "': check the directory");
    f << j.dump(2) << "\n";
  }
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
      ("torch-script", po::value(&a.torchScript), "PyTorch peer script (default: ../scripts/bench_engine_torch.py)");
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    XS_CHECK(a.batch > 0, UsageError, "--batch must be positive");
    XS_CHECK(a.iters > 0, UsageError, "--iters must be positive");
    XS_CHECK(a.imageSize >= 0, UsageError, "--image-size must be 0 or positive");
    return run(a);
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
