// plan.cpp: cheap validation before any worker starts, and the shared-heap plan.
#include "plan.hpp"

#include <nlohmann/json.hpp>

#include "data_setup.hpp"
#include "train_checkpoint.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/models.hpp"
#include "xspawn/train.hpp"

namespace xs::train {

std::size_t gradientFloats(const TrainOptions& o) {
  models::ModelConfig cfg;
  cfg.name = o.model;
  cfg.channels = modelChannels(o);
  cfg.imageSize = o.imageSize;
  cfg.numClasses = 10;
  engine::Network net = models::network(cfg);
  engine::ParamStore params(true), buffers(false);
  nn::BuildInfo info{params, buffers};
  net.layers->build(net.input, "", info);
  return params.size();
}

std::size_t sharedHeapBytes(std::size_t gradientFloats, std::uint64_t datasetBytes) {
  // Every rank's heap cursor passes the datasets' one copy (shareDataset), then the gradients.
  const auto block = [](std::uint64_t bytes) { return static_cast<std::size_t>((bytes + 63) / 64 * 64); };
  return block(datasetBytes) + block((gradientFloats + xs::kStepStats) * sizeof(float)) + (64u << 10);
}

std::string makePlan(const TrainOptions& o) {
  engine::parsePrecision(o.precision);
  engine::parseMemorySize(o.deviceMemory);
  const std::size_t grads = gradientFloats(o);
  const SplitBytes data = checkDatasetFiles(o);
  if (!o.resume.empty()) readTrainState(o.resume);
  // The two splits' pixels, each a block of its own in the heap.
  nlohmann::json j = {{"shared_heap_bytes", sharedHeapBytes(grads, (data.train + 63) / 64 * 64 + data.test)}};
  return j.dump();
}

}  // namespace xs::train
