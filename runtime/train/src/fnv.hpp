// fnv.hpp: FNV-1a over bytes, chainable: the replica check's weights hash and the models'
// layout check across ranks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xs::detail {

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

// Continues hash `h` over n bytes at p.
inline std::uint64_t fnv1a(const void* p, std::size_t n, std::uint64_t h = kFnvOffset) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace xs::detail
