// synthetic.hpp: a deterministic, learnable synthetic dataset. Each class has a smooth random
// template (a 4x4 grid of intensities bilinearly upsampled); each sample is its class template
// plus Gaussian noise, quantised to uint8. Everything is a function of the seed.
#pragma once

#include <cstdint>

#include "xspawn/data/dataset.hpp"

namespace xs::data {

struct SyntheticConfig {
  std::int64_t trainCount = 6000;
  std::int64_t testCount = 1000;
  int channels = 1;
  int height = 28;
  int width = 28;
  int numClasses = 10;
  float noise = 0.2f;  // standard deviation of the noise, in [0, 1] intensity units
  std::uint64_t seed = 1234;
};

// Throws UsageError on non-positive sizes or a negative noise level.
Dataset makeSynthetic(const SyntheticConfig& config, Split split);

}  // namespace xs::data
