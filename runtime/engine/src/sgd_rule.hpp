// sgd_rule.hpp: torch.optim.SGD's update of one vector of values, for the kernels that update
// weights as they make their gradient (linear_rows.cpp): the same operations in the same order as
// the optimizer's own loops (optim.cpp's sgdBody, which GCC vectorizes at full width only when
// written over scalars). Both files are built with -ffp-contract=off, so each operation rounds
// once, as written, and both give the same bits (test_step_in_backward.cpp checks them).
#pragma once

namespace xs::engine::detail {

enum class Sgd { kPlain, kMomentum, kNesterov };

struct SgdArgs {
  float lr, wd, keep, take, mu;  // buf = keep * buf + take * d; Nesterov steps along d + mu * buf
};

// p updated from its gradient g; buf is its momentum (unused by kPlain). T is a GCC vector of
// floats (__m512), the arguments broadcast; by reference, so a vector crosses no call (the
// kernels that use it are compiled for AVX-512 and the rest of the file not).
template <Sgd kRule, class T>
[[gnu::always_inline]] inline void sgdUpdate(T& p, T& buf, const T& g, SgdArgs a) {
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

// An SGD step made inside backward over a store with no bf16 bits mirror, as a kernel that fuses
// it sees it (StepInBackward::sgd).
struct SgdStep {
  Sgd rule;
  float* values;    // the store's flat values
  float* momentum;  // the flat momentum buffer (null for kPlain)
  SgdArgs args;
  float* rounded;   // the store's mirror of rounded floats (emulated bf16), written too; or null
};

}  // namespace xs::engine::detail
