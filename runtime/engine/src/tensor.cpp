// tensor.cpp: Shape utilities and the arena-backed Tensor.
#include "xspawn/engine/tensor.hpp"

#include <cstring>
#include <utility>

#include "xspawn/error.hpp"

namespace xs::engine {

Shape::Shape(std::initializer_list<int> dims) {
  XS_CHECK(dims.size() >= 1 && dims.size() <= 4, ShapeError, "a shape has 1 to 4 dims");
  for (int v : dims) d[rank++] = v;
}

std::size_t Shape::numel() const {
  if (rank == 0) return 0;
  std::size_t n = 1;
  for (int i = 0; i < rank; ++i) n *= static_cast<std::size_t>(d[i]);
  return n;
}

std::size_t Shape::perSample() const { return rank == 0 || d[0] == 0 ? 0 : numel() / d[0]; }

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Tensor::Tensor(Device& dev, const Shape& shape, const char* what) { ensure(dev, shape, what); }

Tensor::~Tensor() { free(); }

Tensor::Tensor(Tensor&& o) noexcept { *this = std::move(o); }

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    free();
    dev_ = std::exchange(o.dev_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    shape_ = std::exchange(o.shape_, Shape{});
    layout_ = std::exchange(o.layout_, Layout::kNchw);
    dtype_ = std::exchange(o.dtype_, DType::kF32);
    blockedGrad_ = std::exchange(o.blockedGrad_, false);
    bf16Values_ = std::exchange(o.bf16Values_, false);
    bf16Grad_ = std::exchange(o.bf16Grad_, false);
  }
  return *this;
}

Tensor Tensor::fromHost(Device& dev, const Shape& shape, const float* host) {
  Tensor t(dev, shape, "input transferred to the device");
  dev.copyToDevice(t.data_, host, shape.numel());
  return t;
}

void Tensor::ensure(Device& dev, const Shape& shape, const char* what) {
  for (int i = 0; i < shape.rank; ++i)
    XS_CHECK(shape.d[i] > 0, ShapeError, "tensor shape " + shape.str() + " has a non-positive dim");
  if (dev_ != &dev || capacity_ < shape.numel()) {
    free();
    data_ = dev.allocate(shape.numel(), what);
    dev_ = &dev;
    capacity_ = shape.numel();
  }
  shape_ = shape;
}

void Tensor::reshape(const Shape& shape) {
  XS_CHECK(shape.numel() == shape_.numel(), ShapeError,
           "cannot reshape " + shape_.str() + " to " + shape.str() + ": sizes differ");
  shape_ = shape;
}

void Tensor::zero() {
  if (data_) std::memset(data_, 0, numel() * sizeof(float));
}

void Tensor::free() {
  if (dev_ && data_) dev_->release(data_);
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace xs::engine
