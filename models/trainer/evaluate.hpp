// evaluate.hpp: evaluation over the whole test set split across ranks (rank r takes images r,
// r + N, r + 2N, ... as PyTorch's DistributedSampler(shuffle=False); counts summed by
// all-reduce), and the replica check (hash of the flat weights on every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "xspawn/data/dataset.h"
#include "xspawn/data/transform.h"
#include "xspawn/engine/model.hpp"

namespace xs::train {

struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  std::int64_t correct = 0;
  std::int64_t count = 0;
  // Rank 0's share in whole batches only (the last partial batch dropped): what a PyTorch/XLA
  // script printing the master's accuracy with drop_last=True reports, e.g. seed 000's "1080 of
  // 1248" (8 ranks, batch 32). For comparison with such figures; `accuracy` is the real one.
  std::int64_t masterCorrect = 0;
  std::int64_t masterCount = 0;
};

// Every rank evaluates its share in batches of batchSize; the sums of correct predictions,
// losses and counts are all-reduced, so every rank gets the result.
EvalResult evaluate(engine::Model& model, const data::Dataset& test, const data::Transform& transform,
                    int batchSize);

// FNV-1a over the bytes of the parameters and the running statistics.
std::uint64_t weightsHash(engine::Model& model);

// Compares the hash across ranks (mesh_reduce). Returns every rank's hash, in rank order.
std::vector<std::uint64_t> gatherHashes(std::uint64_t hash);

}  // namespace xs::train
