// sampler.cpp: DistributedSampler (torch semantics: shuffle by seed + epoch, pad or drop, stride).
#include "xspawn/data/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "xspawn/error.hpp"
#include "xspawn/data/rng.hpp"

namespace xs::data {

std::vector<std::int64_t> seededPermutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  SampleRng rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

DistributedSampler::DistributedSampler(const SamplerConfig& config) : config_(config) {
  if (config.numReplicas < 1 || config.rank < 0 || config.rank >= config.numReplicas) {
    XS_THROW(UsageError, "sampler: rank " + std::to_string(config.rank) +
                                   " is not in [0, " + std::to_string(config.numReplicas) +
                                   "); the world size must be >= 1 and the rank below it");
  }
  if (config.datasetSize <= 0) {
    XS_THROW(UsageError, "sampler: the dataset is empty (" +
                                   std::to_string(config.datasetSize) + " samples)");
  }
  const std::int64_t n = config.datasetSize;
  const std::int64_t r = config.numReplicas;
  numSamples_ = config.dropLast ? n / r : (n + r - 1) / r;
  if (numSamples_ == 0) {
    XS_THROW(UsageError, "sampler: drop_last with " + std::to_string(n) + " samples and " +
                                   std::to_string(r) + " replicas leaves no sample per rank");
  }
}

void DistributedSampler::setEpoch(std::int64_t epoch) { state_ = {epoch, 0}; }

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::int64_t n = config_.datasetSize;
  std::vector<std::int64_t> all;
  if (config_.shuffle) {
    all = seededPermutation(n, config_.seed + static_cast<std::uint64_t>(state_.epoch));
  } else {
    all.resize(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), std::int64_t{0});
  }
  const std::int64_t total = totalSize();
  if (total > n) {  // pad by repeating from the start (cycling when the padding exceeds n)
    all.reserve(static_cast<std::size_t>(total));
    for (std::int64_t i = n; i < total; ++i) all.push_back(all[static_cast<std::size_t>(i % n)]);
  }
  std::vector<std::int64_t> mine(static_cast<std::size_t>(numSamples_));
  for (std::int64_t k = 0; k < numSamples_; ++k) {
    mine[static_cast<std::size_t>(k)] = all[static_cast<std::size_t>(config_.rank + k * config_.numReplicas)];
  }
  return mine;
}

void DistributedSampler::advance(std::int64_t count) {
  state_.position = std::min(numSamples_, state_.position + std::max<std::int64_t>(count, 0));
}

void DistributedSampler::restore(const SamplerState& state) {
  if (state.epoch < 0 || state.position < 0 || state.position > numSamples_) {
    XS_THROW(UsageError, "sampler: cannot restore epoch " + std::to_string(state.epoch) +
                                   " position " + std::to_string(state.position) +
                                   "; the position must be in [0, " +
                                   std::to_string(numSamples_) +
                                   "] (was the checkpoint made with another world size?)");
  }
  state_ = state;
}

}  // namespace xs::data
