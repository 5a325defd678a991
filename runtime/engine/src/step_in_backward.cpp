// step_in_backward.cpp: an optimizer's step made inside a model's backward, view by view as
// backward finishes their gradients (Model::setOptimizerInBackward).
#include "step_in_backward.hpp"

namespace xs::engine::detail {

StepInBackward::StepInBackward(ParamStore& params, optim::Optimizer& opt)
    : params_(params), opt_(opt), done_(params.views().size(), 0) {
  opt_.beginViews();
  fused_ = fusableStep(opt_);
}

void StepInBackward::ready(std::size_t first, std::size_t last) {
  const auto& views = params_.views();
  for (std::size_t i = first; i <= last; ++i) {
    if (done_[i]) continue;
    done_[i] = 1;
    const float* g = params_.grad(i);  // a view nothing wrote reads as zeros
    opt_.stepView(views[i].offset, views[i].count, g);
  }
}

void StepInBackward::finish() {
  if (!done_.empty()) ready(0, done_.size() - 1);
  opt_.endViews();
}

}  // namespace xs::engine::detail
