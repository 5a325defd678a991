// sampler.hpp: a distributed sampler with the semantics of torch.utils.data.DistributedSampler:
//  - shuffle: a deterministic permutation from (seed + epoch) (our own Fisher-Yates on SplitMix64,
//    so the order is not torch's bit for bit); otherwise 0..n-1;
//  - every rank gets numSamples() indices: ceil(n / replicas), padded by repeating indices from
//    the start of the permutation; with dropLast, floor(n / replicas) and the tail dropped;
//  - rank r takes positions r, r + R, r + 2R, ... of the (padded) permutation.
// A state (epoch, position) lets a checkpoint resume mid-epoch.
#pragma once

#include <cstdint>
#include <vector>

namespace xs::data {

struct SamplerConfig {
  std::int64_t datasetSize = 0;
  int numReplicas = 1;
  int rank = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool dropLast = false;
};

struct SamplerState {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // samples of this rank's epoch already consumed
  bool operator==(const SamplerState&) const = default;
};

// A permutation of 0..n-1 determined by seed.
std::vector<std::int64_t> seededPermutation(std::int64_t n, std::uint64_t seed);

class DistributedSampler {
 public:
  explicit DistributedSampler(const SamplerConfig& config);  // throws UsageError

  void setEpoch(std::int64_t epoch);  // also rewinds position to 0
  std::int64_t epoch() const { return state_.epoch; }
  std::int64_t numSamples() const { return numSamples_; }  // per rank and epoch
  std::int64_t totalSize() const { return numSamples_ * config_.numReplicas; }
  const SamplerConfig& config() const { return config_; }

  // This rank's indices for the current epoch (all numSamples(), from position 0).
  std::vector<std::int64_t> indices() const;

  std::int64_t position() const { return state_.position; }
  void advance(std::int64_t count);  // clamps at numSamples()
  SamplerState state() const { return state_; }
  void restore(const SamplerState& state);  // throws UsageError if out of range

 private:
  SamplerConfig config_;
  std::int64_t numSamples_ = 0;
  SamplerState state_;
};

}  // namespace xs::data
