// readers_test.cpp: IDX (raw + gzip), CIFAR-10 and synthetic datasets, and dataset selection.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "test_util.hpp"
#include "xspawn/data/catalog.hpp"
#include "xspawn/data/dataset.hpp"
#include "xspawn/data/cifar.hpp"
#include "xspawn/data/idx.hpp"
#include "xspawn/error.hpp"

namespace xs::data {
namespace {

using test::TempDir;

// Whether the kernel takes madvise(MADV_HUGEPAGE) at all (transparent huge pages built in).
bool hugePagesAdvisable() {
  void* probe = mmap(nullptr, 4u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return false;
  const bool ok = madvise(probe, 4u << 20, MADV_HUGEPAGE) == 0;
  munmap(probe, 4u << 20);
  return ok;
}

// Whether the mapping that holds `p` was advised for 2 MiB pages: "hg" among its VmFlags.
bool advisedHuge(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return (line + " ").find(" hg ") != std::string::npos;
    }
  }
  return false;
}

class IdxReader : public ::testing::TestWithParam<bool> {};  // param: gzip

TEST_P(IdxReader, ReadsImagesAndLabels) {
  TempDir dir;
  test::writeMnistDir(dir.path(), GetParam());
  const Dataset train = loadIdxDataset(dir.path(), Split::kTrain, "mnist");
  EXPECT_EQ(train.name, "mnist");
  EXPECT_EQ(train.size(), 12);
  EXPECT_EQ(train.channels, 1);
  EXPECT_EQ(train.height, 6);
  EXPECT_EQ(train.width, 4);
  EXPECT_EQ(train.numClasses, 10);
  EXPECT_EQ(describe(train), "mnist train: 12 images of 1x6x4, 10 classes");
  for (std::int64_t i = 0; i < train.size(); ++i) {
    EXPECT_EQ(train.labels[i], i % 10);
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 4; ++x) ASSERT_EQ(train.image(i)[y * 4 + x], test::testPixel(i, y, x));
  }
  const Dataset t10k = loadIdxDataset(dir.path(), Split::kTest, "fashion-mnist");
  EXPECT_EQ(t10k.size(), 5);
  EXPECT_EQ(t10k.split, Split::kTest);
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxReader, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "gzip" : "raw"; });

// Whether any whole 2 MiB page of the buffer behind `bytes` (up to its capacity) was advised.
bool advisedHugeSomewhere(const std::vector<std::uint8_t>& bytes) {
  constexpr std::uintptr_t kPage = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  for (std::uintptr_t p = (begin + kPage - 1) / kPage * kPage; p + kPage <= begin + bytes.capacity(); p += kPage)
    if (advisedHuge(reinterpret_cast<const void*>(p))) return true;
  return false;
}

// Files large enough for whole 2 MiB pages (about 4.7 MB of pixels), raw, gzip, and gzip in two
// members whose trailer (the last member's size) leaves the output buffer to grow.
TEST(IdxReader, ReadsLargeFilesIntoBuffersAskedFor2MiBPages) {
  TempDir dir;
  const std::uint32_t count = 6000;
  const test::Bytes idx = test::idxImages(count, 28, 28);
  const test::Bytes expected(idx.begin() + 16, idx.end());
  test::writeFile(dir.path() / "raw-ubyte", idx);
  test::writeFile(dir.path() / "one.gz", idx);
  test::writeFile(dir.path() / "head.gz", test::Bytes(idx.begin(), idx.begin() + (4 << 20)));
  test::writeFile(dir.path() / "tail.gz", test::Bytes(idx.begin() + (4 << 20), idx.end()));
  test::Bytes two = test::readRaw(dir.path() / "head.gz");
  const test::Bytes tail = test::readRaw(dir.path() / "tail.gz");
  two.insert(two.end(), tail.begin(), tail.end());
  test::writeFile(dir.path() / "two-members", two);  // gzip by content, not by name
  const bool advisable = hugePagesAdvisable();
  for (const char* name : {"raw-ubyte", "one.gz", "two-members"}) {
    SCOPED_TRACE(name);
    const IdxImages images = readIdxImages(dir.path() / name);
    EXPECT_EQ(images.count, count);
    ASSERT_EQ(images.pixels.size(), expected.size());
    EXPECT_TRUE(images.pixels == expected);
    if (advisable) {
      EXPECT_TRUE(advisedHugeSomewhere(images.pixels));
    }
  }
}

TEST(IdxReader, PrefersTheRawFileOverGzip) {
  TempDir dir;
  test::writeFile(dir.path() / "x-ubyte", test::idxLabels(3));
  test::writeFile(dir.path() / "x-ubyte.gz", test::idxLabels(3));
  EXPECT_EQ(findIdxFile(dir.path(), "x-ubyte"), dir.path() / "x-ubyte");
  std::filesystem::remove(dir.path() / "x-ubyte");
  EXPECT_EQ(findIdxFile(dir.path(), "x-ubyte"), dir.path() / "x-ubyte.gz");
}

TEST(CifarReader, ReadsTrainAndTestInDirOrNested) {
  for (bool nested : {false, true}) {
    TempDir dir;
    const std::filesystem::path root = nested ? dir.path() / "cifar-10-batches-bin" : dir.path();
    std::filesystem::create_directories(root);
    for (int b = 1; b <= 5; ++b) {
      test::writeFile(root / ("data_batch_" + std::to_string(b) + ".bin"), test::cifarRecords(3, 3 * (b - 1)));
    }
    test::writeFile(root / "test_batch.bin", test::cifarRecords(4, 100));
    const Dataset train = loadCifar10(dir.path(), Split::kTrain);
    ASSERT_EQ(train.size(), 15);
    EXPECT_EQ(train.channels, 3);
    EXPECT_EQ(train.height, 32);
    EXPECT_EQ(train.width, 32);
    for (int i = 0; i < 15; ++i) {
      EXPECT_EQ(train.labels[i], i % 10);
      EXPECT_EQ(train.image(i)[0], i & 0xff);
      EXPECT_EQ(train.image(i)[3071], (i + 3071) & 0xff);
    }
    const Dataset t = loadCifar10(dir.path(), Split::kTest);
    ASSERT_EQ(t.size(), 4);
    EXPECT_EQ(t.labels[0], 0);  // 100 % 10
    EXPECT_EQ(t.image(1)[5], (101 + 5) & 0xff);
  }
}

SyntheticConfig withCounts(std::int64_t train, std::int64_t test) {
  SyntheticConfig c;
  c.trainCount = train;
  c.testCount = test;
  return c;
}

TEST(Synthetic, IsDeterministicFromTheSeed) {
  SyntheticConfig c = withCounts(50, 20);
  const Dataset a = makeSynthetic(c, Split::kTrain);
  const Dataset b = makeSynthetic(c, Split::kTrain);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(makeSynthetic(c, Split::kTest).size(), 20);
  c.seed += 1;
  EXPECT_NE(makeSynthetic(c, Split::kTrain).pixels, a.pixels);
}

TEST(Synthetic, HonoursTheShapeSettings) {
  SyntheticConfig c{.trainCount = 7, .channels = 3, .height = 9, .width = 5, .numClasses = 4};
  const Dataset d = makeSynthetic(c, Split::kTrain);
  EXPECT_EQ(d.pixels.size(), 7u * 3 * 9 * 5);
  for (int label : d.labels) EXPECT_TRUE(label >= 0 && label < 4);
  c.channels = 0;
  EXPECT_THROW(makeSynthetic(c, Split::kTrain), UsageError);
}

// A nearest-class-mean classifier fitted on train must do far better than chance on test.
TEST(Synthetic, IsLearnable) {
  const SyntheticConfig c = withCounts(2000, 500);
  const Dataset train = makeSynthetic(c, Split::kTrain);
  const Dataset test = makeSynthetic(c, Split::kTest);
  const std::size_t n = static_cast<std::size_t>(train.imageSize());
  std::vector<double> means(10 * n, 0.0);
  std::vector<int> counts(10, 0);
  for (std::int64_t i = 0; i < train.size(); ++i) {
    counts[train.labels[i]]++;
    for (std::size_t p = 0; p < n; ++p) means[train.labels[i] * n + p] += train.image(i)[p];
  }
  for (int k = 0; k < 10; ++k) {
    ASSERT_GT(counts[k], 0);
    for (std::size_t p = 0; p < n; ++p) means[k * n + p] /= counts[k];
  }
  int correct = 0;
  for (std::int64_t i = 0; i < test.size(); ++i) {
    int best = 0;
    double bestDist = 1e300;
    for (int k = 0; k < 10; ++k) {
      double d = 0;
      for (std::size_t p = 0; p < n; ++p) {
        const double diff = test.image(i)[p] - means[k * n + p];
        d += diff * diff;
      }
      if (d < bestDist) bestDist = d, best = k;
    }
    correct += best == test.labels[i];
  }
  EXPECT_GT(correct, 0.9 * test.size());
}

TEST(Dataset, ChannelStats) {
  Dataset d;
  d.channels = 2;
  d.height = 1;
  d.width = 2;
  d.numClasses = 2;
  d.pixels = {0, 255, 51, 51, 255, 0, 51, 51};  // channel 0: 0 255 255 0, channel 1: all 0.2
  d.labels = {0, 1};
  const ChannelStats s = computeChannelStats(d);
  ASSERT_EQ(s.mean.size(), 2u);
  EXPECT_NEAR(s.mean[0], 0.5f, 1e-6);
  EXPECT_NEAR(s.std[0], 0.5f, 1e-6);
  EXPECT_NEAR(s.mean[1], 0.2f, 1e-6);
  EXPECT_NEAR(s.std[1], 0.0f, 1e-6);
}

TEST(Catalog, LoadsByName) {
  TempDir dir;
  test::writeMnistDir(dir.path(), true);
  DatasetSpec spec;
  spec.name = "mnist";
  spec.dir = dir.path();
  EXPECT_EQ(loadDataset(spec, Split::kTrain).size(), 12);
  spec.name = "synthetic";
  spec.synthetic.trainCount = 33;
  EXPECT_EQ(loadDataset(spec, Split::kTrain).size(), 33);
  EXPECT_EQ(defaultDataDir("fashion-mnist"), kFashionMnistSystemDir);
  EXPECT_TRUE(defaultDataDir("cifar10").empty());
  EXPECT_EQ(datasetNames().size(), 4u);
}

TEST(Catalog, RejectsUnknownNamesAndMissingDirs) {
  DatasetSpec spec;
  spec.name = "imagenet";
  const std::string unknown = test::messageOf<UsageError>([&] { loadDataset(spec, Split::kTrain); });
  EXPECT_NE(unknown.find("unknown dataset 'imagenet'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("fashion-mnist|mnist|cifar10|synthetic"), std::string::npos) << unknown;
  spec.name = "cifar10";
  EXPECT_THROW(loadDataset(spec, Split::kTrain), UsageError);
  spec.name = "fashion-mnist";
  spec.dir = "/nonexistent/xspawn-fashion";
  const std::string missing = test::messageOf<FileNotFoundError>([&] { loadDataset(spec, Split::kTrain); });
  EXPECT_NE(missing.find("apt-get install dataset-fashion-mnist"), std::string::npos) << missing;
}

TEST(Catalog, DefaultIsFashionMnistWhenPresentElseSynthetic) {
  TempDir dir;
  DefaultDataset none = resolveDefaultDataset(dir.path());
  EXPECT_EQ(none.spec.name, "synthetic");
  EXPECT_NE(none.notice.find("apt-get install dataset-fashion-mnist"), std::string::npos);
  EXPECT_EQ(none.notice.find('\n'), std::string::npos);
  test::writeMnistDir(dir.path(), true);
  DefaultDataset found = resolveDefaultDataset(dir.path());
  EXPECT_EQ(found.spec.name, "fashion-mnist");
  EXPECT_EQ(found.spec.dir, dir.path());
  EXPECT_TRUE(found.notice.empty());
}

TEST(OwnData, PixelBufferIsZeroedAndAskedFor2MiBPages) {
  EXPECT_TRUE(pixelBuffer(0).empty());
  const std::vector<std::uint8_t> small = pixelBuffer(5);
  EXPECT_EQ(small, std::vector<std::uint8_t>(5, 0));
  const std::size_t bytes = std::size_t{16} << 20;
  const std::vector<std::uint8_t> big = pixelBuffer(bytes);
  ASSERT_EQ(big.size(), bytes);
  EXPECT_EQ(std::count(big.begin(), big.end(), std::uint8_t{0}), static_cast<std::ptrdiff_t>(bytes));
  if (!hugePagesAdvisable()) GTEST_SKIP() << "madvise(MADV_HUGEPAGE) is refused here (a kernel without THP)";
  EXPECT_TRUE(advisedHuge(big.data() + bytes / 2));
}

TEST(OwnData, FromFunctionFillsInOrderAndFromMemoryChecks) {
  std::vector<std::int64_t> calls;
  Dataset d = fromFunction("squares", Split::kTrain, 5, 1, 2, 2, 3, [&](std::int64_t i, std::uint8_t* px) {
    calls.push_back(i);
    for (int k = 0; k < 4; ++k) px[k] = static_cast<std::uint8_t>(i * 10 + k);
    return static_cast<std::int32_t>(i % 3);
  });
  EXPECT_EQ(calls, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(d.size(), 5);
  EXPECT_EQ(d.image(3)[1], 31);
  EXPECT_EQ(d.labels[4], 1);
  EXPECT_EQ(d.numClasses, 3);
  try {
    fromMemory("mine", Split::kTest, 1, 2, 2, 3, std::vector<std::uint8_t>(8), {0, 3});
    FAIL() << "a label out of range was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("label 3 at index 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fromMemory("mine", Split::kTest, 1, 2, 2, 3, std::vector<std::uint8_t>(7), {0, 1}), UsageError);
}

}  // namespace
}  // namespace xs::data
