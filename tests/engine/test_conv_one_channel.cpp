// test_conv_one_channel.cpp: the one-input-channel convolution (conv_one_channel.cpp): its
// AVX-512 kernels and portable loops against a scalar reference of the same sums, bit for bit;
// against im2col to fp32's tolerance; emulated bf16 as fp32 on rounded operands; writing its
// planes (y and dy NCHW) for a pool that takes them, the same bits, and the layers choosing so.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "conv_onednn.hpp"
#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "test_util.hpp"
#include "xspawn/error.hpp"
#include "xspawn/nn.hpp"

namespace xs::engine {
namespace {
using golden::Vec;

struct Case {
  int n, h, w, oc, k, pad;
};

ConvGeom geom(const Case& c) {
  ConvGeom g{c.n, 1, c.h, c.w, c.oc, c.k, c.k, 1, c.pad};
  g.srcNhwc = g.dstNhwc = true;
  return g;
}

struct Passes {
  Vec y, dw, db;
};

// Forward, then backward without the input gradient: these kernels (the dispatch takes them
// only with AVX-512), or with dispatch through ops.hpp's (for another backend).
Passes run(Device& dev, const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b, const Vec& dy, bool bias,
           const Vec& dwStart, bool dispatch = false) {
  Passes p{Vec(dy.size()), dwStart, Vec(g.oc, 0.5f)};
  const float* bp = bias ? b.data() : nullptr;
  float* db = bias ? p.db.data() : nullptr;
  if (dispatch) {
    conv2dForward(dev, p.y.data(), x.data(), w.data(), bp, g);
    conv2dBackward(dev, nullptr, p.dw.data(), db, dy.data(), x.data(), w.data(), g);
  } else {
    detail::conv2dForwardOneChannel(dev, p.y.data(), x.data(), w.data(), bp, g);
    detail::conv2dBackwardOneChannel(dev, p.dw.data(), db, dy.data(), x.data(), g);
  }
  return p;
}

// The sums conv_one_channel.cpp documents, in its order: y from the bias over taps (ky, kx) with
// fused multiply-adds; each gradient per lane l of 16-pixel blocks (dy zero past ow) over
// images, rows and blocks, then the 16 lanes in order.
Passes reference(const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b, const Vec& dy, bool bias,
                 const Vec& dwStart) {
  const int oh = g.oh(), ow = g.ow(), oc = g.oc, taps = g.kh * g.kw, blocks = (ow + 15) / 16;
  auto xp = [&](int n, int iy, int ix) {
    return iy < 0 || iy >= g.h || ix < 0 || ix >= g.w ? 0.f : x[(static_cast<std::size_t>(n) * g.h + iy) * g.w + ix];
  };
  Passes p{Vec(dy.size()), dwStart, Vec(oc, 0.5f)};
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox)
        for (int o = 0; o < oc; ++o) {
          float acc = bias ? b[o] : 0.f;
          for (int ky = 0; ky < g.kh; ++ky)
            for (int kx = 0; kx < g.kw; ++kx)
              acc = std::fma(xp(n, oy + ky - g.pad, ox + kx - g.pad), w[o * taps + ky * g.kw + kx], acc);
          p.y[((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * oc + o] = acc;
        }
  std::vector<float> sums(static_cast<std::size_t>(oc) * (taps + 1) * 16, 0.f);  // [oc][taps + 1][16]
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < oh; ++oy)
      for (int blk = 0; blk < blocks; ++blk)
        for (int o = 0; o < oc; ++o)
          for (int l = 0; l < 16; ++l) {
            const int ox = blk * 16 + l;
            const float d = ox < ow ? dy[((static_cast<std::size_t>(n) * oh + oy) * ow + ox) * oc + o] : 0.f;
            float* s = &sums[static_cast<std::size_t>(o) * (taps + 1) * 16 + l];
            for (int t = 0; t < taps; ++t)
              s[t * 16] = std::fma(d, xp(n, oy + t / g.kw - g.pad, ox + t % g.kw - g.pad), s[t * 16]);
            s[taps * 16] += d;
          }
  for (int o = 0; o < oc; ++o)
    for (int t = 0; t <= taps; ++t) {
      float s = 0.f;
      for (int l = 0; l < 16; ++l) s += sums[(static_cast<std::size_t>(o) * (taps + 1) + t) * 16 + l];
      if (t < taps) p.dw[o * taps + t] = g.overwriteGrads ? s : p.dw[o * taps + t] + s;
      else if (bias) p.db[o] = g.overwriteGrads ? s : p.db[o] + s;
    }
  return p;
}

// Shapes: LeNet-5's first layer; one output channel; 15 channels on a wide row (many vectors and
// a partial last one); 3 and 7 wide taps (the portable weight sums); no padding.
const Case kCases[] = {{3, 28, 28, 6, 5, 2}, {2, 12, 9, 1, 3, 0}, {2, 10, 30, 15, 3, 1}, {2, 7, 8, 4, 7, 3},
                       {1, 40, 40, 13, 5, 1}};

TEST(ConvOneChannel, KernelsMatchTheirScalarSumsBitForBit) {
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true})
      for (bool bias : {true, false})
        for (bool overwrite : {false, true}) {
          ConvGeom g = geom(c);
          g.overwriteGrads = overwrite;
          ASSERT_TRUE(detail::useOneChannelConv(g));
          const std::size_t xs = static_cast<std::size_t>(g.n) * g.h * g.w,
                            ys = static_cast<std::size_t>(g.n) * g.oh() * g.ow() * g.oc,
                            ws = static_cast<std::size_t>(g.oc) * g.kh * g.kw;
          Vec x = test::pattern(xs, 1), w = test::pattern(ws, 2), b = test::pattern(g.oc, 3),
              dy = test::pattern(ys, 4), dw0 = test::pattern(ws, 5);
          detail::oneChannelPortableSlot() = portable;
          const Passes got = run(dev, g, x, w, b, dy, bias, dw0);
          detail::oneChannelPortableSlot() = false;
          const Passes want = reference(g, x, w, b, dy, bias, dw0);
          const std::string what = "oc " + std::to_string(c.oc) + " k " + std::to_string(c.k) +
                                   (portable ? " portable" : " vector") + (bias ? " bias" : "") +
                                   (overwrite ? " overwrite" : "");
          EXPECT_EQ(got.y, want.y) << what;
          EXPECT_EQ(got.dw, want.dw) << what;
          EXPECT_EQ(got.db, want.db) << what;
        }
}

// [n, hw, c] -> [n, c, hw]
Vec toPlanes(const Vec& v, int n, int c, int hw) {
  Vec t(v.size());
  nhwcToNchw(t.data(), v.data(), n, c, hw);
  return t;
}

TEST(ConvOneChannel, PlanesAreTheChannelsLastValuesBitForBit) {
  // g.planes: y written and dy read NCHW, as an average pool from planes takes and gives them.
  Device dev;
  for (const Case& c : kCases)
    for (bool portable : {false, true}) {
      const ConvGeom g = geom(c);
      ConvGeom planes = g;
      planes.dstNhwc = false;
      planes.planes = true;
      ASSERT_TRUE(detail::useOneChannelConv(planes));
      const int ohw = g.oh() * g.ow();
      Vec x = test::pattern(test::xCount(g), 21), w = test::pattern(test::wCount(g), 22), b = test::pattern(g.oc, 23),
          dy = test::pattern(test::yCount(g), 24), dw0 = test::pattern(test::wCount(g), 25);
      detail::oneChannelPortableSlot() = portable;
      const Passes want = run(dev, g, x, w, b, dy, true, dw0);
      const Passes got = run(dev, planes, x, w, b, toPlanes(dy, g.n, g.oc, ohw), true, dw0);
      detail::oneChannelPortableSlot() = false;
      const std::string what =
          "oc " + std::to_string(c.oc) + " k " + std::to_string(c.k) + (portable ? " portable" : "");
      EXPECT_EQ(got.y, toPlanes(want.y, g.n, g.oc, ohw)) << what;
      EXPECT_EQ(got.dw, want.dw) << what;
      EXPECT_EQ(got.db, want.db) << what;
    }
}

TEST(ConvOneChannel, AFusedPoolGivesTheSeparatePassesBits) {
  // ConvGeom::pool: each image's planes pooled as computed, and each image's pooled gradient
  // spread back just before its weight sums, against conv -> pool and pool backward -> conv
  // over the whole batch; with and without the ReLU, fp32 and both modes of bf16.
  // LeNet-5's and another with at most 6 channels and 5 taps (pooled from the forward's
  // registers), an odd map (the planes buffer), rows of two and of one block (the gradient
  // straight into the weight sums' layout, avgPoolPlanesToBlocksApply). Native bf16 too: its
  // pairs on vdpbf16ps where the CPU runs them (conv_one_channel_bf16.cpp).
  const Case cases[] = {{3, 28, 28, 6, 5, 2}, {2, 12, 9, 1, 3, 0}, {2, 10, 30, 15, 3, 1}, {2, 14, 14, 4, 3, 1},
                        {2, 20, 20, 3, 5, 2}};
  struct Config {
    Precision prec;
    Bf16Mode mode;
  };
  for (const Case& c : cases)
    for (bool relu : {true, false})
      for (const Config& config : {Config{Precision::kFp32, Bf16Mode::kEmulated},
                                   Config{Precision::kBf16, Bf16Mode::kEmulated},
                                   Config{Precision::kBf16, Bf16Mode::kNative}}) {
        const Precision prec = config.prec;
        test::ModeScope mode(config.mode);
        Device dev(DeviceOptions{.precision = prec});
        ConvGeom g = geom(c);
        g.dstNhwc = false;
        g.planes = true;
        g.overwriteGrads = true;
        PoolGeom pg{g.n, g.oc, g.oh(), g.ow(), 2, 2, 0};
        pg.dxRounded = bf16Products(dev);  // as the convolution would round dy
        const std::size_t planes = test::yCount(g), pooled = static_cast<std::size_t>(g.n) * pg.oh() * pg.ow() * g.oc;
        Vec x = test::pattern(test::xCount(g), 31), w = test::pattern(test::wCount(g), 32), b = test::pattern(g.oc, 33),
            dyPool = test::pattern(pooled, 34);
        std::vector<std::uint16_t> maskWant(avgPoolPlanesMasks(pg) + 1, 7), maskGot = maskWant;
        Vec y(planes), dyPlanes(planes), yWant(pooled), yGot(pooled, -1.f);
        Vec dwWant(test::wCount(g)), dwGot(dwWant.size()), dbWant(g.oc), dbGot(g.oc);
        const AvgPoolFusion f{.relu = relu, .roundY = bf16Products(dev)};
        const PlanesPool pool{pg, f, yGot.data(), relu ? maskGot.data() : nullptr, dyPool.data()};
        ConvGeom fused = g;
        fused.pool = &pool;
        if (!conv2dWritesPlanes(dev, g)) {  // no AVX-512: no planes, so no fused pool either
          EXPECT_THROW(conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), fused), xs::ShapeError);
          continue;
        }
        conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
        avgPoolPlanesForward(yWant.data(), maskWant.data(), y.data(), pg, f);
        avgPoolPlanesBackward(dyPlanes.data(), dyPool.data(), relu ? maskWant.data() : nullptr, pg);
        ConvGeom separate = g;
        separate.dyRounded = pg.dxRounded;
        conv2dBackward(dev, nullptr, dwWant.data(), dbWant.data(), dyPlanes.data(), x.data(), w.data(), separate);
        conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), fused);
        conv2dBackward(dev, nullptr, dwGot.data(), dbGot.data(), nullptr, x.data(), w.data(), fused);
        const std::string what = "oc " + std::to_string(c.oc) + (relu ? " relu " : " ") + precisionName(prec) + " " +
                                 bf16ModeName(config.mode);
        EXPECT_TRUE(test::sameBits(yGot, yWant)) << what;
        if (relu) {
          EXPECT_EQ(maskGot, maskWant) << what;
        }
        EXPECT_TRUE(test::sameBits(dwGot, dwWant)) << what;
        EXPECT_TRUE(test::sameBits(dbGot, dbWant)) << what;
      }
}

// Takes planes (Module::takesPlanarInput) and records the layout it was given; passes x and dy on.
class PlanesProbe : public nn::Module {
 public:
  explicit PlanesProbe(Layout* seen) : seen_(seen) {}
  Shape build(const Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  bool takesPlanarInput() const override { return true; }
  const Tensor& forward(const Tensor& x, nn::Context&) override {
    *seen_ = x.layout();
    return x;
  }
  const Tensor& backward(const Tensor& dy, nn::Context&) override { return dy; }

 private:
  Layout* seen_;
};

TEST(ConvOneChannel, LayersPassPlanesToAPoolThatTakesThem) {
  // LeNet-5's front: conv 1 writes its planes for the ReLU + average pool after it (where its
  // AVX-512 kernels run), which pools them into channels last. The same weights, bit for bit, as
  // with an Opaque copy after conv 1, which keeps it channels last.
  auto lenet = [](nn::Sequential& n, bool opaque) {
    n.add("conv1", nn::Conv2d(1, 6, 5, 1, 2));
    if (opaque) n.add("copy", std::make_unique<test::Opaque>());
    n.add("relu1", nn::ReLU()).add("pool1", nn::AvgPool2d(2)).add("conv2", nn::Conv2d(6, 16, 5));
    n.add("relu2", nn::ReLU()).add("pool2", nn::AvgPool2d(2)).add("flatten", nn::Flatten());
    n.add("fc", nn::Linear(0, 10));
  };
  for (Bf16Mode m : {Bf16Mode::kEmulated, Bf16Mode::kNative}) {
    test::ModeScope mode(m);
    for (Precision p : {Precision::kFp32, Precision::kBf16})
      EXPECT_TRUE(test::sameBits(test::trainedWeights(p, {1, 28, 28}, false, lenet),
                                 test::trainedWeights(p, {1, 28, 28}, true, lenet)))
          << precisionName(p) << " " << bf16ModeName(m);
  }
  Layout seen = Layout::kNchw16c;
  auto probed = [&](nn::Sequential& n, bool) {
    n.add("conv1", nn::Conv2d(1, 6, 5, 1, 2)).add("probe", std::make_unique<PlanesProbe>(&seen));
    n.add("flatten", nn::Flatten()).add("fc", nn::Linear(0, 10));
  };
  test::trainedWeights(Precision::kFp32, {1, 28, 28}, false, probed);
  EXPECT_EQ(seen, cpuHasAvx512() ? Layout::kNchw : Layout::kNhwc);
}

TEST(ConvOneChannel, AgreesWithIm2col) {
  Device dev;
  for (const Case& c : kCases) {
    const ConvGeom g = geom(c);
    const std::size_t xs = static_cast<std::size_t>(g.n) * g.h * g.w,
                      ys = static_cast<std::size_t>(g.n) * g.oh() * g.ow() * g.oc,
                      ws = static_cast<std::size_t>(g.oc) * g.kh * g.kw;
    Vec x = test::pattern(xs, 6), w = test::pattern(ws, 7), b = test::pattern(g.oc, 8), dy = test::pattern(ys, 9),
        dw0(ws, 0.f);
    const Passes got = run(dev, g, x, w, b, dy, true, dw0);
    const Passes want = [&] {
      test::ConvBackendScope im2col(ConvBackend::kIm2col);
      return run(dev, g, x, w, b, dy, true, dw0, true);
    }();
    golden::expectClose("y", got.y.data(), want.y, 1e-5, 1e-5);
    golden::expectClose("dw", got.dw.data(), want.dw, 1e-5, 1e-5);
    golden::expectClose("db", got.db.data(), want.db, 1e-5, 1e-5);
  }
}

TEST(ConvOneChannel, EmulatedBf16IsFp32OnRoundedOperands) {
  // x, w and dy rounded as the kernels build their rows, or told they are rounded already.
  const ConvGeom g = geom(kCases[0]);
  const std::size_t xs = static_cast<std::size_t>(g.n) * g.h * g.w,
                    ys = static_cast<std::size_t>(g.n) * g.oh() * g.ow() * g.oc,
                    ws = static_cast<std::size_t>(g.oc) * g.kh * g.kw;
  Vec x = test::pattern(xs, 10), w = test::pattern(ws, 11), b = test::pattern(g.oc, 12), dy = test::pattern(ys, 13),
      dw0(ws, 0.f);
  Vec rx = x, rw = w, rdy = dy;
  roundToBf16(rx.data(), rx.data(), rx.size());
  roundToBf16(rw.data(), rw.data(), rw.size());
  roundToBf16(rdy.data(), rdy.data(), rdy.size());
  test::ModeScope mode(Bf16Mode::kEmulated);
  Device fp32, emulated(golden::bf16Options());
  const Passes want = run(fp32, g, rx, rw, b, rdy, true, dw0);
  ConvGeom flagged = g;
  flagged.xRounded = flagged.wRounded = flagged.dyRounded = true;
  for (bool portable : {false, true}) {  // x rounded as each image is copied into its padding
    detail::oneChannelPortableSlot() = portable;
    const Passes raw = run(emulated, g, x, w, b, dy, true, dw0);
    const Passes told = run(emulated, flagged, rx, rw, b, rdy, true, dw0);
    detail::oneChannelPortableSlot() = false;
    for (const Passes* p : {&raw, &told}) {
      EXPECT_EQ(p->y, want.y) << (portable ? "portable" : "vector");
      EXPECT_EQ(p->dw, want.dw) << (portable ? "portable" : "vector");
      EXPECT_EQ(p->db, want.db) << (portable ? "portable" : "vector");
    }
  }
}

}  // namespace
}  // namespace xs::engine
