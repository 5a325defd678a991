// loader_test.cpp: ParallelLoader ordering and determinism across thread counts (none: built in
// next()), transfer hook, prefetch bound, error propagation, resume from a saved state, and
// shutdown mid-epoch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "test_util.hpp"
#include "xspawn/data/loader.hpp"
#include "xspawn/data/synthetic.hpp"
#include "xspawn/spawn.hpp"

namespace xs::data {
namespace {

Dataset smallDataset(std::int64_t n = 203) {
  SyntheticConfig c;
  c.trainCount = n;
  c.height = 12;
  c.width = 10;
  return makeSynthetic(c, Split::kTrain);
}

Transform augmenting(const Dataset& d) {
  TransformConfig c;
  c.crop = 8;
  c.cropPadding = 2;
  c.horizontalFlip = true;
  c.mean = {0.5f};
  c.std = {0.25f};
  return Transform(c, d.channels, d.height, d.width);
}

LoaderConfig config(int threads, int batch = 16, int prefetch = 3) {
  LoaderConfig c;
  c.batchSize = batch;
  c.numThreads = threads;
  c.prefetch = prefetch;
  c.seed = 11;
  return c;
}

std::vector<Batch> drain(ParallelLoader& loader) {
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

TEST(Loader, SameBatchesInOrderWithNoneOneOrThreeThreads) {
  const Dataset d = smallDataset();
  const SamplerConfig sc{d.size(), 2, 1, true, 5, false};
  ParallelLoader one(d, augmenting(d), DistributedSampler(sc), config(1));
  ParallelLoader three(d, augmenting(d), DistributedSampler(sc), config(3));
  ParallelLoader none(d, augmenting(d), DistributedSampler(sc), config(0));
  for (std::int64_t epoch : {0, 1}) {
    one.startEpoch(epoch);
    three.startEpoch(epoch);
    none.startEpoch(epoch);
    const auto a = drain(one);
    const auto b = drain(three);
    const auto c = drain(none);
    ASSERT_EQ(a.size(), 7u);  // ceil(ceil(203 / 2) / 16)
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), c.size());
    std::vector<std::int64_t> seen;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].index, static_cast<std::int64_t>(i));
      EXPECT_EQ(a[i].epoch, epoch);
      EXPECT_EQ(a[i].images, b[i].images);
      EXPECT_EQ(a[i].labels, b[i].labels);
      EXPECT_EQ(a[i].sampleIndices, b[i].sampleIndices);
      EXPECT_EQ(c[i].index, a[i].index);
      EXPECT_EQ(c[i].epoch, epoch);
      EXPECT_EQ(c[i].size, a[i].size);
      EXPECT_EQ(c[i].images, a[i].images);
      EXPECT_EQ(c[i].labels, a[i].labels);
      EXPECT_EQ(c[i].sampleIndices, a[i].sampleIndices);
      seen.insert(seen.end(), a[i].sampleIndices.begin(), a[i].sampleIndices.end());
      for (int k = 0; k < a[i].size; ++k) EXPECT_EQ(a[i].labels[k], d.labels[a[i].sampleIndices[k]]);
    }
    EXPECT_EQ(a.back().size, 102 - 6 * 16);
    EXPECT_EQ(a[0].channels, 1);
    EXPECT_EQ(a[0].height, 8);
    EXPECT_EQ(a[0].images.size(), 16u * 8 * 8);
    DistributedSampler ref(sc);
    ref.setEpoch(epoch);
    EXPECT_EQ(seen, ref.indices());
  }
}

TEST(Loader, RecycledBuffersGiveTheSameBatches) {
  const Dataset d = smallDataset();
  const SamplerConfig sc{d.size(), 1, 0, true, 3, false};
  ParallelLoader plain(d, augmenting(d), DistributedSampler(sc), config(2, 32));
  for (int threads : {2, 0}) {
    SCOPED_TRACE(threads);
    ParallelLoader reusing(d, augmenting(d), DistributedSampler(sc), config(threads, 32));
    for (std::int64_t epoch : {0, 1}) {
      plain.startEpoch(epoch);
      reusing.startEpoch(epoch);
      const auto want = drain(plain);
      std::size_t i = 0;
      while (auto b = reusing.next()) {
        ASSERT_LT(i, want.size());
        EXPECT_EQ(b->images, want[i].images);
        EXPECT_EQ(b->images.size(), static_cast<std::size_t>(b->size) * 64);
        ++i;
        reusing.recycle(std::move(*b));
      }
      EXPECT_EQ(i, want.size());
    }
  }
}

TEST(Loader, EpochsDifferAndDropLastDropsTheShortBatch) {
  const Dataset d = smallDataset();
  LoaderConfig c = config(2);
  c.dropLast = true;
  ParallelLoader loader(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 5, false}), c);
  EXPECT_EQ(loader.batchesPerEpoch(), 12);  // 203 / 16
  loader.startEpoch(0);
  const auto e0 = drain(loader);
  loader.startEpoch(1);
  const auto e1 = drain(loader);
  ASSERT_EQ(e0.size(), 12u);
  ASSERT_EQ(e1.size(), 12u);
  EXPECT_NE(e0[0].sampleIndices, e1[0].sampleIndices);
  EXPECT_FALSE(loader.next().has_value());
}

TEST(Loader, TransferHookRunsInTheBackgroundWithinThePrefetchBound) {
  const Dataset d = smallDataset();
  std::atomic<std::int64_t> delivered{0};
  std::atomic<bool> overrun{false};
  std::atomic<int> calls{0};
  const auto consumer = std::this_thread::get_id();
  LoaderConfig c = config(3, 8, 2);
  c.transfer = [&](Batch& b) {
    if (std::this_thread::get_id() == consumer) overrun = true;
    if (b.index >= delivered + c.prefetch + 1) overrun = true;
    b.device = static_cast<int>(b.index * 10);
    ++calls;
  };
  ParallelLoader loader(d, augmenting(d), DistributedSampler({d.size(), 1, 0, false, 0, false}), c);
  loader.startEpoch(0);
  while (auto b = loader.next()) {
    ++delivered;
    ASSERT_EQ(std::any_cast<int>(b->device), b->index * 10);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_EQ(calls.load(), 26);  // ceil(203 / 8)
  EXPECT_FALSE(overrun.load());
  EXPECT_EQ(loader.stats().batches, 26);
  EXPECT_EQ(loader.stats().samples, 203);
}

// Without threads, next() builds each batch itself: the hook runs on the consumer's thread, in
// batch order, one batch at a time, and the build's time counts as the loader's.
TEST(Loader, WithoutThreadsNextBuildsEachBatchOnTheConsumersThread) {
  const Dataset d = smallDataset();
  const auto consumer = std::this_thread::get_id();
  std::vector<std::int64_t> order;
  bool elsewhere = false;
  LoaderConfig c = config(0, 8);
  c.transfer = [&](Batch& b) {
    if (std::this_thread::get_id() != consumer) elsewhere = true;
    order.push_back(b.index);
    b.device = static_cast<int>(b.index * 10);
  };
  ParallelLoader loader(d, augmenting(d), DistributedSampler({d.size(), 1, 0, false, 0, false}), c);
  EXPECT_FALSE(loader.next().has_value());  // not started
  loader.startEpoch(0);
  std::int64_t delivered = 0;
  while (auto b = loader.next()) {
    EXPECT_EQ(std::any_cast<int>(b->device), b->index * 10);
    EXPECT_EQ(static_cast<std::int64_t>(order.size()), ++delivered);  // nothing built ahead
  }
  EXPECT_FALSE(elsewhere);
  ASSERT_EQ(order.size(), 26u);  // ceil(203 / 8)
  for (std::size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<std::int64_t>(i));
  EXPECT_EQ(loader.stats().batches, 26);
  EXPECT_EQ(loader.stats().samples, 203);
  EXPECT_GT(loader.stats().buildSeconds, 0.0);
  EXPECT_EQ(loader.stats().waitSeconds, 0.0);
  loader.startEpoch(1);
  ASSERT_TRUE(loader.next().has_value());
  loader.stop();  // pending batches are dropped, as with threads
  EXPECT_FALSE(loader.next().has_value());
}

class LoaderErrors : public ::testing::TestWithParam<int> {};  // param: threads

TEST_P(LoaderErrors, ReraisesBuildErrorsForTheirBatch) {
  const Dataset d = smallDataset();
  LoaderConfig c = config(GetParam());
  c.transfer = [](Batch& b) {
    if (b.index == 3) throw std::runtime_error("device full at batch 3");
  };
  ParallelLoader loader(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 0, false}), c);
  loader.startEpoch(0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next().has_value());
  try {
    loader.next();
    FAIL() << "expected the hook's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "device full at batch 3");
  }
  EXPECT_EQ(loader.state().position, 4 * 16);  // the failed batch counts as passed
  EXPECT_EQ(loader.next()->index, 4);         // the loader keeps going after a failed batch
  EXPECT_EQ(loader.state().position, 5 * 16);
}

INSTANTIATE_TEST_SUITE_P(ThreadsOrNone, LoaderErrors, ::testing::Values(3, 0),
                         [](const auto& info) { return info.param ? "threads" : "none"; });

TEST(Loader, ResumesFromASavedState) {
  const Dataset d = smallDataset();
  const SamplerConfig sc{d.size(), 3, 0, true, 8, false};
  ParallelLoader full(d, augmenting(d), DistributedSampler(sc), config(2));
  full.startEpoch(2);
  const auto all = drain(full);
  ParallelLoader first(d, augmenting(d), DistributedSampler(sc), config(2));
  first.startEpoch(2);
  for (int i = 0; i < 3; ++i) first.next();
  const SamplerState saved = first.state();
  EXPECT_EQ(saved, (SamplerState{2, 48}));
  for (int threads : {1, 0}) {
    SCOPED_TRACE(threads);
    ParallelLoader resumed(d, augmenting(d), DistributedSampler(sc), config(threads));
    resumed.restore(saved);
    resumed.startEpoch(2);
    const auto rest = drain(resumed);
    ASSERT_EQ(rest.size() + 3, all.size());
    for (std::size_t i = 0; i < rest.size(); ++i) {
      EXPECT_EQ(rest[i].index, all[i + 3].index);
      EXPECT_EQ(rest[i].images, all[i + 3].images);
    }
    EXPECT_EQ(resumed.state(), (SamplerState{2, sc.datasetSize / 3 + 1}));  // this rank's 68
    resumed.startEpoch(3);  // the next epoch starts from 0 again
    EXPECT_EQ(resumed.next()->index, 0);
  }
}

TEST(Loader, ShutsDownCleanlyMidEpochAndCountsWaiting) {
  const Dataset d = smallDataset(2000);
  LoaderConfig c = config(3, 8, 4);
  c.transfer = [](Batch&) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
  const auto t0 = std::chrono::steady_clock::now();
  {
    ParallelLoader loader(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 0, false}), c);
    loader.startEpoch(0);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    EXPECT_GT(loader.stats().waitSeconds, 0.0);
    EXPECT_GT(loader.stats().transferSeconds, 0.0);
  }  // destroyed with ~250 batches still to go
  {
    ParallelLoader idle(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 0, false}), c);
    idle.startEpoch(0);  // destroyed without consuming anything
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);
}

// The default: a thread where the machine has a core to spare for it, else none; outside a job
// this process is one rank, not bound.
TEST(Loader, ThreadsByDefaultOnlyWhereACoreIsToSpare) {
  EXPECT_EQ(defaultLoaderThreads(1, 2, false), 1);  // a core to spare
  EXPECT_EQ(defaultLoaderThreads(2, 2, false), 0);  // a rank on every core
  EXPECT_EQ(defaultLoaderThreads(8, 2, false), 0);  // ranks share the cores
  EXPECT_EQ(defaultLoaderThreads(1, 4, true), 0);   // bound: its thread would share the rank's core
  const Dataset d = smallDataset();
  ParallelLoader byDefault(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 0, false}), LoaderConfig{});
  EXPECT_EQ(byDefault.threads(), defaultLoaderThreads(1, xs::usableCores(), false));
  ParallelLoader none(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 0, false}), config(0));
  EXPECT_EQ(none.threads(), 0);
  EXPECT_EQ(ParallelLoader(d, augmenting(d), DistributedSampler({d.size(), 1, 0, true, 0, false}), config(3)).threads(),
            3);
}

TEST(Loader, RejectsBadSettings) {
  const Dataset d = smallDataset();
  const DistributedSampler s({d.size(), 1, 0, true, 0, false});
  EXPECT_THROW(ParallelLoader(d, augmenting(d), s, config(1, 0)), UsageError);
  EXPECT_THROW(ParallelLoader(d, augmenting(d), s, config(-2)), UsageError);
  EXPECT_THROW(ParallelLoader(d, augmenting(d), s, config(1, 16, 0)), UsageError);
  EXPECT_THROW(ParallelLoader(d, augmenting(d), DistributedSampler({5, 1, 0, true, 0, false}), config(1)),
               UsageError);
  EXPECT_THROW(ParallelLoader(d, Transform({}, 3, 12, 10), s, config(1)), UsageError);
  ParallelLoader notStarted(d, augmenting(d), s, config(1));
  EXPECT_FALSE(notStarted.next().has_value());
}

}  // namespace
}  // namespace xs::data
