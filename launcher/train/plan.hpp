// plan.hpp: the launcher's `xspawn-train --plan`: validate everything cheaply in one process and
// say how much shared heap each rank needs (the flat gradient buffer plus the step's statistics).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "options.hpp"

namespace xs::train {

// Floats in the model's flat gradient buffer, without building its weights.
// Throws the engine's errors for an unknown model or an unusable image size.
std::size_t gradientFloats(const TrainOptions& o);

// Bytes of shared heap one rank needs: the datasets' one copy (datasetBytes: what
// data::shareDataset takes from the top of every rank's region, data::sharedDatasetBytes), then
// gradients + statistics, 64-byte aligned, plus slack.
std::size_t sharedHeapBytes(std::size_t gradientFloats, std::uint64_t datasetBytes);

// Validates the model, image size, device options, dataset files and the checkpoint to resume;
// returns the plan's JSON line. Throws on a bad input.
std::string makePlan(const TrainOptions& o);

}  // namespace xs::train
