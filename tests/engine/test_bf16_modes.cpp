// test_bf16_modes.cpp: bf16 precision run natively (oneDNN's bf16 kernels) and emulated (fp32
// kernels on operands rounded to bf16) computes the same numerics: bf16 products, fp32 sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "conv_onednn.hpp"
#include "gemm.hpp"
#include "golden_util.hpp"
#include "kernel_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/nn.hpp"
#include "xspawn/models.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine {
namespace {
using namespace golden;

using test::ModeScope;

std::uint32_t bitsOf(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

TEST(Bf16Modes, ArrayRoundingMatchesTheScalarOne) {
  // Ties to even both ways, the largest finite values, infinities, NaNs, denormals, signs.
  std::vector<float> v{0.f, -0.f, 1.f, 1.00390625f, 1.01171875f, 1.0078125f, -1.0078125f, 3.4e38f,
                       -3.4e38f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(), 1e-40f};
  for (float x : test::pattern(1000, 5)) v.push_back(x * 1e3f);
  std::vector<float> out(v.size());
  roundToBf16(v.data(), out.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
      continue;
    }
    EXPECT_EQ(bitsOf(out[i]), bitsOf(roundToBf16(v[i]))) << i << ": " << v[i];
    EXPECT_EQ(bitsOf(out[i]) & 0xffffu, 0u) << i;
  }
  roundToBf16(v.data(), v.data(), v.size());  // in place
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) continue;
    EXPECT_EQ(bitsOf(v[i]), bitsOf(out[i])) << i;
  }
}

__attribute__((target("avx512f"))) void roundBf16Lanes(float* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) _mm512_storeu_ps(out + i, roundBf16(_mm512_loadu_ps(in + i)));
}

TEST(Bf16Modes, RegisterRoundingMatchesTheScalarRule) {
  // kernel_util.hpp's roundBf16 (the pools' and conv 1's in-register rounding) against
  // bf16RoundedBits, bit for bit, NaNs included: every 16th bit pattern of the float range's
  // top halves and a few low halves, signs, ties, denormals, infinities, signalling NaNs.
  if (!cpuHasAvx512()) {
    EXPECT_FALSE(cpuHasAvx512());  // roundBf16 runs only inside AVX-512 kernels
    return;
  }
  std::vector<std::uint32_t> bits;
  for (std::uint32_t hi = 0; hi < 0x10000u; hi += 16)
    for (std::uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) bits.push_back(hi << 16 | lo);
  for (std::uint32_t u : {0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fc00000u, 0x7f7fffffu, 0x00000001u})
    bits.push_back(u);
  while (bits.size() % 16) bits.push_back(0);
  std::vector<float> out(bits.size());
  roundBf16Lanes(out.data(), reinterpret_cast<const float*>(bits.data()), bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    float x;
    std::memcpy(&x, &bits[i], sizeof x);
    EXPECT_EQ(bitsOf(out[i]), bf16RoundedBits(x)) << std::hex << bits[i];
  }
}

// y = x w^T + b from the operands rounded to bf16, summed in double: what any bf16 matrix
// unit with fp32 accumulation approximates to fp32's rounding of the sums.
Vec linearReference(const Vec& x, const Vec& w, const Vec& b, int B, int I, int O) {
  Vec y(static_cast<std::size_t>(B) * O);
  for (int r = 0; r < B; ++r)
    for (int o = 0; o < O; ++o) {
      double s = b[o];
      for (int i = 0; i < I; ++i)
        s += static_cast<double>(roundToBf16(x[r * I + i])) * roundToBf16(w[o * I + i]);
      y[r * O + o] = static_cast<float>(s);
    }
  return y;
}

TEST(Bf16Modes, EmulatedLinearComputesBf16Products) {
  ModeScope mode(Bf16Mode::kEmulated);
  Device dev(bf16Options());
  constexpr int B = 5, I = 300, O = 7;
  Vec x = test::pattern(B * I, 1), w = test::pattern(O * I, 2), b = test::pattern(O, 3);
  RoundedOperands r;
  Vec y(B * O);
  linearForward(dev, y.data(), x.data(), w.data(), b.data(), B, I, O, &r);
  expectClose("emulated linear", y.data(), linearReference(x, w, b, B, I, O), 1e-5, 1e-6);
  // The same call without the layer's rounded copies (gemm() rounds itself): the same bits.
  Vec y2(B * O);
  linearForward(dev, y2.data(), x.data(), w.data(), b.data(), B, I, O);
  EXPECT_EQ(y, y2);
}

// A B x I -> O linear layer's operands, patterns from seed on.
struct LinearCase {
  int B, I, O;
  Vec x, w, b, dy;
  LinearCase(int batch, int in, int out, int seed)
      : B(batch), I(in), O(out), x(test::pattern(B * I, seed)), w(test::pattern(O * I, seed + 1)),
        b(test::pattern(O, seed + 2)), dy(test::pattern(B * O, seed + 3)) {}

  // Its passes with operands ops (null: the plain calls), with or without the bias: forward, a
  // backward adding to dw (from 0.5) and db, and one writing them.
  std::vector<Vec> passes(Device& dev, RoundedOperands* ops, bool bias = true) const {
    const float* bp = bias ? b.data() : nullptr;
    Vec y(static_cast<std::size_t>(B) * O), dx(x.size()), dw(w.size(), 0.5f), db(O, 0.f);
    linearForward(dev, y.data(), x.data(), w.data(), bp, B, I, O, ops);
    linearBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), B, I, O, ops);
    Vec dw2(w.size()), db2(O);
    linearBackward(dev, nullptr, dw2.data(), db2.data(), dy.data(), x.data(), w.data(), B, I, O, ops, true);
    return {y, dx, dw, db, dw2, db2};
  }
};

TEST(Bf16Modes, NativeLinearConvertsEachOperandOnce) {
  // Native bf16's linear layer with its operands (RoundedOperands: w as the store's bits, x and
  // dy converted once for both of backward's products) gives the bits of the plain calls, which
  // convert every operand in every product.
  if (!cpuHasBf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU: only the emulated mode runs here";
  ModeScope mode(Bf16Mode::kNative);
  Device dev(bf16Options());
  const LinearCase c(6, 300, 37, 1);
  std::vector<std::uint16_t> wBits(c.w.size());
  detail::floatsToBf16(c.w.data(), wBits.data(), c.w.size());
  for (bool fromStore : {true, false}) {
    RoundedOperands r;
    r.wBits = fromStore ? wBits.data() : nullptr;
    const auto withOperands = c.passes(dev, &r);
    EXPECT_EQ(withOperands, c.passes(dev, nullptr)) << "w from the store: " << fromStore;
    EXPECT_FALSE(r.xBf16.empty());
    EXPECT_EQ(r.wBf16.empty(), fromStore);
  }
}

TEST(Bf16Modes, LinearWeightGradientOnAmxTiles) {
  // dw (+)= dy^T x from bf16 bits on AMX tiles: batches within one K chunk of 32 and across
  // two (zero-padded), written over dw and added to it, against a double-precision sum of the
  // bf16 products; the same layer's whole native backward then takes this path.
  if (!oneDnnRunsAmx()) GTEST_SKIP() << "oneDNN runs no AMX kernels on this CPU";
  constexpr int I = 128, O = 48;
  for (int B : {6, 32, 40}) {
    const Vec x = test::pattern(static_cast<std::size_t>(B) * I, 31);
    const Vec dy = test::pattern(static_cast<std::size_t>(B) * O, 32);
    std::vector<std::uint16_t> xb(x.size()), dyb(dy.size());
    detail::floatsToBf16(x.data(), xb.data(), x.size());
    detail::floatsToBf16(dy.data(), dyb.data(), dy.size());
    Vec want(static_cast<std::size_t>(O) * I);
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < I; ++i) {
        double sum = 0;
        for (int k = 0; k < B; ++k)
          sum += double(bf16BitsToFloat(dyb[static_cast<std::size_t>(k) * O + o])) *
                 bf16BitsToFloat(xb[static_cast<std::size_t>(k) * I + i]);
        want[static_cast<std::size_t>(o) * I + i] = static_cast<float>(sum);
      }
    Vec twice = want;
    for (float& v : twice) v *= 2.f;
    Device dev(bf16Options());
    Tensor aligned(dev, Shape{static_cast<int>(want.size())});  // 64-byte aligned: streamed stores
    Vec unaligned(want.size() + 1);
    for (float* dw : {aligned.data(), unaligned.data() + 1}) {
      const std::string what = " (batch " + std::to_string(B) + (dw == aligned.data() ? ", aligned)" : ")");
      std::fill(dw, dw + want.size(), 7.f);
      ASSERT_TRUE(linearWeightGradientAmx(dev, dw, dyb.data(), xb.data(), B, I, O, true));
      expectClose("dw =" + what, dw, want, 1e-5, 1e-6);
      ASSERT_TRUE(linearWeightGradientAmx(dev, dw, dyb.data(), xb.data(), B, I, O, false));
      expectClose("dw +=" + what, dw, twice, 1e-5, 1e-6);
    }
  }
  Device dev(bf16Options());
  Vec dw(10 * I);
  EXPECT_FALSE(linearWeightGradientAmx(dev, dw.data(), nullptr, nullptr, 4, I, 10, true)) << "O not a multiple of 16";
}

TEST(Bf16Modes, LinearForwardAndDataGradientOnAmxTiles) {
  // y = x w^T + b and dx = dy w from bf16 bits on AMX tiles, batches below, at and past a block
  // of 32 rows (padded), against double-precision sums of the bf16 products.
  if (!oneDnnRunsAmx()) GTEST_SKIP() << "oneDNN runs no AMX kernels on this CPU";
  constexpr int I = 96, O = 96;  // O: a span of two K chunks and one of one
  const Vec w = test::pattern(static_cast<std::size_t>(O) * I, 41), b = test::pattern(O, 42);
  std::vector<std::uint16_t> wb(w.size());
  detail::floatsToBf16(w.data(), wb.data(), w.size());
  auto at = [](const std::vector<std::uint16_t>& v, std::size_t i) { return double(bf16BitsToFloat(v[i])); };
  for (int B : {5, 32, 45}) {
    const Vec x = test::pattern(static_cast<std::size_t>(B) * I, 43);
    const Vec dy = test::pattern(static_cast<std::size_t>(B) * O, 44);
    std::vector<std::uint16_t> xb(x.size()), dyb(dy.size());
    detail::floatsToBf16(x.data(), xb.data(), x.size());
    detail::floatsToBf16(dy.data(), dyb.data(), dy.size());
    Vec wantY(static_cast<std::size_t>(B) * O), wantDx(static_cast<std::size_t>(B) * I);
    for (int n = 0; n < B; ++n) {
      for (int o = 0; o < O; ++o) {
        double sum = 0;
        for (int i = 0; i < I; ++i) sum += at(xb, std::size_t(n) * I + i) * at(wb, std::size_t(o) * I + i);
        wantY[std::size_t(n) * O + o] = static_cast<float>(sum) + b[o];
      }
      for (int i = 0; i < I; ++i) {
        double sum = 0;
        for (int o = 0; o < O; ++o) sum += at(dyb, std::size_t(n) * O + o) * at(wb, std::size_t(o) * I + i);
        wantDx[std::size_t(n) * I + i] = static_cast<float>(sum);
      }
    }
    Device dev(bf16Options());
    Vec y(wantY.size() + 1, 9.f), dx(wantDx.size() + 1, 9.f);  // the float past the end stays
    ASSERT_TRUE(linearForwardAmx(dev, y.data(), xb.data(), wb.data(), b.data(), B, I, O));
    ASSERT_TRUE(linearDataGradientAmx(dev, dx.data(), dyb.data(), wb.data(), B, I, O));
    expectClose("y (batch " + std::to_string(B) + ")", y.data(), wantY, 1e-5, 1e-5);
    expectClose("dx (batch " + std::to_string(B) + ")", dx.data(), wantDx, 1e-5, 1e-5);
    EXPECT_EQ(y.back(), 9.f);
    EXPECT_EQ(dx.back(), 9.f);
  }
  Device dev(bf16Options());
  Vec y(16 * 40);
  EXPECT_FALSE(linearForwardAmx(dev, y.data(), nullptr, nullptr, nullptr, 16, 40, 32)) << "I not a multiple of 32";
}

TEST(Bf16Modes, NativeLinearLayersOfTileShapeRunOnAmx) {
  // A linear layer whose shape fits the tiles (O and I multiples of 64) with its operands: all
  // three products on the AMX kernels, against the plain calls on oneDNN's matmul (the same
  // products, summed in another order), with and without a bias, dw written and added to.
  if (!oneDnnRunsAmx()) GTEST_SKIP() << "oneDNN runs no AMX kernels on this CPU";
  ModeScope mode(Bf16Mode::kNative);
  Device dev(bf16Options());
  const LinearCase c(6, 128, 64, 51);
  for (bool bias : {true, false}) {
    RoundedOperands r;
    const auto tiles = c.passes(dev, &r, bias);
    const auto plain = c.passes(dev, nullptr, bias);
    const char* names[] = {"y", "dx", "dw +=", "db +=", "dw =", "db ="};
    for (int i = 0; i < 6; ++i)
      expectClose(names[i] + std::string(bias ? "" : " (no bias)"), tiles[i].data(), plain[i], 1e-5, 1e-5);
  }
}

// Forward and backward of fixture conv2d_2 at dev's precision, in one layout.
std::vector<Vec> convPasses(Device& dev, bool nhwc) {
  const json& k = fixture("ops.json")["conv2d_2"];
  auto xs = dims(k["in0_shape"]), ws = dims(k["in1_shape"]);
  Vec x = vec(k["in0"]), w = vec(k["in1"]), b = vec(k["in2"]), dy = vec(k["dy"]);
  ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], k["params"]["stride"], k["params"]["pad"]};
  g.srcNhwc = g.dstNhwc = nhwc;
  g.keepSrc = true;
  Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
  conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
  conv2dBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
  return {y, dx, dw, db};
}

TEST(Bf16Modes, EmulatedConvolutionMatchesItsRoundedOperandsInFp32) {
  // Emulated bf16 on x, w, dy = fp32 on round(x), round(w), round(dy), to fp32's tolerance.
  for (bool nhwc : {false, true}) {
    std::vector<Vec> emulated;
    {
      ModeScope mode(Bf16Mode::kEmulated);
      Device dev(bf16Options());
      emulated = convPasses(dev, nhwc);
    }
    const json& k = fixture("ops.json")["conv2d_2"];
    auto xs = dims(k["in0_shape"]), ws = dims(k["in1_shape"]);
    Vec x = vec(k["in0"]), w = vec(k["in1"]), b = vec(k["in2"]), dy = vec(k["dy"]);
    roundToBf16(x.data(), x.data(), x.size());
    roundToBf16(w.data(), w.data(), w.size());
    roundToBf16(dy.data(), dy.data(), dy.size());
    ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], k["params"]["stride"], k["params"]["pad"]};
    g.srcNhwc = g.dstNhwc = nhwc;
    Device fp32;
    Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
    conv2dForward(fp32, y.data(), x.data(), w.data(), b.data(), g);
    conv2dBackward(fp32, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
    const char* names[] = {"y", "dx", "dw", "db"};
    const Vec* want[] = {&y, &dx, &dw, &db};
    for (int i = 0; i < 4; ++i) expectClose(std::string(names[i]) + (nhwc ? " nhwc" : " nchw"), emulated[i].data(), *want[i], 1e-5, 1e-5);
  }
}

TEST(Bf16Modes, EmulatedGemmConvolutionIsFp32OnRoundedOperands) {
  // The channels-last GEMM path in emulated bf16 rounds x in its gather, w in its transpose and
  // dy once, then runs fp32's products: the bits of fp32 on round(x), round(w), round(dy),
  // whether it rounds them itself or is told they are rounded already (xRounded, wRounded,
  // dyRounded), with and without the bias.
  const json& k = fixture("ops.json")["conv2d_2"];
  auto xs = dims(k["in0_shape"]), ws = dims(k["in1_shape"]);
  Vec x = vec(k["in0"]), w = vec(k["in1"]), b = vec(k["in2"]), dy = vec(k["dy"]);
  Vec rx = x, rw = w, rdy = dy;
  roundToBf16(rx.data(), rx.data(), rx.size());
  roundToBf16(rw.data(), rw.data(), rw.size());
  roundToBf16(rdy.data(), rdy.data(), rdy.size());
  setNhwcGemmMaxPixels(1 << 20);
  for (bool bias : {true, false}) {
    auto passes = [&](Device& dev, const Vec& px, const Vec& pw, const Vec& pdy, bool flagged) {
      ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], k["params"]["stride"], k["params"]["pad"]};
      g.srcNhwc = g.dstNhwc = true;
      g.xRounded = g.wRounded = g.dyRounded = flagged;
      Vec y(pdy.size()), dx(px.size()), dw(pw.size(), 0.f), db(b.size(), 0.f);
      conv2dForward(dev, y.data(), px.data(), pw.data(), bias ? b.data() : nullptr, g);
      conv2dBackward(dev, dx.data(), dw.data(), bias ? db.data() : nullptr, pdy.data(), px.data(), pw.data(), g);
      return std::vector<Vec>{y, dx, dw, db};
    };
    ModeScope mode(Bf16Mode::kEmulated);
    Device emulated(bf16Options()), fp32;
    const auto want = passes(fp32, rx, rw, rdy, false);
    EXPECT_EQ(passes(emulated, x, w, dy, false), want) << "bias " << bias;
    EXPECT_EQ(passes(emulated, rx, rw, rdy, true), want) << "bias " << bias;
  }
  setNhwcGemmMaxPixels(16);
}

TEST(Bf16Modes, NativeAndEmulatedAgree) {
  if (!cpuHasBf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU: only the emulated mode runs here";
  for (bool nhwc : {false, true}) {
    std::vector<Vec> native, emulated;
    {
      ModeScope mode(Bf16Mode::kNative);
      Device dev(bf16Options());
      native = convPasses(dev, nhwc);
    }
    {
      ModeScope mode(Bf16Mode::kEmulated);
      Device dev(bf16Options());
      emulated = convPasses(dev, nhwc);
    }
    const char* names[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; ++i) expectClose(names[i], emulated[i].data(), native[i], 1e-4, 1e-5);
  }
}

TEST(Bf16Modes, NarrowConvolutionsRoundTheirOperandsInBothModes) {
  // LeNet-5's convolutions (1 -> 6 and 6 -> 16 channels, channels last) run our own kernels in
  // bf16 whichever the mode, rounding their operands (bf16Products). Native mode gives the
  // emulated mode's bits where it has no vdpbf16ps form of them (narrowBf16), and agrees with
  // them to fp32's tolerance where it has (its pairs sum in another order). In either mode,
  // operands rounded already and told so (the flags a rounding producer and the mirror set) give
  // the same bits.
  if (!cpuHasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU: the narrow kernels do not run here";
  struct Case {
    int c, h, oc, pad;
  };
  for (const Case& k : {Case{1, 28, 6, 2}, Case{6, 14, 16, 0}}) {
    ConvGeom g{4, k.c, k.h, k.h, k.oc, 5, 5, 1, k.pad};
    g.srcNhwc = g.dstNhwc = true;
    const Vec x = test::pattern(std::size_t{4} * k.c * k.h * k.h, 5), w = test::pattern(k.oc * k.c * 25, 6),
              b = test::pattern(k.oc, 7), dy = test::pattern(std::size_t{4} * k.oc * g.oh() * g.ow(), 8);
    auto passes = [&](Bf16Mode m, bool flagged) {
      ModeScope mode(m);
      Device dev(bf16Options());
      Vec rx = x, rw = w, rdy = dy;
      ConvGeom f = g;
      if (flagged) {
        for (Vec* v : {&rx, &rw, &rdy}) roundToBf16(v->data(), v->data(), v->size());
        f.xRounded = f.wRounded = f.dyRounded = true;
      }
      Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
      conv2dForward(dev, y.data(), rx.data(), rw.data(), b.data(), f);
      conv2dBackward(dev, k.c > 1 ? dx.data() : nullptr, dw.data(), db.data(), rdy.data(), rx.data(), rw.data(), f);
      return std::vector<Vec>{y, dx, dw, db};
    };
    const auto emulated = passes(Bf16Mode::kEmulated, false), native = passes(Bf16Mode::kNative, false);
    EXPECT_EQ(passes(Bf16Mode::kEmulated, true), emulated) << k.c << " -> " << k.oc << ", flagged";
    EXPECT_EQ(passes(Bf16Mode::kNative, true), native) << k.c << " -> " << k.oc << ", flagged";
    if (dpbf16Kernels()) {  // the pairs, taken through conv2dForward and conv2dBackward: other bits
      const char* names[] = {"y", "dx", "dw", "db"};
      for (int i = 0; i < 4; ++i) expectClose(names[i], native[i].data(), emulated[i], 1e-5, 1e-5);
      EXPECT_NE(native[0], emulated[0]) << k.c << " -> " << k.oc << ": y";
      EXPECT_NE(native[2], emulated[2]) << k.c << " -> " << k.oc << ": dw";
      if (k.c > 1) {
        EXPECT_NE(native[1], emulated[1]) << k.c << " -> " << k.oc << ": dx";
      }
    } else {
      EXPECT_EQ(native, emulated) << k.c << " -> " << k.oc;
    }
    Vec rounded(emulated[0].size());
    roundToBf16(emulated[0].data(), rounded.data(), rounded.size());
    EXPECT_NE(emulated[0], rounded) << "the outputs are float32 sums, not bf16 values";
  }
}

TEST(Bf16Modes, AFirstLayersWeightGradientIsEmulatedInNativeMode) {
  // Fewer than 16 input channels (the convnet's first layer, an RGB one): native mode runs the
  // weight and bias gradients as emulated mode does (the fp32 primitive on rounded x and dy), so
  // they are emulated mode's bits; except one channel where our vdpbf16ps kernels run
  // (useWideWeightGradientBf16: its own sums, ConvNarrowBf16.WideWeightGradientMatchesItsPairSums*).
  if (!cpuHasBf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU: only the emulated mode runs here";
  struct Case {
    int c, h, oc, k, pad;
  };
  for (const Case& k : {Case{1, 28, 32, 5, 1}, Case{3, 12, 32, 3, 1}}) {
    ConvGeom g{4, k.c, k.h, k.h, k.oc, k.k, k.k, 1, k.pad};
    g.srcNhwc = g.dstNhwc = true;
    g.keepSrc = true;
    const Vec x = test::pattern(std::size_t{4} * k.c * k.h * k.h, 15), w = test::pattern(k.oc * k.c * k.k * k.k, 16),
              b = test::pattern(k.oc, 17), dy = test::pattern(std::size_t{4} * k.oc * g.oh() * g.ow(), 18);
    auto grads = [&](Bf16Mode m) {
      ModeScope mode(m);
      Device dev(bf16Options());
      Vec y(dy.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
      for (int step = 0; step < 2; ++step) {  // the second step adds to the first's
        conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
        conv2dBackward(dev, nullptr, dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
      }
      return std::vector<Vec>{dw, db};
    };
    {
      ModeScope mode(Bf16Mode::kNative);
      if (detail::useWideWeightGradientBf16(Device(bf16Options()), g)) continue;
    }
    EXPECT_EQ(grads(Bf16Mode::kNative), grads(Bf16Mode::kEmulated)) << k.c << " -> " << k.oc;
  }
}

TEST(Bf16Modes, NativeWeightGradientOnSmallMapsAgrees) {
  // Native bf16 on maps of 17 to 64 pixels (the convnet's conv 3: 8x8) runs the weight gradient
  // as a GEMM over gathered patches and the other passes on oneDNN's kernels: the same numerics
  // as emulated mode to fp32's reordering tolerance, with the gradients added to over two steps.
  if (!oneDnnRunsAmx()) GTEST_SKIP() << "oneDNN runs no AMX kernels on this CPU: the path is AMX's";
  ConvGeom g{4, 32, 10, 10, 48, 3, 3, 1, 0};
  g.srcNhwc = g.dstNhwc = true;
  g.keepSrc = true;
  {
    ModeScope mode(Bf16Mode::kNative);
    ASSERT_TRUE(detail::useNhwcGemmWeightGradient(Device(bf16Options()), g));
  }
  const Vec x = test::pattern(std::size_t{4} * 32 * 100, 21), w = test::pattern(48 * 32 * 9, 22),
            b = test::pattern(48, 23), dy = test::pattern(std::size_t{4} * 48 * 64, 24);
  auto passes = [&](Bf16Mode m) {
    ModeScope mode(m);
    Device dev(bf16Options());
    Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
    for (int step = 0; step < 2; ++step) {
      conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
      conv2dBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
    }
    return std::vector<Vec>{y, dx, dw, db};
  };
  const auto native = passes(Bf16Mode::kNative), emulated = passes(Bf16Mode::kEmulated);
  const char* names[] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) expectClose(names[i], native[i].data(), emulated[i], 1e-4, 1e-5);
}

TEST(Bf16Modes, ConvnetTrainsTheSameInBothModes) {
  // Eight SGD steps of the default model: the losses of the two modes stay within fp32's
  // reordering noise of each other, and each mode repeats its own bits.
  auto losses = [](Bf16Mode m) {
    ModeScope mode(m);
    Device dev(bf16Options());
    models::ModelConfig c;
    c.name = "convnet";
    c.seed = 3;
    Model model(dev, models::network(c), c.seed);
    auto opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.05f, 0.9f});
    auto x = test::pattern(16 * model.inputShape().numel(), 11);
    std::vector<std::int32_t> y(16);
    for (int i = 0; i < 16; ++i) y[i] = (i * 7) % 10;
    std::vector<float> out;
    for (int s = 0; s < 8; ++s) {
      out.push_back(model.trainStep(x.data(), y.data(), 16).loss);
      opt->step();
    }
    return out;
  };
  const auto emulated = losses(Bf16Mode::kEmulated);
  EXPECT_EQ(emulated, losses(Bf16Mode::kEmulated));
  EXPECT_LT(emulated.back(), emulated.front() * 0.9f);
  if (!cpuHasBf16()) return;
  const auto native = losses(Bf16Mode::kNative);
  for (std::size_t i = 0; i < native.size(); ++i) EXPECT_NEAR(emulated[i], native[i], 2e-3 * std::fabs(native[i])) << i;
}

TEST(Bf16Modes, FreshInputBuffersEveryStepStayCorrect) {
  // A caller passing a new x buffer at every step (past the 16 call sites a geometry keeps):
  // each step's weight gradient equals the one of a device that saw only that step.
  for (Bf16Mode m : {Bf16Mode::kEmulated, Bf16Mode::kNative}) {
    if (m == Bf16Mode::kNative && !cpuHasBf16()) continue;
    ModeScope mode(m);
    const json& k = fixture("ops.json")["conv2d_2"];
    auto xs = dims(k["in0_shape"]), ws = dims(k["in1_shape"]);
    Vec w = vec(k["in1"]), dy = vec(k["dy"]);
    ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], k["params"]["stride"], k["params"]["pad"]};
    g.srcNhwc = g.dstNhwc = true;
    g.keepSrc = true;
    auto pass = [&](Device& dev, const Vec& x) {
      Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f);
      conv2dForward(dev, y.data(), x.data(), w.data(), nullptr, g);
      conv2dBackward(dev, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), g);
      return dw;
    };
    Device dev(bf16Options());
    std::vector<Vec> inputs;  // all alive at once: 20 distinct addresses
    for (int step = 0; step < 20; ++step) inputs.push_back(test::pattern(vec(k["in0"]).size(), 100 + step));
    for (int step = 0; step < 20; ++step) {
      Device fresh(bf16Options());
      EXPECT_EQ(pass(dev, inputs[step]), pass(fresh, inputs[step])) << bf16ModeName(m) << " step " << step;
    }
  }
}

// Passes its input and gradient through untouched (the same tensors), and says it rounds its
// input to bf16 as the convolution after it will: the pool before then writes rounded values.
class Probe : public nn::Module {
 public:
  explicit Probe(bool* sawRounded) : sawRounded_(sawRounded) {}
  Shape build(const Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  bool roundsInputToBf16() const override { return true; }
  const Tensor& forward(const Tensor& x, nn::Context&) override {
    *sawRounded_ = x.bf16Values();
    return x;
  }
  const Tensor& backward(const Tensor& dy, nn::Context&) override { return dy; }

 private:
  bool* sawRounded_;
};

TEST(Bf16Modes, RoundingAtTheProducerGivesTheSameBits) {
  // Max-pools, ReLUs and batch-norms write their outputs (and the gradients of the layer before)
  // already rounded when the layer next to them would round them (or convert them to bf16, in
  // native mode): the same weights, bit for bit, as networks whose layers cannot see their
  // neighbours (an Opaque copy between them). bnNet's 5x5 and 4x4 maps run the convolutions as
  // GEMMs over patches (docs/engine.md).
  bool sawRounded = false;
  auto convnet = [&](nn::Sequential& n, bool opaque) {
    auto after = [&](const std::string& name, bool probe) -> nn::Sequential& {
      if (opaque) return n.add(name, std::make_unique<test::Opaque>());
      return probe ? n.add(name, std::make_unique<Probe>(&sawRounded)) : n;
    };
    n.add("conv1", nn::Conv2d(1, 32, 5, 1, 1)).add("relu1", nn::ReLU()).add("pool1", nn::MaxPool2d(2));
    after("after1", true).add("conv2", nn::Conv2d(32, 64, 3)).add("relu2", nn::ReLU()).add("pool2", nn::MaxPool2d(2, 1));
    after("after2", false).add("conv3", nn::Conv2d(64, 128, 3)).add("relu3", nn::ReLU()).add("pool3", nn::MaxPool2d(2));
    after("after3", false).add("flatten", nn::Flatten()).add("fc1", nn::Linear(2048, 10));
  };
  auto reluNet = [](nn::Sequential& n, bool opaque) {  // ReLUs before a convolution and linears
    auto after = [&](const std::string& name) -> nn::Sequential& {
      return opaque ? n.add(name, std::make_unique<test::Opaque>()) : n;
    };
    n.add("conv1", nn::Conv2d(1, 16, 3)).add("relu1", nn::ReLU());
    after("after1").add("conv2", nn::Conv2d(16, 16, 3, 2)).add("relu2", nn::ReLU());
    after("after2").add("flatten", nn::Flatten()).add("fc1", nn::Linear(0, 64)).add("relu3", nn::ReLU());
    after("after3").add("fc2", nn::Linear(64, 10));
  };
  auto bnNet = [](nn::Sequential& n, bool opaque) {  // batch-norms before convolutions, two on small maps
    auto after = [&](const std::string& name) -> nn::Sequential& {
      return opaque ? n.add(name, std::make_unique<test::Opaque>()) : n;
    };
    n.add("conv1", nn::Conv2d(1, 16, 3)).add("bn1", nn::BatchNorm2d(16, true, true));
    after("after1").add("conv2", nn::Conv2d(16, 16, 3, 2)).add("bn2", nn::BatchNorm2d(16, false, true));
    after("after2").add("conv3", nn::Conv2d(16, 16, 3, 1, 1)).add("bn3", nn::BatchNorm2d(16, true));
    n.add("flatten", nn::Flatten()).add("fc1", nn::Linear(0, 10));
  };
  for (Bf16Mode m : {Bf16Mode::kEmulated, Bf16Mode::kNative}) {
    for (Precision p : {Precision::kBf16, Precision::kFp32}) {
      if (m == Bf16Mode::kNative && (!cpuHasBf16() || p == Precision::kFp32)) continue;
      ModeScope mode(m);
      SCOPED_TRACE(bf16ModeName(m));
      sawRounded = false;
      EXPECT_TRUE(test::sameBits(test::trainedWeights(p, {1, 28, 28}, false, convnet),
                                 test::trainedWeights(p, {1, 28, 28}, true, convnet)))
          << precisionName(p);
      EXPECT_EQ(sawRounded, p == Precision::kBf16) << precisionName(p);
      EXPECT_TRUE(test::sameBits(test::trainedWeights(p, {1, 12, 12}, false, reluNet),
                                 test::trainedWeights(p, {1, 12, 12}, true, reluNet)))
          << precisionName(p);
      EXPECT_TRUE(test::sameBits(test::trainedWeights(p, {1, 12, 12}, false, bnNet),
                                 test::trainedWeights(p, {1, 12, 12}, true, bnNet)))
          << precisionName(p);
    }
  }
}

TEST(Bf16Modes, NamesAndTheDefault) {
  EXPECT_STREQ(bf16ModeName(Bf16Mode::kNative), "native");
  EXPECT_STREQ(bf16ModeName(Bf16Mode::kEmulated), "emulated");
  Device fp32;
  EXPECT_FALSE(emulatesBf16(fp32));
  EXPECT_FALSE(nativeBf16(fp32));
  Device bf16(bf16Options());
  EXPECT_NE(emulatesBf16(bf16), nativeBf16(bf16));
}

}  // namespace
}  // namespace xs::engine
