// tensor.hpp: Shape (up to 4 dims, NCHW) and Tensor, a float32 buffer living in a Device's arena.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "xspawn/engine/device.hpp"

namespace xs::engine {

// Up to 4 dims; d[i] for i >= rank is 0.
struct Shape {
  std::array<int, 4> d{0, 0, 0, 0};
  int rank = 0;
  Shape() = default;
  Shape(std::initializer_list<int> dims);  // ShapeError unless 1 to 4 dims
  int operator[](int i) const { return d[i]; }
  // The number of elements (the product of the dims).
  std::size_t numel() const;
  // Product of the dims after the first (features per sample).
  std::size_t perSample() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3, 28, 28]"
};

// How a rank-4 activation [n, c, h, w] is stored: NCHW (PyTorch's default, the interface of
// every op) or NHWC (channels last: what the bf16 matrix unit reads without a reorder). The
// shape always names the logical NCHW dims. kNchw16c, [n, c/16, h, w, 16] (oneDNN's nChw16c),
// only between a convolution's oneDNN primitives and a max-pool next to it: gradients both
// ways, and the convolution's output where its primitive computes that layout (bf16).
enum class Layout { kNchw, kNhwc, kNchw16c };

// What a tensor's buffer holds: float32, or bfloat16 values (2 bytes each, packed from the
// start of the buffer: a bf16 producer feeding a bf16 consumer, e.g. a gradient a convolution
// would round to bf16 anyway).
enum class DType { kF32, kBf16 };

// A move-only float32 tensor owned by a device; memory returns to the arena on destruction.
class Tensor {
 public:
  Tensor() = default;  // empty: no device, no memory
  // shape.numel() floats from dev's arena (contents undefined); `what` names it in an
  // out-of-memory error.
  Tensor(Device& dev, const Shape& shape, const char* what = "tensor");
  ~Tensor();
  Tensor(Tensor&& o) noexcept;
  Tensor& operator=(Tensor&& o) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Host -> device transfer of a host buffer of shape.numel() floats.
  static Tensor fromHost(Device& dev, const Shape& shape, const float* host);

  // Keeps the memory when it is big enough, reallocates otherwise (contents undefined).
  void ensure(Device& dev, const Shape& shape, const char* what = "tensor");
  // Same memory, new shape of the same size (flatten).
  void reshape(const Shape& shape);
  // Every element 0.
  void zero();

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  std::size_t numel() const { return shape_.numel(); }
  bool empty() const { return data_ == nullptr; }
  // How the buffer is laid out (Layout); its writer sets it.
  Layout layout() const { return layout_; }
  void setLayout(Layout l) { layout_ = l; }
  // Set by the module that wrote this activation: its backward takes the gradient of it in
  // Layout::kNchw16c as it is. The module reading it alone (the next one in a Sequential) may
  // then hand the gradient back in that layout, and skip a reorder on both sides.
  bool blockedGrad() const { return blockedGrad_; }
  void setBlockedGrad(bool v) { blockedGrad_ = v; }
  // What the buffer holds (DType); its writer sets it.
  DType dtype() const { return dtype_; }
  void setDtype(DType t) { dtype_ = t; }
  // Float32 values that are all bfloat16 values: the module that wrote them rounded them (in a
  // pass it made anyway) because the module reading them would. A module that rounds its input
  // or its gradient to bf16 takes such a tensor as it is, one rounding pass less.
  bool bf16Values() const { return bf16Values_; }
  void setBf16Values(bool v) { bf16Values_ = v; }
  // Set by the module that wrote this activation: its backward rounds the gradient of it to
  // bf16. The module reading it alone may then hand the gradient back rounded (bf16Values).
  bool bf16Grad() const { return bf16Grad_; }
  void setBf16Grad(bool v) { bf16Grad_ = v; }
  // The device whose arena holds it (null when empty).
  Device* device() const { return dev_; }

 private:
  void free();
  Device* dev_ = nullptr;
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
  Shape shape_;
  Layout layout_ = Layout::kNchw;
  bool blockedGrad_ = false;
  bool bf16Values_ = false, bf16Grad_ = false;
  DType dtype_ = DType::kF32;
};

}  // namespace xs::engine
