// test_linear_rows.cpp: the small-batch linear forward (linear_rows.cpp): its AVX-512 kernel and
// portable loop against a scalar reference of the same sums, bit for bit, over batches of 1 to 4
// vectors and row counts with and without a short last block; the layers' forward through it
// against OpenBLAS to fp32's tolerance; emulated bf16 as fp32 on rounded operands.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"

namespace xs::engine {
namespace {
using golden::Vec;

struct Case {
  int batch, in, out;
};

// y[b][o] = bias[o] + sum over k in order of w[o][k] * x[b][k], fused multiply-adds.
Vec reference(const Case& c, const Vec& x, const Vec& w, const float* bias) {
  Vec y(static_cast<std::size_t>(c.batch) * c.out);
  for (int b = 0; b < c.batch; ++b)
    for (int o = 0; o < c.out; ++o) {
      float acc = bias ? bias[o] : 0.f;
      for (int k = 0; k < c.in; ++k)
        acc = std::fma(w[static_cast<std::size_t>(o) * c.in + k], x[static_cast<std::size_t>(b) * c.in + k], acc);
      y[static_cast<std::size_t>(b) * c.out + o] = acc;
    }
  return y;
}

// Batches of 2, 1, 4 and 3 vectors (12, 24, 6 and 8 rows a block); short last blocks of 2, 6 and
// 1 rows; one output.
const Case kCases[] = {{32, 300, 50}, {5, 17, 30}, {64, 100, 13}, {40, 64, 8}, {1, 3, 1}};

TEST(LinearRows, KernelAndLoopMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true})
      for (bool bias : {true, false}) {
        const Vec x = test::pattern(static_cast<std::size_t>(c.batch) * c.in, 1),
                  w = test::pattern(static_cast<std::size_t>(c.out) * c.in, 2), b = test::pattern(c.out, 3);
        Vec y(static_cast<std::size_t>(c.batch) * c.out, 7.f);
        linearRowsPortableSlot() = portable;
        linearForwardRows(dev, y.data(), x.data(), w.data(), bias ? b.data() : nullptr, c.batch, c.in, c.out);
        linearRowsPortableSlot() = false;
        EXPECT_EQ(y, reference(c, x, w, bias ? b.data() : nullptr))
            << c.batch << "x" << c.in << " -> " << c.out << (portable ? " portable" : " vector") << (bias ? " bias" : "");
      }
}

TEST(LinearRows, LayersTakeItForManyWeightsAtASmallBatch) {
  EXPECT_EQ(useLinearRows(32, 9216, 4096), cpuHasAvx512());  // AlexNet's fc1
  EXPECT_EQ(useLinearRows(64, 1024, 1024), cpuHasAvx512());
  EXPECT_FALSE(useLinearRows(65, 9216, 4096));  // more than 4 vectors of batch
  EXPECT_FALSE(useLinearRows(64, 784, 256));    // the MLP's fc1: 200K weights
  // The forward through it agrees with OpenBLAS's.
  Device dev;
  const Case c{24, 1024, 1030};
  const Vec x = test::pattern(static_cast<std::size_t>(c.batch) * c.in, 4),
            w = test::pattern(static_cast<std::size_t>(c.out) * c.in, 5, 0.05f), b = test::pattern(c.out, 6);
  Vec got(static_cast<std::size_t>(c.batch) * c.out), want(got.size());
  linearForward(dev, got.data(), x.data(), w.data(), b.data(), c.batch, c.in, c.out);
  const GemmBackend saved = gemmBackend();
  setGemmBackend(GemmBackend::kOpenBlas);
  linearForward(dev, want.data(), x.data(), w.data(), b.data(), c.batch, c.in, c.out);
  setGemmBackend(saved);
  golden::expectClose("y", got.data(), want, 1e-5, 1e-5);
}

TEST(LinearRows, EmulatedBf16IsFp32OnRoundedOperands) {
  const Case c{32, 1024, 1024};
  Vec x = test::pattern(static_cast<std::size_t>(c.batch) * c.in, 7),
      w = test::pattern(static_cast<std::size_t>(c.out) * c.in, 8), b = test::pattern(c.out, 9);
  Vec rx = x, rw = w;
  roundToBf16(rx.data(), rx.data(), rx.size());
  roundToBf16(rw.data(), rw.data(), rw.size());
  test::ModeScope mode(Bf16Mode::kEmulated);
  Device fp32, emulated(golden::bf16Options());
  Vec want(static_cast<std::size_t>(c.batch) * c.out), got(want.size());
  linearForward(fp32, want.data(), rx.data(), rw.data(), b.data(), c.batch, c.in, c.out);
  RoundedOperands r;
  linearForward(emulated, got.data(), x.data(), w.data(), b.data(), c.batch, c.in, c.out, &r);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace xs::engine
