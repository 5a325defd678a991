// ops.hpp: the engine's operations, each a forward/backward pair on raw device buffers (NCHW,
// row-major), with the tensor shapes in comments. Backward passes ACCUMULATE into parameter
// gradients (dw, db, dgamma, dbeta: +=) and OVERWRITE input gradients (dx: =).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "xspawn/engine/device.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

namespace detail {
struct FusedStep;  // update_rules.hpp
}

// ---- linear: y = x w^T + b -------------------------------------------------------------
// Emulated bf16 (gemm.hpp): a layer's operands rounded to bf16 once per step. Forward rounds w
// and x and keeps them for backward (the weights change only after it); backward rounds dy.
struct RoundedOperands {
  // Emulated bf16: rounded copies, made once in forward for backward (x, w) or once for both of
  // backward's products (dy).
  Tensor w, x, dy;
  // The caller's x / dy are bf16 values already (Tensor::bf16Values): used as they are.
  bool xRounded = false, dyRounded = false;
  // The caller's w is bf16 values already (ParamStore's rounded mirror): used as it is.
  bool wRounded = false;
  // Native bf16: w as bf16 bits (ParamStore's bits mirror; null: converted here, into wBf16),
  // and x and dy converted once into bf16 bits in the same way.
  const std::uint16_t* wBits = nullptr;
  Tensor wBf16, xBf16, dyBf16;
};
// x [B, I], w [O, I], b [O] (may be null) -> y [B, O]; r: the layer's rounded operands.
void linearForward(Device& dev, float* y, const float* x, const float* w, const float* b, int B,
                   int I, int O, RoundedOperands* r = nullptr);
// dy [B, O] -> dx [B, I] (skipped when null), dw [O, I] +=, db [O] +=; r as forward left it.
// overwrite: dw = and db = instead (ParamStore::gradSlot), which spares reading them.
void linearBackward(Device& dev, float* dx, float* dw, float* db, const float* dy, const float* x,
                    const float* w, int B, int I, int O, RoundedOperands* r = nullptr, bool overwrite = false);
// The same with an SGD or Adam step of w inside backward (Model::setOptimizerInBackward), for a
// layer whose gradients zeroGrad cleared: db = as above, then dx and the step of w (at `offset`
// into step's values), dw never written: in fp32 and emulated bf16 in one pass
// (linearBackwardWithStep; w is what linearBackward would read, the rounded weights in emulated
// bf16), in native bf16 on vdpbf16ps dx and then the weight gradient's pass with SGD's step
// (linearWeightStepBf16). False (nothing done) where linearBackward would not take those
// kernels, or native bf16 would not fuse the rule: the caller then runs it and steps w itself.
bool linearBackwardStepped(Device& dev, float* dx, float* db, const float* dy, const float* x, const float* w, int B,
                           int I, int O, RoundedOperands* r, const detail::FusedStep& step, std::size_t offset);

// The forward of a linear layer with at least 2^20 weights at a batch of at most 64, where the CPU
// has AVX-512: y^T = w x^T, output rows streaming their weights against the batch's vectors
// (linear_rows.cpp; dnnl_sgemm runs such shapes at 40-45% of the core's peak). y [batch, out]
// = bias + x w^T, every sum from the bias in order of k.
bool useLinearRows(int batch, int in, int out);
void linearForwardRows(Device& dev, float* y, const float* x, const float* w, const float* bias, int batch, int in,
                       int out);
// Its input gradient, for the same layers: dx [batch, in] = dy w, every sum from zero in order of o.
void linearDataGradientRows(Device& dev, float* dx, const float* dy, const float* w, int batch, int in, int out);
// Its weight gradient, for the same layers: dw [out, in] = (or +=) dy^T x, every sum from zero in
// order of b.
void linearWeightGradientRows(Device& dev, float* dw, const float* dy, const float* x, int batch, int in, int out,
                              bool overwrite);
// Both gradients and an SGD or Adam step of the weights in one pass, their gradient never written: dx
// (skipped when null) as linearDataGradientRows makes it from w (the weights before the step, or
// their rounding), and the weights at `offset` into step's values (and their rounding into its
// mirror) updated from linearWeightGradientRows' gradient, as the optimizer would
// (Model::setOptimizerInBackward). False (nothing done) unless the layer takes these kernels
// (useLinearRows).
bool linearBackwardWithStep(Device& dev, float* dx, const float* dy, const float* x, const float* w, int batch, int in,
                            int out, const detail::FusedStep& step, std::size_t offset);
// Whether linearBackwardWithStep takes Adam and AdamW (SGD it always takes): not on AMD CPUs,
// where the rule's divisions and square root in its tiles cost more than Adam's own pass. Tests
// set it to check the fused Adam everywhere.
bool& fusesAdamInTiles();
// Tests: true runs the portable loops instead of the AVX-512 kernels (the same bits).
bool& linearRowsPortableSlot();
// Tests: how many times linearBackwardWithStep or linearWeightStepBf16 has made a layer's step.
std::uint64_t& linearStepsFused();
// Native bf16 where it runs on AVX512-BF16's vdpbf16ps, not AMX (linear_rows_bf16.cpp): the
// layers useLinearRows takes, unless the tests ask for the portable loops (linearRowsPortableSlot).
bool useLinearRowsBf16(int batch, int in, int out);
// The forward from bf16 bits: y [batch, out] = bias + x w^T, every sum from the bias over pairs
// of k in order.
void linearForwardBf16(Device& dev, float* y, const std::uint16_t* x, const std::uint16_t* w, const float* bias,
                       int batch, int in, int out);
// The input gradient from bf16 bits: dx [batch, in] = dy w, every sum from zero over pairs of o
// in order.
void linearDataGradientBf16(Device& dev, float* dx, const std::uint16_t* dy, const std::uint16_t* w, int batch,
                            int in, int out);
// The weight gradient from bf16 bits: dw [out, in] = (or +=) dy^T x, every sum from zero over
// pairs of b in order.
void linearWeightGradientBf16(Device& dev, float* dw, const std::uint16_t* dy, const std::uint16_t* x, int batch,
                              int in, int out, bool overwrite);
// Whether the next one takes step: SGD's rules, on the layers useLinearRowsBf16 takes.
bool fusesLinearStepBf16(int batch, int in, int out, const detail::FusedStep& step);
// The step of the weights at `offset` into step's values from that gradient, never written (as
// linearBackwardWithStep), their bits written into the store's bits mirror (step.bits); false
// (nothing done) where fusesLinearStepBf16 is false.
bool linearWeightStepBf16(Device& dev, const std::uint16_t* dy, const std::uint16_t* x, int batch, int in, int out,
                          const detail::FusedStep& step, std::size_t offset);
// bf16 operands laid out for vdpbf16ps and AMX's tiles (linear_rows_bf16.cpp): x [batch][in]
// bits -> [ceil(in / 2)][width] 32-bit pairs (x[b][k], x[b][k+1]), zeros past the batch and
// past `in`; and src [rows][cols] bits -> src^T [cols][width], zeros past `rows`.
void pairsByColumn(std::uint32_t* dst, const std::uint16_t* x, int batch, int in, int width);
void transposeBits(std::uint16_t* dst, const std::uint16_t* src, int rows, int cols, int width);
// Native bf16 on AMX (linear_amx.cpp), from bf16 bits into float32; each returns false (nothing
// done) where oneDNN runs no AMX kernels or the shape does not fit its tiles:
// dw [O, I] (+)= dy^T [O, B] x [B, I], overwritten or added to (O a multiple of 16, I of 64);
bool linearWeightGradientAmx(Device& dev, float* dw, const std::uint16_t* dy, const std::uint16_t* x, int B, int I,
                             int O, bool overwrite);
// y [B, O] = x [B, I] w^T + b (b may be null) and dx [B, I] = dy [B, O] w (O and I multiples of 32).
bool linearForwardAmx(Device& dev, float* y, const std::uint16_t* x, const std::uint16_t* w, const float* b, int B,
                      int I, int O);
bool linearDataGradientAmx(Device& dev, float* dx, const std::uint16_t* dy, const std::uint16_t* w, int B, int I,
                           int O);

// ---- conv2d (square stride, symmetric padding, no dilation or groups) -----------------------
struct PlanesPool;
struct NhwcPool;
// The windows of size k, stride and padding pad along a side of `size`: floor((size + 2 pad - k)
// / stride) + 1, as PyTorch's; 0 when the window is larger than the padded side (C++'s division
// would round that up to a window).
constexpr int windowsAlong(int size, int k, int stride, int pad) {
  const int span = size + 2 * pad - k;
  return span < 0 ? 0 : span / stride + 1;
}
struct ConvGeom {
  int n, c, h, w;       // input [n, c, h, w]
  int oc, kh, kw;       // weight [oc, c, kh, kw], bias [oc]
  int stride = 1, pad = 0;
  bool srcNhwc = false, dstNhwc = false;  // x and dx / y and dy stored channels last
  // One input channel, y and dy NCHW (dstNhwc false): the one-channel kernels write their channel
  // planes as they are, for an average pool that takes planes (Module::takesPlanarInput).
  bool planes = false;
  // With planes: the average pool after it, computed in the convolution's passes image by image
  // (the batch's planes are never stored; see PlanesPool). y and dy are then the pool's.
  const PlanesPool* pool = nullptr;
  // Channels last: the 2x2 average pool after it (and the ReLU before that pool), computed in the
  // narrow convolution's passes (conv2dPoolsNhwc, NhwcPool), or the 2x2 max-pool of stride 2 in
  // the one-channel wide kernels' (conv2dMaxPoolsNhwc). y and dy are then the pool's.
  const NhwcPool* nhwcPool = nullptr;
  // The caller leaves x unchanged between conv2dForward and conv2dBackward: the backward then
  // reuses the forward's copy of x in the kernel's layout and precision (one conversion less).
  bool keepSrc = false;
  bool dyBf16 = false;  // dy holds bfloat16 values (what the bf16 products round it to anyway)
  // Emulated bf16: x / dy are float32 values that are bf16 already (Tensor::bf16Values), so the
  // convolution skips rounding them.
  bool xRounded = false, dyRounded = false;
  bool wRounded = false;  // w is bf16 values already (ParamStore's rounded mirror)
  // dy / dx in blocks of 16 channels ([n, c/16, h, w, 16]): only where conv2dGradsBlocked16 holds.
  bool dyBlocked = false, dxBlocked = false;
  // y written in blocks of 16 channels ([n, oc/16, oh, ow, 16]) as the primitive computes it,
  // for a max-pool after it: only where conv2dWritesBlocked16 holds. dy stays as dstNhwc says.
  bool dstBlocked = false;
  // dw and db are written, not added to (ParamStore::gradSlot): no read of the old gradient.
  bool overwriteGrads = false;
  int oh() const { return windowsAlong(h, kh, stride, pad); }
  int ow() const { return windowsAlong(w, kw, stride, pad); }
};
// How conv2d runs: oneDNN's direct convolution primitives (blocked layouts inside, staged
// through reorders), or im2col + the GEMM backend. Default oneDNN, or $XS_ENGINE_CONV
// ("onednn" / "im2col"); a geometry oneDNN cannot run falls back to im2col.
enum class ConvBackend { kOneDnn, kIm2col };
const char* convBackendName(ConvBackend b);
ConvBackend parseConvBackend(const std::string& name);
ConvBackend convBackend();
void setConvBackend(ConvBackend b);
// With oneDNN in fp32, the backward passes of 3x3 stride-1 convolutions (16 or more input
// channels) use Winograd primitives (docs/engine.md). Default on; $XS_ENGINE_WINOGRAD=0 or
// setConvWinograd(false) keep every pass direct.
bool convWinograd();
void setConvWinograd(bool on);
// With the oneDNN backend, a channels-last convolution of at most this many output pixels per
// image runs as GEMMs over gathered patches instead (faster on small maps, docs/engine.md).
// Default 16, or $XS_ENGINE_NHWC_GEMM_PIXELS; 0 turns it off.
void setNhwcGemmMaxPixels(int pixels);

// The layout the convolutions of dev want their activations in (kAuto): NHWC in both precisions.
// The AMX and AVX512-BF16 kernels read it directly; in fp32 the primitives take NHWC as it is
// instead of reordering to nChw16c (convnet 1.20x, AlexNet and ResNet-18 unchanged, LeNet-5
// 0.92x: docs/engine.md). $XS_ENGINE_LAYOUT (auto, nchw, nhwc) or setLayoutPolicy choose one.
enum class LayoutPolicy { kAuto, kNchw, kNhwc };
LayoutPolicy parseLayoutPolicy(const std::string& name);
void setLayoutPolicy(LayoutPolicy p);
Layout preferredLayout(const Device& dev);

// x [n, c, h, w], w [oc, c, kh, kw], b [oc] (may be null) -> y [n, oc, oh, ow]
void conv2dForward(Device& dev, float* y, const float* x, const float* w, const float* b,
                   const ConvGeom& g);
// dy [n, oc, oh, ow] -> dx [n, c, h, w] (skipped when null), dw +=, db += (skipped when null);
// dw =, db = with g.overwriteGrads
void conv2dBackward(Device& dev, float* dx, float* dw, float* db, const float* dy, const float* x,
                    const float* w, const ConvGeom& g);
// True when conv2dBackward's kernels read dy (and, with dx, write dx) in blocks of 16 channels
// themselves (oneDNN's backward in fp32, channels last, for Winograd 3x3 convolutions and for
// one input channel): it then takes g.dyBlocked / g.dxBlocked and skips the reorders it would
// make from and to NHWC.
bool conv2dGradsBlocked16(Device& dev, const ConvGeom& g, bool bias, bool dx);
// True when conv2dBackward's data gradient writes dx in blocks of 16 channels itself, whatever
// layout dy comes in (oneDNN's primitives in native bf16, where they pick that layout): it then
// takes g.dxBlocked alone.
bool conv2dDxBlocked16(Device& dev, const ConvGeom& g, bool bias);
// True when conv2dForward's kernel computes y in blocks of 16 channels (oneDNN's primitives in
// native bf16, where they pick that layout; channels last otherwise): it then takes g.dstBlocked
// and writes y so, skipping its reorder to NHWC, for a max-pool that reads that layout
// (PoolGeom::xBlocked).
bool conv2dWritesBlocked16(Device& dev, const ConvGeom& g, bool bias);
// True when a convolution of g's geometry, channels last otherwise, runs kernels that compute its
// output's channel planes (one input channel, AVX-512, no input gradient): with g.planes it
// then writes y and reads dy NCHW as they are, for an average pool that takes planes.
bool conv2dWritesPlanes(Device& dev, const ConvGeom& g);
// Whether the layers pass gradients, and a convolution's output to a max-pool, in channel blocks
// where both sides can (default on; the results are the same bits either way, which a test
// checks with this switch).
void setBlockedGradients(bool on);

// ---- layout conversions: [n, c, hw] <-> [n, hw, c] ----------------------------------------------
void nchwToNhwc(float* dst, const float* src, int n, int c, int hw);
void nhwcToNchw(float* dst, const float* src, int n, int c, int hw);

// ---- pooling -------------------------------------------------------------------------------
struct PoolGeom {
  int n, c, h, w;  // input [n, c, h, w]
  int k, stride, pad = 0;
  bool nhwc = false;  // max- and average pool: x, y (window codes), dy, dx stored channels last
  // Channels-last max-pool only, c a multiple of 16: dy / dx in blocks of 16 channels
  // ([n, c/16, h, w, 16], oneDNN's nChw16c), as the oneDNN convolutions next to it take them.
  bool dyBlocked = false, dxBlocked = false;
  // Channels-last max-pool forward only, c a multiple of 16: x in blocks of 16 channels, as the
  // oneDNN convolution before it writes it (conv2dWritesBlocked16); y and the codes stay
  // channels last. The same bits as from x channels last.
  bool xBlocked = false;
  // dx written rounded to bf16, for an emulated bf16 convolution before it that would round it:
  // the average pool with any window, the max-pool channels last with windows that tile only.
  bool dxRounded = false;
  int oh() const { return windowsAlong(h, k, stride, pad); }
  int ow() const { return windowsAlong(w, k, stride, pad); }
  bool tiles() const { return k == stride && pad == 0; }  // each input pixel in one window at most
};
// One output window: its unclipped origin (oy * stride - pad, ox * stride - pad), the origin of
// a max-pool's window codes, and the rows and columns [y0, y1) x [x0, x1) of it inside the input.
struct PoolWindow {
  int wy, wx, y0, y1, x0, x1;
  PoolWindow(int oy, int ox, const PoolGeom& g)
      : wy(oy * g.stride - g.pad), wx(ox * g.stride - g.pad), y0(std::max(wy, 0)),
        y1(std::min(wy + g.k, g.h)), x0(std::max(wx, 0)), x1(std::min(wx + g.k, g.w)) {}
  int offset(int iy, int ix, int k) const { return (iy - wy) * k + (ix - wx); }
};
// ShapeError naming op unless every size is positive, the padding at most half the window and
// the window no larger than the padded input.
void checkPool(const PoolGeom& g, const char* op);
// NCHW max-pool: x [n, c, h, w] -> y [n, c, oh, ow], argmax [n, c, oh, ow] (index into the h*w
// plane). ShapeError for a channels-last geometry (that one takes maxPoolNhwcForward).
void maxPool2dForward(float* y, std::int32_t* argmax, const float* x, const PoolGeom& g);
// dy [n, c, oh, ow] -> dx [n, c, h, w]. With relu (the forward's y after a fused ReLU, same
// shape as dy), the gradient goes only where y > 0: the ReLU's backward folded in.
void maxPool2dBackward(float* dx, const float* dy, const std::int32_t* argmax, const PoolGeom& g,
                       const float* relu = nullptr);

// Channels-last max-pool (g.nhwc). It keeps, per output, a 16-bit window code instead of a
// 32-bit plane index: the picked pixel's offset in its k x k window (row-major, from the
// window's unclipped origin), with kPoolPasses set when dy goes through to it. The backward
// then reads 2 bytes per output instead of the index and the pooled value (4 + 4).
enum class PoolEpilogue {
  kNone,               // y = max; every code passes
  kRelu,               // y = relu(max) (a ReLU before the pool fused in: max(relu(x)) = relu(max(x)));
                       // passes where y > 0, the ReLU's backward folded in
  kReluRoundedToBf16,  // the same, y rounded to bf16 (for a next layer that would round it)
};
constexpr std::uint16_t kPoolPasses = 0x8000;
constexpr std::uint16_t kPoolOffsetMask = 0x7fff;
constexpr int kMaxNhwcPoolWindow = 181;  // k * k offsets fit in 15 bits
// x [n, h, w, c] -> y, code [n, oh, ow, c]
void maxPoolNhwcForward(float* y, std::uint16_t* code, const float* x, const PoolGeom& g, PoolEpilogue e);
// dy [n, oh, ow, c] or [n, c/16, oh, ow, 16] -> dx [n, h, w, c] or [n, c/16, h, w, 16]
void maxPoolNhwcBackward(float* dx, const float* dy, const std::uint16_t* code, const PoolGeom& g);

// Average pool: x [n, c, h, w] -> y [n, c, oh, ow], or x, y, dy, dx all channels last (g.nhwc),
// the same bits either way; padding counts in the divisor (PyTorch's default). Each window sums
// in rows, then columns, from +0, and divides once (ops_pool_avg.cpp).
struct AvgPoolFusion {
  bool relu = false;     // a ReLU before the pool: it pools relu(x), the ReLU's own pass saved
  bool roundY = false;   // y rounded to bf16, for a next layer that would round it
};
// The max-pool epilogue for the same flags (a rounded y comes with its ReLU): what a max-pool
// fused into a convolution (NhwcPool::codes) applies, as the pool's own pass would.
constexpr PoolEpilogue maxPoolEpilogue(AvgPoolFusion f) {
  return f.roundY ? PoolEpilogue::kReluRoundedToBf16 : f.relu ? PoolEpilogue::kRelu : PoolEpilogue::kNone;
}
void avgPool2dForward(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f = {});
// dy -> dx. reluInput (the forward's x when f.relu): dx only where x > 0, the ReLU's backward
// folded in. g.dxRounded: dx rounded to bf16 (any window shape). The bits of the separate passes.
void avgPool2dBackward(float* dx, const float* dy, const PoolGeom& g, const float* reluInput = nullptr);
// The channels-last loops a CPU without AVX-512 runs, whatever this one has (for the tests).
void avgPoolNhwcForwardPortable(float* y, const float* x, const PoolGeom& g, AvgPoolFusion f = {});
void avgPoolNhwcBackwardPortable(float* dx, const float* dy, const PoolGeom& g, const float* reluInput = nullptr);
// The 2x2 average pool that tiles, from channel planes to channels last (ops_pool_planes.cpp):
// x [n, c, h, w] (g.nhwc false) -> y [n, oh, ow, c], c < 16, for a convolution of one input
// channel that writes its planes (conv2dWritesPlanes) and a next layer that reads channels last.
// The same bits as avgPool2dForward. With f.relu it writes the ReLU's mask, avgPoolPlanesMasks(g)
// uint16 (one bit a pixel), which the backward reads instead of x.
bool avgPoolPlanesApply(const PoolGeom& g);
std::size_t avgPoolPlanesMasks(const PoolGeom& g);
void avgPoolPlanesForward(float* y, std::uint16_t* mask, const float* x, const PoolGeom& g, AvgPoolFusion f);
// dy [n, oh, ow, c] -> dx [n, c, h, w]; mask: the forward's with a fused ReLU, else null. g.dxRounded:
// dx rounded to bf16.
void avgPoolPlanesBackward(float* dx, const float* dy, const std::uint16_t* mask, const PoolGeom& g);
// Tests: true runs the portable loops instead of the AVX-512 kernels (the same bits).
bool& avgPoolPlanesPortableSlot();
// That pool fused into the convolution before it (ConvGeom::pool): the convolution pools its
// tiles from their registers (pool_windows.hpp), or one image's planes from a buffer in cache
// (forward); one image's pooled gradient is spread straight into its weight sums' layout, or
// into that buffer, just before the sums read it (backward). The 1.2 MB of LeNet-5's batch of
// planes then never go to memory and back, twice. The same bits as the separate passes.
struct PlanesPool {
  PoolGeom g;                      // n: the batch; g.dxRounded: the planes' gradient rounded to bf16
  AvgPoolFusion f;                 // forward: the ReLU before the pool, y rounded
  float* y = nullptr;              // forward: the pool's output [n, oh, ow, c]
  std::uint16_t* mask = nullptr;   // the ReLU's mask (avgPoolPlanesMasks(g)), when f.relu
  const float* dy = nullptr;       // backward: the gradient of the pool's output [n, oh, ow, c]
};
// Image n: its planes x [c, h, w] pooled into p.y (and p.mask); p.dy's image n spread into dx [c, h, w].
void avgPoolPlanesForwardImage(const PlanesPool& p, int n, const float* x);
void avgPoolPlanesBackwardImage(float* dx, const PlanesPool& p, int n);
// The same spread straight into the one-channel convolution's weight-sum layout dyT [h][blocks
// of 16 pixels][c][16] (zeros past w), adding each vector to laneSums [c][16] (the bias
// gradient's lanes) in row order: rows of at most 32 pixels that the windows cover, AVX-512.
bool avgPoolPlanesToBlocksApply(const PlanesPool& p);
void avgPoolPlanesBackwardToBlocks(float* dyT, float* laneSums, const PlanesPool& p, int n);
// The same (and p.g.dxRounded) into the native bf16 weight sums' words instead, dq [h / 2][blocks
// of 16 pixels][c][16] = (row 2 q, row 2 q + 1) bits, the rows of each window row as a pair:
// dyT's words without dyT, the lane sums in the same order.
void avgPoolPlanesBackwardToPairs(std::uint32_t* dq, float* laneSums, const PlanesPool& p, int n);
// The 2x2 average pool that tiles a channels-last convolution's output, fused into the narrow
// convolution in native bf16 (ConvGeom::nhwcPool; LeNet-5's conv 2, ReLU and pool 2): the forward
// pools each pair of output rows from the registers (no y of the convolution is written or read
// back), with the ReLU's mask one 16-bit word a pixel (bit o: y[o] > 0); the backward spreads
// the pool's gradient into the bf16 bits the convolution's backward kernels read (no float dy).
// The same bits as the separate passes (avgPool2dForward, avgPool2dBackward with g.dxRounded).
// The same struct carries the 2x2 max-pool of stride 2 after a one-channel convolution into
// blocks of 16 outputs (the convnet's conv 1, ReLU and pool 1; conv2dMaxPoolsNhwc): the forward
// pools each pair of output rows from the registers into the pool's output and window codes
// (maxPoolNhwcForward's, with its epilogue); the backward's weight pass makes its bf16 words of
// dy from the pool's gradient and codes, as the pool's backward (dx rounded) would spread them.
struct NhwcPool {
  AvgPoolFusion f;                 // forward: the ReLU before the pool, y rounded
  float* y = nullptr;              // forward: the pool's output [n, oh / 2, ow / 2, oc]
  std::uint16_t* mask = nullptr;   // the ReLU's mask [n, oh, ow] (conv2dPoolMasks words), when f.relu
  const float* dy = nullptr;       // backward: the gradient of the pool's output
  // A max-pool's window codes [n, oh / 2, ow / 2, oc] (kPoolPasses where its ReLU passes dy), in
  // place of the mask; null for an average pool. Its dy may come in blocks (ConvGeom::dyBlocked).
  std::uint16_t* codes = nullptr;
};
// Whether conv g (native bf16, its narrow kernels) can compute pool p, an average pool of x = y,
// in its passes; the ReLU's mask words for g's batch.
bool conv2dPoolsNhwc(Device& dev, const ConvGeom& g, const PoolGeom& p);
std::size_t conv2dPoolMasks(const ConvGeom& g);
// Whether conv g (native bf16, the one-channel forward into blocks of 16 outputs, with bias when
// bias) can compute p, a 2x2 max-pool of stride 2 of x = y, in its forward (NhwcPool::codes). Its
// backward then takes the weight and bias gradients only (no dx).
bool conv2dMaxPoolsNhwc(Device& dev, const ConvGeom& g, const PoolGeom& p, bool bias);
// x [n, c, h, w] -> y [n, c, oh, ow]; window i covers [floor(i*h/oh), ceil((i+1)*h/oh))
void adaptiveAvgPool2dForward(float* y, const float* x, int n, int c, int h, int w, int oh, int ow);
void adaptiveAvgPool2dBackward(float* dx, const float* dy, int n, int c, int h, int w, int oh,
                               int ow);

// ---- element-wise --------------------------------------------------------------------------
// x [count] -> y [count] (y may alias x)
void reluForward(float* y, const float* x, std::size_t count);
// y = the bf16 value nearest relu(x) (gemm.hpp's rounding): what the bf16 layer after rounds to.
void reluRoundedToBf16(float* y, const float* x, std::size_t count);
// dy, y [count] -> dx [count] (dx may alias dy)
void reluBackward(float* dx, const float* dy, const float* y, std::size_t count);
// dx as reluBackward's, rounded to bf16: what the bf16 layer before rounds it to.
void reluBackwardRoundedToBf16(float* dx, const float* dy, const float* y, std::size_t count);
// x [count] -> y [count], mask [count] (0 or 1/(1-p)); the mask depends only on (seed, step, i)
void dropoutForward(float* y, float* mask, const float* x, std::size_t count, float p,
                    std::uint64_t seed, std::uint64_t step);
void dropoutBackward(float* dx, const float* dy, const float* mask, std::size_t count);
// a, b [count] -> y [count]; backward: dy flows unchanged into both inputs
void addForward(float* y, const float* a, const float* b, std::size_t count);
// y = relu(a + b) (y may alias a or b)
void addReluForward(float* y, const float* a, const float* b, std::size_t count);
// dx = y > 0 ? a + b : 0 (a residual block's input gradient through the ReLU that made y)
void reluMaskedSum(float* dx, const float* a, const float* b, const float* y, std::size_t count);
// dst [count] += src [count]
void accumulate(float* dst, const float* src, std::size_t count);

// ---- batch-norm 2d (per channel over n, h, w) ------------------------------------------------
struct BatchNormArgs {
  int n, c, hw;
  float momentum = 0.1f, eps = 1e-5f;
  bool nhwc = false;  // x, y, dy, dx stored [n, hw, c]
  bool relu = false;  // y = relu(batch-norm(x)); backward then takes that y to mask dy
  bool dxBf16 = false;  // NHWC only: backward writes dx as bfloat16 (for a bf16 convolution)
  // NHWC only: forward writes y rounded to bf16 values (for an emulated bf16 convolution). With
  // relu, backward's mask then reads the rounded y: a positive value below bf16's smallest
  // (about 2^-134) rounds to 0 and masks, as in a bf16 pipeline.
  bool roundY = false;
};
// train: x [n, c, hw] -> y, mean [c], invstd [c]; runMean, runVar [c] updated (unbiased var)
void batchNorm2dForwardTrain(float* y, float* mean, float* invstd, float* runMean, float* runVar,
                             const float* x, const float* gamma, const float* beta,
                             const BatchNormArgs& a);
// eval: normalises with the running statistics; fills mean/invstd from them for backward
void batchNorm2dForwardEval(float* y, float* mean, float* invstd, const float* runMean,
                            const float* runVar, const float* x, const float* gamma,
                            const float* beta, const BatchNormArgs& a);
// dy [n, c, hw] -> dx [n, c, hw], dgamma [c] +=, dbeta [c] +=; train: through batch statistics.
// With a.relu, y is the forward's output (dy counts only where y > 0); otherwise y may be null.
void batchNorm2dBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                         const float* mean, const float* invstd, const float* gamma, bool train,
                         const BatchNormArgs& a, const float* y = nullptr);

// ---- losses (mean over the batch) -------------------------------------------------------------
// x [B, C] -> y [B, C] = log softmax(x)
void logSoftmaxForward(float* y, const float* x, int B, int C);
// dy, y [B, C] -> dx [B, C] = dy - exp(y) * sum(dy)
void logSoftmaxBackward(float* dx, const float* dy, const float* y, int B, int C);
// logp [B, C], labels [B] -> mean of -logp[b, label[b]]
float nllLossForward(const float* logp, const std::int32_t* labels, int B, int C);
// -> dlogp [B, C] = -1/B at the label, 0 elsewhere (scaled by dloss)
void nllLossBackward(float* dlogp, const std::int32_t* labels, int B, int C, float dloss = 1.f);
// logits [B, C], labels [B] -> probs [B, C] = softmax, returns the mean cross-entropy against
// the target (1 - smoothing) * onehot + smoothing / C (torch's label_smoothing)
float crossEntropyForward(float* probs, const float* logits, const std::int32_t* labels, int B,
                          int C, float smoothing = 0.f);
// -> dlogits [B, C] = (probs - target) / B (scaled by dloss), the target as above
void crossEntropyBackward(float* dlogits, const float* probs, const std::int32_t* labels, int B,
                          int C, float dloss = 1.f, float smoothing = 0.f);
// logits [B, C] -> how many rows have their maximum at the label
int countCorrect(const float* logits, const std::int32_t* labels, int B, int C);
// Throws ShapeError naming the first label outside [0, C).
void checkLabels(const std::int32_t* labels, int B, int C);

}  // namespace xs::engine
