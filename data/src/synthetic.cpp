// synthetic.cpp: class templates (smooth random fields) plus Gaussian noise, from a seed.
#include "xspawn/data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "xspawn/error.hpp"
#include "xspawn/data/rng.hpp"
#include "xspawn/data/transform.hpp"

namespace xs::data {
namespace {

constexpr int kGrid = 4;                    // template resolution before upsampling
constexpr std::uint64_t kTemplateStream = 0x7e3;
constexpr std::uint64_t kSampleStream = 0x5a3;

// Templates [numClasses, C, H, W] in [0, 1].
std::vector<float> classTemplates(const SyntheticConfig& c) {
  const std::size_t plane = static_cast<std::size_t>(c.height) * c.width;
  std::vector<float> templates(static_cast<std::size_t>(c.numClasses) * c.channels * plane);
  std::vector<float> grid(static_cast<std::size_t>(c.channels) * kGrid * kGrid);
  for (int k = 0; k < c.numClasses; ++k) {
    SampleRng rng(c.seed, kTemplateStream, static_cast<std::uint64_t>(k));
    for (float& g : grid) g = static_cast<float>(rng.uniform());
    resizeBilinear(grid.data(), c.channels, kGrid, kGrid,
                   templates.data() + static_cast<std::size_t>(k) * c.channels * plane, c.height,
                   c.width);
  }
  return templates;
}

}  // namespace

Dataset makeSynthetic(const SyntheticConfig& config, Split split) {
  const std::int64_t count = split == Split::kTrain ? config.trainCount : config.testCount;
  if (count <= 0 || config.channels <= 0 || config.height <= 0 || config.width <= 0 ||
      config.numClasses < 2 || config.numClasses > 256 || !(config.noise >= 0)) {
    XS_THROW(UsageError,
                  "synthetic dataset: invalid settings (count " + std::to_string(count) +
                      ", shape " + std::to_string(config.channels) + "x" +
                      std::to_string(config.height) + "x" + std::to_string(config.width) +
                      ", classes " + std::to_string(config.numClasses) + ", noise " +
                      std::to_string(config.noise) +
                      "); sizes must be positive, classes in 2..256, noise >= 0");
  }
  const std::vector<float> templates = classTemplates(config);
  Dataset ds;
  ds.name = "synthetic";
  ds.split = split;
  ds.channels = config.channels;
  ds.height = config.height;
  ds.width = config.width;
  ds.numClasses = config.numClasses;
  const std::size_t image = static_cast<std::size_t>(ds.imageSize());
  ds.pixels = pixelBuffer(static_cast<std::size_t>(count) * image);
  ds.labels.resize(static_cast<std::size_t>(count));
  const std::uint64_t stream = kSampleStream + (split == Split::kTrain ? 0 : 1);
  for (std::int64_t i = 0; i < count; ++i) {
    SampleRng rng(config.seed, stream, static_cast<std::uint64_t>(i));
    const int label = static_cast<int>(rng.below(static_cast<std::uint64_t>(config.numClasses)));
    ds.labels[i] = label;
    const float* t = templates.data() + static_cast<std::size_t>(label) * image;
    std::uint8_t* out = ds.pixels.data() + static_cast<std::size_t>(i) * image;
    for (std::size_t p = 0; p < image; ++p) {
      const double v = t[p] + config.noise * rng.normal();
      out[p] = static_cast<std::uint8_t>(std::lround(std::clamp(v, 0.0, 1.0) * 255.0));
    }
  }
  return ds;
}

}  // namespace xs::data
