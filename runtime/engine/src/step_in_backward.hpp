// step_in_backward.hpp: the optimizer step a Model makes inside its backward
// (Model::setOptimizerInBackward): which parameter views have been stepped, and the rule a
// layer may fuse into its own kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "update_rules.hpp"
#include "xspawn/engine/params.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine::detail {

class StepInBackward {
 public:
  // Begins opt's step over params (Optimizer::beginViews).
  StepInBackward(ParamStore& params, optim::Optimizer& opt);
  // Steps views [first, last] from the store's gradients, those no kernel stepped itself.
  void ready(std::size_t first, std::size_t last);
  // A kernel made view i's step itself.
  void stepped(std::size_t i) { done_[i] = 1; }
  // The step a kernel may make itself (SGD, Adam or AdamW), or null (another optimizer).
  const FusedStep* fused() const { return fused_.rule != FusedStep::Rule::kNone ? &fused_ : nullptr; }
  // Steps the views no module reported, then ends the step (Optimizer::endViews).
  void finish();

 private:
  ParamStore& params_;
  optim::Optimizer& opt_;
  std::vector<std::uint8_t> done_;
  FusedStep fused_{};
};

// Why opt cannot step inside backward (its stepsByViews() is false): a UsageError's message.
std::string onlyAllAtOnce(const optim::Optimizer& opt);

// The step an optimizer began in beginViews, when it is optim::SGD, Adam or AdamW; rule kNone
// otherwise (optim.cpp).
FusedStep fusableStep(const optim::Optimizer& opt);

}  // namespace xs::engine::detail
