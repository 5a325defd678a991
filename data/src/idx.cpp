// idx.cpp: IDX (MNIST / Fashion-MNIST) image and label files, gzip or raw.
#include "xspawn/data/idx.hpp"

#include <cstdio>
#include <string>

#include "file_bytes.hpp"
#include "xspawn/error.hpp"

namespace xs::data {
namespace {

constexpr std::size_t kImagesHeader = 16;
constexpr std::size_t kLabelsHeader = 8;
constexpr std::uint32_t kMaxSide = 1 << 16;
constexpr const char* kAgain = "download or copy the file again";

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// Checks the magic number and that the header fits; returns the decompressed bytes.
std::vector<std::uint8_t> readIdx(const std::filesystem::path& path, std::uint32_t magic,
                                  std::size_t header, const char* what) {
  std::vector<std::uint8_t> bytes = detail::readFileBytes(path);
  if (bytes.size() >= 4) {  // the magic first: a wrong file is more telling than a short one
    const std::uint32_t found = detail::readBigEndian32(bytes.data());
    if (found != magic) {
      XS_THROW(FormatError, path.string() + ": bad magic " + hex32(found) + ", expected " +
                                     hex32(magic) + " (" + what +
                                     " unsigned bytes); is this the right file?");
    }
  }
  if (bytes.size() < header) {
    XS_THROW(TruncatedError, path.string() + ": truncated: " + std::to_string(bytes.size()) +
                                      " bytes, shorter than the " + std::to_string(header) +
                                      "-byte " + what + " header; " + kAgain);
  }
  return bytes;
}

}  // namespace

IdxImages readIdxImages(const std::filesystem::path& path) {
  std::vector<std::uint8_t> bytes = readIdx(path, kIdxImagesMagic, kImagesHeader, "IDX3");
  const std::uint32_t count = detail::readBigEndian32(bytes.data() + 4);
  const std::uint32_t rows = detail::readBigEndian32(bytes.data() + 8);
  const std::uint32_t cols = detail::readBigEndian32(bytes.data() + 12);
  if (rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide) {
    XS_THROW(FormatError, path.string() + ": implausible image size " + std::to_string(rows) +
                                   "x" + std::to_string(cols) + " in the IDX3 header; " + kAgain);
  }
  const std::uint64_t expected = kImagesHeader + std::uint64_t{count} * rows * cols;
  if (bytes.size() != expected) {
    XS_THROW(TruncatedError,
                  path.string() + ": " + (bytes.size() < expected ? "truncated" : "trailing data") +
                      ": header says " + std::to_string(count) + " images of " +
                      std::to_string(rows) + "x" + std::to_string(cols) + " (" +
                      std::to_string(expected) + " bytes) but the file holds " +
                      std::to_string(bytes.size()) + "; " + kAgain);
  }
  IdxImages images;
  images.count = count;
  images.rows = static_cast<int>(rows);
  images.cols = static_cast<int>(cols);
  // The header dropped in place: a copy would fault in and fill another 47 MB per rank.
  bytes.erase(bytes.begin(), bytes.begin() + kImagesHeader);
  images.pixels = std::move(bytes);
  return images;
}

std::vector<std::int32_t> readIdxLabels(const std::filesystem::path& path, int numClasses) {
  std::vector<std::uint8_t> bytes = readIdx(path, kIdxLabelsMagic, kLabelsHeader, "IDX1");
  const std::uint32_t count = detail::readBigEndian32(bytes.data() + 4);
  const std::uint64_t expected = kLabelsHeader + std::uint64_t{count};
  if (bytes.size() != expected) {
    XS_THROW(TruncatedError,
                  path.string() + ": " + (bytes.size() < expected ? "truncated" : "trailing data") +
                      ": header says " + std::to_string(count) + " labels (" +
                      std::to_string(expected) + " bytes) but the file holds " +
                      std::to_string(bytes.size()) + "; " + kAgain);
  }
  std::vector<std::int32_t> labels(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const int label = bytes[kLabelsHeader + i];
    if (label >= numClasses) {
      XS_THROW(LabelRangeError, path.string() + ": label " + std::to_string(label) +
                                         " at index " + std::to_string(i) +
                                         " is out of range, expected 0.." +
                                         std::to_string(numClasses - 1));
    }
    labels[i] = label;
  }
  return labels;
}

std::filesystem::path findIdxFile(const std::filesystem::path& dir, const std::string& base) {
  std::error_code ec;
  const std::filesystem::path raw = dir / base;
  if (std::filesystem::is_regular_file(raw, ec)) return raw;
  const std::filesystem::path gz = dir / (base + ".gz");
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  XS_THROW(FileNotFoundError,
                raw.string() + "[.gz]: not found (neither " + base + " nor " + base +
                    ".gz is in " + dir.string() +
                    "); point the data dir at an MNIST-layout directory");
}

Dataset loadIdxDataset(const std::filesystem::path& dir, Split split, const std::string& name) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::filesystem::path imagesPath = findIdxFile(dir, prefix + "-images-idx3-ubyte");
  const std::filesystem::path labelsPath = findIdxFile(dir, prefix + "-labels-idx1-ubyte");
  IdxImages images = readIdxImages(imagesPath);
  std::vector<std::int32_t> labels = readIdxLabels(labelsPath, 10);
  if (static_cast<std::int64_t>(labels.size()) != images.count) {
    XS_THROW(MismatchError, labelsPath.string() + ": holds " +
                                     std::to_string(labels.size()) + " labels but " +
                                     imagesPath.filename().string() + " holds " +
                                     std::to_string(images.count) +
                                     " images; the two files must come from the same release");
  }
  Dataset ds;
  ds.name = name;
  ds.split = split;
  ds.channels = 1;
  ds.height = images.rows;
  ds.width = images.cols;
  ds.numClasses = 10;
  ds.pixels = std::move(images.pixels);
  ds.labels = std::move(labels);
  return ds;
}

}  // namespace xs::data
