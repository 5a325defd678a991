// test_onednn_reorders.cpp: the convolutions' layout changes done by the engine
// (onednn_reorders.hpp) against oneDNN's own reorder between the same layouts, byte for byte:
// weights to the bf16 forward and data-gradient layouts, weight gradients back to the plain
// layout, activations channels last to channel blocks (float32 and bf16). The values include ties
// of the bf16 rounding, denormals, infinities and NaNs (a quiet and a signalling one). Pairs the
// engine leaves to oneDNN are checked to stay there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "gemm.hpp"
#include "onednn_reorders.hpp"

namespace xs::engine::detail {
namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// Deterministic floats: mostly ordinary values, every 7th a tie of the bf16 rounding, and a few
// specials.
std::vector<float> values(std::size_t n) {
  std::vector<float> v(n);
  std::uint32_t s = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float x = static_cast<float>(static_cast<std::int32_t>(s >> 8) % 20001 - 10000) / 997.f;
    if (i % 7 == 3) {
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      bits = (bits & 0xffff0000u) | 0x8000u;  // halfway between two bf16 values
      std::memcpy(&v[i], &bits, 4);
    } else {
      v[i] = x;
    }
  }
  const float specials[] = {std::numeric_limits<float>::denorm_min() * 3, -1e-39f, 0.f, -0.f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 3.4e38f,
                            std::numeric_limits<float>::signaling_NaN()};
  for (std::size_t k = 0; k < std::size(specials) && 11 * k + 5 < n; ++k) v[11 * k + 5] = specials[k];
  return v;
}

struct Pair {
  memory::dims dims;
  dt fromType;
  tag from;
  dt toType;
  tag to;
};

std::string name(const Pair& p) {
  std::string s;
  for (auto d : p.dims) s += std::to_string(d) + "x";
  return s + " " + std::to_string(static_cast<int>(p.from)) + "->" + std::to_string(static_cast<int>(p.to));
}

// Runs the pair both ways; returns whether the engine took it.
bool matchesOneDnn(const Pair& p) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::desc from(p.dims, p.fromType, p.from), to(p.dims, p.toType, p.to);
  std::vector<float> src = values(from.get_size() / 4);
  std::vector<std::uint8_t> want(to.get_size(), 0xab), got(to.get_size(), 0xab);
  memory sm(from, eng, src.data()), wm(to, eng, want.data());
  dnnl::reorder(sm, wm).execute(stream, sm, wm);
  stream.wait();
  const OwnReorder own = OwnReorder::between(from, to);
  if (!own) return false;
  own(src.data(), got.data());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << name(p);
  return true;
}

TEST(OneDnnReorders, MatchOneDnnByteForByte) {
  // Ours where oneDNN converts with vcvtneps2bf16 (ONEDNN_MAX_CPU_ISA may hold it below).
  const bool bf16 = cpuHasAvx512Bw() && cpuHasBf16() && oneDnnRunsAvx512Bf16();
  const std::vector<memory::dims> weights = {{16, 16, 1, 1}, {64, 32, 3, 3}, {128, 64, 3, 3}, {32, 48, 5, 5},
                                             {48, 16, 11, 11}};
  for (const auto& d : weights) {
    EXPECT_EQ(bf16, matchesOneDnn({d, dt::f32, tag::abcd, dt::bf16, tag::ABcd8b16a2b}));
    EXPECT_EQ(bf16, matchesOneDnn({d, dt::f32, tag::abcd, dt::bf16, tag::ABcd8a16b2a}));
    EXPECT_EQ(bf16, matchesOneDnn({d, dt::f32, tag::ABcd16b16a, dt::f32, tag::abcd}));
  }
  const std::vector<memory::dims> activations = {{16, 32, 13, 13}, {3, 64, 7, 5}, {1, 16, 1, 1}, {5, 128, 8, 8}};
  for (const auto& d : activations) {
    EXPECT_EQ(bf16, matchesOneDnn({d, dt::f32, tag::acdb, dt::bf16, tag::aBcd16b}));
    EXPECT_EQ(bf16, matchesOneDnn({d, dt::f32, tag::acdb, dt::f32, tag::aBcd16b}));
  }
}

TEST(OneDnnReorders, LeavesOtherPairsToOneDnn) {
  // Channels not in whole blocks, another layout or type: oneDNN's reorder, checked above to run.
  EXPECT_FALSE(matchesOneDnn({{32, 1, 5, 5}, dt::f32, tag::abcd, dt::bf16, tag::AcdB16a2b}));
  EXPECT_FALSE(matchesOneDnn({{24, 16, 3, 3}, dt::f32, tag::abcd, dt::bf16, tag::ABcd8b16a2b}));
  EXPECT_FALSE(matchesOneDnn({{16, 24, 3, 3}, dt::f32, tag::ABcd16b16a, dt::f32, tag::abcd}));
  EXPECT_FALSE(matchesOneDnn({{4, 24, 5, 5}, dt::f32, tag::acdb, dt::bf16, tag::aBcd16b}));
  EXPECT_FALSE(matchesOneDnn({{4, 32, 5, 5}, dt::f32, tag::aBcd16b, dt::f32, tag::acdb}));
  EXPECT_FALSE(matchesOneDnn({{32, 32, 3, 3}, dt::f32, tag::abcd, dt::f32, tag::ABcd16b16a}));
}

}  // namespace
}  // namespace xs::engine::detail
