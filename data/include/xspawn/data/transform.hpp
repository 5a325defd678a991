// transform.hpp: per-image transforms as torchvision applies them, on float32 CHW images:
//   to float [0,1] -> bilinear resize -> gray to RGB -> random crop with zero padding
//   -> random horizontal flip -> per-channel normalisation.
// Resize matches torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
// antialias=False), i.e. torchvision Resize on float tensors with antialias=False.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "xspawn/data/rng.hpp"

namespace xs::data {

// ImageNet statistics, as used by torchvision's pretrained models.
inline const std::vector<float> kImagenetMean = {0.485f, 0.456f, 0.406f};
inline const std::vector<float> kImagenetStd = {0.229f, 0.224f, 0.225f};

// ---- primitives (exposed for tests and custom pipelines) ----
// dst[i] = src[i] / 255
void toFloat(const std::uint8_t* src, std::size_t n, float* dst);
// src [c, h, w] -> dst [c, outH, outW], bilinear, align_corners=False, no antialiasing.
void resizeBilinear(const float* src, int c, int h, int w, float* dst, int outH, int outW);
// src [1, h, w] -> dst [3, h, w] (the channel repeated).
void grayToRgb(const float* src, int h, int w, float* dst);
// Window [top, top+outH) x [left, left+outW) of src zero-padded by `padding` on every side
// (coordinates in the padded image): src [c, h, w] -> dst [c, outH, outW].
void padCrop(const float* src, int c, int h, int w, int padding, int top, int left, float* dst,
             int outH, int outW);
// In place, mirror every row.
void flipHorizontal(float* data, int c, int h, int w);
// In place, x = (x - mean[ch]) / std[ch].
void normalize(float* data, int c, int h, int w, const float* mean, const float* std);

struct TransformConfig {
  int resize = 0;             // square output side of the bilinear resize; 0 keeps the size
  bool toRgb = false;         // repeat a single channel three times
  int crop = 0;               // random crop side (square); 0 = no random crop
  int cropPadding = 0;        // zero padding on every side before the random crop
  bool horizontalFlip = false;  // flip with probability 0.5
  std::vector<float> mean;    // per output channel; empty = no normalisation
  std::vector<float> std;     // same length as mean, all > 0
};

// A validated pipeline for images of a fixed input shape. apply() is const and thread-safe.
class Transform {
 public:
  // Throws UsageError when the settings do not fit the input shape.
  Transform(const TransformConfig& config, int channels, int height, int width);

  int inChannels() const { return inC_; }
  int inHeight() const { return inH_; }
  int inWidth() const { return inW_; }
  int outChannels() const { return outC_; }
  int outHeight() const { return outH_; }
  int outWidth() const { return outW_; }
  std::size_t outSize() const { return static_cast<std::size_t>(outC_) * outH_ * outW_; }
  const TransformConfig& config() const { return config_; }

  // src: uint8 [inC, inH, inW] -> dst: float [outC, outH, outW]. Random choices come from rng.
  void apply(const std::uint8_t* src, float* dst, SampleRng& rng) const;

 private:
  TransformConfig config_;
  int inC_, inH_, inW_;
  int sizeH_, sizeW_;  // after resize
  int outC_, outH_, outW_;
};

}  // namespace xs::data
