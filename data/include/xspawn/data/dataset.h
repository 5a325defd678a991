// dataset.h: an in-memory image classification dataset: uint8 pixels [N, C, H, W] + int32 labels.
// Readers (IDX, CIFAR-10) and the synthetic generator all produce this; transforms turn one
// image into float32 CHW.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xs::data {

enum class Split { kTrain, kTest };

const char* splitName(Split split);  // "train" / "test"

struct Dataset {
  std::string name;  // "fashion-mnist", "mnist", "cifar10", "synthetic"
  Split split = Split::kTrain;
  int channels = 0;
  int height = 0;
  int width = 0;
  int numClasses = 0;
  std::vector<std::uint8_t> pixels;  // [N, C, H, W]
  std::vector<std::int32_t> labels;  // [N], each in [0, numClasses)

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  std::int64_t imageSize() const { return std::int64_t{channels} * height * width; }  // C*H*W
  const std::uint8_t* image(std::int64_t i) const { return pixels.data() + i * imageSize(); }
};

// One line for logs, e.g. "fashion-mnist train: 60000 images of 1x28x28, 10 classes".
std::string describe(const Dataset& dataset);

// Per-channel mean and standard deviation of the pixels in [0, 1] (for normalisation), e.g.
// about 0.2860 / 0.3530 for the Fashion-MNIST training set.
struct ChannelStats {
  std::vector<float> mean;
  std::vector<float> std;
};
ChannelStats computeChannelStats(const Dataset& dataset);

}  // namespace xs::data
