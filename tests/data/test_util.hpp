// test_util.h: shared pieces of the data tests: scratch directories and writers of small IDX and
// CIFAR-10 files, raw or gzip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "xspawn/error.hpp"

namespace xs::data::test {

using Bytes = std::vector<std::uint8_t>;

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("xspawn-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void appendBigEndian32(Bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

// Writes bytes as is, or gzip-compressed when the name ends in ".gz".
inline void writeFile(const std::filesystem::path& path, const Bytes& bytes) {
  if (path.extension() == ".gz") {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    }
    gzclose(f);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
}

inline Bytes readRaw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Pixel value of image i at (y, x) in the generated files.
inline std::uint8_t testPixel(std::int64_t i, int y, int x) {
  return static_cast<std::uint8_t>((i * 31 + y * 7 + x * 3) & 0xff);
}

inline Bytes idxImages(std::uint32_t count, std::uint32_t rows, std::uint32_t cols) {
  Bytes out;
  appendBigEndian32(out, 0x00000803);
  appendBigEndian32(out, count);
  appendBigEndian32(out, rows);
  appendBigEndian32(out, cols);
  for (std::uint32_t i = 0; i < count; ++i)
    for (std::uint32_t y = 0; y < rows; ++y)
      for (std::uint32_t x = 0; x < cols; ++x) out.push_back(testPixel(i, y, x));
  return out;
}

inline Bytes idxLabels(std::uint32_t count) {
  Bytes out;
  appendBigEndian32(out, 0x00000801);
  appendBigEndian32(out, count);
  for (std::uint32_t i = 0; i < count; ++i) out.push_back(static_cast<std::uint8_t>(i % 10));
  return out;
}

// One CIFAR-10 batch: record r has label (r + first) % 10 and pixel p = (r + first + p) & 0xff.
inline Bytes cifarRecords(int count, int first = 0) {
  Bytes out;
  for (int r = 0; r < count; ++r) {
    out.push_back(static_cast<std::uint8_t>((r + first) % 10));
    for (int p = 0; p < 3072; ++p) out.push_back(static_cast<std::uint8_t>((r + first + p) & 0xff));
  }
  return out;
}

// An MNIST-layout directory: train (trainCount) and t10k (testCount) images of rows x cols.
inline void writeMnistDir(const std::filesystem::path& dir, bool gz, std::uint32_t trainCount = 12,
                          std::uint32_t testCount = 5, std::uint32_t rows = 6, std::uint32_t cols = 4) {
  const std::string ext = gz ? ".gz" : "";
  writeFile(dir / ("train-images-idx3-ubyte" + ext), idxImages(trainCount, rows, cols));
  writeFile(dir / ("train-labels-idx1-ubyte" + ext), idxLabels(trainCount));
  writeFile(dir / ("t10k-images-idx3-ubyte" + ext), idxImages(testCount, rows, cols));
  writeFile(dir / ("t10k-labels-idx1-ubyte" + ext), idxLabels(testCount));
}

// The message of the DataError `Type` that `fn` throws (fails the test otherwise).
template <typename Type, typename Fn>
std::string messageOf(Fn&& fn) {
  try {
    fn();
  } catch (const Type& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception thrown";
  return {};
}

}  // namespace xs::data::test
