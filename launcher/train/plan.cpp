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
  // The datasets' one copy (shareDataset, from the top), then the gradients (from the bottom).
  const std::size_t grads = (gradientFloats + xs::kStepStats) * sizeof(float);
  return static_cast<std::size_t>(datasetBytes) + (grads + 63) / 64 * 64 + (64u << 10);
}

std::string makePlan(const TrainOptions& o) {
  engine::parsePrecision(o.precision);
  engine::parseMemorySize(o.deviceMemory);
  const std::size_t grads = gradientFloats(o);
  const SplitBytes data = checkDatasetFiles(o);
  if (!o.resume.empty()) readTrainState(o.resume);
  nlohmann::json j = {{"shared_heap_bytes", sharedHeapBytes(grads, data.train + data.test)}};
  return j.dump();
}

}  // namespace xs::train
