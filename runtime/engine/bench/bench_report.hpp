// bench_report.hpp: pieces of xspawn-bench-engine: the measured per-core peak, the PyTorch
// peer run and the result table.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace xs::engine::bench {

struct Figures {
  double imagesPerSecond = 0, msPerStep = 0, gflops = 0;  // from thread CPU time per step
  double wallMsPerStep = 0;
  int steps = 0;  // timed steps
};

// Measured peak GFLOP/s of one core: AVX-512 FMA (fp32) or vdpbf16ps (bf16); 0 when absent.
double measurePeakGflops(bool bf16);
// Measured peak GFLOP/s of this core's AMX unit (tdpbf16ps); 0 when absent or not granted.
double measureAmxPeakGflops();

// Memory speed one core reaches right now, in GB/s read + written: a sum of two 64 MiB arrays
// into a third (far past the last-level cache), best of three. A shared machine's memory-bound
// rows follow it where the FMA probe stays flat.
double measureMemoryGBs();

struct PeerResult {
  std::optional<Figures> figures;  // empty when the peer could not run
  std::string note;                // why, or the peer's version
};

// Runs python3 on the PyTorch script with the same settings; parses its JSON line.
PeerResult runTorchPeer(const std::string& script, const std::string& model, int batch,
                        int imageSize, const std::string& precision, int iters);

// Where scripts/bench_engine_torch.py is, relative to this executable (build/ -> ../scripts).
std::string defaultTorchScript();

}  // namespace xs::engine::bench
