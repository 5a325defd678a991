// reduce_kernels.cpp: blocked, vectorised N-way reductions. Each block of kBlock elements is
// accumulated in an L1-resident buffer: first source copied, each further source combined in
// rank order, then the block stored to every destination. Built for AVX-512, AVX2 and plain
// x86-64, picked at run time (target_clones).
#include "reduce_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

namespace xs::detail {
namespace {

constexpr std::size_t kBlock = 2048;

// How an element type is read into its accumulator type and written back.
template <class T>
struct Elem;
template <>
struct Elem<float> {
  using Acc = float;
  static Acc load(float v) { return v; }
  static float store(Acc a) { return a; }
};
template <>
struct Elem<double> {
  using Acc = double;
  static Acc load(double v) { return v; }
  static double store(Acc a) { return a; }
};
// Integers accumulate in unsigned 64-bit: a sum wraps like the element type's two's complement
// (no undefined overflow); max/min and the mean use the signed value.
template <>
struct Elem<std::int32_t> {
  using Acc = std::int64_t;
  static Acc load(std::int32_t v) { return v; }
  static std::int32_t store(Acc a) { return static_cast<std::int32_t>(a); }
};
template <>
struct Elem<std::int64_t> {
  using Acc = std::int64_t;
  static Acc load(std::int64_t v) { return v; }
  static std::int64_t store(Acc a) { return a; }
};
template <>
struct Elem<std::uint16_t> {  // bfloat16 bits
  using Acc = float;
  static Acc load(std::uint16_t v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }
  static std::uint16_t store(Acc a) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(a);
    std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    std::uint32_t nan = (u >> 16) | 0x40u;  // keep NaN a (quiet) NaN
    return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
};

template <class A>
[[gnu::always_inline]] inline A combine(ReduceOp op, A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    switch (op) {
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kMin: return a < b ? a : b;
      default:
        return static_cast<A>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
    }
  } else {
    switch (op) {
      // NaN wins, as in PyTorch: a NaN in a stays (a != a), a NaN in b fails both tests.
      case ReduceOp::kMax: return (a > b || a != a) ? a : b;
      case ReduceOp::kMin: return (a < b || a != a) ? a : b;
      default: return a + b;
    }
  }
}

template <class T, ReduceOp Op>
[[gnu::always_inline]] inline void kernel(const void* const* srcsv, int nsrc, void* const* dstsv,
                                          int ndst, std::size_t n, int divisor) {
  using E = Elem<T>;
  using A = typename E::Acc;
  alignas(64) A acc[kBlock];
  for (std::size_t base = 0; base < n; base += kBlock) {
    const std::size_t m = std::min(kBlock, n - base);
    const T* s0 = static_cast<const T*>(srcsv[0]) + base;
    for (std::size_t j = 0; j < m; ++j) acc[j] = E::load(s0[j]);
    for (int k = 1; k < nsrc; ++k) {
      const T* sk = static_cast<const T*>(srcsv[k]) + base;
      for (std::size_t j = 0; j < m; ++j) acc[j] = combine<A>(Op, acc[j], E::load(sk[j]));
    }
    if (Op == ReduceOp::kMean && divisor > 1) {
      if constexpr (std::is_integral_v<A>) {
        for (std::size_t j = 0; j < m; ++j) acc[j] = acc[j] / divisor;
      } else {
        const A d = static_cast<A>(divisor);
        for (std::size_t j = 0; j < m; ++j) acc[j] = acc[j] / d;
      }
    }
    for (int d = 0; d < ndst; ++d) {
      T* dd = static_cast<T*>(dstsv[d]) + base;
      for (std::size_t j = 0; j < m; ++j) dd[j] = E::store(acc[j]);
    }
  }
}

template <class T>
[[gnu::always_inline]] inline void byOp(ReduceOp op, const void* const* s, int ns, void* const* d,
                                        int nd, std::size_t n, int div) {
  switch (op) {
    case ReduceOp::kSum: return kernel<T, ReduceOp::kSum>(s, ns, d, nd, n, div);
    case ReduceOp::kMean: return kernel<T, ReduceOp::kMean>(s, ns, d, nd, n, div);
    case ReduceOp::kMax: return kernel<T, ReduceOp::kMax>(s, ns, d, nd, n, div);
    case ReduceOp::kMin: return kernel<T, ReduceOp::kMin>(s, ns, d, nd, n, div);
  }
}

#define XS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

XS_CLONES void reduceF32(ReduceOp op, const void* const* s, int ns, void* const* d, int nd, std::size_t n, int div) {
  byOp<float>(op, s, ns, d, nd, n, div);
}
XS_CLONES void reduceF64(ReduceOp op, const void* const* s, int ns, void* const* d, int nd, std::size_t n, int div) {
  byOp<double>(op, s, ns, d, nd, n, div);
}
XS_CLONES void reduceI32(ReduceOp op, const void* const* s, int ns, void* const* d, int nd, std::size_t n, int div) {
  byOp<std::int32_t>(op, s, ns, d, nd, n, div);
}
XS_CLONES void reduceI64(ReduceOp op, const void* const* s, int ns, void* const* d, int nd, std::size_t n, int div) {
  byOp<std::int64_t>(op, s, ns, d, nd, n, div);
}
XS_CLONES void reduceBF16(ReduceOp op, const void* const* s, int ns, void* const* d, int nd, std::size_t n, int div) {
  byOp<std::uint16_t>(op, s, ns, d, nd, n, div);
}

}  // namespace

void reduceInto(DType type, ReduceOp op, const void* const* srcs, int nsrc, void* const* dsts,
                int ndst, std::size_t n, int meanDivisor) {
  if (n == 0 || ndst == 0) return;
  switch (type) {
    case DType::kFloat32: return reduceF32(op, srcs, nsrc, dsts, ndst, n, meanDivisor);
    case DType::kFloat64: return reduceF64(op, srcs, nsrc, dsts, ndst, n, meanDivisor);
    case DType::kInt32: return reduceI32(op, srcs, nsrc, dsts, ndst, n, meanDivisor);
    case DType::kInt64: return reduceI64(op, srcs, nsrc, dsts, ndst, n, meanDivisor);
    case DType::kBFloat16: return reduceBF16(op, srcs, nsrc, dsts, ndst, n, meanDivisor);
  }
}

void scaleCopy(DType type, const void* src, void* dst, std::size_t n, int divisor) {
  const void* s[1] = {src};
  void* d[1] = {dst};
  reduceInto(type, ReduceOp::kMean, s, 1, d, 1, n, divisor);
}

}  // namespace xs::detail

namespace xs {

float toFloat(bfloat16 v) { return detail::Elem<std::uint16_t>::load(v.bits); }
bfloat16 toBFloat16(float v) { return bfloat16{detail::Elem<std::uint16_t>::store(v)}; }

}  // namespace xs
