// idx.hpp: readers for the IDX format of MNIST and Fashion-MNIST (gzip or raw).
//   images: magic 0x00000803, then count, rows, cols (big-endian uint32), then count*rows*cols bytes
//   labels: magic 0x00000801, then count, then count bytes
// File names: {train,t10k}-{images-idx3,labels-idx1}-ubyte, optionally with ".gz".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "xspawn/data/dataset.hpp"

namespace xs::data {

inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;  // IDX3, unsigned bytes
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;  // IDX1, unsigned bytes

struct IdxImages {
  std::int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<std::uint8_t> pixels;  // [count, rows, cols]
};

// One IDX3 image file. Throws FileNotFoundError, FormatError (bad magic, corrupt gzip),
// TruncatedError (size disagrees with the header).
IdxImages readIdxImages(const std::filesystem::path& path);
// One IDX1 label file; each label must be < numClasses (LabelRangeError otherwise).
std::vector<std::int32_t> readIdxLabels(const std::filesystem::path& path, int numClasses = 10);

// dir/<base> if it exists, else dir/<base>.gz; FileNotFoundError naming both otherwise.
std::filesystem::path findIdxFile(const std::filesystem::path& dir, const std::string& base);

// The train (60000) or test (10000, "t10k") split of an MNIST-layout directory, 10 classes.
// `name` is recorded in the dataset ("mnist" or "fashion-mnist").
Dataset loadIdxDataset(const std::filesystem::path& dir, Split split, const std::string& name);

}  // namespace xs::data
