// test_conv_narrow_bf16.cpp: native bf16's own convolution kernels on vdpbf16ps (narrowBf16 in
// conv_narrow_forward.cpp, conv_narrow_data.cpp, conv_narrow_weights.cpp,
// conv_one_channel_bf16.cpp, and for 16 channels and more conv_wide_weights_bf16.cpp and
// conv_one_channel_wide_bf16.cpp): the
// forward, the input gradient and the weight and bias gradients against scalar sums of the same
// pairs in the same order, bit for bit, and against fp32 on the rounded operands to its
// tolerance; where they do not apply, the emulated kernels' bits. A pair
// adds its high half's product first, and a product of two bf16 values is exact in fp32, so each
// of its two steps is a fused multiply-add. The patterns hold no denormals, which vdpbf16ps
// reads as zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "conv_onednn.hpp"
#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"

namespace xs::engine {
namespace {
using golden::Vec;

using Case = test::ConvCase;
using test::wCount, test::xCount, test::yCount;
constexpr auto geom = test::nhwcGeom;

Vec rounded(Vec v) {
  roundToBf16(v.data(), v.data(), v.size());
  return v;
}

// One pair of vdpbf16ps: acc + hi's product, then + lo's.
float pairStep(float acc, float lo, float wLo, float hi, float wHi) {
  return std::fma(lo, wLo, std::fma(hi, wHi, acc));
}

// Readers of the rounded operands, zeros outside them.
struct Operands {
  const ConvGeom& g;
  const Vec &x, &w, &dy;
  float X(int n, int iy, int ix, int ci) const {
    const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w && ci < g.c;
    return inside ? x[((static_cast<std::size_t>(n) * g.h + iy) * g.w + ix) * g.c + ci] : 0.f;
  }
  float W(int o, int ci, int ky, int kx) const {
    return o < g.oc && ci < g.c ? w[((static_cast<std::size_t>(o) * g.c + ci) * g.kh + ky) * g.kw + kx] : 0.f;
  }
  float D(int n, int oy, int ox, int o) const {
    return oy < g.oh() && o < g.oc ? dy[((static_cast<std::size_t>(n) * g.oh() + oy) * g.ow() + ox) * g.oc + o] : 0.f;
  }
};

// The forward: from the bias over ky, pairs of input channels (ci, ci + 1), then kx.
Vec forwardReference(const Operands& a, const float* b) {
  const ConvGeom& g = a.g;
  return test::eachOutput(g, [&](int n, int oy, int ox, int o) {
    float acc = b ? b[o] : 0.f;
    for (int ky = 0; ky < g.kh; ++ky)
      for (int ci = 0; ci < g.c; ci += 2)
        for (int kx = 0; kx < g.kw; ++kx) {
          const int iy = oy + ky - g.pad, ix = ox + kx - g.pad;
          acc = pairStep(acc, a.X(n, iy, ix, ci), a.W(o, ci, ky, kx), a.X(n, iy, ix, ci + 1), a.W(o, ci + 1, ky, kx));
        }
    return acc;
  });
}

// The input gradient: each target's run (a padded row iy of dx, a pixel ox of dy) over the rows
// of dy that reach it, ky ascending, and pairs of output channels (o, o + 1) from zero, added
// into the padded dx in conv_narrow_data.cpp's order (test::narrowDataColumns).
Vec dataReference(const Operands& a) {
  const ConvGeom& g = a.g;
  return test::narrowDataColumns(g, [&](int n, int iy, int ox, int kx, int ci) {
    float t = 0.f;
    for (int ky = 0; ky < g.kh; ++ky) {
      const int oy = iy - ky;
      if (oy < 0 || oy >= g.oh()) continue;
      for (int o = 0; o < g.oc; o += 2)
        t = pairStep(t, a.D(n, oy, ox, o), a.W(o, ci, ky, kx), a.D(n, oy, ox, o + 1), a.W(o + 1, ci, ky, kx));
    }
    return t;
  });
}

using Grads = test::WeightGrads;

// The weight and bias gradients: from zero over images, pairs of output rows (oy, oy + 1) and
// pixels, then added to start. An odd last row pairs with zeros, x's too.
Grads weightReference(const Operands& a, const Grads& start) {
  const ConvGeom& g = a.g;
  auto weight = [&](int o, int ci, int ky, int kx) {
    float s = 0.f;
    for (int n = 0; n < g.n; ++n)
      for (int oy = 0; oy < g.oh(); oy += 2)
        for (int ox = 0; ox < g.ow(); ++ox) {
          const int ix = ox + kx - g.pad;
          const float xHi = oy + 1 < g.oh() ? a.X(n, oy + 1 + ky - g.pad, ix, ci) : 0.f;
          s = pairStep(s, a.D(n, oy, ox, o), a.X(n, oy + ky - g.pad, ix, ci), a.D(n, oy + 1, ox, o), xHi);
        }
    return s;
  };
  auto bias = [&](int o) {
    float s = 0.f;
    for (int n = 0; n < g.n; ++n)
      for (int oy = 0; oy < g.oh(); oy += 2)
        for (int ox = 0; ox < g.ow(); ++ox) s = pairStep(s, a.D(n, oy, ox, o), 1.f, a.D(n, oy + 1, ox, o), 1.f);
    return s;
  };
  return test::weightSums(g, start, weight, bias);
}

// Shapes: LeNet-5's conv 2 (6 channels into 16, 5 x 5); 2 channels 3 x 3 into 8 with padding
// 1 (odd output rows and columns); 4 channels into 12 on rows of 29 pixels (blocks of 9 and 10);
// 6 into 16, 3 x 3, padding 2, two blocks of 11.
const Case kCases[] = {{3, 6, 14, 14, 16, 5, 0}, {2, 2, 9, 11, 8, 3, 1}, {1, 4, 6, 33, 12, 5, 0},
                       {2, 6, 7, 18, 16, 3, 2}};

class ConvNarrowBf16 : public test::NativeBf16Kernels {};

// Flagged: the operands rounded already and told so (g.xRounded, wRounded, dyRounded), as a
// rounding producer and the mirror hand them over: the same bits.
TEST_F(ConvNarrowBf16, PassesMatchTheirPairSumsBitForBit) {
  ASSERT_TRUE(detail::narrowBf16(dev_));
  for (const Case& c : kCases)
    for (bool flagged : {false, true}) {
      ConvGeom g = geom(c);
      ASSERT_TRUE(detail::useNarrowForward(g) && detail::useNarrowDataGradient(g) &&
                  detail::useNarrowWeightGradient(g));
      const Vec rx = rounded(test::pattern(xCount(g), 1)), rw = rounded(test::pattern(wCount(g), 2)),
                rdy = rounded(test::pattern(yCount(g), 4)), b = test::pattern(g.oc, 3);
      g.xRounded = g.wRounded = g.dyRounded = flagged;
      const Vec x = flagged ? rx : test::pattern(xCount(g), 1), w = flagged ? rw : test::pattern(wCount(g), 2),
                dy = flagged ? rdy : test::pattern(yCount(g), 4);
      const Operands a{g, rx, rw, rdy};
      const std::string where = "c " + std::to_string(c.c) + " oc " + std::to_string(c.oc) + " k " +
                                std::to_string(c.k) + (flagged ? " flagged" : "");
      for (bool bias : {true, false}) {
        Vec y(yCount(g), 7.f);
        detail::conv2dForwardNarrow(dev_, y.data(), x.data(), w.data(), bias ? b.data() : nullptr, g);
        EXPECT_EQ(y, forwardReference(a, bias ? b.data() : nullptr)) << where << (bias ? " bias" : "");
      }
      Vec dx(xCount(g), 7.f);
      detail::conv2dDataGradientNarrow(dev_, dx.data(), dy.data(), w.data(), g);
      EXPECT_EQ(dx, dataReference(a)) << where;
      for (bool overwrite : {false, true})
        for (bool bias : {true, false}) {
          const Grads start{test::pattern(wCount(g), 5), test::pattern(g.oc, 6)};
          Grads got = start;
          ConvGeom gw = g;
          gw.overwriteGrads = overwrite;
          detail::conv2dWeightGradientNarrow(dev_, got.dw.data(), bias ? got.db.data() : nullptr, dy.data(),
                                             x.data(), gw);
          const Grads want = weightReference(a, overwrite ? Grads{Vec(wCount(g), 0.f), Vec(g.oc, 0.f)} : start);
          const std::string what = where + (overwrite ? " overwrite" : "") + (bias ? " bias" : "");
          EXPECT_EQ(got.dw, want.dw) << what;
          EXPECT_EQ(got.db, bias ? want.db : start.db) << what;
        }
    }
}

// The input gradient on maps one and two pixels wide (1 x 1 taps: one pixel a group, or two),
// and on 15 channels, whose tap rows run 3 vectors (45 values) a pixel.
TEST_F(ConvNarrowBf16, InputGradientOfNarrowMapsMatchesItsPairSums) {
  for (const Case& c : {Case{2, 6, 4, 1, 8, 1, 0}, Case{3, 2, 5, 2, 8, 1, 0}, Case{2, 15, 6, 6, 8, 3, 1}}) {
    const ConvGeom g = geom(c);
    ASSERT_TRUE(detail::useNarrowDataGradient(g));
    const Vec rw = rounded(test::pattern(wCount(g), 2)), rdy = rounded(test::pattern(yCount(g), 4));
    const Vec dy = test::pattern(yCount(g), 4), w = test::pattern(wCount(g), 2);
    const Operands a{g, Vec(xCount(g), 0.f), rw, rdy};
    Vec dx(xCount(g), 7.f);
    detail::conv2dDataGradientNarrow(dev_, dx.data(), dy.data(), w.data(), g);
    EXPECT_EQ(dx, dataReference(a)) << "w " << c.w << " k " << c.k;
  }
}

// Odd input channels (the forward's pairs) and odd output channels (the input gradient's) run the
// emulated kernels: the bits of an emulated bf16 device.
TEST_F(ConvNarrowBf16, OddChannelsRunTheEmulatedKernels) {
  for (const Case& c : {Case{2, 3, 9, 11, 8, 3, 1}, Case{2, 4, 9, 11, 5, 3, 1}}) {
    const ConvGeom g = geom(c);
    const Vec x = test::pattern(xCount(g), 7), w = test::pattern(wCount(g), 8), b = test::pattern(g.oc, 9),
              dy = test::pattern(yCount(g), 10);
    Vec y(yCount(g)), dx(xCount(g)), yEmulated(yCount(g)), dxEmulated(xCount(g));
    detail::conv2dForwardNarrow(dev_, y.data(), x.data(), w.data(), b.data(), g);
    detail::conv2dDataGradientNarrow(dev_, dx.data(), dy.data(), w.data(), g);
    {
      test::ModeScope emulated(Bf16Mode::kEmulated);
      Device dev(golden::bf16Options());
      detail::conv2dForwardNarrow(dev, yEmulated.data(), x.data(), w.data(), b.data(), g);
      detail::conv2dDataGradientNarrow(dev, dxEmulated.data(), dy.data(), w.data(), g);
    }
    if (c.c % 2) {
      EXPECT_EQ(y, yEmulated) << "c " << c.c;
    }
    if (c.oc % 2) {
      EXPECT_EQ(dx, dxEmulated) << "oc " << c.oc;
    }
  }
}

// Through conv2dForward and conv2dBackward, as a layer calls them: fp32 on the rounded operands
// to its tolerance (the sums differ in order only).
TEST_F(ConvNarrowBf16, AgreesWithFp32OnRoundedOperands) {
  // The narrow shapes, then wide ones (conv_wide_weights_bf16.cpp, conv_one_channel_wide_bf16.cpp):
  // the convnet's conv 3 and conv 1, on odd batches.
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.insert(cases.end(), {Case{3, 64, 10, 10, 128, 3, 0}, Case{3, 1, 28, 28, 32, 5, 1}});
  for (const Case& c : cases) {
    const ConvGeom g = geom(c);
    const Vec x = rounded(test::pattern(xCount(g), 11)), w = rounded(test::pattern(wCount(g), 12)),
              b = test::pattern(g.oc, 13), dy = rounded(test::pattern(yCount(g), 14));
    auto run = [&](Device& dev) {
      std::vector<Vec> r{Vec(yCount(g)), Vec(xCount(g)), Vec(wCount(g), 0.f), Vec(g.oc, 0.f)};
      conv2dForward(dev, r[0].data(), x.data(), w.data(), b.data(), g);
      conv2dBackward(dev, r[1].data(), r[2].data(), r[3].data(), dy.data(), x.data(), w.data(), g);
      return r;
    };
    const std::vector<Vec> got = run(dev_);
    Device fp32;
    const std::vector<Vec> want = run(fp32);
    const char* names[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; ++i) golden::expectClose(names[i], got[i].data(), want[i], 1e-5, 1e-5);
  }
}

// The one-channel convolution (conv_one_channel_bf16.cpp): the forward from the bias over the
// tap pairs, along each row (kx, kx + 1), then down an odd width's last column (ky, ky + 1),
// then an odd height's last tap alone; the weight sums per lane over pairs of output rows, the
// bias's per lane as in fp32; then each sum's 16 lanes in order.
struct OneChannel {
  Vec y, dw, db;
};

OneChannel oneChannelReference(const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  const int oh = g.oh(), ow = g.ow(), oc = g.oc, kh = g.kh, kw = g.kw, taps = kh * kw, blocks = (ow + 15) / 16;
  auto X = [&](int n, int iy, int ix) {  // the padded image, zeros past it
    iy -= g.pad, ix -= g.pad;
    return iy < 0 || iy >= g.h || ix < 0 || ix >= g.w ? 0.f : x[(static_cast<std::size_t>(n) * g.h + iy) * g.w + ix];
  };
  auto W = [&](int o, int ky, int kx) { return ky < kh ? w[static_cast<std::size_t>(o) * taps + ky * kw + kx] : 0.f; };
  auto D = [&](int n, int oy, int ox, int o) {
    return oy < oh && ox < ow ? dy[((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * oc + o] : 0.f;
  };
  OneChannel r{Vec(yCount(g)), Vec(wCount(g), 0.f), Vec(oc, 0.f)};
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox)
        for (int o = 0; o < oc; ++o) {
          float acc = b[o];
          for (int ky = 0; ky < kh; ++ky)
            for (int kx = 0; kx + 1 < kw; kx += 2)
              acc = pairStep(acc, X(n, oy + ky, ox + kx), W(o, ky, kx), X(n, oy + ky, ox + kx + 1), W(o, ky, kx + 1));
          for (int ky = 0; kw % 2 && ky < kh; ky += 2) {  // the last column's pairs; an odd last tap alone
            const int kx = kw - 1;
            const float hi = ky + 1 < kh ? X(n, oy + ky + 1, ox + kx) : 0.f;
            acc = pairStep(acc, X(n, oy + ky, ox + kx), W(o, ky, kx), hi, W(o, ky + 1, kx));
          }
          r.y[((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * oc + o] = acc;
        }
  std::vector<float> lanes(static_cast<std::size_t>(oc) * (taps + 1) * 16, 0.f);  // [oc][taps + 1][16]
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; oy += 2)
      for (int blk = 0; blk < blocks; ++blk)
        for (int o = 0; o < oc; ++o)
          for (int l = 0; l < 16; ++l) {
            const int ox = blk * 16 + l;
            float* s = &lanes[static_cast<std::size_t>(o) * (taps + 1) * 16 + l];
            for (int t = 0; t < taps; ++t) {
              const float xHi = oy + 1 < oh ? X(n, oy + 1 + t / kw, ox + t % kw) : 0.f;  // an odd last row: zeros
              s[t * 16] =
                  pairStep(s[t * 16], D(n, oy, ox, o), X(n, oy + t / kw, ox + t % kw), D(n, oy + 1, ox, o), xHi);
            }
          }
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int blk = 0; blk < blocks; ++blk)
        for (int o = 0; o < oc; ++o)
          for (int l = 0; l < 16; ++l)
            lanes[(static_cast<std::size_t>(o) * (taps + 1) + taps) * 16 + l] += D(n, oy, blk * 16 + l, o);
  for (int o = 0; o < oc; ++o)
    for (int t = 0; t <= taps; ++t) {
      float s = 0.f;
      for (int l = 0; l < 16; ++l) s += lanes[(static_cast<std::size_t>(o) * (taps + 1) + t) * 16 + l];
      (t < taps ? r.dw[static_cast<std::size_t>(o) * taps + t] : r.db[o]) = s;
    }
  return r;
}

// Also with y and dy as planes (g.planes, for a pool that takes them): the same values.
TEST_F(ConvNarrowBf16, OneChannelPassesMatchTheirPairSumsBitForBit) {
  // LeNet-5's conv 1; 3 x 3 taps (a last column pair and a last tap alone) into one channel; 15
  // channels on rows of two blocks; 5 x 5 taps into 13 on three blocks; an odd output height;
  // 7 x 7 taps (the weight sums' pairs take widths 3 and 5: the emulated kernels' bits there).
  const Case cases[] = {{3, 1, 28, 28, 6, 5, 2}, {2, 1, 12, 9, 1, 3, 0}, {2, 1, 10, 30, 15, 3, 1},
                        {1, 1, 40, 40, 13, 5, 1}, {2, 1, 9, 20, 5, 5, 2}, {2, 1, 7, 8, 4, 7, 3}};
  for (const Case& c : cases)
    for (bool flagged : {false, true})  // as in PassesMatchTheirPairSumsBitForBit
      for (bool planes : {false, true}) {
        ConvGeom g = geom(c);
        g.overwriteGrads = true;
        g.dstNhwc = !planes;
        g.planes = planes;
        ASSERT_TRUE(detail::useOneChannelConv(g));
        auto layout = [&](const Vec& v) {  // channels last -> g's layout of y and dy
          if (!planes) return v;
          Vec t(v.size());
          nhwcToNchw(t.data(), v.data(), g.n, g.oc, g.oh() * g.ow());
          return t;
        };
        const Vec rx = rounded(test::pattern(xCount(g), 15)), rw = rounded(test::pattern(wCount(g), 16)),
                  rdy = rounded(test::pattern(yCount(g), 18)), b = test::pattern(g.oc, 17);
        g.xRounded = g.wRounded = g.dyRounded = flagged;
        const Vec x = flagged ? rx : test::pattern(xCount(g), 15), w = flagged ? rw : test::pattern(wCount(g), 16),
                  dy = layout(flagged ? rdy : test::pattern(yCount(g), 18));
        auto run = [&](Device& dev) {
          OneChannel r{Vec(yCount(g)), Vec(wCount(g)), Vec(g.oc)};
          detail::conv2dForwardOneChannel(dev, r.y.data(), x.data(), w.data(), b.data(), g);
          detail::conv2dBackwardOneChannel(dev, r.dw.data(), r.db.data(), dy.data(), x.data(), g);
          return r;
        };
        const OneChannel got = run(dev_);
        OneChannel want = oneChannelReference(g, rx, rw, b, rdy);
        if (c.k == 7) {
          test::ModeScope emulated(Bf16Mode::kEmulated);
          Device dev(golden::bf16Options());
          const OneChannel e = run(dev);
          want.dw = e.dw, want.db = e.db;
        }
        const std::string where = "oc " + std::to_string(c.oc) + " k " + std::to_string(c.k) +
                                  (flagged ? " flagged" : "") + (planes ? " planes" : "");
        EXPECT_EQ(got.y, layout(want.y)) << where;
        EXPECT_EQ(got.dw, want.dw) << where;
        EXPECT_EQ(got.db, want.db) << where;
      }
}

// The wide weight gradient (conv_wide_weights_bf16.cpp): from zero over pairs of images (2 np,
// 2 np + 1), rows and pixels, then added to start; an odd batch's last image pairs with zeros.
Grads wideWeightReference(const Operands& a, const Grads& start) {
  const ConvGeom& g = a.g;
  auto X = [&](int n, int iy, int ix, int ci) { return n < g.n ? a.X(n, iy, ix, ci) : 0.f; };
  auto D = [&](int n, int oy, int ox, int o) { return n < g.n ? a.D(n, oy, ox, o) : 0.f; };
  auto weight = [&](int o, int ci, int ky, int kx) {
    float s = 0.f;
    for (int n = 0; n < g.n; n += 2)
      for (int oy = 0; oy < g.oh(); ++oy)
        for (int ox = 0; ox < g.ow(); ++ox) {
          const int iy = oy + ky - g.pad, ix = ox + kx - g.pad;
          s = pairStep(s, D(n, oy, ox, o), X(n, iy, ix, ci), D(n + 1, oy, ox, o), X(n + 1, iy, ix, ci));
        }
    return s;
  };
  auto bias = [&](int o) {
    float s = 0.f;
    for (int n = 0; n < g.n; n += 2)
      for (int oy = 0; oy < g.oh(); ++oy)
        for (int ox = 0; ox < g.ow(); ++ox) s = pairStep(s, D(n, oy, ox, o), 1.f, D(n + 1, oy, ox, o), 1.f);
    return s;
  };
  return test::weightSums(g, start, weight, bias);
}

// As a layer's backward reaches it, through oneDNN's layouts: dw and db those pair sums, bit for
// bit, written or added to; dx oneDNN's, the same bits as with the weight gradient left to
// oneDNN; and with dy in blocks of 16 channels, as a max-pool's backward hands it over where
// conv2dGradsBlocked16 holds (one input channel), the same dw and db. Shapes: the convnet's conv 3
// (4 blocks a pass) on an odd batch; conv 2's odd maps; padding 2, 5 x 5 taps into 3 blocks (one
// a pass), one image; padding 1 into 2 blocks (two a pass), four images; the convnet's conv 1
// (one channel, float32 x and dy) on an odd batch; one channel 3 x 3 into 3 blocks.
TEST_F(ConvNarrowBf16, WideWeightGradientMatchesItsPairSumsBitForBit) {
  const Case cases[] = {{3, 64, 10, 10, 128, 3, 0}, {2, 32, 13, 13, 64, 3, 0}, {1, 16, 7, 9, 48, 5, 2},
                        {4, 32, 6, 6, 32, 3, 1},      {3, 1, 28, 28, 32, 5, 1},   {2, 1, 9, 12, 48, 3, 0}};
  for (const Case& c : cases) {
    const ConvGeom g = geom(c);
    ASSERT_TRUE(detail::useWideWeightGradientBf16(dev_, g));
    const Vec rx = rounded(test::pattern(xCount(g), 21)), rw = rounded(test::pattern(wCount(g), 22)),
              rdy = rounded(test::pattern(yCount(g), 24));
    const Vec x = test::pattern(xCount(g), 21), w = test::pattern(wCount(g), 22), dy = test::pattern(yCount(g), 24);
    const Operands a{g, rx, rw, rdy};
    const std::string where = "c " + std::to_string(c.c) + " oc " + std::to_string(c.oc) + " k " + std::to_string(c.k);
    for (bool overwrite : {false, true})
      for (bool bias : {true, false}) {
        const Grads start{test::pattern(wCount(g), 25), test::pattern(g.oc, 26)};
        ConvGeom gw = g;
        gw.overwriteGrads = overwrite;
        auto run = [&](Device& dev, Vec& dx) {
          Grads r = start;
          conv2dBackward(dev, dx.data(), r.dw.data(), bias ? r.db.data() : nullptr, dy.data(), x.data(), w.data(), gw);
          return r;
        };
        Vec dx(xCount(g)), dxOneDnn(xCount(g));
        const Grads got = run(dev_, dx);
        const Grads want = wideWeightReference(a, overwrite ? Grads{Vec(wCount(g), 0.f), Vec(g.oc, 0.f)} : start);
        const std::string what = where + (overwrite ? " overwrite" : "") + (bias ? " bias" : "");
        EXPECT_EQ(got.dw, want.dw) << what;
        EXPECT_EQ(got.db, bias ? want.db : start.db) << what;
        detail::wideBf16Slot() = false;
        Device oneDnn(golden::bf16Options());
        run(oneDnn, dxOneDnn);
        detail::wideBf16Slot() = true;
        EXPECT_EQ(dx, dxOneDnn) << what;
        if (!conv2dGradsBlocked16(dev_, gw, bias, false)) continue;
        ConvGeom blocked = gw;
        blocked.dyBlocked = true;
        const int blocks = g.oc / 16, pixels = g.oh() * g.ow();
        Vec dyBlocks(yCount(g));
        for (int n = 0; n < g.n; ++n)
          for (int p = 0; p < pixels; ++p)
            for (int o = 0; o < g.oc; ++o)
              dyBlocks[((static_cast<std::size_t>(n) * blocks + o / 16) * pixels + p) * 16 + o % 16] =
                  dy[(static_cast<std::size_t>(n) * pixels + p) * g.oc + o];
        Grads fromBlocks = start;
        conv2dBackward(dev_, nullptr, fromBlocks.dw.data(), bias ? fromBlocks.db.data() : nullptr, dyBlocks.data(),
                       x.data(), w.data(), blocked);
        EXPECT_EQ(fromBlocks.dw, want.dw) << what << " dy in blocks";
        EXPECT_EQ(fromBlocks.db, bias ? want.db : start.db) << what << " dy in blocks";
      }
  }
}

// One channel into blocks of 16 (conv_one_channel_wide_bf16.cpp): from the bias over ky and the
// tap pairs along the row (kx, kx + 1), an odd width's last tap alone.
Vec oneChannelWideReference(const Operands& a, const float* b) {
  const ConvGeom& g = a.g;
  return test::eachOutput(g, [&](int n, int oy, int ox, int o) {
    float acc = b ? b[o] : 0.f;
    for (int ky = 0; ky < g.kh; ++ky)
      for (int kx = 0; kx < g.kw; kx += 2) {
        const int iy = oy + ky - g.pad, ix = ox + kx - g.pad;
        const bool pair = kx + 1 < g.kw;
        acc = pairStep(acc, a.X(n, iy, ix, 0), a.W(o, 0, ky, kx), pair ? a.X(n, iy, ix + 1, 0) : 0.f,
                       pair ? a.W(o, 0, ky, kx + 1) : 0.f);
      }
    return acc;
  });
}

// Through conv2dForward, y channels last and in the blocks the max-pool after it takes: the
// reference's bits. Shapes: the convnet's conv 1 (5 x 5, padding 1, 2 blocks a tile); 4 x 4 taps
// (no tap alone) into 3 blocks (one a tile) with padding 2; 3 x 3 on rows of 40 pixels (tiles of
// 10 and more).
TEST_F(ConvNarrowBf16, OneChannelIntoBlocksMatchesItsPairSumsBitForBit) {
  const Case cases[] = {{3, 1, 28, 28, 32, 5, 1}, {1, 1, 12, 13, 48, 4, 2}, {2, 1, 7, 42, 32, 3, 0}};
  for (const Case& c : cases)
    for (bool bias : {true, false}) {
      const ConvGeom g = geom(c);
      ASSERT_TRUE(detail::useOneChannelWideBf16(dev_, g));
      const Vec x = test::pattern(xCount(g), 31), w = test::pattern(wCount(g), 32), b = test::pattern(g.oc, 33);
      const Vec rx = rounded(x), rw = rounded(w);
      const Vec want = oneChannelWideReference(Operands{g, rx, rw, rx}, bias ? b.data() : nullptr);
      const std::string where = "oc " + std::to_string(c.oc) + " k " + std::to_string(c.k) + (bias ? " bias" : "");
      Vec y(yCount(g), 7.f);
      conv2dForward(dev_, y.data(), x.data(), w.data(), bias ? b.data() : nullptr, g);
      EXPECT_EQ(y, want) << where;
      ConvGeom blocked = g;
      blocked.dstBlocked = true;
      ASSERT_TRUE(conv2dWritesBlocked16(dev_, g, bias));
      Vec yb(yCount(g), 7.f);
      conv2dForward(dev_, yb.data(), x.data(), w.data(), bias ? b.data() : nullptr, blocked);
      const int blocks = g.oc / 16, pixels = g.oh() * g.ow();
      for (int n = 0; n < g.n; ++n)
        for (int p = 0; p < pixels; ++p)
          for (int o = 0; o < g.oc; ++o)
            ASSERT_EQ(yb[((static_cast<std::size_t>(n) * blocks + o / 16) * pixels + p) * 16 + o % 16],
                      want[(static_cast<std::size_t>(n) * pixels + p) * g.oc + o])
                << where << " blocked, image " << n << " pixel " << p << " channel " << o;
    }
}

}  // namespace
}  // namespace xs::engine
