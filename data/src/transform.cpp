// transform.cpp: float conversion, bilinear resize (align_corners=False), gray->RGB, padded random
// crop, horizontal flip, normalisation, and the Transform pipeline that chains them.
#include "xspawn/data/transform.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "xspawn/error.hpp"

namespace xs::data {
namespace {

// Source index pair and weight of the second one for each output coordinate, as ATen computes
// them for linear modes with align_corners=False: src = (dst + 0.5) * in/out - 0.5, clamped at 0.
struct Tap {
  int i0, i1;
  float w1;
};

std::vector<Tap> linearTaps(int in, int out) {
  std::vector<Tap> taps(out);
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int d = 0; d < out; ++d) {
    const float src = std::max(scale * (static_cast<float>(d) + 0.5f) - 0.5f, 0.0f);
    const int i0 = std::min(static_cast<int>(src), in - 1);
    const float w1 = std::clamp(src - static_cast<float>(i0), 0.0f, 1.0f);
    taps[d] = {i0, i0 < in - 1 ? i0 + 1 : i0, w1};
  }
  return taps;
}

}  // namespace

void toFloat(const std::uint8_t* src, std::size_t n, float* dst) {
  constexpr float kScale = 1.0f / 255.0f;
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * kScale;
}

void resizeBilinear(const float* src, int c, int h, int w, float* dst, int outH, int outW) {
  const std::vector<Tap> xs = linearTaps(w, outW);
  const std::vector<Tap> ys = linearTaps(h, outH);
  thread_local std::vector<float> rows;  // horizontal pass [h, outW]
  rows.resize(static_cast<std::size_t>(h) * outW);
  for (int ch = 0; ch < c; ++ch) {
    const float* plane = src + static_cast<std::size_t>(ch) * h * w;
    for (int y = 0; y < h; ++y) {
      const float* in = plane + static_cast<std::size_t>(y) * w;
      float* out = rows.data() + static_cast<std::size_t>(y) * outW;
      for (int x = 0; x < outW; ++x) {
        const Tap& t = xs[x];
        out[x] = (1.0f - t.w1) * in[t.i0] + t.w1 * in[t.i1];
      }
    }
    float* outPlane = dst + static_cast<std::size_t>(ch) * outH * outW;
    for (int y = 0; y < outH; ++y) {
      const Tap& t = ys[y];
      const float* r0 = rows.data() + static_cast<std::size_t>(t.i0) * outW;
      const float* r1 = rows.data() + static_cast<std::size_t>(t.i1) * outW;
      const float w0 = 1.0f - t.w1;
      float* out = outPlane + static_cast<std::size_t>(y) * outW;
      for (int x = 0; x < outW; ++x) out[x] = w0 * r0[x] + t.w1 * r1[x];
    }
  }
}

void grayToRgb(const float* src, int h, int w, float* dst) {
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  for (int ch = 0; ch < 3; ++ch) std::memcpy(dst + ch * plane, src, plane * sizeof(float));
}

void padCrop(const float* src, int c, int h, int w, int padding, int top, int left, float* dst,
             int outH, int outW) {
  for (int ch = 0; ch < c; ++ch) {
    const float* plane = src + static_cast<std::size_t>(ch) * h * w;
    for (int y = 0; y < outH; ++y) {
      float* out = dst + (static_cast<std::size_t>(ch) * outH + y) * outW;
      const int sy = top + y - padding;
      for (int x = 0; x < outW; ++x) {
        const int sx = left + x - padding;
        const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        out[x] = inside ? plane[static_cast<std::size_t>(sy) * w + sx] : 0.0f;
      }
    }
  }
}

void flipHorizontal(float* data, int c, int h, int w) {
  for (int row = 0; row < c * h; ++row) {
    float* r = data + static_cast<std::size_t>(row) * w;
    std::reverse(r, r + w);
  }
}

void normalize(float* data, int c, int h, int w, const float* mean, const float* std) {
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  for (int ch = 0; ch < c; ++ch) {
    const float m = mean[ch];
    const float inv = 1.0f / std[ch];
    float* p = data + ch * plane;
    for (std::size_t i = 0; i < plane; ++i) p[i] = (p[i] - m) * inv;
  }
}

Transform::Transform(const TransformConfig& config, int channels, int height, int width)
    : config_(config), inC_(channels), inH_(height), inW_(width) {
  const std::string shape =
      std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
  if (channels <= 0 || height <= 0 || width <= 0 || config.resize < 0 || config.crop < 0 ||
      config.cropPadding < 0) {
    XS_THROW(UsageError, "transform: invalid input shape " + shape + " or negative size (resize " +
                                   std::to_string(config.resize) + ", crop " +
                                   std::to_string(config.crop) + ", padding " +
                                   std::to_string(config.cropPadding) + ")");
  }
  sizeH_ = config.resize > 0 ? config.resize : height;
  sizeW_ = config.resize > 0 ? config.resize : width;
  if (config.toRgb && channels != 1 && channels != 3) {
    XS_THROW(UsageError, "transform: to-RGB needs 1 or 3 input channels, got " + shape);
  }
  outC_ = config.toRgb ? 3 : channels;
  outH_ = config.crop > 0 ? config.crop : sizeH_;
  outW_ = config.crop > 0 ? config.crop : sizeW_;
  if (config.crop > 0 && (config.crop > sizeH_ + 2 * config.cropPadding ||
                          config.crop > sizeW_ + 2 * config.cropPadding)) {
    XS_THROW(UsageError, "transform: crop " + std::to_string(config.crop) +
                                   " is larger than the padded image (" + std::to_string(sizeH_) +
                                   "x" + std::to_string(sizeW_) + " + 2x" +
                                   std::to_string(config.cropPadding) + ")");
  }
  if (config.mean.size() != config.std.size() ||
      (!config.mean.empty() && config.mean.size() != static_cast<std::size_t>(outC_))) {
    XS_THROW(UsageError, "transform: normalisation needs one mean and one std per output channel (" +
                                   std::to_string(outC_) + "), got " +
                                   std::to_string(config.mean.size()) + " means and " +
                                   std::to_string(config.std.size()) + " stds");
  }
  for (float s : config.std) {
    if (!(s > 0)) XS_THROW(UsageError, "transform: every std must be > 0, got " + std::to_string(s));
  }
}

// Fused: after float conversion and resize (on the input channels only), one pass writes each
// output pixel as crop (zero outside) -> flip -> channel repeat -> normalise. Same result as
// chaining the primitives above, with a single write of the (large) output.
void Transform::apply(const std::uint8_t* src, float* dst, SampleRng& rng) const {
  thread_local std::vector<float> a;
  thread_local std::vector<float> b;
  const std::size_t inSize = static_cast<std::size_t>(inC_) * inH_ * inW_;
  a.resize(inSize);
  toFloat(src, inSize, a.data());
  if (sizeH_ != inH_ || sizeW_ != inW_) {
    b.resize(static_cast<std::size_t>(inC_) * sizeH_ * sizeW_);
    resizeBilinear(a.data(), inC_, inH_, inW_, b.data(), sizeH_, sizeW_);
    std::swap(a, b);
  }
  int top = 0;
  int left = 0;
  const int p = config_.crop > 0 ? config_.cropPadding : 0;
  if (config_.crop > 0) {
    top = static_cast<int>(rng.below(static_cast<std::uint64_t>(sizeH_ + 2 * p - outH_ + 1)));
    left = static_cast<int>(rng.below(static_cast<std::uint64_t>(sizeW_ + 2 * p - outW_ + 1)));
  }
  const bool flip = config_.horizontalFlip && rng.coin();
  const std::size_t plane = static_cast<std::size_t>(sizeH_) * sizeW_;
  for (int oc = 0; oc < outC_; ++oc) {
    const float* in = a.data() + (inC_ == 1 ? 0 : static_cast<std::size_t>(oc) * plane);
    const float mean = config_.mean.empty() ? 0.0f : config_.mean[oc];
    const float inv = config_.mean.empty() ? 1.0f : 1.0f / config_.std[oc];
    for (int y = 0; y < outH_; ++y) {
      float* out = dst + (static_cast<std::size_t>(oc) * outH_ + y) * outW_;
      const int sy = top + y - p;
      if (sy < 0 || sy >= sizeH_) {
        std::fill(out, out + outW_, (0.0f - mean) * inv);
        continue;
      }
      // Output column x reads source column base + x (base + outW - 1 - x when flipped);
      // columns outside [0, sizeW) are padding. [x0, x1) is where the source is inside.
      const float* row = in + static_cast<std::size_t>(sy) * sizeW_;
      const int base = left - p;
      const int lo = flip ? base + outW_ - 1 - (sizeW_ - 1) : -base;
      const int x0 = std::clamp(lo, 0, outW_);
      const int x1 = std::clamp(lo + sizeW_, x0, outW_);
      const float pad = (0.0f - mean) * inv;
      std::fill(out, out + x0, pad);
      if (flip) {
        const float* r = row + base + outW_ - 1;
        for (int x = x0; x < x1; ++x) out[x] = (r[-x] - mean) * inv;
      } else {
        const float* r = row + base;
        for (int x = x0; x < x1; ++x) out[x] = (r[x] - mean) * inv;
      }
      std::fill(out + x1, out + outW_, pad);
    }
  }
}

}  // namespace xs::data
