// update_rules.hpp: torch.optim's SGD and Adam updates of one vector of values, for the kernels
// that update weights as they make their gradient (linear_rows.cpp, linear_rows_bf16.cpp): the
// same operations in the same order as the optimizers' own loops (optim.cpp's sgdBody and
// adamBody, which GCC vectorizes at full width only when written over scalars). All these files
// are built with -ffp-contract=off, so each operation rounds once, as written, and all give the
// same bits (test_step_in_backward.cpp checks them).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace xs::engine::detail {

enum class Sgd { kPlain, kMomentum, kNesterov };

struct SgdArgs {
  float lr, wd, keep, take, mu;  // buf = keep * buf + take * d; Nesterov steps along d + mu * buf
};

// Adam adds the decay wd to the gradient; AdamW shrinks the weights by `shrink` first.
struct AdamArgs {
  float b1, b2, eps, wd, shrink, stepSize, bc2Sqrt;
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

// p updated from its gradient g with Adam's moments m and v (AdamW: kDecoupled).
template <bool kDecoupled>
[[gnu::always_inline]] inline __attribute__((target("avx512f"))) void adamUpdate(__m512& p, __m512& m, __m512& v,
                                                                                 const __m512& g, AdamArgs a) {
  __m512 w = p;
  if constexpr (kDecoupled) w = w * a.shrink;
  const __m512 d = g + a.wd * w;
  m = m * a.b1 + (1.f - a.b1) * d;
  v = v * a.b2 + (1.f - a.b2) * d * d;
  const __m512 denom = _mm512_maskz_sqrt_ps(0xffff, v) / a.bc2Sqrt + a.eps;  // maskz: GCC 12 warns on the plain form
  p = w - a.stepSize * (m / denom);
}

// An optimizer's step made inside backward, as a kernel that fuses it sees it
// (StepInBackward::fused).
struct FusedStep {
  enum class Rule { kNone, kSgd, kSgdMomentum, kSgdNesterov, kAdam, kAdamW };
  Rule rule = Rule::kNone;
  float* values = nullptr;   // the store's flat values
  float* first = nullptr;    // SGD's momentum buffer, Adam's first moment (null for plain SGD)
  float* second = nullptr;   // Adam's second moment
  float* rounded = nullptr;  // the store's mirror of rounded floats (emulated bf16), written too; or null
  std::uint16_t* bits = nullptr;  // the store's mirror of bf16 bits (native bf16), written too; or null
  SgdArgs sgd{};
  AdamArgs adam{};
};

}  // namespace xs::engine::detail
