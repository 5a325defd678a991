// share_test.cpp: shareDataset across the ranks of a job: loaded by the owner alone, one copy of
// the pixels in shared memory that every rank reads, the same images, labels and shape as the
// owner's, mapped by every rank before its loader reads them; private copies where the shared
// heap has no room; a dataset that does not hold together fails on every rank; outside a job,
// the dataset as loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "process_runner.hpp"
#include "xspawn/data/dataset.hpp"
#include "xspawn/data/loader.hpp"
#include "xspawn/data/sampler.hpp"
#include "xspawn/data/synthetic.hpp"
#include "xspawn/data/transform.hpp"
#include "xspawn/error.hpp"
#include "xspawn/spawn.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::data {
namespace {

SyntheticConfig config() {
  SyntheticConfig c;
  c.trainCount = 3000;  // 2.35 MB of 28x28 pixels
  c.testCount = 10;
  return c;
}

// Every rank against the dataset it would make itself: 0 when equal, else a code naming the field.
int sameAsReference(const Dataset& d, bool shared) {
  const Dataset want = makeSynthetic(config(), Split::kTrain);
  if (d.name != want.name || d.split != Split::kTrain) return 20;
  if (d.channels != want.channels || d.height != want.height || d.width != want.width) return 21;
  if (d.numClasses != want.numClasses || d.labels != want.labels) return 22;
  if (d.pixelCount() != want.pixels.size()) return 23;
  if (std::memcmp(d.pixelData(), want.pixels.data(), want.pixels.size()) != 0) return 24;
  if (shared != !d.sharedPixels.empty() || shared != d.pixels.empty()) return 25;
  if (std::memcmp(d.image(2999), want.image(2999), 784) != 0) return 26;
  return 0;
}

SpawnOptions options(const char* tag) {
  SpawnOptions o;
  o.quiet = true;
  o.jobId = test::uniqueJobId(tag);
  return o;
}

TEST(ShareDataset, EveryRankReadsTheOwnersOneCopy) {
  SpawnOptions o = options("share");
  JobResult r = spawn(
      [](int rank, const Flags&) {
        int loads = 0;
        const Dataset d = shareDataset([&] { return ++loads, makeSynthetic(config(), Split::kTrain); }, 1);
        if (loads != (rank == 1 ? 1 : 0)) return 19;  // loaded by the owner alone
        if (int bad = sameAsReference(d, true)) return bad;
        if (reinterpret_cast<std::uintptr_t>(d.pixelData()) % 64 != 0) return 30;
        // One copy: what the owner changes there, every rank sees (for the test only: it is read-only).
        const std::uint8_t before = d.pixelData()[5];
        barrier("read");
        if (rank == 1) const_cast<std::uint8_t*>(d.pixelData())[5] ^= 0xff;
        barrier("changed");
        if (d.pixelData()[5] != (before ^ 0xff)) return 32;
        barrier("seen");
        if (rank == 1) const_cast<std::uint8_t*>(d.pixelData())[5] = before;
        barrier("restored");
        // A loader over it gives every rank's share of the batches, as over a private copy.
        LoaderConfig lc;
        lc.batchSize = 8;
        lc.numThreads = 0;
        const Dataset own = makeSynthetic(config(), Split::kTrain);
        auto loader = [&](const Dataset& of) {
          return std::make_unique<ParallelLoader>(of, Transform(TransformConfig{}, 1, 28, 28),
                                                  DistributedSampler({of.size(), 3, rank, true, 7, false}), lc);
        };
        auto sharedLoader = loader(d), ownLoader = loader(own);
        sharedLoader->startEpoch(0);
        ownLoader->startEpoch(0);
        auto a = sharedLoader->next(), b = ownLoader->next();
        if (!a || !b || a->images != b->images || a->labels != b->labels) return 31;
        return 0;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(test::segmentExists(o.jobId));
}

// Pages of file-backed and shared memory this process has mapped (/proc/self/statm, field 3).
long sharedPagesMapped() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0, shared = -1;
  statm >> size >> resident >> shared;
  return shared;
}

TEST(ShareDataset, EveryRankMapsTheSharedPixelsBeforeItsLoaderReadsThemInRandomOrder) {
  SpawnOptions o = options("sharemapped");
  JobResult r = spawn(
      [](int rank, const Flags&) {
        barrier("before");
        const long before = sharedPagesMapped();
        const Dataset d = shareDataset([] { return makeSynthetic(config(), Split::kTrain); }, 0);
        const long pages = static_cast<long>(d.pixelCount() / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
        // The owner's writes mapped them for it; the others read one byte of each page (the
        // labels and the barriers' words alone are a handful of pages).
        if (before < 0 || sharedPagesMapped() - before < pages) return 60 + rank;
        return sameAsReference(d, true);
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(test::segmentExists(o.jobId));
}

TEST(ShareDataset, PrivateCopiesWhereTheSharedHeapHasNoRoomAndOneCopyWhereItHas) {
  SpawnOptions o = options("shareprivate");
  o.sharedHeapBytes = 1 << 20;  // under the training split's 2.35 MB, over the test split's 7.8 KB
  JobResult r = spawn(
      [](int, const Flags&) {
        const Dataset train = shareDataset([] { return makeSynthetic(config(), Split::kTrain); });
        if (int bad = sameAsReference(train, false)) return bad;
        const Dataset test = shareDataset([] { return makeSynthetic(config(), Split::kTest); }, 2);
        const Dataset want = makeSynthetic(config(), Split::kTest);
        if (test.sharedPixels.empty() || test.labels != want.labels || test.split != Split::kTest) return 40;
        return std::memcmp(test.pixelData(), want.pixels.data(), want.pixels.size()) == 0 ? 0 : 41;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(test::segmentExists(o.jobId));
}

TEST(ShareDataset, AnEmptyDatasetIsSharedAsEmpty) {
  SpawnOptions o = options("shareempty");
  JobResult r = spawn(
      [](int, const Flags&) {
        const Dataset d = shareDataset([] { return fromMemory("none", Split::kTest, 1, 2, 2, 3, {}, {}); });
        return d.size() == 0 && d.pixelCount() == 0 && d.name == "none" && d.numClasses == 3 ? 0 : 50;
      },
      2, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(test::segmentExists(o.jobId));
}

TEST(ShareDataset, RanksThatNameOtherOwnersFailTogether) {
  SpawnOptions o = options("shareowners");
  o.printReport = false;
  JobResult r = spawn(
      [](int rank, const Flags&) {
        shareDataset([] { return makeSynthetic(config(), Split::kTest); }, rank == 2 ? 1 : 0);
        return 0;
      },
      3, o);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.report.text().find("from owners 0 to 1: every rank must pass the same size and owner"),
            std::string::npos)
      << r.report.text();
  EXPECT_FALSE(test::segmentExists(o.jobId));
}

TEST(ShareDataset, ADatasetThatDoesNotHoldTogetherFailsOnEveryRank) {
  SpawnOptions o = options("sharebad");
  o.printReport = false;
  JobResult r = spawn(
      [](int, const Flags&) {
        shareDataset([] {
          Dataset d = makeSynthetic(config(), Split::kTrain);
          d.pixels.resize(100);
          return d;
        });
        return 0;
      },
      2, o);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.report.text().find("shareDataset: the dataset of local rank 0 holds 100 pixel values for 3000 images "
                                 "of 1x28x28"),
            std::string::npos)
      << r.report.text();
  EXPECT_FALSE(test::segmentExists(o.jobId));
}

TEST(ShareDataset, OutsideAJobTheDatasetIsLoadedAndKept) {
  const Dataset d = shareDataset([] { return makeSynthetic(config(), Split::kTrain); });
  EXPECT_EQ(sameAsReference(d, false), 0);
  EXPECT_THROW(shareDataset({}), UsageError);
}

}  // namespace
}  // namespace xs::data
