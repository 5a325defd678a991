// gradient_pool.cpp: lending and taking back the activation gradients (gradient_pool.hpp).
#include "gradient_pool.hpp"

#include <algorithm>
#include <utility>

namespace xs::engine::detail {

void GradientPool::lend(Tensor& dx, const Shape& shape, const char* what) {
  const std::size_t need = shape.numel();
  auto held = std::find_if(lent_.begin(), lent_.end(), [&](const Lent& l) { return l.tensor == &dx; });
  if (held == lent_.end() && !dx.empty()) {  // a tensor of the module's own (run outside a model first)
    dx.ensure(dev_, shape, what);
    return;
  }
  if (held == lent_.end()) {
    // The smallest free buffer that fits; failing that the largest, which grows below.
    auto fit = free_.end(), largest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->floats >= need && (fit == free_.end() || it->floats < fit->floats)) fit = it;
      if (largest == free_.end() || it->floats > largest->floats) largest = it;
    }
    const auto pick = fit != free_.end() ? fit : largest;
    std::size_t floats = 0;
    if (pick != free_.end()) {
      dx = std::move(pick->tensor);
      floats = pick->floats;
      free_.erase(pick);
    }
    lent_.push_back({&dx, floats});
    held = lent_.end() - 1;
  }
  dx.ensure(dev_, shape, what);  // keeps the memory when big enough (the contents need not survive)
  held->floats = std::max(held->floats, need);
  // Its flags as a new tensor's: the module sets those it needs.
  dx.setLayout(Layout::kNchw);
  dx.setDtype(DType::kF32);
  dx.setBlockedGrad(false);
  dx.setBf16Values(false);
  dx.setBf16Grad(false);
}

void GradientPool::giveBack(const Tensor& t) {
  auto it = std::find_if(lent_.begin(), lent_.end(), [&](const Lent& l) { return l.tensor == &t; });
  if (it == lent_.end()) return;
  free_.push_back({std::move(*it->tensor), it->floats});
  lent_.erase(it);
}

}  // namespace xs::engine::detail
