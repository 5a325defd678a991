// train.hpp: data-parallel training in a worker's own function, as torch_xla's xm module gives
// it: the emulated core a worker trains on, xs::optimizer_step (the mean over ranks of the
// gradients and BatchNorm statistics, then the update), evaluation over the whole test set split
// across ranks, the replica check, and a master-only atomic save / load of model + optimizer +
// sampler state for a bit-exact resume. Every call here is collective: every rank makes it, in
// the same order (a rank that does not is named in a DivergenceError, never a hang).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "xspawn/data/dataset.hpp"
#include "xspawn/data/loader.hpp"
#include "xspawn/data/sampler.hpp"
#include "xspawn/data/transform.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/optim.hpp"

namespace xs {

// Settings of this worker's emulated core: ordinal = the rank, pinned to the CPU the launcher
// bound the worker to (--bind-to core), with `memory` bytes of device memory.
engine::DeviceOptions device_options(engine::Precision precision = engine::Precision::kFp32,
                                     std::size_t memoryBytes = std::size_t{4} << 30);

// One local training step on a loader's batch: zero the gradients, forward, loss, backward
// (engine::Model::trainStep). ShapeError when the batch's images are not of the model's input
// shape (the transform must resize or convert them). Returns this rank's loss and correct count.
engine::StepResult train_step(engine::Model& model, const data::Batch& batch);

// How optimizer_step reduces a model's gradients (optional: the defaults need no call).
struct DataParallelOptions {
  // > 0: gradients are all-reduced in buckets of about this many bytes by a communication
  // thread while backward still runs (DistributedDataParallel's bucket_cap_mb); 0: one
  // all-reduce after backward.
  std::size_t bucketBytes = 0;
};

// Puts the model's gradient buffer in the job's shared memory, so optimizer_step all-reduces it
// in place with no copy, from the first step on. Optional: optimizer_step does it at its first
// call (that step copies the gradients in once). Call it on every rank, before the first
// backward, to bucket. No shared memory needs to be sized for it (no --shared-heap).
void data_parallel(engine::Model& model, const DataParallelOptions& options = {});

// The mean over ranks of the model's gradients and of its running statistics (BatchNorm), then
// optimizer.step(): every replica applies the same update and stays identical (torch_xla's
// xm.optimizer_step). `stats` (at most kStepStats floats, e.g. the step's loss and correct
// count) are averaged over ranks with the gradients, in the same all-reduce, and written back.
// UsageError when the optimizer was built for another model; ShapeError when the ranks' models
// differ; with one rank it only steps. With one rank, the optimizer may instead step inside the
// model's backward (engine::Model::setOptimizerInBackward; `xspawn train --nprocs 1` does):
// optimizer_step then only counts the step. With more ranks that is a UsageError, as the
// gradients must be all-reduced before the update.
inline constexpr std::size_t kStepStats = 16;
void optimizer_step(engine::Model& model, optim::Optimizer& optimizer, std::span<float> stats = {});

// Gradient all-reduces optimizer_step made in its last call (1 without buckets, 0 with one rank).
int gradient_buckets(const engine::Model& model);
// Whether the model's gradients are reduced in place in shared memory.
bool gradients_zero_copy(const engine::Model& model);

// Accuracy and loss over a whole dataset split across ranks (rank r takes images r, r + N, ...,
// as DistributedSampler(shuffle=False)), in batches of batchSize; counts and losses are summed
// over ranks, so every rank gets the same result.
struct EvalResult {
  double accuracy = 0;
  double loss = 0;  // mean cross-entropy per image
  std::int64_t correct = 0;
  std::int64_t count = 0;
  // Rank 0's share in whole batches only (the last partial batch dropped): what a PyTorch/XLA
  // script printing the master's accuracy with drop_last=True reports (seed 000's "1080 of 1248").
  std::int64_t masterCorrect = 0;
  std::int64_t masterCount = 0;
};
EvalResult evaluate(engine::Model& model, const data::Dataset& dataset, const data::Transform& transform,
                    int batchSize);

// FNV-1a over the bytes of the parameters and running statistics: equal on every rank while the
// replicas are identical.
std::uint64_t weights_hash(engine::Model& model);
// Every rank's weights_hash, in rank order (a rendezvous).
std::vector<std::uint64_t> gather_weights_hashes(engine::Model& model);

// What a checkpoint carries besides the weights and the optimizer state.
struct TrainingState {
  std::int64_t epoch = 0;      // the epoch the sampler is in
  std::int64_t step = 0;       // optimizer steps done
  data::SamplerState sampler{};  // ParallelLoader::state(): resumes mid-epoch
  std::string user{};          // anything the program wants back (e.g. its settings as JSON)
};

// Saves model + optimizer + state to `path`: the master writes it atomically (a temporary file,
// fsync, rename: a crash leaves the previous file intact), the others wait for it (torch_xla's
// xm.save). Call it on every rank. CheckpointError when it cannot be written.
void save(const std::string& path, engine::Model& model, optim::Optimizer& optimizer,
          const TrainingState& state = {});
// Restores a checkpoint written by save into a model and optimizer built as when it was saved
// (every rank reads it); also sets the model's step counter, so dropout masks continue as in an
// uninterrupted run. CheckpointError for a missing, corrupt file or one of another network or
// optimizer, leaving the model untouched.
TrainingState load(const std::string& path, engine::Model& model, optim::Optimizer& optimizer);

}  // namespace xs
