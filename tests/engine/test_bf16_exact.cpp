// test_bf16_exact.cpp: the bf16 hand-overs that skip a conversion give the very bits the
// conversion would: a convolution's kept bf16 input, batch-norm's bf16 input gradient.
#include <gtest/gtest.h>

#include <cstdint>

#include "golden_util.hpp"
#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine {
namespace {
using namespace golden;

TEST(Bf16Exact, ConvolutionReusesItsConvertedInputExactly) {
  // keepSrc: backward reads forward's bf16 copy of x instead of converting x again; same bits.
  Device dev(bf16Options());
  const json& c = fixture("ops.json")["conv2d_1"];
  auto xs = dims(c["in0_shape"]), ws = dims(c["in1_shape"]);
  Vec x = vec(c["in0"]), w = vec(c["in1"]), b = vec(c["in2"]), dy = vec(c["dy"]);
  std::vector<Vec> dws;
  for (bool keep : {false, true})
    for (bool nhwc : {false, true}) {
      ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], c["params"]["stride"], c["params"]["pad"]};
      g.keepSrc = keep;
      g.srcNhwc = g.dstNhwc = nhwc;  // the data is just read in the other layout
      Vec y(dy.size()), dx(x.size()), dw(w.size(), 0.f), db(b.size(), 0.f);
      conv2dForward(dev, y.data(), x.data(), w.data(), b.data(), g);
      conv2dBackward(dev, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), g);
      dws.push_back(dw);
    }
  EXPECT_EQ(dws[0], dws[2]);
  EXPECT_EQ(dws[1], dws[3]);
}

TEST(Bf16Exact, GradientHandOverIsExact) {
  // Batch-norm writing dx as bf16 gives the bits a convolution would round its dy to, and a
  // convolution reading bf16 dy computes what it computes from the float32 dy.
  const json& c = fixture("ops.json")["batchnorm_train"];
  auto s = dims(c["in0_shape"]);
  BatchNormArgs a{s[0], s[1], s[2] * s[3]};
  a.nhwc = true;
  Vec x = vec(c["in0"]), g = vec(c["in1"]), b = vec(c["in2"]), dy = vec(c["dy"]);
  Vec rm(a.c, 0.f), rv(a.c, 1.f), y(x.size()), mean(a.c), invstd(a.c), dg(a.c, 0.f), db(a.c, 0.f);
  batchNorm2dForwardTrain(y.data(), mean.data(), invstd.data(), rm.data(), rv.data(), x.data(), g.data(), b.data(), a);
  Vec dx(x.size()), packed(x.size());
  batchNorm2dBackward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), invstd.data(), g.data(), true, a);
  a.dxBf16 = true;
  batchNorm2dBackward(packed.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), invstd.data(), g.data(),
                      true, a);
  const auto* bits = reinterpret_cast<const std::uint16_t*>(packed.data());
  for (std::size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(bits[i], toBf16Bits(dx[i])) << i;

  Device dev(bf16Options());
  const json& k = fixture("ops.json")["conv2d_2"];
  auto xs = dims(k["in0_shape"]), ws = dims(k["in1_shape"]);
  Vec cx = vec(k["in0"]), w = vec(k["in1"]), cb = vec(k["in2"]), cdy = vec(k["dy"]);
  std::vector<std::uint16_t> dyBits(cdy.size());
  for (std::size_t i = 0; i < cdy.size(); ++i) dyBits[i] = toBf16Bits(cdy[i]);
  // oneDNN's kernels; (native bf16) the weight gradient alone as a GEMM; the GEMM path
  for (int pixels : {0, 4, 1 << 20}) {
    setNhwcGemmMaxPixels(pixels);
    std::vector<Vec> outs;
    for (bool packedDy : {false, true}) {
      ConvGeom cg{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], k["params"]["stride"], k["params"]["pad"]};
      cg.srcNhwc = cg.dstNhwc = true;
      cg.dyBf16 = packedDy;
      Vec cdx(cx.size()), dw(w.size(), 0.f), dbias(cb.size(), 0.f);
      conv2dBackward(dev, cdx.data(), dw.data(), dbias.data(),
                     packedDy ? reinterpret_cast<const float*>(dyBits.data()) : cdy.data(), cx.data(), w.data(), cg);
      cdx.insert(cdx.end(), dw.begin(), dw.end());
      cdx.insert(cdx.end(), dbias.begin(), dbias.end());
      outs.push_back(cdx);
    }
    EXPECT_EQ(outs[0], outs[1]) << "pixels " << pixels;
  }
  setNhwcGemmMaxPixels(16);
}

}  // namespace
}  // namespace xs::engine
