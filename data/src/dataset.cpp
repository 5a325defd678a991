// dataset.cpp: channel statistics, dataset selection by name and the default (Fashion-MNIST or
// synthetic) choice.
#include <algorithm>
#include <cmath>
#include <string>

#include "file_bytes.hpp"
#include "xspawn/data/catalog.hpp"
#include "xspawn/data/cifar.hpp"
#include "xspawn/error.hpp"
#include "xspawn/data/idx.hpp"

namespace xs::data {
namespace {

std::string joinedNames() {
  std::string out;
  for (const std::string& n : datasetNames()) out += (out.empty() ? "" : "|") + n;
  return out;
}

}  // namespace

std::vector<std::uint8_t> pixelBuffer(std::size_t bytes) {
  std::vector<std::uint8_t> b;
  detail::resizeLarge(b, bytes);
  return b;
}

Dataset fromMemory(std::string name, Split split, int channels, int height, int width, int numClasses,
                   std::vector<std::uint8_t> pixels, std::vector<std::int32_t> labels) {
  XS_CHECK(channels > 0 && height > 0 && width > 0 && numClasses > 0, UsageError,
           "dataset '" + name + "': channels, height, width and classes must be positive, got " +
               std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width) + ", " +
               std::to_string(numClasses) + " classes");
  const std::size_t per = static_cast<std::size_t>(channels) * height * width;
  XS_CHECK(pixels.size() == per * labels.size(), UsageError,
           "dataset '" + name + "': " + std::to_string(pixels.size()) + " pixel values for " +
               std::to_string(labels.size()) + " labels of " + std::to_string(per) +
               "-value images: give count * channels * height * width pixels");
  for (std::size_t i = 0; i < labels.size(); ++i)
    XS_CHECK(labels[i] >= 0 && labels[i] < numClasses, UsageError,
             "dataset '" + name + "': label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                 " is outside 0.." + std::to_string(numClasses - 1) + ": fix the label or the number of classes");
  Dataset d;
  d.name = std::move(name);
  d.split = split;
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.numClasses = numClasses;
  d.pixels = std::move(pixels);
  d.labels = std::move(labels);
  return d;
}

Dataset fromFunction(std::string name, Split split, std::int64_t count, int channels, int height, int width,
                     int numClasses, const SampleFn& sample) {
  XS_CHECK(count >= 0 && sample, UsageError,
           "dataset '" + name + "': give a sample function and a non-negative count, got " + std::to_string(count));
  XS_CHECK(channels > 0 && height > 0 && width > 0, UsageError,
           "dataset '" + name + "': channels, height and width must be positive");
  const std::size_t per = static_cast<std::size_t>(channels) * height * width;
  std::vector<std::uint8_t> pixels = pixelBuffer(per * static_cast<std::size_t>(count));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) labels[i] = sample(i, pixels.data() + per * i);
  return fromMemory(std::move(name), split, channels, height, width, numClasses, std::move(pixels), std::move(labels));
}

ChannelStats computeChannelStats(const Dataset& dataset) {
  ChannelStats stats;
  const std::size_t plane = static_cast<std::size_t>(dataset.height) * dataset.width;
  for (int c = 0; c < dataset.channels; ++c) {
    std::uint64_t sum = 0;
    std::uint64_t squares = 0;  // exact: at most 255^2 per pixel
    for (std::int64_t i = 0; i < dataset.size(); ++i) {
      const std::uint8_t* p = dataset.image(i) + c * plane;
      for (std::size_t k = 0; k < plane; ++k) {
        sum += p[k];
        squares += std::uint64_t{p[k]} * p[k];
      }
    }
    const double n = static_cast<double>(plane) * static_cast<double>(dataset.size());
    const double mean = n > 0 ? static_cast<double>(sum) / n : 0.0;
    const double var = n > 0 ? static_cast<double>(squares) / n - mean * mean : 0.0;
    stats.mean.push_back(static_cast<float>(mean / 255.0));
    stats.std.push_back(static_cast<float>(std::sqrt(std::max(var, 0.0)) / 255.0));
  }
  return stats;
}

const char* splitName(Split split) { return split == Split::kTrain ? "train" : "test"; }

std::string describe(const Dataset& d) {
  return d.name + " " + splitName(d.split) + ": " + std::to_string(d.size()) + " images of " +
         std::to_string(d.channels) + "x" + std::to_string(d.height) + "x" +
         std::to_string(d.width) + ", " + std::to_string(d.numClasses) + " classes";
}

std::vector<std::string> datasetNames() { return {"fashion-mnist", "mnist", "cifar10", "synthetic"}; }

std::filesystem::path defaultDataDir(std::string_view name) {
  if (name == "fashion-mnist") return kFashionMnistSystemDir;
  return {};
}

Dataset loadDataset(const DatasetSpec& spec, Split split) {
  if (spec.name == "synthetic") return makeSynthetic(spec.synthetic, split);
  const bool idx = spec.name == "fashion-mnist" || spec.name == "mnist";
  if (!idx && spec.name != "cifar10") {
    XS_THROW(UsageError, "unknown dataset '" + spec.name + "'; choose one of " + joinedNames());
  }
  const std::filesystem::path dir = spec.dir.empty() ? defaultDataDir(spec.name) : spec.dir;
  if (dir.empty()) {
    XS_THROW(UsageError, "dataset '" + spec.name +
                                   "' has no default location; give its data directory");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    const std::string hint = spec.name == "fashion-mnist"
                                 ? "install it with `apt-get install dataset-fashion-mnist` or "
                                   "give another data directory"
                                 : "give the directory that holds the " + spec.name + " files";
    XS_THROW(FileNotFoundError, dir.string() + ": data directory of '" + spec.name +
                                         "' does not exist; " + hint);
  }
  return idx ? loadIdxDataset(dir, split, spec.name) : loadCifar10(dir, split);
}

DefaultDataset resolveDefaultDataset(const std::filesystem::path& fashionDir) {
  DefaultDataset out;
  bool present = true;
  for (const char* base : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    std::error_code ec;
    present = present && (std::filesystem::is_regular_file(fashionDir / base, ec) ||
                          std::filesystem::is_regular_file(fashionDir / (std::string(base) + ".gz"), ec));
  }
  if (present) {
    out.spec.name = "fashion-mnist";
    out.spec.dir = fashionDir;
  } else {
    out.spec.name = "synthetic";
    out.notice = "Fashion-MNIST not found in " + fashionDir.string() +
                 "; using the synthetic dataset (get the real one with "
                 "`apt-get install dataset-fashion-mnist`)";
  }
  return out;
}

}  // namespace xs::data
