// train_checkpoint.hpp: training checkpoints in a directory, committed atomically:
//   DIR/step-<N>.xsckpt  model + optimizer state in the engine's checkpoint format
//   DIR/latest.json      the training state (epoch, step, sampler position, settings) naming it
// The weights file is written and fsynced first; latest.json is written to a temporary file,
// fsynced and renamed over the old one (the commit), then the directory is fsynced and the
// previous weights file removed. A crash at any point leaves the previous checkpoint usable;
// a failed write leaves no partial file behind.
#pragma once

#include <cstdint>
#include <string>

#include "xspawn/data/sampler.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/optim.hpp"

namespace xs::train {

struct TrainState {
  std::int64_t epoch = 0;  // the epoch the sampler is in
  std::int64_t step = 0;   // optimizer steps done
  data::SamplerState sampler;
  int worldSize = 1;
  int batchSize = 0;
  std::string model;
  std::string dataset;
  std::uint64_t seed = 0;
  std::string weights;     // file name of the weights, in the same directory
};

// Writes a checkpoint into dir (created if needed), first removing the partial files a save
// killed mid-write left there (step-*.xsckpt.tmp, latest.json.tmp). Throws UsageError when dir
// cannot be created, CheckpointError when a write fails (its partial files removed, the
// previous checkpoint still committed).
void saveTrainCheckpoint(const std::string& dir, engine::Model& model, optim::Optimizer& opt,
                         const TrainState& state);
// Reads latest.json of a checkpoint directory (or that file itself). Throws UsageError.
TrainState readTrainState(const std::string& dirOrFile);
// Restores model and optimizer; returns the state. Throws UsageError / the engine's errors.
TrainState loadTrainCheckpoint(const std::string& dirOrFile, engine::Model& model, optim::Optimizer& opt);

}  // namespace xs::train
