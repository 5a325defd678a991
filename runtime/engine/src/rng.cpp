// rng.cpp: deterministic fills for initial weights and test patterns.
#include "rng.hpp"

namespace xs::engine {

void fillUniform(float* dst, std::size_t n, float bound, std::uint64_t stream) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bound * (2.f * uniform01(mix64(stream + i)) - 1.f);
}

void fillPattern(float* dst, std::size_t n, std::uint64_t seed, float scale) {
  const std::uint64_t base = seed * 0x100000001b3ull;
  for (std::size_t i = 0; i < n; ++i) dst[i] = scale * (2.f * uniform01(mix64(base + i)) - 1.f);
}

}  // namespace xs::engine
