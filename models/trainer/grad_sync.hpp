// grad_sync.hpp: the optimizer step's all-reduce. The model's flat gradient buffer lives in the
// job's shared heap (xs::shared_alloc + Model::bindGradients), after a few floats of step
// statistics, so in-place, zero-copy all-reduce-means average both: one after backward, or
// (bucketBytes > 0) buckets reduced by a communication thread while backward still runs.
#pragma once

#include <cstddef>
#include <memory>

#include "bucket_reducer.hpp"
#include "xspawn/engine/model.hpp"

namespace xs::train {

class GradientSync {
 public:
  // Binds the model's gradients to shared memory when the job has more than one rank; with
  // bucketBytes > 0, reduces them in buckets of that size during backward.
  GradientSync(engine::Model& model, std::size_t bucketBytes);
  ~GradientSync();

  // Before the step's forward/backward (resets the buckets).
  void beginStep();

  // The step's statistics (local before allReduce, means over ranks after).
  void setStats(float loss, float correct);
  float loss() const { return stats_[0]; }
  float correct() const { return stats_[1]; }  // mean over ranks of the correct count

  // Mean over ranks of gradients and statistics, in place (what the buckets left); also
  // averages the model's running statistics (BatchNorm) so every replica keeps the same ones.
  void allReduce();
  bool zeroCopy() const { return shared_ != nullptr; }
  // All-reduces of the gradients in the last step (1 without buckets).
  int buckets() const { return reducer_ ? reducer_->bucketsLastStep() : 1; }

 private:
  engine::Model& model_;
  std::size_t count_ = 0;
  float* shared_ = nullptr;  // statistics + gradients in the shared heap
  float* stats_ = nullptr;
  float local_[16] = {};
  std::unique_ptr<BucketReducer> reducer_;
};

}  // namespace xs::train
