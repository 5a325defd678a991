// sampler_test.cpp: DistributedSampler semantics (coverage, equal counts, padding, drop_last,
// epochs, seeds, state save/restore).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "test_util.hpp"
#include "xspawn/data/sampler.hpp"

namespace xs::data {
namespace {

std::vector<std::vector<std::int64_t>> allRanks(std::int64_t n, int world, bool shuffle, bool dropLast,
                                                std::uint64_t seed = 0, std::int64_t epoch = 0) {
  std::vector<std::vector<std::int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s({n, world, r, shuffle, seed, dropLast});
    s.setEpoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, DisjointCoverageWhenDivisible) {
  const auto ranks = allRanks(24, 4, true, false, 5);
  std::vector<std::int64_t> all;
  for (const auto& r : ranks) {
    EXPECT_EQ(r.size(), 6u);
    all.insert(all.end(), r.begin(), r.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> want(24);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(all, want);
}

TEST(Sampler, PaddingRepeatsFromTheStart) {
  // 10 samples, 4 ranks: ceil(10/4) = 3 each, total 12, positions 10 and 11 repeat 0 and 1.
  const auto ranks = allRanks(10, 4, false, false);
  EXPECT_EQ(ranks[0], (std::vector<std::int64_t>{0, 4, 8}));
  EXPECT_EQ(ranks[1], (std::vector<std::int64_t>{1, 5, 9}));
  EXPECT_EQ(ranks[2], (std::vector<std::int64_t>{2, 6, 0}));
  EXPECT_EQ(ranks[3], (std::vector<std::int64_t>{3, 7, 1}));
}

TEST(Sampler, PaddingCyclesWhenLargerThanTheDataset) {
  const auto ranks = allRanks(2, 5, false, false);  // total 5: 0 1 0 1 0
  EXPECT_EQ(ranks[2], (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ranks[3], (std::vector<std::int64_t>{1}));
  EXPECT_EQ(ranks[4], (std::vector<std::int64_t>{0}));
}

TEST(Sampler, PaddingWithShuffleUsesThePermutationStart) {
  const std::vector<std::int64_t> perm = seededPermutation(10, 3 + 2);
  const auto ranks = allRanks(10, 4, true, false, 3, 2);
  EXPECT_EQ(ranks[1], (std::vector<std::int64_t>{perm[1], perm[5], perm[9]}));
  EXPECT_EQ(ranks[2], (std::vector<std::int64_t>{perm[2], perm[6], perm[0]}));
}

TEST(Sampler, DropLastDropsTheTail) {
  const auto ranks = allRanks(10, 4, false, true);  // floor(10/4) = 2 each; 8, 9 dropped
  EXPECT_EQ(ranks[0], (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(ranks[3], (std::vector<std::int64_t>{3, 7}));
  DistributedSampler s({10, 4, 0, true, 0, true});
  EXPECT_EQ(s.numSamples(), 2);
  EXPECT_EQ(s.totalSize(), 8);
  std::vector<std::int64_t> seen;
  for (const auto& r : allRanks(10, 4, true, true, 9)) seen.insert(seen.end(), r.begin(), r.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());  // still disjoint
}

TEST(Sampler, EpochChangesTheOrderAndSeedFixesIt) {
  DistributedSampler a({100, 2, 1, true, 42, false});
  DistributedSampler b({100, 2, 1, true, 42, false});
  EXPECT_EQ(a.indices(), b.indices());
  const auto epoch0 = a.indices();
  a.setEpoch(1);
  EXPECT_NE(a.indices(), epoch0);
  b.setEpoch(1);
  EXPECT_EQ(a.indices(), b.indices());
  DistributedSampler c({100, 2, 1, true, 43, false});
  EXPECT_NE(c.indices(), epoch0);
  // torch semantics: the permutation depends on seed + epoch only.
  DistributedSampler d({100, 2, 1, true, 41, false});
  d.setEpoch(1);
  EXPECT_EQ(d.indices(), epoch0);
}

TEST(Sampler, NoShuffleIsInOrder) {
  const auto ranks = allRanks(6, 2, false, false);
  EXPECT_EQ(ranks[0], (std::vector<std::int64_t>{0, 2, 4}));
  EXPECT_EQ(ranks[1], (std::vector<std::int64_t>{1, 3, 5}));
}

TEST(Sampler, StateSavesAndRestores) {
  DistributedSampler s({50, 3, 2, true, 7, false});
  s.setEpoch(4);
  s.advance(5);
  const SamplerState saved = s.state();
  EXPECT_EQ(saved, (SamplerState{4, 5}));
  DistributedSampler t({50, 3, 2, true, 7, false});
  t.restore(saved);
  EXPECT_EQ(t.epoch(), 4);
  EXPECT_EQ(t.position(), 5);
  EXPECT_EQ(t.indices(), s.indices());
  t.advance(1000);
  EXPECT_EQ(t.position(), t.numSamples());
  EXPECT_THROW(t.restore({0, t.numSamples() + 1}), UsageError);
  t.setEpoch(5);
  EXPECT_EQ(t.position(), 0);
}

TEST(Sampler, RejectsBadSettings) {
  EXPECT_THROW(DistributedSampler({10, 2, 2, true, 0, false}), UsageError);
  EXPECT_THROW(DistributedSampler({10, 0, 0, true, 0, false}), UsageError);
  EXPECT_THROW(DistributedSampler({0, 1, 0, true, 0, false}), UsageError);
  EXPECT_THROW(DistributedSampler({3, 4, 0, true, 0, true}), UsageError);  // nothing per rank
}

TEST(Sampler, PermutationIsAPermutation) {
  auto p = seededPermutation(1000, 99);
  std::sort(p.begin(), p.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], i);
}

}  // namespace
}  // namespace xs::data
