// gemm_onednn.cpp: the oneDNN backend: dnnl_sgemm for fp32 and cached bf16 matmul primitives
// (bf16 operands, fp32 accumulation and output) for bf16, run on the calling thread.
#include <immintrin.h>

#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <dnnl.hpp>
#include <fmt/format.h>

#include "xspawn/error.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "conv_onednn.hpp"
#include "onednn_context.hpp"

namespace xs::engine {
namespace {

constexpr int kScratchpadSlot = 3;  // shared with the convolutions: never live at the same time

// Cached bf16 matmul primitives of one device (kernel state slot 1).
struct MatmulCache : detail::KernelState {
  using Key = std::tuple<int, int, int, bool, bool, int, float>;
  struct Entry {
    bool ok = false;  // false: oneDNN has no bf16 matmul here (the caller emulates)
    dnnl::matmul prim;
    dnnl::memory::desc scratchpad;
    // The operands' memory objects and the argument map, made once: a call only sets their
    // data handles. Made per call (a few allocations each), they cost LeNet-5's bf16 step, nine
    // calls, 2-4%.
    dnnl::memory a, b, c, sp;
    std::unordered_map<int, dnnl::memory> args;
  };
  std::map<Key, Entry> entries;
};
constexpr int kMatmulSlot = 1;

MatmulCache& matmulCache(Device& dev) {
  if (!detail::kernelState(dev, kMatmulSlot)) detail::setKernelState(dev, kMatmulSlot, std::make_unique<MatmulCache>());
  return *static_cast<MatmulCache*>(detail::kernelState(dev, kMatmulSlot));
}

__attribute__((target("avx512f,avx512bf16,avx512vl")))
void toBf16Native(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<__m256i&>(v));
  }
  for (; i < n; ++i) dst[i] = toBf16Bits(src[i]);
}

void toBf16(const float* src, std::uint16_t* dst, std::size_t n) {
  static const bool native = cpuHasBf16();
  if (native) {
    toBf16Native(src, dst, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) dst[i] = toBf16Bits(src[i]);
}

// Converts the stored [rows, cols] block (row stride ld) to a dense bf16 copy.
std::uint16_t* packBf16(Device& dev, int slot, const float* X, int ld, int rows, int cols) {
  auto* out = reinterpret_cast<std::uint16_t*>(
      detail::scratch(dev, slot, (static_cast<std::size_t>(rows) * cols + 1) / 2));
  if (ld == cols) toBf16(X, out, static_cast<std::size_t>(rows) * cols);
  else
    for (int r = 0; r < rows; ++r)
      toBf16(X + static_cast<std::size_t>(r) * ld, out + static_cast<std::size_t>(r) * cols, cols);
  return out;
}

dnnl::memory::desc matrixDesc(int rows, int cols, bool trans, dnnl::memory::data_type dt) {
  // Logical [rows, cols]; stored dense either as is or transposed.
  dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1};
  return dnnl::memory::desc({rows, cols}, dt, strides);
}

// Whether oneDNN's effective ISA includes every feature of `need`.
bool oneDnnRuns(dnnl::cpu_isa need) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(need)) == static_cast<unsigned>(need);
}
}  // namespace

bool oneDnnRunsAmx() {
  static const bool amx = oneDnnRuns(dnnl::cpu_isa::avx512_core_amx);
  return amx;
}

bool oneDnnRunsAvx512Bf16() {
  static const bool bf16 = oneDnnRuns(dnnl::cpu_isa::avx512_core_bf16);
  return bf16;
}

void sgemmOneDnn(bool transA, bool transB, int M, int N, int K, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  detail::oneDnnContext();  // one thread
  dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  XS_CHECK(st == dnnl_success, BackendError,
           fmt::format("oneDNN sgemm failed (status {}) for M={} N={} K={}", int(st), M, N, K));
}

bool gemmOneDnn(Device& dev, bool transA, bool transB, int M, int N, int K, const float* A,
                int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (dev.precision() == Precision::kFp32) {
    sgemmOneDnn(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return true;
  }
  return detail::gemmBf16(dev, transA, transB, M, N, K, A, false, lda, B, false, ldb, beta, C, ldc);
}

namespace detail {

void floatsToBf16(const float* src, std::uint16_t* dst, std::size_t n) { toBf16(src, dst, n); }

bool gemmBf16(Device& dev, bool transA, bool transB, int M, int N, int K, const void* A, bool aBf16,
              int lda, const void* B, bool bBf16, int ldb, float beta, float* C, int ldc) {
  auto& ctx = detail::oneDnnContext();
  MatmulCache& cache = matmulCache(dev);
  MatmulCache::Key key{M, N, K, transA, transB, ldc, beta};
  auto it = cache.entries.find(key);
  if (it == cache.entries.end()) {
    using dt = dnnl::memory::data_type;
    const auto aMd = matrixDesc(M, K, transA, dt::bf16), bMd = matrixDesc(K, N, transB, dt::bf16);
    const auto cMd = dnnl::memory::desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
    MatmulCache::Entry e;
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // from the device arena
      if (beta != 0.f) {
        dnnl::post_ops po;
        po.append_sum(beta);
        attr.set_post_ops(po);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(aMd, bMd, cMd), attr, ctx.eng);
      e.ok = true;
      e.prim = dnnl::matmul(pd);
      e.scratchpad = pd.scratchpad_desc();
      e.a = dnnl::memory(aMd, ctx.eng, DNNL_MEMORY_NONE);
      e.b = dnnl::memory(bMd, ctx.eng, DNNL_MEMORY_NONE);
      e.c = dnnl::memory(cMd, ctx.eng, DNNL_MEMORY_NONE);
      e.sp = dnnl::memory(e.scratchpad, ctx.eng, DNNL_MEMORY_NONE);
      e.args = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}, {DNNL_ARG_SCRATCHPAD, e.sp}};
    } catch (const dnnl::error&) {
      e.ok = false;
    }
    it = cache.entries.emplace(key, e).first;
  }
  if (!it->second.ok) return false;
  // Dense bf16 copies, kept in their stored orientation.
  const float* af = static_cast<const float*>(A);
  const float* bf = static_cast<const float*>(B);
  void* a = aBf16 ? const_cast<void*>(A) : transA ? packBf16(dev, 4, af, lda, K, M) : packBf16(dev, 4, af, lda, M, K);
  void* b = bBf16 ? const_cast<void*>(B) : transB ? packBf16(dev, 5, bf, ldb, N, K) : packBf16(dev, 5, bf, ldb, K, N);
  MatmulCache::Entry& e = it->second;
  e.a.set_data_handle(a);
  e.b.set_data_handle(b);
  e.c.set_data_handle(C);
  e.sp.set_data_handle(detail::scratch(dev, kScratchpadSlot, e.scratchpad.get_size() / 4 + 1));
  e.prim.execute(ctx.stream, e.args);
  ctx.stream.wait();
  return true;
}

}  // namespace detail
}  // namespace xs::engine
