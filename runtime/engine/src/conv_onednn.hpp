// conv_onednn.hpp: conv2d on oneDNN's convolution primitives (internal header); each call
// returns false when oneDNN has no primitive for the geometry, so the caller uses im2col.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device_internals.hpp"
#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine::detail {

// The passes on oneDNN's convolution primitives; false when oneDNN has none for the shape.
// Backward: dw null runs the data gradient only (db still says whether the layer has a bias,
// which names its cached primitives).
bool conv2dForwardOneDnn(Device& dev, float* y, const float* x, const float* w, const float* b,
                         const ConvGeom& g);
bool conv2dBackwardOneDnn(Device& dev, float* dx, float* dw, float* db, const float* dy,
                          const float* x, const float* w, const ConvGeom& g);
// Whether a convolution whose backward passes run on Winograd takes it for the data gradient
// too: only from 2^30 multiply-adds. Winograd's small GEMMs and transforms lose to the direct
// pass, which runs at the core's peak, on the convnet's sizes (batch 16: 0.49 + 0.91 ms direct
// against 0.69 + 1.18 for conv 2 + 3, 1.11x the whole step; even at batch 100); ResNet-18's and
// AlexNet's 3x3 layers (3.2G multiply-adds and up) run 1.4-2.3x faster on it. The weight
// gradient keeps Winograd at every size (conv 3 at batch 16: 0.62 ms against 1.09 direct).
bool winogradDataGradient(const ConvGeom& g);
// Backward weights reads diff_dst as nChw16c; with dx, backward data also reads diff_dst and
// writes diff_src as nChw16c.
bool conv2dGradsBlocked16OneDnn(Device& dev, const ConvGeom& g, bool bias, bool dx);
// Native bf16 only (the measured case; fp32 channels last keeps NHWC): backward data writes
// diff_src as nChw16c float32.
bool conv2dDxBlocked16OneDnn(Device& dev, const ConvGeom& g, bool bias);
// Native bf16 only: the forward writes dst as nChw16c float32.
bool conv2dWritesBlocked16OneDnn(Device& dev, const ConvGeom& g, bool bias);
// Native bf16 only: the forward and the weight gradient run on our kernels in oneDNN's place
// (useOneChannelWideBf16, useWideWeightGradientBf16), which then may pool the forward's sums and
// spread the pool's gradient (ConvGeom::nhwcPool with codes).
bool conv2dOneChannelWideOnOurs(Device& dev, const ConvGeom& g, bool bias);

// src -> bf16 bits, nearest even (vcvtneps2bf16 where the CPU has it). (gemm_onednn.cpp)
void floatsToBf16(const float* src, std::uint16_t* dst, std::size_t n);
// The bf16 matmul on the matrix unit: each operand float32 (rounded into a dense bf16 copy) or
// already dense bf16 bits (aBf16 / bBf16; then lda / ldb are its dense row lengths). False when
// oneDNN has no bf16 matmul here. (gemm_onednn.cpp)
bool gemmBf16(Device& dev, bool transA, bool transB, int M, int N, int K, const void* A, bool aBf16,
              int lda, const void* B, bool bBf16, int ldb, float beta, float* C, int ldc);

// Channels-last convolution as GEMMs (conv_gemm_nhwc.cpp), chosen by useNhwcGemm: both
// activations NHWC and at most setNhwcGemmMaxPixels output pixels per image.
bool useNhwcGemm(const ConvGeom& g);
// Native bf16 on AMX, on the next maps up, to 4x that many pixels (the convnet's conv 3: 8x8):
// the weight gradient alone as a GEMM (conv2dBackwardGemmNhwc with no dx), where oneDNN's
// direct AMX kernel is slowest; the other passes stay on the direct kernels. (Without AMX the
// direct vdpbf16ps kernel runs that pass as fast as the GEMM, which then loses its gather.) A
// layer of fewer than 16 input channels on such maps takes it too, instead of the emulated
// weight gradient of larger first layers (conv_onednn.cpp).
bool useNhwcGemmWeightGradient(const Device& dev, const ConvGeom& g);
void conv2dForwardGemmNhwc(Device& dev, float* y, const float* x, const float* w, const float* b,
                           const ConvGeom& g);
// dx null: the weight and bias gradients only. dy may be bf16 bits (g.dyBf16) in native bf16.
void conv2dBackwardGemmNhwc(Device& dev, float* dx, float* dw, float* db, const float* dy,
                            const float* x, const float* w, const ConvGeom& g);

// One input channel into fewer than 16 channels-last outputs (or NCHW ones, g.planes), stride 1
// (conv_one_channel.cpp), chosen by useOneChannelConv in fp32 and bf16 where the CPU has
// AVX-512: forward, and backward's weight and bias gradients (an input gradient, when asked for,
// takes the path below or oneDNN).
bool useOneChannelConv(const ConvGeom& g);
void conv2dForwardOneChannel(Device& dev, float* y, const float* x, const float* w, const float* b,
                             const ConvGeom& g);
void conv2dBackwardOneChannel(Device& dev, float* dw, float* db, const float* dy, const float* x,
                              const ConvGeom& g);
// Tests: true runs the portable loops instead of the AVX-512 kernels (the same bits).
bool& oneChannelPortableSlot();

// The input gradient of a channels-last stride-1 convolution into fewer than 16 input channels
// (conv_narrow_data.cpp), chosen by useNarrowDataGradient in fp32 and bf16 where the CPU has
// AVX-512; dx is overwritten. The weight and bias gradients stay with the other paths.
bool useNarrowDataGradient(const ConvGeom& g);
// dyBits (native bf16 pairs only): dy as bf16 bits [n][oh][ow][oc] instead of dy (nhwcPoolGradBits).
void conv2dDataGradientNarrow(Device& dev, float* dx, const float* dy, const float* w, const ConvGeom& g,
                              const std::uint16_t* dyBits = nullptr);
// Tests: true runs the portable loops instead of the AVX-512 kernels (the same bits).
bool& narrowDataPortableSlot();

// Native bf16 (nativeBf16) where our vdpbf16ps kernels run (dpbf16Kernels): the narrow
// passes here (above and below) sum over pairs of bf16 values on vdpbf16ps, twice the FMA units'
// multiply-adds on AMD Zen 4, instead of running their fp32 kernels on rounded operands. Each
// takes the pairs along a sum of its fp32 kernel (the forward: input channels, when even; the
// input gradient: output channels, when even; the weight gradients: output rows; the one-channel
// forward: taps, conv_one_channel_bf16.cpp) in its tiles; x and dy are rounded to bf16 as they
// are laid out in pairs, w as it is.
bool narrowBf16(const Device& dev);

// Native bf16 where our vdpbf16ps kernels run (narrowBf16): the weight and bias gradients of a
// stride-1 convolution from one input channel or blocks of 16 into blocks of 16 channels
// (conv_wide_weights_bf16.cpp), in oneDNN's layouts for its weight pass: x and dy bf16 bits in
// blocks of 16 channels ([n][c/16][h][w][16]), or for one input channel x float32 [n][h][w] and
// dy float32 blocks; dw written in oneDNN's blocks (ABcd16b16a, or Acdb16a for one channel), db
// (when not null) written. The pairs are images. With g.nhwcPool (a fused max-pool's codes, one
// input channel) dy is not read: its words come from the pool's gradient and codes.
bool useWideWeightGradientBf16(const Device& dev, const ConvGeom& g);
void conv2dWeightGradientWideBf16(Device& dev, float* dwBlocks, float* db, const void* dy, const void* x,
                                  const ConvGeom& g);
// Native bf16 where narrowBf16 holds: the forward of a stride-1 convolution from one input
// channel into blocks of 16 outputs (conv_one_channel_wide_bf16.cpp), y written in oneDNN's
// blocks of 16 channels ([n][oc/16][oh][ow][16] float32), pairs of taps along a row. With
// g.nhwcPool (a max-pool's codes, conv2dMaxPoolsNhwc) yBlocks is unused: the pool's output and
// codes are written instead.
bool useOneChannelWideBf16(const Device& dev, const ConvGeom& g);
void conv2dForwardOneChannelWideBf16(Device& dev, float* yBlocks, const float* x, const float* w, const float* b,
                                     const ConvGeom& g);
// Whether conv_onednn.cpp hands those two passes to our kernels: default true;
// $XS_ENGINE_WIDE_BF16=0 or false (tests) leave them to oneDNN's. Read as a geometry's primitives
// are built.
bool& wideBf16Slot();

// The forward of a channels-last stride-1 convolution from fewer than 16 input channels into at
// most 16 outputs (conv_narrow_forward.cpp), chosen by useNarrowForward in fp32 and bf16 where
// narrowForwardVectorized holds. The backward passes do not read a copy of x kept by
// it (conv2dBackward clears keepSrc).
bool useNarrowForward(const ConvGeom& g);
void conv2dForwardNarrow(Device& dev, float* y, const float* x, const float* w, const float* b, const ConvGeom& g);
// Whether this CPU and g's taps (3 or 5 wide) have its AVX-512 kernels; elsewhere its portable
// loops run, slower than oneDNN.
bool narrowForwardVectorized(const ConvGeom& g);
// Tests: true runs the portable loops instead of the AVX-512 kernels (the same bits).
bool& narrowForwardPortableSlot();

// Native bf16: the 2x2 average pool fused into the narrow convolution (ConvGeom::nhwcPool,
// ops.hpp). narrowPoolsNhwc: the forward's side of conv2dPoolsNhwc (its pair kernel, two rows a
// block and one block a row, even maps: each pair of rows one row of windows).
// nhwcPoolGradBits (conv_narrow_pool.cpp): the pool's gradient g.nhwcPool->dy spread into the
// convolution's dy as bf16 bits [n][oh][ow][oc] (a scratch slot of its own), what the backward
// kernels' dyBits take.
bool narrowPoolsNhwc(const Device& dev, const ConvGeom& g);
const std::uint16_t* nhwcPoolGradBits(Device& dev, const ConvGeom& g);

// The geometry of the narrow convolutions' forward and weight gradient: the runs of
// `run` = kw * c values a tap row reads ((kx, ci) flatten like a row's (ix, ci)), in padded
// channels-last rows of xpRow = (w + 2 pad) * c values.
struct NarrowRuns {
  int c, oc, oh, ow, kh, kw, run, xpRow;
  explicit NarrowRuns(const ConvGeom& g)
      : c(g.c), oc(g.oc), oh(g.oh()), ow(g.ow()), kh(g.kh), kw(g.kw), run(g.kw * g.c), xpRow((g.w + 2 * g.pad) * g.c) {}
};

// A channels-last image with its padding, for the narrow convolutions: rows of (w + 2 pad) * c
// values in a scratch slot whose zero borders are written once. float: x's own image when
// there is no padding; std::uint16_t: native bf16's bits, rounded as they are copied (unless
// g.xRounded says x holds bf16 values already).
template <class T = float>
class PaddedImages {
  static constexpr bool kFloat = std::is_same_v<T, float>;

 public:
  PaddedImages(Device& dev, int slot, const ConvGeom& g)
      : g_(g), row_(static_cast<std::size_t>(g.w + 2 * g.pad) * g.c), count_((g.h + 2 * g.pad) * row_),
        xp_(g.pad || !kFloat ? reinterpret_cast<T*>(detail::scratch(dev, slot, (count_ * sizeof(T) + 3) / 4)) : nullptr) {
    if (xp_) std::fill(xp_, xp_ + count_, T{0});
  }
  // Image n of x [n, h, w, c], padded.
  const T* image(const float* x, int n) const {
    const std::size_t width = static_cast<std::size_t>(g_.w) * g_.c;
    const float* xn = x + static_cast<std::size_t>(n) * g_.h * width;
    if (!xp_) return reinterpret_cast<const T*>(xn);  // float, no padding
    if (!g_.pad) copy(xn, xp_, g_.h * width);
    for (int iy = 0; iy < g_.h && g_.pad; ++iy)
      copy(xn + iy * width, xp_ + (iy + g_.pad) * row_ + static_cast<std::size_t>(g_.pad) * g_.c, width);
    return xp_;
  }

 private:
  void copy(const float* from, T* to, std::size_t n) const {
    if constexpr (kFloat) std::memcpy(to, from, n * sizeof(float));
    else if (g_.xRounded) bf16BitsOfRounded(from, to, n);
    else toBf16Bits(from, to, n);
  }
  const ConvGeom& g_;
  std::size_t row_, count_;
  T* xp_;
};

// The weight and bias gradients of a channels-last stride-1 convolution from fewer than 16 input
// channels into at most 16 outputs (conv_narrow_weights.cpp), chosen by useNarrowWeightGradient in
// fp32 and bf16 where the CPU has AVX-512. dw and db are added to (or written, with
// g.overwriteGrads); db may be null.
bool useNarrowWeightGradient(const ConvGeom& g);
void conv2dWeightGradientNarrow(Device& dev, float* dw, float* db, const float* dy, const float* x,
                                const ConvGeom& g, const std::uint16_t* dyBits = nullptr);  // as above
// Tests: true runs the portable loops instead of the AVX-512 kernels (the same bits).
bool& narrowWeightsPortableSlot();

}  // namespace xs::engine::detail
