// grad_sync.cpp: binding the gradients to the shared heap and the step's all-reduce-mean.
#include "grad_sync.hpp"

#include <span>

#include "plan.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::train {

GradientSync::GradientSync(engine::Model& model) : model_(model), count_(model.gradientCount()) {
  static_assert(kStatFloats == 16);
  stats_ = local_;
  if (xs::world_size() > 1) {
    shared_ = static_cast<float*>(xs::shared_alloc((count_ + kStatFloats) * sizeof(float)));
    model_.bindGradients(shared_, count_);
    stats_ = shared_ + count_;
  }
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
  xs::all_reduce(shared_, shared_, count_ + kStatFloats, xs::DType::kFloat32, xs::ReduceOp::kMean, opt);
  engine::ParamStore& buffers = model_.buffers();
  if (buffers.size() > 0) {
    opt.tag = "running statistics";
    xs::all_reduce(buffers.values(), buffers.values(), buffers.size(), xs::DType::kFloat32,
                   xs::ReduceOp::kMean, opt);
  }
}

}  // namespace xs::train
