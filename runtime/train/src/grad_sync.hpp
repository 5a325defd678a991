// grad_sync.hpp: what xs::optimizer_step keeps with a model (Model::Attachment). The model's
// flat gradient buffer lives in the job's shared heap (xs::shared_alloc + Model::bindGradients),
// after kStepStats floats of step statistics, so in-place, zero-copy all-reduce-means average
// both: one after backward, or (bucketBytes > 0) buckets reduced by a communication thread while
// backward still runs.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "bucket_reducer.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/train.hpp"

namespace xs::detail {

class GradientSync : public engine::Model::Attachment {
 public:
  // Checks that every rank's model has the same layout, then binds the model's gradients to
  // shared memory (when the job has more than one rank; the current gradients are copied there);
  // with bucketBytes > 0, reduces them in buckets of that size during backward.
  GradientSync(engine::Model& model, std::size_t bucketBytes);
  ~GradientSync() override;

  // The gradients of the model it belongs to, averaged over ranks in place with `stats`
  // (written back); also averages the model's running statistics (BatchNorm).
  void allReduce(std::span<float> stats);
  bool zeroCopy() const { return shared_ != nullptr; }
  // All-reduces of the gradients in the last step (1 without buckets).
  int buckets() const { return reducer_ && armed_ ? reducer_->bucketsLastStep() : 1; }
  // Before a backward: its finished layers go out in buckets (made by data_parallel before the
  // first backward; after every step).
  void arm() {
    if (!reducer_) return;
    reducer_->begin();
    armed_ = true;
  }

 private:
  engine::Model& model_;
  std::size_t count_ = 0;
  float* shared_ = nullptr;  // statistics + gradients in the shared heap
  std::unique_ptr<BucketReducer> reducer_;
  bool armed_ = false;  // the current backward reports its layers to reducer_
};

// The model's GradientSync, made with `options` at the first call.
GradientSync& gradientSync(engine::Model& model, const DataParallelOptions& options = {});

}  // namespace xs::detail
