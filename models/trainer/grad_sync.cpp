// grad_sync.cpp: binding the gradients to the shared heap and the step's all-reduce-mean.
#include "grad_sync.hpp"

#include "plan.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::train {

GradientSync::GradientSync(engine::Model& model, std::size_t bucketBytes)
    : model_(model), count_(model.gradientCount()) {
  static_assert(kStatFloats * sizeof(float) == 64, "the gradients after the statistics stay 64-byte aligned");
  stats_ = local_;
  if (xs::world_size() == 1) return;
  shared_ = static_cast<float*>(xs::shared_alloc((kStatFloats + count_) * sizeof(float)));
  stats_ = shared_;
  model_.bindGradients(shared_ + kStatFloats, count_);
  const std::size_t bucketFloats = bucketBytes / sizeof(float);
  if (bucketFloats == 0 || bucketFloats >= count_) return;  // one all-reduce after backward
  reducer_ = std::make_unique<BucketReducer>(shared_, kStatFloats + count_, kStatFloats, bucketFloats);
  model_.setGradReadyHook([this](std::size_t offset, std::size_t count) { reducer_->ready(offset, count); });
}

GradientSync::~GradientSync() {
  if (reducer_) model_.setGradReadyHook({});
}

void GradientSync::beginStep() {
  if (reducer_) reducer_->begin();
}

void GradientSync::setStats(float loss, float correct) {
  for (std::size_t i = 0; i < kStatFloats; ++i) stats_[i] = 0.f;
  stats_[0] = loss;
  stats_[1] = correct;
}

void GradientSync::allReduce() {
  if (!shared_) return;
  xs::CollectiveOptions opt;
  opt.tag = "gradients";
  if (reducer_)
    reducer_->finish();
  else
    xs::all_reduce(shared_, shared_, kStatFloats + count_, xs::DType::kFloat32, xs::ReduceOp::kMean, opt);
  engine::ParamStore& buffers = model_.buffers();
  if (buffers.size() > 0) {
    opt.tag = "running statistics";
    xs::all_reduce(buffers.values(), buffers.values(), buffers.size(), xs::DType::kFloat32,
                   xs::ReduceOp::kMean, opt);
  }
}

}  // namespace xs::train
