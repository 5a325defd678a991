// data_setup.cpp: datasets and transforms of a training run, and the plan's file checks.
#include "data_setup.hpp"

#include <zlib.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "xspawn/data/cifar.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"
#include "xspawn/data/idx.hpp"

namespace xs::train {
namespace fs = std::filesystem;
namespace {

// Training-set statistics of the real datasets (synthetic data is measured when loaded).
struct Stats {
  const char* dataset;
  std::vector<float> mean, std;
};
const Stats kStats[] = {
    {"fashion-mnist", {0.2860f}, {0.3530f}},
    {"mnist", {0.1307f}, {0.3081f}},
    {"cifar10", {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}},
};

void normalisation(const TrainOptions& o, const data::Dataset& train, data::TransformConfig& t) {
  if (o.model == "alexnet") {  // seed 000: ImageNet statistics on the RGB copy
    t.mean = data::kImagenetMean;
    t.std = data::kImagenetStd;
    return;
  }
  data::ChannelStats s;
  bool known = false;
  for (const auto& k : kStats)
    if (o.dataset == k.dataset) s.mean = k.mean, s.std = k.std, known = true;
  if (!known) s = data::computeChannelStats(train);
  if (t.toRgb) {
    s.mean.assign(3, s.mean[0]);
    s.std.assign(3, s.std[0]);
  }
  t.mean = s.mean;
  t.std = s.std;
}

std::uint32_t bigEndian(const unsigned char* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

// The trailer's length did not match: read the whole stream to say what is wrong with it (a
// cut-off file's last bytes are compressed data, not a trailer).
[[noreturn]] void throwGzipMismatch(const fs::path& path, std::uint32_t count, std::uint64_t expect, std::uint64_t size) {
  const std::string name = path.string();
  gzFile f = gzopen(path.c_str(), "rb");
  std::uint64_t total = 0;
  std::vector<char> buf(1 << 20);
  int got = 0;
  while (f && (got = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) total += static_cast<std::uint64_t>(got);
  int err = Z_OK;
  std::string zlib = f ? gzerror(f, &err) : "cannot reopen it";
  if (zlib.rfind(name + ": ", 0) == 0) zlib = zlib.substr(name.size() + 2);
  if (f) gzclose(f);
  if (err == Z_BUF_ERROR || got < 0) {
    XS_THROW(xs::TruncatedError,
             fmt::format("{}: the gzip stream is truncated: its {} compressed bytes end in the middle of the data, after {} of "
                         "the {} bytes its header announces ({} items; zlib: {}); the download or copy was cut short: "
                         "re-download it",
                         name, size, total, expect, count, zlib));
  }
  if (total == expect) {
    XS_THROW(xs::FormatError, fmt::format("{}: the gzip stream holds the {} bytes its header announces, but the file goes on "
                                          "after it (its last 4 bytes are not the stream's trailer); re-download it",
                                          name, expect));
  }
  XS_THROW(xs::TruncatedError, fmt::format("{}: {}: header says {} items ({} bytes) but the gzip stream holds {} bytes; "
                                           "re-download it",
                                           name, total < expect ? "truncated" : "trailing data", count, expect, total));
}

// Header of an IDX file (raw or .gz): magic, count and (images) rows, cols; then the size the
// header implies against the file's size (raw) or the gzip trailer's size (mod 2^32).
std::uint32_t checkIdxFile(const fs::path& path, std::uint32_t magic, int dims, std::uint64_t* itemBytes = nullptr) {
  const std::string name = path.string();
  gzFile f = gzopen(name.c_str(), "rb");
  if (!f) XS_THROW(xs::FileNotFoundError, name + ": cannot be opened; check its permissions");
  std::array<unsigned char, 16> h{};
  const int want = 4 + 4 * dims;
  const int got = gzread(f, h.data(), static_cast<unsigned>(want));
  const bool direct = gzdirect(f) == 1;
  int err = Z_OK;
  const std::string zlib = got < 0 ? gzerror(f, &err) : "";
  gzclose(f);
  // A stream short enough to be inflated whole by the first read: its check (CRC, size) failed.
  if (got < 0 && err == Z_DATA_ERROR)
    XS_THROW(xs::FormatError, fmt::format("{}: corrupt gzip stream (zlib: {}); the file is damaged: download or copy "
                                          "the file again",
                                          name, zlib.rfind(name + ": ", 0) == 0 ? zlib.substr(name.size() + 2) : zlib));
  if (got < 4)
    XS_THROW(xs::TruncatedError, fmt::format("{}: truncated: {} bytes, shorter than the {}-byte IDX header; re-download it",
                                                    name, std::max(got, 0), want));
  if (bigEndian(h.data()) != magic)
    XS_THROW(xs::FormatError, fmt::format("{}: bad magic 0x{:08x}, expected 0x{:08x}; is this the right file?",
                                                 name, bigEndian(h.data()), magic));
  if (got < want)
    XS_THROW(xs::TruncatedError, fmt::format("{}: truncated: {} bytes, shorter than the {}-byte IDX header; re-download it",
                                                    name, got, want));
  const std::uint32_t count = bigEndian(h.data() + 4);
  std::uint64_t item = 1;
  for (int d = 1; d < dims; ++d) {
    std::uint32_t side = bigEndian(h.data() + 4 + 4 * d);
    if (side == 0 || side > 4096)
      XS_THROW(xs::FormatError, fmt::format("{}: implausible image side {} in the header; re-download it", name, side));
    item *= side;
  }
  if (count == 0) XS_THROW(xs::FormatError, name + ": the header says 0 items; re-download it");
  if (itemBytes) *itemBytes = item;
  const std::uint64_t expect = static_cast<std::uint64_t>(want) + count * item;
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (direct) {
    if (size != expect)
      XS_THROW(xs::TruncatedError, fmt::format("{}: {}: header says {} items ({} bytes) but the file holds {}; re-download it",
                                                      name, size < expect ? "truncated" : "trailing data", count, expect, size));
  } else {
    std::ifstream in(path, std::ios::binary);
    unsigned char t[4] = {};
    in.seekg(-4, std::ios::end);
    in.read(reinterpret_cast<char*>(t), 4);
    const std::uint32_t isize = std::uint32_t{t[0]} | std::uint32_t{t[1]} << 8 | std::uint32_t{t[2]} << 16 | std::uint32_t{t[3]} << 24;
    if (!in || isize != static_cast<std::uint32_t>(expect)) throwGzipMismatch(path, count, expect, size);
  }
  return count;
}

// The shared heap data::shareDataset takes for a split of `count` images of `image` bytes, of which
// the job uses the first `limit` (0: all).
std::uint64_t usedBytes(std::uint64_t count, std::uint64_t image, std::int64_t limit, const TrainOptions& o) {
  const std::uint64_t used = limit > 0 ? std::min<std::uint64_t>(count, static_cast<std::uint64_t>(limit)) : count;
  return data::sharedDatasetBytes(static_cast<std::int64_t>(used), static_cast<std::int64_t>(image), o.dataset.size());
}

SplitBytes checkIdxDir(const fs::path& dir, const TrainOptions& o) {
  SplitBytes bytes;
  for (const char* split : {"train", "t10k"}) {
    fs::path images = data::findIdxFile(dir, std::string(split) + "-images-idx3-ubyte");
    fs::path labels = data::findIdxFile(dir, std::string(split) + "-labels-idx1-ubyte");
    std::uint64_t image = 0;
    std::uint32_t n = checkIdxFile(images, data::kIdxImagesMagic, 3, &image);
    std::uint32_t m = checkIdxFile(labels, data::kIdxLabelsMagic, 1);
    if (n != m)
      XS_THROW(xs::MismatchError, fmt::format("{}: holds {} labels but {} holds {} images; use matching files",
                                                     labels.string(), m, images.filename().string(), n));
    const bool train = split == std::string("train");
    (train ? bytes.train : bytes.test) = usedBytes(n, image, train ? o.trainSize : o.testSize, o);
  }
  return bytes;
}

SplitBytes checkCifarDir(const fs::path& dir, const TrainOptions& o) {
  fs::path d = data::findCifarDir(dir);
  std::uint64_t trainRecords = 0, testRecords = 0;
  for (const char* base : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                           "data_batch_5.bin", "test_batch.bin"}) {
    fs::path f = d / base;
    std::error_code ec;
    if (!fs::is_regular_file(f, ec))
      XS_THROW(xs::FileNotFoundError, f.string() + ": not found; the CIFAR-10 binary version has data_batch_1..5.bin and test_batch.bin");
    std::uint64_t size = fs::file_size(f, ec);
    if (size == 0 || size % data::kCifarRecordBytes != 0)
      XS_THROW(xs::TruncatedError, fmt::format("{}: truncated: {} bytes is not a whole, non-zero number of {}-byte records; re-download it",
                                                      f.string(), size, data::kCifarRecordBytes));
    (std::string(base) == "test_batch.bin" ? testRecords : trainRecords) += size / data::kCifarRecordBytes;
  }
  const std::uint64_t image = data::kCifarRecordBytes - 1;  // the label byte, then the pixels
  return {usedBytes(trainRecords, image, o.trainSize, o), usedBytes(testRecords, image, o.testSize, o)};
}

}  // namespace

int datasetChannels(const TrainOptions& o) { return o.dataset == "cifar10" ? 3 : 1; }

int modelChannels(const TrainOptions& o) {
  return o.model == "alexnet" || o.model == "resnet18" ? 3 : datasetChannels(o);
}

data::DatasetSpec datasetSpec(const TrainOptions& o) {
  data::DatasetSpec spec;
  spec.name = o.dataset;
  spec.dir = o.dataDir;
  spec.synthetic.seed = o.seed;
  if (o.trainSize > 0) spec.synthetic.trainCount = o.trainSize;
  if (o.testSize > 0) spec.synthetic.testCount = o.testSize;
  return spec;
}

data::Dataset loadSplit(const TrainOptions& o, data::Split split) {
  data::Dataset d = data::loadDataset(datasetSpec(o), split);
  const std::int64_t limit = split == data::Split::kTrain ? o.trainSize : o.testSize;
  if (limit > 0 && limit < d.size()) {
    d.labels.resize(static_cast<std::size_t>(limit));
    d.pixels.resize(static_cast<std::size_t>(limit * d.imageSize()));
  }
  return d;
}

data::Dataset loadSplitShared(const TrainOptions& o, data::Split split) {
  // Inflating Fashion-MNIST's training images (26 MB of gzip) takes about 90 ms of a core: 8
  // ranks on 2 cores spent about 0.36 s of the default run reading the same files. One rank reads
  // them and the machine keeps one copy in shared memory (data::shareDataset): the others
  // received 47 MB each before, and their first touch of that memory was most of the start-up's
  // cost (docs/data.md). Across machines, the same on every machine.
  return data::shareDataset([&] { return loadSplit(o, split); }, split == data::Split::kTrain ? 0 : 1);
}

data::TransformConfig testTransform(const TrainOptions& o, const data::Dataset& train) {
  data::TransformConfig t;
  if (o.imageSize != train.height || o.imageSize != train.width) t.resize = o.imageSize;
  t.toRgb = train.channels == 1 && modelChannels(o) == 3;
  normalisation(o, train, t);
  return t;
}

data::TransformConfig trainTransform(const TrainOptions& o, const data::Dataset& train) {
  data::TransformConfig t = testTransform(o, train);
  if (o.augment) {
    t.crop = o.imageSize;
    t.cropPadding = 4;
    t.horizontalFlip = true;
  }
  return t;
}

SplitBytes checkDatasetFiles(const TrainOptions& o) {
  if (o.dataset == "synthetic") {
    const data::SyntheticConfig c = datasetSpec(o).synthetic;
    const std::uint64_t image = static_cast<std::uint64_t>(c.channels) * c.height * c.width;
    return {usedBytes(c.trainCount, image, 0, o), usedBytes(c.testCount, image, 0, o)};
  }
  fs::path dir = o.dataDir.empty() ? data::defaultDataDir(o.dataset) : fs::path(o.dataDir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::string hint = o.dataset == "fashion-mnist"
                           ? "install it with `apt-get install dataset-fashion-mnist` or give --data-dir"
                           : "give --data-dir the directory that holds the " + o.dataset + " files";
    XS_THROW(xs::FileNotFoundError,
                  dir.string() + ": data directory of '" + o.dataset + "' does not exist; " + hint);
  }
  return o.dataset == "cifar10" ? checkCifarDir(dir, o) : checkIdxDir(dir, o);
}

}  // namespace xs::train
