// errors_test.cpp: every bad dataset file gives a one-line typed error naming the file, what was
// expected and what was found (raw and gzip variants).
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "xspawn/data/cifar.hpp"
#include "xspawn/data/idx.hpp"

namespace xs::data {
namespace {

using test::Bytes;
using test::TempDir;

void expectContains(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nwanted: " << part;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
}

class IdxErrors : public ::testing::TestWithParam<bool> {  // param: gzip
 protected:
  std::filesystem::path file(const std::string& base) const {
    return dir_.path() / (base + (GetParam() ? ".gz" : ""));
  }
  TempDir dir_;
};

TEST_P(IdxErrors, MissingFile) {
  const std::string m = test::messageOf<FileNotFoundError>([&] { loadIdxDataset(dir_.path(), Split::kTrain, "mnist"); });
  expectContains(m, "train-images-idx3-ubyte[.gz]: not found");
  const std::string direct = test::messageOf<FileNotFoundError>([&] { readIdxImages(file("nothing")); });
  expectContains(direct, file("nothing").string() + ": no such file");
}

TEST_P(IdxErrors, BadMagic) {
  Bytes zeros(16 + 4, 0);
  test::writeFile(file("train-images-idx3-ubyte"), zeros);
  const std::string m = test::messageOf<FormatError>([&] { readIdxImages(file("train-images-idx3-ubyte")); });
  expectContains(m, file("train-images-idx3-ubyte").filename().string() +
                        ": bad magic 0x00000000, expected 0x00000803 (IDX3 unsigned bytes)");
  test::writeFile(file("swapped"), test::idxLabels(4));
  expectContains(test::messageOf<FormatError>([&] { readIdxImages(file("swapped")); }),
                 "bad magic 0x00000801, expected 0x00000803");
  test::writeFile(file("labels"), test::idxImages(1, 2, 2));
  expectContains(test::messageOf<FormatError>([&] { readIdxLabels(file("labels")); }),
                 "bad magic 0x00000803, expected 0x00000801 (IDX1 unsigned bytes)");
}

TEST_P(IdxErrors, TruncatedImages) {
  Bytes bytes = test::idxImages(3, 4, 5);  // 16 + 60 bytes
  bytes.resize(bytes.size() - 10);
  test::writeFile(file("img"), bytes);
  expectContains(test::messageOf<TruncatedError>([&] { readIdxImages(file("img")); }),
                 "img" + std::string(GetParam() ? ".gz" : "") +
                     ": truncated: header says 3 images of 4x5 (76 bytes) but the file holds 66");
}

TEST_P(IdxErrors, ShortHeaderAndTrailingData) {
  test::writeFile(file("short"), {0, 0, 8, 3, 0, 0, 0, 1, 0, 0});
  expectContains(test::messageOf<TruncatedError>([&] { readIdxImages(file("short")); }),
                 "truncated: 10 bytes, shorter than the 16-byte IDX3 header");
  Bytes bytes = test::idxImages(2, 3, 3);
  bytes.push_back(7);
  test::writeFile(file("long"), bytes);
  expectContains(test::messageOf<TruncatedError>([&] { readIdxImages(file("long")); }),
                 "trailing data: header says 2 images of 3x3 (34 bytes) but the file holds 35");
}

TEST_P(IdxErrors, TruncatedLabels) {
  Bytes bytes = test::idxLabels(9);
  bytes.resize(bytes.size() - 4);
  test::writeFile(file("lab"), bytes);
  expectContains(test::messageOf<TruncatedError>([&] { readIdxLabels(file("lab")); }),
                 "truncated: header says 9 labels (17 bytes) but the file holds 13");
}

TEST_P(IdxErrors, LabelCountMismatch) {
  test::writeMnistDir(dir_.path(), GetParam());
  test::writeFile(file("train-labels-idx1-ubyte"), test::idxLabels(11));
  const std::string m = test::messageOf<MismatchError>([&] { loadIdxDataset(dir_.path(), Split::kTrain, "mnist"); });
  expectContains(m, file("train-labels-idx1-ubyte").string() + ": holds 11 labels but " +
                        file("train-images-idx3-ubyte").filename().string() + " holds 12 images");
}

TEST_P(IdxErrors, LabelOutOfRange) {
  Bytes bytes = test::idxLabels(6);
  bytes[8 + 3] = 12;
  test::writeFile(file("lab"), bytes);
  expectContains(test::messageOf<LabelRangeError>([&] { readIdxLabels(file("lab")); }),
                 "label 12 at index 3 is out of range, expected 0..9");
}

TEST_P(IdxErrors, ErrorsCarryTheirSourceLocation) {
  test::writeFile(file("short"), Bytes(3, 0));
  try {
    readIdxImages(file("short"));
    FAIL() << "no exception";
  } catch (const DataError& e) {
    EXPECT_NE(e.where().find("idx.cpp:"), std::string::npos) << e.where();
    EXPECT_GT(e.line(), 0);
    EXPECT_EQ(std::string(e.what()).find(".cpp:"), std::string::npos) << "what() is the message alone: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxErrors, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "gzip" : "raw"; });

// Writes `bytes` as is to a file named `name` (which may end in .gz) in dir.
std::filesystem::path writeAsIs(const TempDir& dir, const std::string& name, const Bytes& bytes) {
  test::writeFile(dir.path() / "as-is", bytes);  // no .gz suffix: written as is
  std::filesystem::rename(dir.path() / "as-is", dir.path() / name);
  return dir.path() / name;
}

// The gzip file of 50 images of 28x28 (39216 bytes of IDX).
Bytes gzipImages(const TempDir& dir) {
  test::writeFile(dir.path() / "whole.gz", test::idxImages(50, 28, 28));
  return test::readRaw(dir.path() / "whole.gz");
}

TEST(GzipErrors, TruncatedStream) {
  TempDir dir;
  Bytes gz = gzipImages(dir);
  gz.resize(gz.size() / 2);
  const auto path = writeAsIs(dir, "train-images-idx3-ubyte.gz", gz);
  const std::string m = test::messageOf<TruncatedError>([&] { readIdxImages(path); });
  expectContains(m, path.string() + ": the gzip stream is truncated: it ends early, at the end of the file's " +
                        std::to_string(gz.size()) + " compressed bytes, before the end of its data and trailer (");
  expectContains(m, " bytes decompressed by then); the download or copy was cut short: download or copy the file again");
  EXPECT_EQ(m.find("4274266709"), std::string::npos) << m;
  test::writeFile(dir.path() / "train-labels-idx1-ubyte", test::idxLabels(50));
  expectContains(test::messageOf<TruncatedError>([&] { loadIdxDataset(dir.path(), Split::kTrain, "mnist"); }),
                 "train-images-idx3-ubyte.gz: the gzip stream is truncated");
}

TEST(GzipErrors, TruncatedInTheHeaderOrTrailer) {
  TempDir dir;
  Bytes gz = gzipImages(dir);
  Bytes trailerCut(gz.begin(), gz.end() - 3);  // all the data, part of the length field
  expectContains(test::messageOf<TruncatedError>([&] { readIdxImages(writeAsIs(dir, "a.gz", trailerCut)); }),
                 "a.gz: the gzip stream is truncated: it ends early, at the end of the file's " +
                     std::to_string(trailerCut.size()) +
                     " compressed bytes, before the end of its data and trailer (39216 bytes decompressed by then)");
  Bytes headerCut(gz.begin(), gz.begin() + 5);
  expectContains(test::messageOf<TruncatedError>([&] { readIdxImages(writeAsIs(dir, "b.gz", headerCut)); }),
                 "b.gz: the gzip stream is truncated: it ends early, at the end of the file's 5 compressed bytes, "
                 "before the end of its data and trailer (0 bytes decompressed by then)");
}

TEST(GzipErrors, TrailingGarbageAfterACompleteStream) {
  TempDir dir;
  Bytes gz = gzipImages(dir);
  const std::size_t end = gz.size();
  for (char c : std::string("garbage!")) gz.push_back(static_cast<std::uint8_t>(c));
  const auto path = writeAsIs(dir, "t10k-images-idx3-ubyte.gz", gz);
  expectContains(test::messageOf<FormatError>([&] { readIdxImages(path); }),
                 path.string() + ": trailing garbage after the gzip stream: the stream (39216 decompressed bytes) ends at byte " +
                     std::to_string(end) + " but the file has 8 more bytes that are not a gzip member; the file was "
                     "damaged or appended to: download or copy the file again");
}

TEST(GzipErrors, ConcatenatedMembersAreOneStreamAndACutOneSaysWhere) {
  TempDir dir;
  const Bytes idx = test::idxImages(50, 28, 28);
  test::writeFile(dir.path() / "head.gz", Bytes(idx.begin(), idx.begin() + 1000));
  test::writeFile(dir.path() / "tail.gz", Bytes(idx.begin() + 1000, idx.end()));
  const Bytes head = test::readRaw(dir.path() / "head.gz");
  Bytes both = head;
  const Bytes tail = test::readRaw(dir.path() / "tail.gz");
  both.insert(both.end(), tail.begin(), tail.end());
  const IdxImages images = readIdxImages(writeAsIs(dir, "both.gz", both));
  EXPECT_EQ(images.count, 50);
  EXPECT_EQ(images.pixels, Bytes(idx.begin() + 16, idx.end()));
  both.resize(both.size() - 100);
  expectContains(test::messageOf<TruncatedError>([&] { readIdxImages(writeAsIs(dir, "cut.gz", both)); }),
                 "cut.gz: the gzip stream is truncated: it ends early, at the end of the file's " +
                     std::to_string(both.size()) + " compressed bytes (in the gzip member that starts at byte " +
                     std::to_string(head.size()) + "), before the end of its data and trailer (");
}

TEST(GzipErrors, EmptyGzFile) {
  TempDir dir;
  const auto path = writeAsIs(dir, "train-labels-idx1-ubyte.gz", {});
  expectContains(test::messageOf<TruncatedError>([&] { readIdxLabels(path); }),
                 path.string() + ": empty file (0 bytes) where a gzip stream was expected; the download or copy was "
                                 "interrupted: download or copy the file again");
}

TEST(GzipErrors, CorruptedStream) {
  TempDir dir;
  const auto path = dir.path() / "t10k-images-idx3-ubyte.gz";
  test::writeFile(path, test::idxImages(50, 28, 28));
  Bytes gz = test::readRaw(path);
  gz[gz.size() - 6] ^= 0xff;  // inside the CRC-32 trailer
  test::writeFile(dir.path() / "bad", gz);
  std::filesystem::rename(dir.path() / "bad", path);
  const std::string m = test::messageOf<FormatError>([&] { readIdxImages(path); });
  expectContains(m, path.string() + ": corrupt gzip stream (zlib: ");
  expectContains(m, "decompressed bytes; the file is damaged: download or copy the file again");
}

TEST(CifarErrors, TruncatedBatch) {
  TempDir dir;
  Bytes bytes = test::cifarRecords(2);
  bytes.pop_back();
  test::writeFile(dir.path() / "test_batch.bin", bytes);
  expectContains(test::messageOf<TruncatedError>([&] { loadCifar10(dir.path(), Split::kTest); }),
                 "test_batch.bin: truncated: 6145 bytes is not a whole, non-zero number of 3073-byte records");
}

TEST(CifarErrors, LabelOutOfRange) {
  TempDir dir;
  Bytes bytes = test::cifarRecords(3);
  bytes[2 * 3073] = 57;
  test::writeFile(dir.path() / "test_batch.bin", bytes);
  expectContains(test::messageOf<LabelRangeError>([&] { loadCifar10(dir.path(), Split::kTest); }),
                 "test_batch.bin: label 57 in record 2 is out of range, expected 0..9");
}

TEST(CifarErrors, MissingDirectoryOrBatch) {
  TempDir dir;
  expectContains(test::messageOf<FileNotFoundError>([&] { loadCifar10(dir.path(), Split::kTrain); }),
                 "no CIFAR-10 batches (expected data_batch_1..5.bin and test_batch.bin");
  test::writeFile(dir.path() / "data_batch_1.bin", test::cifarRecords(1));
  test::writeFile(dir.path() / "data_batch_2.bin", test::cifarRecords(1));
  expectContains(test::messageOf<FileNotFoundError>([&] { loadCifar10(dir.path(), Split::kTrain); }),
                 "data_batch_3.bin: no such file");
}

}  // namespace
}  // namespace xs::data
