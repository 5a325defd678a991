// rng.hpp: a small counter-based random generator. A SampleRng is seeded from (seed, stream, index)
// (for transforms: stream = epoch, index = dataset index), so the random choices made for a sample
// do not depend on which thread processes it or in which order.
#pragma once

#include <cmath>
#include <cstdint>

namespace xs::data {

namespace detail {
// SplitMix64 step: advances `state` and returns a well-mixed 64-bit value.
inline std::uint64_t splitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace detail

class SampleRng {
 public:
  explicit SampleRng(std::uint64_t seed, std::uint64_t stream = 0, std::uint64_t index = 0) {
    std::uint64_t s = seed;
    state_ = detail::splitMix64(s);
    state_ ^= stream * 0xd1b54a32d192ed03ULL;
    state_ = detail::splitMix64(state_);
    state_ ^= index * 0x8cb92ba72f3d8dd7ULL;
    detail::splitMix64(state_);
  }

  std::uint64_t next() { return detail::splitMix64(state_); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0.
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  bool coin() { return (next() >> 63) != 0; }
  // Standard normal (Box-Muller).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_ = 0;
};

}  // namespace xs::data
