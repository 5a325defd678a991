// fashion_mnist_test.cpp: the real Fashion-MNIST from Debian's dataset-fashion-mnist package,
// when installed.
#include <gtest/gtest.h>

#include <algorithm>

#include "xspawn/data/catalog.hpp"

namespace xs::data {
namespace {

TEST(FashionMnist, LoadsTheSystemCopy) {
  const DefaultDataset choice = resolveDefaultDataset();
  if (choice.spec.name != "fashion-mnist") {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistSystemDir
                 << " (apt-get install dataset-fashion-mnist)";
  }
  for (Split split : {Split::kTrain, Split::kTest}) {
    const Dataset d = loadDataset(choice.spec, split);
    EXPECT_EQ(d.size(), split == Split::kTrain ? 60000 : 10000);
    EXPECT_EQ(d.height, 28);
    EXPECT_EQ(d.width, 28);
    EXPECT_EQ(d.channels, 1);
    const auto [lo, hi] = std::minmax_element(d.labels.begin(), d.labels.end());
    EXPECT_EQ(*lo, 0);
    EXPECT_EQ(*hi, 9);
    std::vector<int> counts(10, 0);
    for (int label : d.labels) counts[label]++;
    for (int c : counts) EXPECT_EQ(c, d.size() / 10);  // Fashion-MNIST is balanced
    if (split == Split::kTrain) {
      const ChannelStats stats = computeChannelStats(d);  // the commonly quoted 0.2860 / 0.3530
      EXPECT_NEAR(stats.mean[0], 0.2860f, 5e-4);
      EXPECT_NEAR(stats.std[0], 0.3530f, 5e-4);
    }
  }
}

}  // namespace
}  // namespace xs::data
