// sgd_rule.hpp: torch.optim.SGD's update of one value (or one vector of them), the one source of
// the rule for the optimizer's loops (optim.cpp) and for the kernels that update weights as they
// make their gradient (linear_rows.cpp). Both files are built with -ffp-contract=off, so each
// operation rounds once, as written, and both give the same bits.
#pragma once

namespace xs::engine::detail {

enum class Sgd { kPlain, kMomentum, kNesterov };

struct SgdArgs {
  float lr, wd, keep, take, mu;  // buf = keep * buf + take * d; Nesterov steps along d + mu * buf
};

// p updated from its gradient g; buf is its momentum (unused by kPlain). T is float or a GCC
// vector of floats (__m512), the arguments broadcast; all by reference, so a vector crosses no
// call (the kernels that use it are compiled for AVX-512 and the rest not).
template <Sgd kRule, class T>
[[gnu::always_inline]] inline void sgdUpdate(T& p, T& buf, const T& g, const SgdArgs& a) {
  const T d = g + a.wd * p;
  if constexpr (kRule == Sgd::kPlain) {
    p = p - a.lr * d;
  } else {
    const T b = a.keep * buf + a.take * d;
    buf = b;
    if constexpr (kRule == Sgd::kNesterov) p = p - a.lr * (d + a.mu * b);
    else p = p - a.lr * b;
  }
}

// An SGD step made inside backward over a store with no bf16 mirror, as a kernel that fuses it
// sees it (StepInBackward::sgd).
struct SgdStep {
  Sgd rule;
  float* values;    // the store's flat values
  float* momentum;  // the flat momentum buffer (null for kPlain)
  SgdArgs args;
};

}  // namespace xs::engine::detail
