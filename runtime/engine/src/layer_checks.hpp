// layer_checks.hpp: the checks the engine's layers share on what they are handed (internal
// header): the input's rank at build time, the gradient's layout and type in backward, and a
// module's name for their errors.
#pragma once

#include <string>

#include "xspawn/engine/tensor.hpp"
#include "xspawn/error.hpp"

namespace xs::engine::detail {

// The error of a module (who) handed back a gradient in another layout than its output's.
inline std::string gradientLayoutError(const std::string& who) {
  return who + ": the gradient's layout differs from the output's: the module after it must give its input's "
               "gradient in its input's layout (dx.setLayout(x.layout()))";
}

// The gradient a module is handed back: float32, in its output's layout (or in channel blocks
// where it said it takes them, Tensor::blockedGrad). A module of one's own after it that sets no
// layout on its dx would otherwise have its values read in the wrong order, silently.
inline void expectGradientOf(const Tensor& y, const Tensor& dy, const std::string& who) {
  XS_CHECK(dy.layout() == y.layout() || (dy.layout() == Layout::kNchw16c && y.blockedGrad()), ShapeError,
           gradientLayoutError(who));
  XS_CHECK(dy.dtype() == DType::kF32, ShapeError,
           who + ": the gradient holds bf16 values where float32 ones are read: hand it back as float32 "
                 "(Tensor::setDtype(DType::kF32))");
}

// A module by its name in the network and its kind, for errors: "features.1 (relu)".
inline std::string moduleName(const std::string& prefix, const char* kind) {
  return prefix.empty() ? std::string(kind) : prefix + " (" + kind + ")";
}

// A module's input at build time: one sample, [channels, height, width].
inline void expectChw(const Shape& in, const std::string& who) {
  XS_CHECK(in.rank == 3, ShapeError,
           who + " expects a [channels, height, width] input, got " + in.str() + ": put it before "
                 "the flatten");
}

}  // namespace xs::engine::detail
