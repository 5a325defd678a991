// train_test_util.hpp: helpers of the trainer tests: running `xspawn` as a user would,
// temporary directories, small IDX datasets, reading the metrics file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xs::train::test {

struct CommandResult {
  int status = -1;
  std::string out, err;
};

// Runs `xspawn ARGS` (ARGS is shell text) with stdout and stderr captured.
CommandResult runXspawn(const std::string& args);

// A fresh empty directory under the system temp dir, named after the test.
std::filesystem::path freshDir(const std::string& name);

// Writes train/t10k IDX files (raw) of learnable 28x28 images: class k is a bright bar at a
// position depending on k, plus noise.
void writeIdxDataset(const std::filesystem::path& dir, int trainCount, int testCount);

// Writes CIFAR-10 binary batches (data_batch_1..5.bin with perBatch records each, test_batch.bin
// with testCount) of learnable 32x32 RGB images: the class sets the colour and the direction of
// stripes, with noise.
void writeCifarDataset(const std::filesystem::path& dir, int perBatch, int testCount);

// The lines of a JSON-lines metrics file whose "event" is `event`.
std::vector<nlohmann::json> metricLines(const std::filesystem::path& file, const std::string& event);

// The weights hash of the run's summary line in a metrics file ("" when there is none).
std::string summaryHash(const std::filesystem::path& metrics);

// Lines of a text.
std::vector<std::string> lines(const std::string& text);

}  // namespace xs::train::test
