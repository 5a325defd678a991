// test_util.hpp: shared pieces of the engine tests: deterministic data and finite-difference checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gemm.hpp"
#include "golden_util.hpp"
#include "ops.hpp"
#include "rng.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/error.hpp"
#include "xspawn/models.hpp"
#include "xspawn/nn.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine::test {

// Sets the process-wide bf16 mode for one scope and puts the previous one back.
class ModeScope {
 public:
  explicit ModeScope(Bf16Mode m) : saved_(bf16Mode()) { setBf16Mode(m); }
  ~ModeScope() { setBf16Mode(saved_); }

 private:
  Bf16Mode saved_;
};

// A fixture for the kernels on vdpbf16ps in native bf16 (dpbf16Kernels): skipped where this CPU
// does not run them; dev_ a bf16 device.
class NativeBf16Kernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dpbf16Kernels()) GTEST_SKIP() << "this CPU does not run the vdpbf16ps kernels (dpbf16Kernels)";
  }
  ModeScope mode_{Bf16Mode::kNative};
  Device dev_{golden::bf16Options()};
};

// The same for the convolution backend.
class ConvBackendScope {
 public:
  explicit ConvBackendScope(ConvBackend b) : saved_(convBackend()) { setConvBackend(b); }
  ~ConvBackendScope() { setConvBackend(saved_); }

 private:
  ConvBackend saved_;
};

// A square-kernel, stride-1, channels-last convolution (the narrow convolutions' tests) and the
// sizes of its x, y and w.
struct ConvCase {
  int n, c, h, w, oc, k, pad;
};
inline ConvGeom nhwcGeom(const ConvCase& c) {
  ConvGeom g{c.n, c.c, c.h, c.w, c.oc, c.k, c.k, 1, c.pad};
  g.srcNhwc = g.dstNhwc = true;
  return g;
}
inline std::size_t xCount(const ConvGeom& g) { return static_cast<std::size_t>(g.n) * g.h * g.w * g.c; }
inline std::size_t yCount(const ConvGeom& g) { return static_cast<std::size_t>(g.n) * g.oh() * g.ow() * g.oc; }
inline std::size_t wCount(const ConvGeom& g) { return static_cast<std::size_t>(g.oc) * g.c * g.kh * g.kw; }

// The pixels of a row in groups of P, ceil(ow / P) apart: f(ox) in the order the narrow input
// gradient's kernels add them.
template <class F>
void eachGroupedPixel(int ow, int P, F f) {
  const int step = (ow + P - 1) / P;
  for (int gi = 0; gi < step; ++gi)
    for (int k = 0; k < P; ++k)
      if (gi + k * step < ow) f(gi + k * step);
}

// dx [n][h][w][c] of one input gradient, each image summed by add(n, dxp) into its padded dxp
// [h + 2 pad][w + 2 pad][c] (zeros at first).
template <class Add>
std::vector<float> paddedDx(const ConvGeom& g, Add add) {
  const int hp = g.h + 2 * g.pad, wp = g.w + 2 * g.pad;
  std::vector<float> dx(xCount(g));
  for (int n = 0; n < g.n; ++n) {
    std::vector<float> dxp(static_cast<std::size_t>(hp) * wp * g.c, 0.f);
    add(n, dxp);
    for (int iy = 0; iy < g.h; ++iy)
      for (int ix = 0; ix < g.w; ++ix)
        for (int ci = 0; ci < g.c; ++ci)
          dx[((static_cast<std::size_t>(n) * g.h + iy) * g.w + ix) * g.c + ci] =
              dxp[(static_cast<std::size_t>(iy + g.pad) * wp + ix + g.pad) * g.c + ci];
  }
  return dx;
}

// The narrow input gradient's order (conv_narrow_data.cpp): per image, output row and group of
// pixels (2 or 4, ceil(ow / P) apart), each pixel's run value run(n, oy, ox, ky, kx, ci) added
// into the padded dx.
template <class Run>
std::vector<float> narrowDataOrder(const ConvGeom& g, Run run) {
  const int vk = (g.kw * g.c + 15) / 16, P = g.kh * vk <= 7 ? 4 : 2, wp = g.w + 2 * g.pad;
  return paddedDx(g, [&](int n, std::vector<float>& dxp) {
    for (int oy = 0; oy < g.oh(); ++oy)
      eachGroupedPixel(g.ow(), P, [&](int ox) {
        for (int ky = 0; ky < g.kh; ++ky)
          for (int kx = 0; kx < g.kw; ++kx)
            for (int ci = 0; ci < g.c; ++ci)
              dxp[(static_cast<std::size_t>(oy + ky) * wp + ox + kx) * g.c + ci] += run(n, oy, ox, ky, kx, ci);
      });
  });
}

// The same in the native bf16 input gradient's order (conv_narrow_data.cpp's columns): each
// padded row iy, pixels in groups of P (gi, gi + step), each target's whole run
// run(n, iy, ox, kx, ci) added once.
template <class Run>
std::vector<float> narrowDataColumns(const ConvGeom& g, Run run) {
  const int ow = g.ow(), vk = (g.kw * g.c + 15) / 16, most = std::min(12, std::max(1, 24 / vk));
  const int P = ow >= 2 && (ow + 1) / 2 >= g.kw && most >= 2 ? 2 : 1, wp = g.w + 2 * g.pad;
  return paddedDx(g, [&](int n, std::vector<float>& dxp) {
    for (int iy = 0; iy < g.h + 2 * g.pad; ++iy)
      eachGroupedPixel(ow, P, [&](int ox) {
        for (int kx = 0; kx < g.kw; ++kx)
          for (int ci = 0; ci < g.c; ++ci)
            dxp[(static_cast<std::size_t>(iy) * wp + ox + kx) * g.c + ci] += run(n, iy, ox, kx, ci);
      });
  });
}

// y [n][oh][ow][oc] of a reference forward, each value(n, oy, ox, o).
template <class Value>
std::vector<float> eachOutput(const ConvGeom& g, Value value) {
  std::vector<float> y(yCount(g));
  for (int n = 0; n < g.n; ++n)
    for (int oy = 0; oy < g.oh(); ++oy)
      for (int ox = 0; ox < g.ow(); ++ox)
        for (int o = 0; o < g.oc; ++o)
          y[((static_cast<std::size_t>(n) * g.oh() + oy) * g.ow() + ox) * g.oc + o] = value(n, oy, ox, o);
  return y;
}

// A weight pass's gradients: dw [oc][c][kh][kw] and db [oc].
struct WeightGrads {
  std::vector<float> dw, db;
};

// Reference weight and bias gradients: r plus each weight's sum(o, ci, ky, kx) and each output's
// bias(o).
template <class Sum, class Bias>
WeightGrads weightSums(const ConvGeom& g, WeightGrads r, Sum sum, Bias bias) {
  for (int o = 0; o < g.oc; ++o) {
    for (int ci = 0; ci < g.c; ++ci)
      for (int ky = 0; ky < g.kh; ++ky)
        for (int kx = 0; kx < g.kw; ++kx)
          r.dw[((static_cast<std::size_t>(o) * g.c + ci) * g.kh + ky) * g.kw + kx] += sum(o, ci, ky, kx);
    r.db[o] += bias(o);
  }
  return r;
}

inline std::vector<float> pattern(std::size_t n, std::uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
  fillPattern(v.data(), n, seed, scale);
  return v;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks grad (the analytic d<forward(), r>/d var) against central differences at up to
// `samples` evenly spread entries of var. forward recomputes the output from current values.
inline void expectGradient(const std::string& what, std::vector<float>& var,
                           const std::vector<float>& grad, const std::vector<float>& r,
                           const std::function<std::vector<float>()>& forward, float h = 1e-2f,
                           double tol = 2e-2, std::size_t samples = 48) {
  ASSERT_EQ(var.size(), grad.size()) << what;
  std::size_t stride = std::max<std::size_t>(1, var.size() / samples);
  for (std::size_t i = 0; i < var.size(); i += stride) {
    float keep = var[i];
    var[i] = keep + h;
    double up = dot(forward(), r);
    var[i] = keep - h;
    double down = dot(forward(), r);
    var[i] = keep;
    double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(grad[i], numeric, tol * (1.0 + std::fabs(numeric)))
        << what << " entry " << i << " of " << var.size();
  }
}

// 3 steps of SGD with momentum at batch 8 on fixed data (the model's input shape, 10 classes).
inline void trainThreeSteps(Model& model, Device& dev) {
  auto opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.05f, 0.9f});
  auto x = pattern(8 * model.inputShape().numel(), 13);
  std::vector<std::int32_t> y(8);
  for (int i = 0; i < 8; ++i) y[i] = (i * 3) % 10;
  for (int s = 0; s < 3; ++s) {
    model.trainStep(x.data(), y.data(), 8);
    opt->step();
  }
}

// A copy of its input and gradient in its own tensors, with none of their flags: the modules
// around it round and lay out as if alone.
class Opaque : public nn::Module {
 public:
  Shape build(const Shape& in, const std::string&, nn::BuildInfo&) override { return in; }
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override { return copy(y_, x, ctx); }
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override { return copy(dx_, dy, ctx); }

 private:
  static const Tensor& copy(Tensor& to, const Tensor& from, nn::Context& ctx) {
    to.ensure(ctx.dev, from.shape(), "copy");
    to.setLayout(from.layout());
    std::memcpy(to.data(), from.data(), from.numel() * sizeof(float));
    return to;
  }
};

// A fused pool's forward asked of a convolution whose kernels cannot run it (on `dev`): a
// ShapeError that names `ask`, the function to ask first.
inline void expectFusedPoolRefused(Device& dev, const ConvGeom& g, const NhwcPool& pool, const char* ask) {
  const std::vector<float> x = pattern(xCount(g), 1), w = pattern(wCount(g), 2);
  ConvGeom fused = g;
  fused.nhwcPool = &pool;
  try {
    conv2dForward(dev, nullptr, x.data(), w.data(), nullptr, fused);
    ADD_FAILURE() << "no error";
  } catch (const xs::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(ask), std::string::npos) << e.what();
  }
}

// The same floats, bit for bit (-0 and NaN payloads included).
inline bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The weights after 3 SGD steps (trainThreeSteps) of a network from build(net, opaque).
template <class Build>
std::vector<float> trainedWeights(Precision p, Shape input, bool opaque, Build build) {
  auto net = std::make_unique<nn::Sequential>();
  build(*net, opaque);
  Device dev(p == Precision::kBf16 ? golden::bf16Options() : DeviceOptions{});
  Model model(dev, {std::move(net), input, 10, "net"}, 5);
  trainThreeSteps(model, dev);
  return {model.params().values(), model.params().values() + model.params().size()};
}

// A built-in network by configuration, on dev, initialised from its seed.
inline Model build(Device& dev, const models::ModelConfig& c) { return Model(dev, models::network(c), c.seed); }

}  // namespace xs::engine::test
