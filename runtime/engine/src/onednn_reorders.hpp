// onednn_reorders.hpp: the convolutions' frequent layout changes between our tensors and oneDNN's
// bf16 primitives, on AVX-512 (internal header). oneDNN 2.6's reorders for them (its generic
// kernel) took about 120 us of the convnet's bf16 step on Zen 5 (conv 3's 74k weights: 28 us
// into each layout, 20 us for its gradient back); these take about 55 (docs/benchmarks.md).
#pragma once

#include <vector>

#include <dnnl.hpp>

namespace xs::engine::detail {

// A reorder between two layouts done here, as oneDNN's reorder between them would do it on this
// CPU (float32 to bf16 by vcvtneps2bf16, as its reorder does: nearest even, denormals to zero).
// The pairs done here, all from float32 with whole blocks of 16 channels:
//   - weights [oc][ic][kh][kw] (abcd) to bf16 ABcd8b16a2b (the forward's) and ABcd8a16b2a (the
//     data gradient's): pairs of input or output channels in 32-bit words, 16 lanes of the other;
//   - weight gradients from ABcd16b16a (the weight gradient's float32 output) to abcd;
//   - activations channels last (acdb) to channel blocks (aBcd16b), float32 or bf16.
// Any other pair, a CPU without AVX512-BF16, or oneDNN held below avx512_core_bf16
// (ONEDNN_MAX_CPU_ISA; it then converts without that instruction): none, and the caller runs
// oneDNN's reorder.
class OwnReorder {
 public:
  static OwnReorder between(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  explicit operator bool() const { return kind_ != kNone; }
  // src in `from`'s layout to dst in `to`'s (only when *this is true).
  void operator()(const void* src, void* dst) const;

 private:
  enum Kind { kNone, kNhwcToBlocks, kNhwcToBf16Blocks, kPairsOverIc, kPairsOverOc, kGradBlocksToPlain };
  Kind kind_ = kNone;
  int a_ = 0, b_ = 0, taps_ = 0;  // dims a, b and c * d: oc, ic and taps (weights); n, c and pixels
  mutable std::vector<float> stage_;  // the weights' transposed block (16 x 16 x taps floats)
};

}  // namespace xs::engine::detail
