// cifar.cpp: CIFAR-10 binary batches (label byte + 3x32x32 planar RGB per record).
#include "xspawn/data/cifar.hpp"

#include <algorithm>
#include <string>

#include "file_bytes.hpp"
#include "xspawn/error.hpp"

namespace xs::data {
namespace {

constexpr int kImageBytes = kCifarRecordBytes - 1;

}  // namespace

void readCifarBatch(const std::filesystem::path& path, Dataset& out) {
  std::vector<std::uint8_t> bytes = detail::readFileBytes(path);
  if (bytes.empty() || bytes.size() % kCifarRecordBytes != 0) {
    XS_THROW(TruncatedError,
                  path.string() + ": truncated: " + std::to_string(bytes.size()) +
                      " bytes is not a whole, non-zero number of " +
                      std::to_string(kCifarRecordBytes) +
                      "-byte records (1 label + 3072 pixels; a full batch is 10000 records)");
  }
  const std::size_t records = bytes.size() / kCifarRecordBytes;
  const std::size_t base = out.labels.size();
  out.labels.resize(base + records);
  const std::size_t need = (base + records) * kImageBytes;
  // On 2 MiB pages, growing as a vector does (loadCifar10 reserved all five batches at once).
  if (need > out.pixels.capacity()) detail::reserveLarge(out.pixels, std::max(need, 2 * out.pixels.capacity()));
  out.pixels.resize(need);
  for (std::size_t r = 0; r < records; ++r) {
    const std::uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    if (rec[0] >= out.numClasses) {
      XS_THROW(LabelRangeError, path.string() + ": label " + std::to_string(rec[0]) +
                                         " in record " + std::to_string(r) +
                                         " is out of range, expected 0.." +
                                         std::to_string(out.numClasses - 1) +
                                         "; is this the CIFAR-10 (not CIFAR-100) binary version?");
    }
    out.labels[base + r] = rec[0];
    std::copy(rec + 1, rec + kCifarRecordBytes, out.pixels.begin() + (base + r) * kImageBytes);
  }
}

std::filesystem::path findCifarDir(const std::filesystem::path& dir) {
  std::error_code ec;
  const std::filesystem::path nested = dir / "cifar-10-batches-bin";
  if (std::filesystem::is_regular_file(dir / "test_batch.bin", ec) ||
      std::filesystem::is_regular_file(dir / "data_batch_1.bin", ec)) {
    return dir;
  }
  if (std::filesystem::is_directory(nested, ec)) return nested;
  XS_THROW(FileNotFoundError,
                dir.string() + ": no CIFAR-10 batches (expected data_batch_1..5.bin and "
                               "test_batch.bin here or in cifar-10-batches-bin/); extract "
                               "cifar-10-binary.tar.gz into this directory");
}

Dataset loadCifar10(const std::filesystem::path& dir, Split split) {
  const std::filesystem::path root = findCifarDir(dir);
  Dataset ds;
  ds.name = "cifar10";
  ds.split = split;
  ds.channels = 3;
  ds.height = 32;
  ds.width = 32;
  ds.numClasses = 10;
  if (split == Split::kTrain) {
    // Room for the five batches at once: growing batch by batch copied the pixels four times.
    std::error_code ec;
    std::size_t bytes = 0;
    for (int i = 1; i <= 5 && !ec; ++i)
      bytes += std::filesystem::file_size(root / ("data_batch_" + std::to_string(i) + ".bin"), ec);
    if (!ec) detail::reserveLarge(ds.pixels, bytes / kCifarRecordBytes * kImageBytes);  // else readCifarBatch says
    for (int i = 1; i <= 5; ++i) {
      readCifarBatch(root / ("data_batch_" + std::to_string(i) + ".bin"), ds);
    }
  } else {
    readCifarBatch(root / "test_batch.bin", ds);
  }
  return ds;
}

}  // namespace xs::data
