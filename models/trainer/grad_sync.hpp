// grad_sync.hpp: the optimizer step's all-reduce. The model's flat gradient buffer lives in the
// job's shared heap (xs::shared_alloc + Model::bindGradients), followed by a few floats of step
// statistics, so one in-place, zero-copy all-reduce-mean averages both.
#pragma once

#include <cstddef>

#include "xspawn/engine/model.hpp"

namespace xs::train {

class GradientSync {
 public:
  // Binds the model's gradients to shared memory when the job has more than one rank.
  explicit GradientSync(engine::Model& model);

  // The step's statistics (local before allReduce, means over ranks after).
  void setStats(float loss, float correct);
  float loss() const { return stats_[0]; }
  float correct() const { return stats_[1]; }  // mean over ranks of the correct count

  // Mean over ranks of gradients and statistics, in place; also averages the model's
  // running statistics (BatchNorm) so every replica keeps the same ones.
  void allReduce();
  bool zeroCopy() const { return shared_ != nullptr; }
  std::size_t bytes() const { return (count_ + 16) * sizeof(float); }

 private:
  engine::Model& model_;
  std::size_t count_ = 0;
  float* shared_ = nullptr;  // gradients + statistics in the shared heap
  float* stats_ = nullptr;
  float local_[16] = {};
};

}  // namespace xs::train
