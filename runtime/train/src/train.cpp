// train.cpp: the public training calls: the worker's core settings, optimizer_step and the
// master-only atomic save / load (see xspawn/train.hpp).
#include "xspawn/train.hpp"

#include <nlohmann/json.hpp>
#include <fmt/format.h>

#include "fault.hpp"
#include "grad_sync.hpp"
#include "telemetry.hpp"
#include "xspawn/engine/checkpoint.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace xs {

engine::DeviceOptions device_options(engine::Precision precision, std::size_t memoryBytes) {
  engine::DeviceOptions d;
  d.ordinal = xs::get_ordinal();
  d.memoryBytes = memoryBytes;
  d.precision = precision;
  d.bindCpu = xs::device().cpu >= 0;
  d.cpu = xs::device().cpu;
  return d;
}

engine::StepResult train_step(engine::Model& model, const data::Batch& batch) {
  model.checkSample(engine::Shape{batch.channels, batch.height, batch.width});
  return model.trainStep(batch.images.data(), batch.labels.data(), batch.size);
}

void data_parallel(engine::Model& model, const DataParallelOptions& options) {
  XS_CHECK(model.attachment() == nullptr, UsageError,
           fmt::format("data_parallel: model '{}' is already set up for data-parallel steps; call "
                       "data_parallel once, before the first optimizer_step",
                       model.name()));
  detail::gradientSync(model, options).arm();
}

void optimizer_step(engine::Model& model, optim::Optimizer& optimizer, std::span<float> stats) {
  XS_CHECK(&optimizer.params() == &model.params(), UsageError,
           fmt::format("optimizer_step: the {} optimizer was built for another model's parameters ({} floats), "
                       "not for model '{}' ({} floats): build it from this model, e.g. optim::SGD(model, ...)",
                       optimizer.kind(), optimizer.params().size(), model.name(), model.params().size()));
  XS_CHECK(!optimizer.inBackward() || xs::world_size() == 1, UsageError,
           fmt::format("optimizer_step: the {} optimizer steps inside the backward of model '{}' "
                       "(Model::setOptimizerInBackward), which only a job of one rank can do: {} ranks must "
                       "all-reduce their gradients before the update; call setOptimizerInBackward(nullptr)",
                       optimizer.kind(), model.name(), xs::world_size()));
  {
    detail::telemetry::Span step(detail::Category::kStep, "optimizer_step");
    if (detail::fault::gArmed) detail::fault::atStep();
    detail::gradientSync(model).allReduce(stats);
    if (!optimizer.inBackward()) {  // else backward() has made the step
      detail::telemetry::Span update(detail::Category::kUpdate, "update");
      optimizer.step();
    }
  }
  detail::telemetry::stepDone();
}

int gradient_buckets(const engine::Model& model) {
  auto* sync = dynamic_cast<detail::GradientSync*>(model.attachment());
  return sync && sync->zeroCopy() ? sync->buckets() : 0;
}

bool gradients_zero_copy(const engine::Model& model) {
  auto* sync = dynamic_cast<detail::GradientSync*>(model.attachment());
  return sync && sync->zeroCopy();
}

void save(const std::string& path, engine::Model& model, optim::Optimizer& optimizer, const TrainingState& state) {
  detail::telemetry::Span span(detail::Category::kCheckpoint, "save checkpoint");
  nlohmann::json extra = {{"epoch", state.epoch},
                          {"step", state.step},
                          {"sampler_epoch", state.sampler.epoch},
                          {"sampler_position", state.sampler.position},
                          {"model_step", model.step()},
                          {"world_size", xs::world_size()},
                          {"user", state.user}};
  // The master writes; a failure there reaches every rank through the rendezvous payload, so
  // all of them throw the same error instead of the others waiting for a file that never comes.
  std::string error;
  if (xs::is_master_ordinal(false)) {
    try {
      engine::saveCheckpoint(path, model, &optimizer, extra.dump());
    } catch (const Error& e) {
      error = e.what();
    }
  }
  std::vector<std::string> outcome = xs::rendezvous("save: " + path, error);
  XS_CHECK(outcome[0].empty(), CheckpointError, fmt::format("save: the master could not write {}: {}", path, outcome[0]));
}

TrainingState load(const std::string& path, engine::Model& model, optim::Optimizer& optimizer) {
  detail::telemetry::Span span(detail::Category::kCheckpoint, "load checkpoint");
  const std::string text = engine::loadCheckpoint(path, model, &optimizer);
  TrainingState s;
  if (text.empty()) return s;  // written by engine::saveCheckpoint alone: weights only
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    XS_THROW(CheckpointError, fmt::format("load: {} has an unreadable training state ({}): it was not written by "
                                          "xs::save",
                                          path, e.what()));
  }
  const int world = j.value("world_size", xs::world_size());
  XS_CHECK(world == xs::world_size(), UsageError,
           fmt::format("load: {} was saved by a job of {} ranks, this one has {}: the sampler's position depends on "
                       "it; resume with --nprocs {}",
                       path, world, xs::world_size(), world));
  s.epoch = j.value("epoch", std::int64_t{0});
  s.step = j.value("step", std::int64_t{0});
  s.sampler.epoch = j.value("sampler_epoch", std::int64_t{0});
  s.sampler.position = j.value("sampler_position", std::int64_t{0});
  s.user = j.value("user", std::string());
  model.setStep(j.value("model_step", std::uint64_t{0}));
  return s;
}

}  // namespace xs
