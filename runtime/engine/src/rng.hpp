// rng.hpp: counter-based random numbers (splitmix64), identical in every process and on every
// machine for the same seed: initial weights and dropout masks depend only on (seed, name, index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace xs::engine {

// splitmix64's finaliser: a bijective 64-bit mix.
inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The top 24 bits as a float in [0, 1), exactly representable.
inline float uniform01(std::uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

// FNV-1a of a name, to give each parameter its own stream.
inline std::uint64_t hashName(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// dst[i] = uniform in [-bound, bound), element i from mix64(stream + i): order-independent.
void fillUniform(float* dst, std::size_t n, float bound, std::uint64_t stream);

// The deterministic test pattern shared with scripts/make_engine_fixtures.py:
// dst[i] = scale * (2 * uniform01(mix64(seed * 0x100000001b3 + i)) - 1).
void fillPattern(float* dst, std::size_t n, std::uint64_t seed, float scale);

}  // namespace xs::engine
