// conv_narrow_pool.cpp: the backward side of the 2x2 average pool fused into the narrow
// convolution in native bf16 (ConvGeom::nhwcPool, ops.hpp; its forward pools in
// conv_narrow_forward.cpp's pair kernel). Each window's gradient is spread to its four pixels as
// avgPool2dBackward spreads it (+0 + dy / 4, rounded to bf16, +0 where the ReLU's mask is clear)
// and written as the bf16 bits that the convolution's backward kernels read (their dyBits): the
// float dy of the separate passes is never written, and neither kernel converts it.
#include <immintrin.h>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "kernel_util.hpp"

namespace xs::engine::detail {

XS_DPBF16 const std::uint16_t* nhwcPoolGradBits(Device& dev, const ConvGeom& g) {
  const NhwcPool& p = *g.nhwcPool;
  const int oh = g.oh(), ow = g.ow(), oc = g.oc, wins = ow / 2;
  const std::size_t count = static_cast<std::size_t>(g.n) * oh * ow * oc;
  auto* bits = reinterpret_cast<std::uint16_t*>(scratch(dev, kFusedPoolGradSlot, (count + 1) / 2));
  const __mmask16 lanes = firstLanes(oc);
  const __m512 zero = _mm512_setzero_ps(), quarter = _mm512_set1_ps(0.25f);
  for (int n = 0; n < g.n; ++n)
    for (int wy = 0; wy < oh / 2; ++wy)
      for (int wx = 0; wx < wins; ++wx) {
        const float* up = p.dy + ((static_cast<std::size_t>(n) * (oh / 2) + wy) * wins + wx) * oc;
        const __m512 grad = roundBf16(_mm512_add_ps(zero, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, up), quarter)));
#pragma GCC unroll 2
        for (int i = 0; i < 2; ++i)
#pragma GCC unroll 2
          for (int j = 0; j < 2; ++j) {
            const std::size_t pixel = (static_cast<std::size_t>(n) * oh + 2 * wy + i) * ow + 2 * wx + j;
            const __m512 v = p.f.relu ? _mm512_maskz_mov_ps(p.mask[pixel], grad) : grad;
            const __m256i b = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
            _mm256_mask_storeu_epi16(bits + pixel * oc, lanes, b);
          }
      }
  return bits;
}

}  // namespace xs::engine::detail
