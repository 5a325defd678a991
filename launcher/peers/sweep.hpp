// sweep.hpp: what every collective benchmark shares, xspawn's and its peers' (MPI, Gloo), so
// they measure the same way: the message sizes, buffer rotation (so the cache does not
// flatter anyone), per-call timing with medians, and the JSON line each size reports.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace xs::bench {

struct SweepConfig {
  std::string op = "allreduce";  // allreduce | broadcast | allgather | reducescatter
  std::size_t minBytes = 4096;
  std::size_t maxBytes = 256u << 20;
  int factor = 4;
  int iters = 20;
  int warmup = 3;
  std::size_t rotateBytes = 256u << 20;  // buffers cycled through per size, in total
};

// Reads "OP MIN MAX FACTOR ITERS WARMUP" from argv[first..first+5], as the bench passes them.
inline SweepConfig sweepFromArgs(char** argv, int first) {
  SweepConfig c;
  c.op = argv[first];
  c.minBytes = std::strtoull(argv[first + 1], nullptr, 10);
  c.maxBytes = std::strtoull(argv[first + 2], nullptr, 10);
  c.factor = std::atoi(argv[first + 3]);
  c.iters = std::atoi(argv[first + 4]);
  c.warmup = std::atoi(argv[first + 5]);
  return c;
}

inline std::vector<std::size_t> sweepSizes(const SweepConfig& c) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = c.minBytes; b <= c.maxBytes; b *= static_cast<std::size_t>(c.factor)) {
    sizes.push_back(b);
    if (c.factor < 2) break;
  }
  return sizes;
}

// How many distinct buffers of `bytes` to cycle through.
inline int rotation(const SweepConfig& c, std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(c.rotateBytes / std::max<std::size_t>(bytes, 1), 1, 64));
}

// Iterations at a size: fewer for huge messages so a sweep stays within minutes.
inline int itersFor(const SweepConfig& c, std::size_t bytes) {
  if (bytes >= (64u << 20)) return std::max(3, c.iters / 4);
  return c.iters;
}

struct Timing {
  double medianUs = 0;
  double maxUs = 0;
};

// Times each call of `call(i)` after `warmup` untimed ones, a barrier before each.
template <class Call, class Barrier>
Timing timeCalls(int warmup, int iters, Call&& call, Barrier&& barrier) {
  for (int i = 0; i < warmup; ++i) call(i);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    call(warmup + i);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.back()};
}

inline void printJsonLine(const std::string& peer, const std::string& op, std::size_t bytes, const Timing& t) {
  std::printf("{\"peer\":\"%s\",\"op\":\"%s\",\"bytes\":%zu,\"time_us\":%.3f,\"max_us\":%.3f}\n", peer.c_str(),
              op.c_str(), bytes, t.medianUs, t.maxUs);
  std::fflush(stdout);
}

}  // namespace xs::bench
