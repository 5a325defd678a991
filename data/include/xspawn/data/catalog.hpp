// catalog.hpp: selecting a dataset by name (fashion-mnist | mnist | cifar10 | synthetic) and a data
// directory, and the default choice (Fashion-MNIST when installed, synthetic otherwise).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "xspawn/data/dataset.hpp"
#include "xspawn/data/synthetic.hpp"

namespace xs::data {

// Where Debian's dataset-fashion-mnist package installs the four .gz IDX files.
inline constexpr const char* kFashionMnistSystemDir = "/usr/share/datasets/fashion-mnist";

struct DatasetSpec {
  std::string name = "fashion-mnist";
  std::filesystem::path dir;  // empty: defaultDataDir(name)
  SyntheticConfig synthetic;  // used when name == "synthetic"
};

std::vector<std::string> datasetNames();  // the accepted names, in order

// The system directory of a dataset, or empty if it has none (mnist, cifar10, synthetic).
std::filesystem::path defaultDataDir(std::string_view name);

// Loads one split. Throws UsageError for an unknown name or a missing directory setting, and
// the reader errors (FileNotFoundError, FormatError, ...) for bad files.
Dataset loadDataset(const DatasetSpec& spec, Split split);

struct DefaultDataset {
  DatasetSpec spec;
  std::string notice;  // one line to show the user when falling back to synthetic, else empty
};

// Fashion-MNIST from `fashionDir` when its four files are there, else synthetic with a notice
// saying how to install the real one.
DefaultDataset resolveDefaultDataset(const std::filesystem::path& fashionDir = kFashionMnistSystemDir);

}  // namespace xs::data
