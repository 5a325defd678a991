// bench_report.cpp: peak measurement and the PyTorch peer of xspawn-bench-engine.
#include "bench_report.hpp"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>

namespace xs::engine::bench {
namespace {

volatile double gSink = 0;  // keeps the peak loops' results alive

// Sums the lanes of the accumulators so the loops cannot be optimised away.
__attribute__((target("avx512f"))) double sum(const __m512 (&acc)[12]) {
  alignas(64) float lanes[16];
  double s = 0;
  for (const auto& a : acc) {
    _mm512_store_ps(lanes, a);
    for (float v : lanes) s += v;
  }
  return s;
}

__attribute__((target("avx512f"))) double fmaLoop(long iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_set1_ps(0.f);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (long i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  return sum(acc);
}

__attribute__((target("avx512f,avx512bf16"))) double bf16Loop(long iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_set1_ps(0.f);
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (long i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, x);
  return sum(acc);
}

// AMX: 4 accumulator tiles C[16x16 fp32] += A[16x32 bf16] * B[32x16 bf16] (16384 flops each).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) double amxLoop(long iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) static std::uint16_t ab[16 * 32];
  alignas(64) static float c[16 * 16];
  for (auto& v : ab) v = 0x3c00;  // bf16 2^-7
  _tile_loadconfig(&cfg);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  _tile_loadd(4, ab, 64); _tile_loadd(5, ab, 64); _tile_loadd(6, ab, 64); _tile_loadd(7, ab, 64);
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}

// Linux hands out AMX tile state only on request.
bool amxUsable() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("amx-bf16")) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTiledata) == 0;
}

}  // namespace

double measureAmxPeakGflops() {
  if (!amxUsable()) return 0;
  const long iters = 200'000;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    gSink = gSink + amxLoop(iters);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, iters * 4 * 16384.0 / s / 1e9);
  }
  return best;
}

double measurePeakGflops(bool bf16) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || (bf16 && !__builtin_cpu_supports("avx512bf16"))) return 0;
  const long iters = 2'000'000;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    gSink = gSink + (bf16 ? bf16Loop(iters) : fmaLoop(iters));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // 12 accumulators x 16 lanes x 2 flops (fp32 FMA) or x 4 flops (bf16 pair dot product)
    best = std::max(best, iters * 12.0 * 16 * (bf16 ? 4 : 2) / s / 1e9);
  }
  return best;
}

double measureMemoryGBs() {
  const std::size_t n = std::size_t{16} << 20;  // floats: 64 MiB an array
  std::vector<float> a(n, 1.f), b(n, 2.f), c(n, 0.f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + 0.5f * b[i];
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gSink = gSink + c[rep];
    best = std::max(best, 3.0 * n * sizeof(float) / s / 1e9);
  }
  return best;
}

std::string defaultTorchScript() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "scripts/bench_engine_torch.py";
  auto dir = exe.parent_path();
  for (auto cand : {dir / ".." / "scripts" / "bench_engine_torch.py", dir / "scripts" / "bench_engine_torch.py"})
    if (std::filesystem::exists(cand)) return std::filesystem::weakly_canonical(cand).string();
  return (dir / ".." / "scripts" / "bench_engine_torch.py").string();
}

PeerResult runTorchPeer(const std::string& script, const std::string& model, int batch,
                        int imageSize, const std::string& precision, int iters) {
  PeerResult r;
  if (!std::filesystem::exists(script)) {
    r.note = "PyTorch peer left out: script " + script + " not found (use --torch-script)";
    return r;
  }
  // Debian's interpreter first: python3-torch installs into it.
  std::string python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::string cmd = fmt::format("OMP_NUM_THREADS=1 {} '{}' --model {} --batch {} --image-size {} "
                                "--precision {} --iters {} 2>&1",
                                python, script, model, batch, imageSize, precision, iters);
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) {
    r.note = "PyTorch peer left out: cannot start " + python;
    return r;
  }
  std::string out, last;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p.get())) {
    out += buf.data();
    std::string line = buf.data();
    if (!line.empty() && line[0] == '{') last = line;
  }
  int status = pclose(p.release());
  if (status != 0 || last.empty()) {
    std::string tail = out.size() > 300 ? out.substr(out.size() - 300) : out;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    r.note = "PyTorch peer left out (python3-torch missing or failed): " + tail;
    return r;
  }
  try {
    auto j = nlohmann::json::parse(last);
    r.figures = Figures{j.at("images_per_s").get<double>(), j.at("ms_per_step").get<double>(), 0,
                        j.value("wall_ms_per_step", 0.0)};
    r.note = "PyTorch " + j.value("torch", std::string("?")) + ", 1 thread";
  } catch (const std::exception& e) {
    r.note = std::string("PyTorch peer left out: unreadable output: ") + e.what();
  }
  return r;
}

}  // namespace xs::engine::bench
