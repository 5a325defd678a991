// test_linear_rows.cpp: the small-batch linear forward, input and weight gradients (linear_rows.cpp):
// AVX-512 kernels and portable loops against scalar references of the same sums, bit for bit,
// over batches of 1 to 4 vectors, row counts with and without a short last block and inputs of
// one or two column blocks; the layers' passes through them against OpenBLAS to fp32's
// tolerance; emulated bf16 as fp32 on rounded operands.
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

// dx[b][k] = sum over o in order of w[o][k] * dy[b][o], from zero, fused multiply-adds.
Vec gradReference(const Case& c, const Vec& dy, const Vec& w) {
  Vec dx(static_cast<std::size_t>(c.batch) * c.in);
  for (int b = 0; b < c.batch; ++b)
    for (int k = 0; k < c.in; ++k) {
      float acc = 0.f;
      for (int o = 0; o < c.out; ++o)
        acc = std::fma(w[static_cast<std::size_t>(o) * c.in + k], dy[static_cast<std::size_t>(b) * c.out + o], acc);
      dx[static_cast<std::size_t>(b) * c.in + k] = acc;
    }
  return dx;
}

// Batches of 2, 1, 4 and 3 vectors (forward: 12, 24, 6 and 8 rows a block; input gradient: 8 or
// 6); short last blocks; one output; 1,600 inputs at 3 vectors (two column blocks of the input
// gradient).
const Case kCases[] = {{32, 300, 50}, {5, 17, 30}, {64, 100, 13}, {40, 64, 8}, {1, 3, 1}, {40, 1600, 20}};

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
            << c.batch << "x" << c.in << " -> " << c.out << (portable ? " portable" : " vector")
            << (bias ? " bias" : "");
      }
}

TEST(LinearRows, InputGradientKernelAndLoopMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true}) {
      const Vec dy = test::pattern(static_cast<std::size_t>(c.batch) * c.out, 11),
                w = test::pattern(static_cast<std::size_t>(c.out) * c.in, 12);
      Vec dx(static_cast<std::size_t>(c.batch) * c.in, 7.f);
      linearRowsPortableSlot() = portable;
      linearDataGradientRows(dev, dx.data(), dy.data(), w.data(), c.batch, c.in, c.out);
      linearRowsPortableSlot() = false;
      EXPECT_EQ(dx, gradReference(c, dy, w)) << c.batch << "x" << c.in << " -> " << c.out
                                             << (portable ? " portable" : " vector");
    }
}

// dw[o][k] (+)= sum over b in order of dy[b][o] * x[b][k], from zero, fused multiply-adds.
Vec weightGradReference(const Case& c, const Vec& dy, const Vec& x, Vec dw, bool overwrite) {
  for (int o = 0; o < c.out; ++o)
    for (int k = 0; k < c.in; ++k) {
      float acc = 0.f;
      for (int b = 0; b < c.batch; ++b)
        acc = std::fma(dy[static_cast<std::size_t>(b) * c.out + o], x[static_cast<std::size_t>(b) * c.in + k], acc);
      float& g = dw[static_cast<std::size_t>(o) * c.in + k];
      g = overwrite ? acc : g + acc;
    }
  return dw;
}

TEST(LinearRows, WeightGradientKernelAndLoopMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true})
      for (bool overwrite : {true, false}) {
        const Vec dy = test::pattern(static_cast<std::size_t>(c.batch) * c.out, 14),
                  x = test::pattern(static_cast<std::size_t>(c.batch) * c.in, 15),
                  before = test::pattern(static_cast<std::size_t>(c.out) * c.in, 16);
        Vec dw = before;
        linearRowsPortableSlot() = portable;
        linearWeightGradientRows(dev, dw.data(), dy.data(), x.data(), c.batch, c.in, c.out, overwrite);
        linearRowsPortableSlot() = false;
        EXPECT_EQ(dw, weightGradReference(c, dy, x, before, overwrite))
            << c.batch << "x" << c.in << " -> " << c.out << (portable ? " portable" : " vector")
            << (overwrite ? " =" : " +=");
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
  const Vec dy = test::pattern(static_cast<std::size_t>(c.batch) * c.out, 13);
  struct Passes {
    Vec y, dx, dw, db;
  };
  auto passes = [&](GemmBackend backend) {
    const GemmBackend saved = gemmBackend();
    setGemmBackend(backend);
    Passes p{Vec(static_cast<std::size_t>(c.batch) * c.out), Vec(x.size()), Vec(w.size(), 0.f), Vec(c.out, 0.f)};
    linearForward(dev, p.y.data(), x.data(), w.data(), b.data(), c.batch, c.in, c.out);
    linearBackward(dev, p.dx.data(), p.dw.data(), p.db.data(), dy.data(), x.data(), w.data(), c.batch, c.in, c.out);
    setGemmBackend(saved);
    return p;
  };
  const Passes got = passes(GemmBackend::kOneDnn), want = passes(GemmBackend::kOpenBlas);
  golden::expectClose("y", got.y.data(), want.y, 1e-5, 1e-5);
  golden::expectClose("dx", got.dx.data(), want.dx, 1e-5, 1e-5);
  golden::expectClose("dw", got.dw.data(), want.dw, 1e-5, 1e-5);
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
  // The input gradient from dy rounded, and w as the forward rounded it.
  Vec dy = test::pattern(static_cast<std::size_t>(c.batch) * c.out, 10), rdy = dy;
  roundToBf16(rdy.data(), rdy.data(), rdy.size());
  Vec dxWant(x.size()), dxGot(x.size()), dw(w.size(), 0.f);
  linearBackward(fp32, dxWant.data(), dw.data(), nullptr, rdy.data(), rx.data(), rw.data(), c.batch, c.in, c.out);
  linearBackward(emulated, dxGot.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), c.batch, c.in, c.out, &r);
  EXPECT_EQ(dxGot, dxWant);
}

}  // namespace
}  // namespace xs::engine
