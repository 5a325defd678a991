// errors_test.cpp: every bad input of `xspawn train` gives one line on stderr,
// "xspawn train: <what, where, how to fix>", and exit status 2, before any worker starts.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "train_test_util.hpp"

namespace xs::train::test {
namespace {
namespace fs = std::filesystem;

void expectUsageError(const std::string& args, const std::string& needle) {
  SCOPED_TRACE(args);
  CommandResult r = runXspawn("--nprocs 2 -q train " + args);
  EXPECT_EQ(r.status, 2);
  auto err = lines(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("xspawn train: ", 0), 0u) << err[0];
  EXPECT_NE(err[0].find(needle), std::string::npos) << err[0];
  EXPECT_EQ(r.out, "");
}

TEST(TrainErrors, UnknownModel) { expectUsageError("--model vgg16 --dataset synthetic", "unknown model"); }

TEST(TrainErrors, BatchSizeZero) { expectUsageError("--dataset synthetic --batch-size 0", "--batch-size 0"); }

TEST(TrainErrors, UnknownOption) { expectUsageError("--dataset synthetic --bogus 1", "--help"); }

TEST(TrainErrors, BadNumbers) {
  expectUsageError("--dataset synthetic --lr -1", "--lr");
  expectUsageError("--dataset synthetic --optimizer rmsprop", "sgd or adam");
  expectUsageError("--dataset synthetic --precision fp8", "fp32 or bf16");
  expectUsageError("--dataset synthetic --device-memory 12X", "memory size");
  expectUsageError("--dataset synthetic --stop-at-accuracy 150", "--stop-at-accuracy 150");
  expectUsageError("--dataset synthetic --bucket-mb -2", "--bucket-mb -2");
}

TEST(TrainErrors, ImageTooSmallForAlexnet) {
  expectUsageError("--model alexnet --dataset synthetic --image-size 32", "63");
}

TEST(TrainErrors, MissingDatasetDirectory) {
  expectUsageError("--dataset mnist --data-dir /nonexistent/mnist", "does not exist");
  expectUsageError("--dataset mnist", "--data-dir");
  expectUsageError("--dataset imagenet --data-dir /tmp", "unknown dataset");
}

TEST(TrainErrors, MissingFile) {
  fs::path dir = freshDir("missing-file");
  writeIdxDataset(dir, 20, 10);
  fs::remove(dir / "t10k-labels-idx1-ubyte");
  expectUsageError("--dataset mnist --data-dir " + dir.string(), "t10k-labels-idx1-ubyte");
  fs::remove_all(dir);
}

TEST(TrainErrors, CorruptFiles) {
  fs::path dir = freshDir("corrupt");
  writeIdxDataset(dir, 20, 10);
  fs::copy_file(dir / "train-labels-idx1-ubyte", dir / "train-images-idx3-ubyte", fs::copy_options::overwrite_existing);
  expectUsageError("--dataset mnist --data-dir " + dir.string(), "bad magic");
  writeIdxDataset(dir, 20, 10);
  fs::resize_file(dir / "t10k-images-idx3-ubyte", 1000);
  expectUsageError("--dataset mnist --data-dir " + dir.string(), "truncated");
  writeIdxDataset(dir, 20, 10);
  fs::resize_file(dir / "train-images-idx3-ubyte", 7);
  expectUsageError("--dataset mnist --data-dir " + dir.string(), "truncated");
  fs::remove_all(dir);
}

TEST(TrainErrors, TruncatedGzipSaysTruncatedAndWhere) {
  fs::path dir = freshDir("truncated-gz");
  writeIdxDataset(dir, 400, 10);
  const fs::path raw = dir / "train-images-idx3-ubyte", gz = dir / "train-images-idx3-ubyte.gz";
  ASSERT_EQ(std::system(("gzip -c " + raw.string() + " > " + gz.string()).c_str()), 0);
  fs::remove(raw);
  fs::resize_file(gz, fs::file_size(gz) / 2);  // a download cut short: no gzip trailer
  CommandResult r = runXspawn("--nprocs 2 -q train --dataset mnist --data-dir " + dir.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(gz.string() + ": the gzip stream is truncated: its " + std::to_string(fs::file_size(gz)) +
                       " compressed bytes end in the middle of the data, after "),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("of the 313616 bytes its header announces (400 items"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("re-download it"), std::string::npos) << r.err;
  // A complete stream with bytes after it.
  ASSERT_EQ(std::system(("gzip -c " + (dir / "t10k-images-idx3-ubyte").string() + " > " + gz.string() + " && echo junk >> " +
                         gz.string()).c_str()), 0);
  fs::copy_file(dir / "t10k-labels-idx1-ubyte", dir / "train-labels-idx1-ubyte", fs::copy_options::overwrite_existing);
  r = runXspawn("--nprocs 2 -q train --dataset mnist --data-dir " + dir.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(gz.string() + ": the gzip stream holds the 7856 bytes its header announces, but the file goes on "
                       "after it"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TrainErrors, ABrokenTestSplitIsReportedByTheRankThatReadsIt) {
  // In a job on one machine rank 1 reads the test set for everyone (loadSplitShared): its error
  // is the job's, and the other ranks stop with it instead of waiting in the broadcast.
  fs::path dir = freshDir("broken-test-split");
  writeIdxDataset(dir, 40, 400);  // a stream long enough that the plan inflates only its start
  const fs::path raw = dir / "t10k-images-idx3-ubyte", gz = dir / "t10k-images-idx3-ubyte.gz";
  ASSERT_EQ(std::system(("gzip -c " + raw.string() + " > " + gz.string()).c_str()), 0);
  fs::remove(raw);
  {  // a wrong CRC in the trailer, which only inflating the whole stream finds (the plan's cheap
     // checks read the header and the trailer's size)
    std::fstream f(gz, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(gz) - 8));
    f.write("\x01\x02\x03\x04", 4);
  }
  for (int ranks : {2, 3}) {
    CommandResult r = runXspawn("--nprocs " + std::to_string(ranks) + " -q train --dataset mnist --data-dir " +
                                dir.string());
    EXPECT_NE(r.status, 0) << ranks << " ranks";
    EXPECT_NE(r.err.find(gz.string() + ": corrupt gzip stream"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("root cause (first failure):\n  rank 1 "), std::string::npos) << r.err;
  }
  // A short stream is inflated whole by the plan's first read of its header: the same error there.
  writeIdxDataset(dir, 40, 10);
  ASSERT_EQ(std::system(("gzip -c " + raw.string() + " > " + gz.string()).c_str()), 0);
  fs::remove(raw);
  {
    std::fstream f(gz, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(gz) - 8));
    f.write("\x01\x02\x03\x04", 4);
  }
  CommandResult r = runXspawn("--nprocs 2 -q train --dataset mnist --data-dir " + dir.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(gz.string() + ": corrupt gzip stream (zlib: incorrect data check)"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TrainErrors, MismatchedCounts) {
  fs::path dir = freshDir("mismatch");
  writeIdxDataset(dir, 20, 10);
  fs::path other = freshDir("mismatch-other");
  writeIdxDataset(other, 21, 10);
  fs::copy_file(other / "train-labels-idx1-ubyte", dir / "train-labels-idx1-ubyte", fs::copy_options::overwrite_existing);
  expectUsageError("--dataset mnist --data-dir " + dir.string(), "21 labels");
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST(TrainErrors, CifarTruncated) {
  fs::path dir = freshDir("cifar-bad");
  for (const char* f : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                        "data_batch_5.bin", "test_batch.bin"}) {
    std::ofstream(dir / f, std::ios::binary) << std::string(3073, '\1');
  }
  fs::resize_file(dir / "data_batch_3.bin", 3000);
  expectUsageError("--model resnet18 --dataset cifar10 --data-dir " + dir.string(), "data_batch_3.bin");
  fs::remove_all(dir);
}

TEST(TrainErrors, ResumeWithoutCheckpoint) {
  expectUsageError("--dataset synthetic --resume /nonexistent/ckpt", "no checkpoint");
}

TEST(TrainErrors, HelpIsPassedThrough) {
  CommandResult r = runXspawn("train --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--batch-size"), std::string::npos);
}

}  // namespace
}  // namespace xs::train::test
