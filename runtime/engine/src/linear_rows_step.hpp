// linear_rows_step.hpp: what the big linear layers' kernels share (internal header): their
// scratch slots, the column tiling, where a weight gradient's vector goes (into the
// gradient, or into the optimizer's step of the weights it is the gradient of) and the rules of
// that step as policies (linear_rows.cpp in fp32 and emulated bf16, linear_rows_bf16.cpp in
// native bf16 on vdpbf16ps). Every file that includes it is built with -ffp-contract=off
// (runtime/engine/CMakeLists.txt), as the update's bits require: the linker keeps one copy of
// these inline functions for all of them.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <type_traits>

#include "update_rules.hpp"

namespace xs::engine::rows {

constexpr int kLanes = 16;
// Scratch: gemm()'s rounded copies and the convolutions' slots, not live meanwhile (slot 6:
// linear_rows.cpp's padded copies).
constexpr int kXtSlot = 4, kDxtSlot = 5, kPanelsSlot = 7;

// Columns [k0, k1) in tiles of C vectors, then single vectors, the last one masked:
// tile(std::integral_constant<int, C or 1>, k, lanes of its last vector).
template <int C, class Tile>
void columnTiles(int k0, int k1, Tile tile) {
  int k = k0;
  for (; k + C * kLanes <= k1; k += C * kLanes) tile(std::integral_constant<int, C>{}, k, __mmask16{0xffff});
  for (; k + kLanes <= k1; k += kLanes) tile(std::integral_constant<int, 1>{}, k, __mmask16{0xffff});
  if (k < k1) tile(std::integral_constant<int, 1>{}, k, static_cast<__mmask16>((1u << (k1 - k)) - 1));
}

// y [batch, out]'s columns o0.. (R of them, those past `out` dropped) from the R x V sums of the
// batch's lanes.
template <int R, int V>
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline void storeRows(float* y, const __m512 (&acc)[R][V],
                                                                                int batch, int out, int o0) {
  alignas(64) float t[R][V * kLanes];
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_store_ps(t[r] + v * kLanes, acc[r][v]);
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < R && o0 + r < out; ++r) y[static_cast<std::size_t>(b) * out + o0 + r] = t[r][b];
}

// A vector of `lanes` at p, and its store: plain where every lane is set. The tiles' last
// vectors get their lanes at run time, and a masked load or store of memory runs slower than a
// plain one even with every lane set: on Zen 5 the fp32 backward with SGD inside ran 1.13x
// faster on AlexNet's fc1 (1.09-1.16x on fc2) once they were plain.
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline __m512 loadLanes(__mmask16 lanes, const float* p) {
  return lanes == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes, p);
}
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline void storeLanes(float* p, __mmask16 lanes, __m512 v) {
  if (lanes == 0xffff) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, lanes, v);
}

// Where a weight gradient's vector (16 columns from k, `lanes` of them) goes: into dw (= or +=).
struct IntoGradient {
  float* dw;
  int in;
  bool overwrite;
  __attribute__((target("avx512f"))) void operator()(__m512 v, int o, int k, __mmask16 lanes) const {
    float* p = dw + static_cast<std::size_t>(o) * in + k;
    if (!overwrite) v = _mm512_add_ps(loadLanes(lanes, p), v);
    storeLanes(p, lanes, v);
  }
};

// ... or into the step of the weights at `at` (into the layer's weights w, their momentum or
// moments at the same offsets) by the rule of `Update` (below); returns the new weights, whose
// mirror (if any) the caller writes.
template <class Update>
struct StepOf {
  Update update;
  float* w;
  float* first;
  float* second;
  __attribute__((target("avx512f"))) __m512 operator()(__m512 g, std::size_t at, __mmask16 lanes) const {
    __m512 p = loadLanes(lanes, w + at);
    update(p, g, lanes, first ? first + at : nullptr, second ? second + at : nullptr);
    storeLanes(w + at, lanes, p);
    return p;
  }
};

// The rules: p updated from g, their state at m (and v) read and written in place.
template <detail::Sgd kRule>
struct SgdRule {
  detail::SgdArgs args;
  __attribute__((target("avx512f"))) void operator()(__m512& p, __m512 g, __mmask16 lanes, float* m, float*) const {
    __m512 b = kRule == detail::Sgd::kPlain ? _mm512_setzero_ps() : loadLanes(lanes, m);
    detail::sgdUpdate<kRule>(p, b, g, args);
    if constexpr (kRule != detail::Sgd::kPlain) storeLanes(m, lanes, b);
  }
};

template <bool kDecoupled>
struct AdamRule {
  detail::AdamArgs args;
  __attribute__((target("avx512f"))) void operator()(__m512& p, __m512 g, __mmask16 lanes, float* m, float* v) const {
    __m512 m1 = loadLanes(lanes, m), v1 = loadLanes(lanes, v);
    detail::adamUpdate<kDecoupled>(p, m1, v1, g, args);
    storeLanes(m, lanes, m1);
    storeLanes(v, lanes, v1);
  }
};

// run(StepOf<rule>) for the step s makes of the weights at `offset` into its store, for the
// rules in `kRules` (SGD's alone: nothing runs for Adam's).
enum Rules { kSgdRules, kEveryRule };
template <Rules kRules = kEveryRule, class Run>
void withStep(const detail::FusedStep& s, std::size_t offset, Run run) {
  auto at = [offset](float* base) { return base ? base + offset : nullptr; };
  auto go = [&](auto update) { run(StepOf<decltype(update)>{update, at(s.values), at(s.first), at(s.second)}); };
  using Rule = detail::FusedStep::Rule;
  switch (s.rule) {
    case Rule::kSgd: return go(SgdRule<detail::Sgd::kPlain>{s.sgd});
    case Rule::kSgdMomentum: return go(SgdRule<detail::Sgd::kMomentum>{s.sgd});
    case Rule::kSgdNesterov: return go(SgdRule<detail::Sgd::kNesterov>{s.sgd});
    case Rule::kAdam:
      if constexpr (kRules == kEveryRule) go(AdamRule<false>{s.adam});
      return;
    case Rule::kAdamW:
      if constexpr (kRules == kEveryRule) go(AdamRule<true>{s.adam});
      return;
    case Rule::kNone: return;
  }
}

}  // namespace xs::engine::rows
