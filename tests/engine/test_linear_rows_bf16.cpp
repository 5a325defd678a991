// test_linear_rows_bf16.cpp: native bf16's forward and both gradients of the big linear layers
// on vdpbf16ps (linear_rows_bf16.cpp) against scalar sums of the same pairs in the same order,
// bit for bit, and against double-precision sums; over batches of 1 to 4 vectors (odd ones too),
// odd row and column counts, columns ragged against the tiles; SGD's step fused into the weight
// gradient against the gradient and the rule apart (this file is built with -ffp-contract=off,
// as the rule's own files are); the operand layouts shared with the AMX kernels; and where the
// layers take them. The patterns hold no denormals,
// which vdpbf16ps reads as zeros and the scalar sums would not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"
#include "update_rules.hpp"

namespace xs::engine {
namespace {
using golden::Vec;
using Bits = std::vector<std::uint16_t>;

struct Case {
  int batch, in, out;
};

Bits bitsOf(const Vec& v) {
  Bits b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = toBf16Bits(v[i]);
  return b;
}
float value(std::uint16_t b) { return bf16BitsToFloat(b); }

// One lane of vdpbf16ps: acc += hi products, then += lo products (exact products of bf16s).
float pairStep(float acc, float aLo, float bLo, float aHi, float bHi) {
  acc = acc + aHi * bHi;
  return acc + aLo * bLo;
}

// y[b][o] = bias[o] + sum over pairs (k, k+1) in order of w[o][k] * x[b][k]; dx and dw below
// likewise over pairs of o and of b; a missing partner counts as zero.
Vec yReference(const Case& c, const Bits& x, const Bits& w, const float* bias) {
  Vec y(static_cast<std::size_t>(c.batch) * c.out);
  auto at = [&](const Bits& m, int r, int k) { return k < c.in ? value(m[r * c.in + k]) : 0.f; };
  for (int b = 0; b < c.batch; ++b)
    for (int o = 0; o < c.out; ++o) {
      float acc = bias ? bias[o] : 0.f;
      for (int k = 0; k < c.in; k += 2)
        acc = pairStep(acc, at(w, o, k), at(x, b, k), at(w, o, k + 1), at(x, b, k + 1));
      y[static_cast<std::size_t>(b) * c.out + o] = acc;
    }
  return y;
}

// dx[b][k] = sum over pairs (o, o+1) in order of w[o][k] * dy[b][o].
Vec dxReference(const Case& c, const Bits& dy, const Bits& w) {
  Vec dx(static_cast<std::size_t>(c.batch) * c.in);
  auto at = [&](const Bits& m, int b, int o) { return o < c.out ? value(m[b * c.out + o]) : 0.f; };
  auto wAt = [&](int o, int k) { return o < c.out ? value(w[o * c.in + k]) : 0.f; };
  for (int b = 0; b < c.batch; ++b)
    for (int k = 0; k < c.in; ++k) {
      float acc = 0.f;
      for (int o = 0; o < c.out; o += 2) acc = pairStep(acc, wAt(o, k), at(dy, b, o), wAt(o + 1, k), at(dy, b, o + 1));
      dx[static_cast<std::size_t>(b) * c.in + k] = acc;
    }
  return dx;
}
Vec dwReference(const Case& c, const Bits& dy, const Bits& x) {
  Vec dw(static_cast<std::size_t>(c.out) * c.in);
  auto at = [&](const Bits& m, int b, int col, int cols) { return b < c.batch ? value(m[b * cols + col]) : 0.f; };
  for (int o = 0; o < c.out; ++o)
    for (int k = 0; k < c.in; ++k) {
      float acc = 0.f;
      for (int b = 0; b < c.batch; b += 2)
        acc = pairStep(acc, at(dy, b, o, c.out), at(x, b, k, c.in), at(dy, b + 1, o, c.out), at(x, b + 1, k, c.in));
      dw[static_cast<std::size_t>(o) * c.in + k] = acc;
    }
  return dw;
}

// Batches of 2, 1 (odd), 4 and 3 vectors (and not a multiple of the input gradient's 8 rows);
// rows not a multiple of the forward's 24 / V rows or the weight gradient's 4-row tiles, odd,
// and over the input gradient's chunks of 128 (301: three, the last odd); columns odd and ragged
// against the tiles of 96 and the strips of 32; and the input gradient's strips packed 16 at a
// time over several chunks (1100 columns into 261 rows: groups of 16, 16 and 3 strips, the last
// strip of 12 columns, in each of three chunks, the last of 5 rows, its last pair missing a row).
const Case kCases[] = {{32, 300, 50}, {5, 17, 31},    {64, 100, 13}, {40, 64, 8},
                       {1, 3, 1},     {40, 1601, 20}, {13, 70, 301}, {9, 1100, 261}};

TEST(LinearRowsBf16, ForwardIsTheSumsOfItsPairsBitForBit) {
  if (!useLinearRowsBf16(32, 9216, 4096)) GTEST_SKIP() << "bf16 here runs on AMX or is not native";
  Device dev;
  for (const Case& c : kCases)
    for (bool bias : {true, false}) {
      const Bits x = bitsOf(test::pattern(static_cast<std::size_t>(c.batch) * c.in, 21)),
                 w = bitsOf(test::pattern(static_cast<std::size_t>(c.out) * c.in, 22));
      const Vec b = test::pattern(c.out, 23);
      Vec y(static_cast<std::size_t>(c.batch) * c.out, 7.f);
      linearForwardBf16(dev, y.data(), x.data(), w.data(), bias ? b.data() : nullptr, c.batch, c.in, c.out);
      SCOPED_TRACE(std::to_string(c.batch) + "x" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                   (bias ? " bias" : ""));
      EXPECT_EQ(y, yReference(c, x, w, bias ? b.data() : nullptr));
      // And the sums themselves, in doubles, to fp32's tolerance.
      for (int i = 0; i < c.batch; ++i)
        for (int o = 0; o < c.out; o += 3) {
          double sum = bias ? b[o] : 0.0;
          for (int k = 0; k < c.in; ++k) sum += double(value(w[o * c.in + k])) * value(x[i * c.in + k]);
          EXPECT_NEAR(y[static_cast<std::size_t>(i) * c.out + o], sum, 1e-4 * (1 + std::abs(sum)));
        }
    }
}

TEST(LinearRowsBf16, InputGradientIsTheSumsOfItsPairsBitForBit) {
  if (!useLinearRowsBf16(32, 9216, 4096)) GTEST_SKIP() << "bf16 here runs on AMX or is not native";
  Device dev;
  for (const Case& c : kCases) {
    const Bits dy = bitsOf(test::pattern(static_cast<std::size_t>(c.batch) * c.out, 27)),
               w = bitsOf(test::pattern(static_cast<std::size_t>(c.out) * c.in, 28));
    Vec dx(static_cast<std::size_t>(c.batch) * c.in, 7.f);
    linearDataGradientBf16(dev, dx.data(), dy.data(), w.data(), c.batch, c.in, c.out);
    SCOPED_TRACE(std::to_string(c.batch) + "x" + std::to_string(c.in) + " -> " + std::to_string(c.out));
    EXPECT_EQ(dx, dxReference(c, dy, w));
    for (int b = 0; b < c.batch; ++b)
      for (int k = 0; k < c.in; k += 5) {
        double sum = 0;
        for (int o = 0; o < c.out; ++o) sum += double(value(w[o * c.in + k])) * value(dy[b * c.out + o]);
        EXPECT_NEAR(dx[static_cast<std::size_t>(b) * c.in + k], sum, 1e-4 * (1 + std::abs(sum)));
      }
  }
}

TEST(LinearRowsBf16, WeightGradientIsTheSumsOfItsPairsBitForBit) {
  if (!useLinearRowsBf16(32, 9216, 4096)) GTEST_SKIP() << "bf16 here runs on AMX or is not native";
  Device dev;
  for (const Case& c : kCases)
    for (bool overwrite : {true, false}) {
      const Bits dy = bitsOf(test::pattern(static_cast<std::size_t>(c.batch) * c.out, 24)),
                 x = bitsOf(test::pattern(static_cast<std::size_t>(c.batch) * c.in, 25));
      const Vec before = test::pattern(static_cast<std::size_t>(c.out) * c.in, 26);
      Vec dw = before;
      linearWeightGradientBf16(dev, dw.data(), dy.data(), x.data(), c.batch, c.in, c.out, overwrite);
      Vec want = dwReference(c, dy, x);
      if (!overwrite)
        for (std::size_t i = 0; i < want.size(); ++i) want[i] = before[i] + want[i];
      SCOPED_TRACE(std::to_string(c.batch) + "x" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                   (overwrite ? " =" : " +="));
      EXPECT_EQ(dw, want);
      for (int o = 0; o < c.out; ++o)
        for (int k = 0; k < c.in; k += 7) {
          double sum = 0;
          for (int b = 0; b < c.batch; ++b) sum += double(value(dy[b * c.out + o])) * value(x[b * c.in + k]);
          EXPECT_NEAR(dw[static_cast<std::size_t>(o) * c.in + k] - (overwrite ? 0.f : before[o * c.in + k]), sum,
                      1e-4 * (1 + std::abs(sum)));
        }
    }
}

// SGD's step fused into the weight gradient's tiles against the gradient, SGD's rule and the one
// rounding rule apart: values, momentum and every bit of the mirror, and nothing written around
// it; the bits from 0, 16 and 32 bytes off a cache line (whole lines streamed where they fill
// one), columns that fill the 6-vector tiles or not, odd ones; NaN, infinities, denormals and -0
// among the weights, rounded into the mirror as the optimizers round them.
TEST(LinearRowsBf16, SgdStepIsTheGradientThenTheRuleBitForBit) {
  if (!useLinearRowsBf16(32, 9216, 4096)) GTEST_SKIP() << "bf16 here runs on AMX or is not native";
  using Rule = detail::FusedStep::Rule;
  const detail::SgdArgs args{0.05f, 1e-3f, 0.9f, 0.7f, 0.9f};
  const std::pair<Rule, detail::Sgd> rules[] = {{Rule::kSgd, detail::Sgd::kPlain},
                                                {Rule::kSgdMomentum, detail::Sgd::kMomentum},
                                                {Rule::kSgdNesterov, detail::Sgd::kNesterov}};
  Device dev;
  const int batch = 32, out = 1050;  // rows past the 4-row tiles; over 2^20 weights at every width
  for (int in : {1024, 1050, 1001})
    for (int offset : {0, 8, 16})
      for (const auto& [rule, sgd] : rules) {
        SCOPED_TRACE(std::to_string(in) + " columns, bits " + std::to_string(2 * offset) + " bytes in, rule " +
                     std::to_string(static_cast<int>(sgd)));
        const std::size_t n = static_cast<std::size_t>(out) * in, size = offset + n + 40;
        const Bits dy = bitsOf(test::pattern(static_cast<std::size_t>(batch) * out, 31)),
                   x = bitsOf(test::pattern(static_cast<std::size_t>(batch) * in, 32));
        Vec values = test::pattern(size, 33), momentum = test::pattern(size, 34);
        const float special[] = {NAN, INFINITY, -INFINITY, 1e-40f, -3e-39f, -0.f};
        std::copy(std::begin(special), std::end(special), values.begin() + offset);
        Bits store(size + 32, 0xabcd);  // the mirror from a cache line's start on
        std::uint16_t* bits = store.data();
        while (reinterpret_cast<std::uintptr_t>(bits) % 64 != 0) ++bits;
        const Bits before(bits, bits + size);
        // The reference: the gradient, then the rule and the rounding over each weight.
        Vec g(n), want = values, wantMomentum = momentum;
        Bits wantBits(bits, bits + size);
        linearWeightGradientBf16(dev, g.data(), dy.data(), x.data(), batch, in, out, true);
        for (std::size_t i = 0; i < n; ++i) {
          float& p = want[offset + i];
          float& buf = wantMomentum[offset + i];
          if (sgd == detail::Sgd::kPlain) detail::sgdUpdate<detail::Sgd::kPlain>(p, buf, g[i], args);
          else if (sgd == detail::Sgd::kMomentum) detail::sgdUpdate<detail::Sgd::kMomentum>(p, buf, g[i], args);
          else detail::sgdUpdate<detail::Sgd::kNesterov>(p, buf, g[i], args);
          wantBits[offset + i] = toBf16Bits(p);
        }
        if (rule == Rule::kSgd) wantMomentum = momentum;  // plain SGD keeps no momentum
        detail::FusedStep step;
        step.rule = rule, step.values = values.data(), step.bits = bits, step.sgd = args;
        step.first = rule == Rule::kSgd ? nullptr : momentum.data();
        ASSERT_TRUE(linearWeightStepBf16(dev, dy.data(), x.data(), batch, in, out, step, offset));
        EXPECT_TRUE(test::sameBits(values, want)) << "values";
        EXPECT_TRUE(test::sameBits(momentum, wantMomentum)) << "momentum";
        EXPECT_EQ(Bits(bits, bits + size), wantBits) << "mirror";
        EXPECT_EQ(Bits(bits, bits + offset), Bits(before.begin(), before.begin() + offset)) << "before the view";
      }
}

// The operand layouts this file's kernels and the AMX ones share, on any CPU: odd and even
// columns, batches padded to vectors and to AMX's 32 rows.
TEST(LinearRowsBf16, OperandLayoutsPairAndTransposeWithZerosPast) {
  for (const auto& [batch, in, width] : {std::tuple{5, 7, 16}, {32, 64, 32}, {40, 18, 64}, {1, 1, 16}}) {
    SCOPED_TRACE(std::to_string(batch) + " x " + std::to_string(in) + " into " + std::to_string(width));
    Bits x(static_cast<std::size_t>(batch) * in);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i * 7 + 1);
    std::vector<std::uint32_t> pairs(static_cast<std::size_t>((in + 1) / 2) * width, 0xdeadbeef);
    pairsByColumn(pairs.data(), x.data(), batch, in, width);
    Bits t(static_cast<std::size_t>(in) * width, 0xbeef);
    transposeBits(t.data(), x.data(), batch, in, width);
    auto at = [&](int b, int k) -> std::uint32_t { return b < batch && k < in ? x[b * in + k] : 0u; };
    for (int q = 0; q < (in + 1) / 2; ++q)
      for (int b = 0; b < width; ++b)
        ASSERT_EQ(pairs[static_cast<std::size_t>(q) * width + b], at(b, 2 * q) | at(b, 2 * q + 1) << 16)
            << q << " " << b;
    for (int k = 0; k < in; ++k)
      for (int b = 0; b < width; ++b) ASSERT_EQ(t[static_cast<std::size_t>(k) * width + b], at(b, k)) << k << " " << b;
  }
}

TEST(LinearRowsBf16, NativeLayersTakeThemWhereBf16RunsOnVdpbf16ps) {
  const bool here = cpuHasAvx512() && cpuHasBf16() && !oneDnnRunsAmx();
  EXPECT_EQ(useLinearRowsBf16(32, 9216, 4096), here);  // AlexNet's fc1
  EXPECT_FALSE(useLinearRowsBf16(128, 9216, 4096));    // past 4 vectors of batch
  EXPECT_FALSE(useLinearRowsBf16(32, 1000, 1000));     // under 2^20 weights
  linearRowsPortableSlot() = true;
  EXPECT_FALSE(useLinearRowsBf16(32, 9216, 4096));
  linearRowsPortableSlot() = false;
}

}  // namespace
}  // namespace xs::engine
