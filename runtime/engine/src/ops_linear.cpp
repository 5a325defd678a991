// ops_linear.cpp: the linear layer's passes (forward, backward, and the backward with the
// optimizer step fused in): our row kernels for small batches (linear_rows.cpp and, in native
// bf16 on vdpbf16ps, linear_rows_bf16.cpp), oneDNN's AMX tiles or bf16 matmul, else the GEMM
// backend; emulated bf16 on rounded operands.
#include <cstring>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "ops.hpp"
#include "update_rules.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {

namespace {
// The small-batch kernels (linear_rows.cpp) instead of the GEMM backend: with oneDNN's, in fp32
// and emulated bf16 (the operands rounded).
bool linearRows(const Device& dev, bool emulated, int B, int I, int O) {
  return gemmBackend() == GemmBackend::kOneDnn && (emulated || dev.precision() == Precision::kFp32) &&
         useLinearRows(B, I, O);
}

// Native bf16 with the layer's operands (r): the matmul on bf16 bits, each operand converted at
// most once a step (w not at all when it comes from the store's bits mirror).
bool nativeLinear(Device& dev, const RoundedOperands* r) { return r && bf16Matmul(dev); }

// src (n floats) as bf16 bits in t (grown to fit).
const std::uint16_t* bf16Copy(Device& dev, Tensor& t, const float* src, std::size_t n) {
  t.ensure(dev, Shape{static_cast<int>((n + 1) / 2)}, "bf16 operand");
  auto* out = reinterpret_cast<std::uint16_t*>(t.data());
  detail::floatsToBf16(src, out, n);
  return out;
}
const std::uint16_t* bitsOf(const Tensor& t) { return reinterpret_cast<const std::uint16_t*>(t.data()); }

// Native bf16's backward by linear_rows_bf16.cpp's kernels: x as forward converted it, on
// vdpbf16ps (no AMX), the layers linearRows takes in fp32.
bool bf16Rows(Device& dev, const RoundedOperands* r, int B, int I, int O) {
  return nativeLinear(dev, r) && !r->xBf16.empty() && useLinearRowsBf16(B, I, O);
}
}  // namespace

void linearForward(Device& dev, float* y, const float* x, const float* w, const float* b, int B,
                   int I, int O, RoundedOperands* r) {
  // y [B, O] = x [B, I] * w^T [I, O]
  if (nativeLinear(dev, r)) {
    const auto* xb = bf16Copy(dev, r->xBf16, x, static_cast<std::size_t>(B) * I);
    const auto* wb = r->wBits ? r->wBits : bf16Copy(dev, r->wBf16, w, static_cast<std::size_t>(O) * I);
    if (useLinearRowsBf16(B, I, O)) return linearForwardBf16(dev, y, xb, wb, b, B, I, O);
    if (linearForwardAmx(dev, y, xb, wb, b, B, I, O)) return;
    if (b)
      for (int i = 0; i < B; ++i) std::memcpy(y + static_cast<std::size_t>(i) * O, b, O * sizeof(float));
    if (detail::gemmBf16(dev, false, true, B, O, I, xb, true, I, wb, true, I, b ? 1.f : 0.f, y, O)) return;
  }
  const bool emulated = r && emulatesBf16(dev);
  if (emulated) {
    if (!r->xRounded) x = roundedCopy(dev, r->x, x, static_cast<std::size_t>(B) * I);
    if (!r->wRounded) w = roundedCopy(dev, r->w, w, static_cast<std::size_t>(O) * I);
  }
  if (linearRows(dev, emulated, B, I, O)) return linearForwardRows(dev, y, x, w, b, B, I, O);
  if (b)
    for (int i = 0; i < B; ++i) std::memcpy(y + static_cast<std::size_t>(i) * O, b, O * sizeof(float));
  if (emulated) return gemmOfRounded(dev, false, true, B, O, I, x, I, w, I, b ? 1.f : 0.f, y, O);
  gemm(dev, false, true, B, O, I, x, I, w, I, b ? 1.f : 0.f, y, O);
}

namespace {
// db [O] (+)= the sum of dy [B, O]'s rows.
void biasGradient(float* db, const float* dy, int B, int O, bool overwrite) {
  if (!db) return;
  if (overwrite) std::memset(db, 0, static_cast<std::size_t>(O) * sizeof(float));  // O floats, not O x I
  for (int i = 0; i < B; ++i) accumulate(db, dy + static_cast<std::size_t>(i) * O, O);
}

// Native bf16's dx [B, I] = dy [B, O] * w [O, I] from their bits (dy and w as floats where no
// kernel takes them).
void nativeDataGradient(Device& dev, float* dx, const std::uint16_t* dyb, const std::uint16_t* wb, const float* dy,
                        const float* w, int B, int I, int O) {
  if (useLinearRowsBf16(B, I, O)) return linearDataGradientBf16(dev, dx, dyb, wb, B, I, O);
  if (!linearDataGradientAmx(dev, dx, dyb, wb, B, I, O) &&
      !detail::gemmBf16(dev, false, false, B, I, O, dyb, true, O, wb, true, I, 0.f, dx, I))
    gemm(dev, false, false, B, I, O, dy, O, w, I, 0.f, dx, I);
}

// Emulated bf16's operands as forward and backward round them (x and w by forward, dy here).
struct RoundedInputs {
  const float *dy, *x, *w;
};
RoundedInputs roundedInputs(Device& dev, RoundedOperands& r, const float* dy, const float* x, const float* w, int B,
                            int I, int O) {
  return {r.dyRounded ? dy : roundedCopy(dev, r.dy, dy, static_cast<std::size_t>(B) * O), r.xRounded ? x : r.x.data(),
          r.wRounded ? w : r.w.data()};
}
}  // namespace

bool linearBackwardStepped(Device& dev, float* dx, float* db, const float* dy, const float* x, const float* w, int B,
                           int I, int O, RoundedOperands* r, const detail::FusedStep& step, std::size_t offset) {
  // Where linearBackward takes the same kernels (the gradients' bits): in native bf16 on
  // vdpbf16ps, linear_rows_bf16.cpp's, whose step writes the bits mirror as well; in fp32 or
  // emulated bf16, linear_rows.cpp's, whose step writes the rounded mirror as well.
  if (bf16Rows(dev, r, B, I, O)) {  // native bf16: dx as linearBackward makes it, then the step
    if (!fusesLinearStepBf16(B, I, O, step)) return false;
    biasGradient(db, dy, B, O, true);
    const auto* dyb = bf16Copy(dev, r->dyBf16, dy, static_cast<std::size_t>(B) * O);
    const auto* wb = r->wBits ? r->wBits : bitsOf(r->wBf16);
    if (dx) nativeDataGradient(dev, dx, dyb, wb, dy, w, B, I, O);
    return linearWeightStepBf16(dev, dyb, bitsOf(r->xBf16), B, I, O, step, offset);
  }
  const bool emulated = r && emulatesBf16(dev);
  if ((!emulated && dev.precision() != Precision::kFp32) || (emulated && !step.rounded) || step.bits ||
      !linearRows(dev, emulated, B, I, O) || linearRowsPortableSlot())
    return false;
  biasGradient(db, dy, B, O, true);
  const RoundedInputs in = emulated ? roundedInputs(dev, *r, dy, x, w, B, I, O) : RoundedInputs{dy, x, w};
  return linearBackwardWithStep(dev, dx, in.dy, in.x, in.w, B, I, O, step, offset);
}

void linearBackward(Device& dev, float* dx, float* dw, float* db, const float* dy, const float* x,
                    const float* w, int B, int I, int O, RoundedOperands* r, bool overwrite) {
  biasGradient(db, dy, B, O, overwrite);
  const float beta = overwrite ? 0.f : 1.f;
  if (nativeLinear(dev, r) && !r->xBf16.empty()) {  // x and w as forward converted them
    const auto* dyb = bf16Copy(dev, r->dyBf16, dy, static_cast<std::size_t>(B) * O);
    const auto* wb = r->wBits ? r->wBits : bitsOf(r->wBf16);
    // dw [O, I] (+)= dy^T [O, B] * x [B, I]; dx [B, I] = dy [B, O] * w [O, I]
    if (bf16Rows(dev, r, B, I, O)) linearWeightGradientBf16(dev, dw, dyb, bitsOf(r->xBf16), B, I, O, beta == 0.f);
    else if (!linearWeightGradientAmx(dev, dw, dyb, bitsOf(r->xBf16), B, I, O, beta == 0.f) &&
        !detail::gemmBf16(dev, true, false, O, I, B, dyb, true, O, bitsOf(r->xBf16), true, I, beta, dw, I))
      gemm(dev, true, false, O, I, B, dy, O, x, I, beta, dw, I);
    if (dx) nativeDataGradient(dev, dx, dyb, wb, dy, w, B, I, O);
    return;
  }
  const bool emulated = r && emulatesBf16(dev);
  if (emulated) {  // x and w as forward rounded them
    const RoundedInputs in = roundedInputs(dev, *r, dy, x, w, B, I, O);
    dy = in.dy, x = in.x, w = in.w;
  }
  // dw [O, I] (+)= dy^T [O, B] * x [B, I]
  if (linearRows(dev, emulated, B, I, O)) linearWeightGradientRows(dev, dw, dy, x, B, I, O, overwrite);
  else if (emulated) gemmOfRounded(dev, true, false, O, I, B, dy, O, x, I, beta, dw, I);
  else gemm(dev, true, false, O, I, B, dy, O, x, I, beta, dw, I);
  if (!dx) return;
  // dx [B, I] = dy [B, O] * w [O, I]
  if (linearRows(dev, emulated, B, I, O)) linearDataGradientRows(dev, dx, dy, w, B, I, O);
  else if (emulated) gemmOfRounded(dev, false, false, B, I, O, dy, O, w, I, 0.f, dx, I);
  else gemm(dev, false, false, B, I, O, dy, O, w, I, 0.f, dx, I);
}

}  // namespace xs::engine
