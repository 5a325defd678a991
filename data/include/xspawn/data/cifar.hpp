// cifar.hpp: reader for the CIFAR-10 binary version. Each record is 1 label byte (0..9) then
// 3072 pixel bytes (1024 red, 1024 green, 1024 blue, rows of 32). Train = data_batch_1..5.bin,
// test = test_batch.bin, found in DIR or DIR/cifar-10-batches-bin.
#pragma once

#include <filesystem>

#include "xspawn/data/dataset.hpp"

namespace xs::data {

inline constexpr int kCifarRecordBytes = 1 + 3 * 32 * 32;

// Appends the records of one batch file to `out` (which must be 3x32x32, 10 classes).
// Throws FileNotFoundError, TruncatedError (not a whole number of records), LabelRangeError.
void readCifarBatch(const std::filesystem::path& path, Dataset& out);

// The directory holding the batch files: dir itself or dir/cifar-10-batches-bin.
std::filesystem::path findCifarDir(const std::filesystem::path& dir);

Dataset loadCifar10(const std::filesystem::path& dir, Split split);

}  // namespace xs::data
