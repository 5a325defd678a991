// gradient_pool.hpp: the activation gradients of one model's backward, lent to its modules
// and given back once read. A module's input gradient is read by one module only, the one
// before it; once that one has written its own, the buffer can hold the next. So a backward
// through a chain holds about two gradients at a time instead of one per module (PyTorch's
// autograd frees them likewise): less device memory, and fewer distinct bytes a step.
#pragma once

#include <cstddef>
#include <vector>

#include "xspawn/engine/tensor.hpp"
#include "xspawn/nn.hpp"

namespace xs::engine::detail {

class GradientPool {
 public:
  explicit GradientPool(Device& dev) : dev_(dev) {}
  GradientPool(const GradientPool&) = delete;
  GradientPool& operator=(const GradientPool&) = delete;

  // Gives dx memory for `shape` (contents undefined, its flags as a new tensor's): the buffer
  // it still holds when nobody gave it back, else the smallest free one big enough, else the
  // largest free one grown, else a new one. dx stays lent until giveBack(dx).
  void lend(Tensor& dx, const Shape& shape, const char* what);
  // Takes t's buffer back when it was lent (t is then empty); any other tensor stays as it is.
  // The caller is the only reader left of t: it has been read for the last time.
  void giveBack(const Tensor& t);

 private:
  struct Lent {
    Tensor* tensor;  // a module's own member: it lives as long as the model, and so the pool
    std::size_t floats;
  };
  struct Free {
    Tensor tensor;
    std::size_t floats;
  };
  Device& dev_;
  std::vector<Lent> lent_;
  std::vector<Free> free_;
};

// dx for a module's backward: from the model's pool when the backward runs in one
// (Context::gradients), else dx's own memory (Tensor::ensure).
inline void lendGradient(nn::Context& ctx, Tensor& dx, const Shape& shape) {
  if (ctx.gradients) ctx.gradients->lend(dx, shape, "activation gradients");
  else dx.ensure(ctx.dev, shape, "activation gradients");
}
inline void giveBackGradient(nn::Context& ctx, const Tensor& t) {
  if (ctx.gradients) ctx.gradients->giveBack(t);
}

}  // namespace xs::engine::detail
