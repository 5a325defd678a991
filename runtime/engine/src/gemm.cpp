// gemm.cpp: backend selection, bf16 rounding, the OpenBLAS path and our own portable kernel.
#include "gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device_internals.hpp"
#include "xspawn/error.hpp"

namespace xs::engine {

// Defined in gemm_onednn.cpp; false when oneDNN has no bf16 matmul for the shape on this CPU.
bool gemmOneDnn(Device& dev, bool transA, bool transB, int M, int N, int K, const float* A,
                int lda, const float* B, int ldb, float beta, float* C, int ldc);

namespace {
GemmBackend initialBackend() {
  const char* env = std::getenv("XS_ENGINE_GEMM");
  return env && *env ? parseGemmBackend(env) : GemmBackend::kOneDnn;
}
GemmBackend& backendSlot() {
  static GemmBackend b = initialBackend();
  return b;
}

// Our kernel: C += A * B for row-major, non-transposed A[M,K], B[K,N], blocked for L1/L2.
__attribute__((target_clones("avx512f", "avx2", "default")))
void ownKernel(int M, int N, int K, const float* A, const float* B, float* C, int ldc) {
  constexpr int kBk = 256, kBn = 512;
  for (int k0 = 0; k0 < K; k0 += kBk) {
    int k1 = std::min(K, k0 + kBk);
    for (int j0 = 0; j0 < N; j0 += kBn) {
      int j1 = std::min(N, j0 + kBn);
      for (int i = 0; i < M; ++i) {
        float* __restrict c = C + static_cast<std::size_t>(i) * ldc;
        const float* a = A + static_cast<std::size_t>(i) * K;
        for (int k = k0; k < k1; ++k) {
          float av = a[k];
          const float* __restrict b = B + static_cast<std::size_t>(k) * N;
          for (int j = j0; j < j1; ++j) c[j] += av * b[j];
        }
      }
    }
  }
}

// Copies op(X) into a dense row-major [rows, cols] buffer, rounding to bf16 when asked.
void pack(const float* X, int ld, bool trans, int rows, int cols, float* out, bool bf16) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float v = trans ? X[static_cast<std::size_t>(c) * ld + r] : X[static_cast<std::size_t>(r) * ld + c];
      out[static_cast<std::size_t>(r) * cols + c] = bf16 ? roundToBf16(v) : v;
    }
}

// The stored [rows, cols] block of X (row stride ld) rounded to bf16, dense, in scratch slot.
const float* roundedDense(Device& dev, int slot, const float* X, int ld, int rows, int cols) {
  if (ld == cols) return roundedScratch(dev, slot, X, static_cast<std::size_t>(rows) * cols);
  float* out = detail::scratch(dev, slot, static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    roundToBf16(X + static_cast<std::size_t>(r) * ld, out + static_cast<std::size_t>(r) * cols, cols);
  return out;
}

void scaleC(int M, int N, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i) {
    float* c = C + static_cast<std::size_t>(i) * ldc;
    if (beta == 0.f) std::memset(c, 0, N * sizeof(float));
    else if (beta != 1.f)
      for (int j = 0; j < N; ++j) c[j] *= beta;
  }
}
}  // namespace

const char* gemmBackendName(GemmBackend b) {
  switch (b) {
    case GemmBackend::kOneDnn: return "onednn";
    case GemmBackend::kOpenBlas: return "openblas";
    case GemmBackend::kOwn: return "own";
  }
  return "?";
}

GemmBackend parseGemmBackend(const std::string& name) {
  if (name == "onednn") return GemmBackend::kOneDnn;
  if (name == "openblas") return GemmBackend::kOpenBlas;
  if (name == "own") return GemmBackend::kOwn;
  XS_THROW(UsageError, "unknown GEMM backend '" + name + "': use onednn, openblas or own");
}

GemmBackend gemmBackend() { return backendSlot(); }
void setGemmBackend(GemmBackend b) { backendSlot() = b; }

bool cpuHasBf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

bool dpbf16Kernels() {
  static const bool isa = cpuHasAvx512Bw() && cpuHasBf16();
  return isa && !oneDnnRunsAmx();
}

bool cpuHasAvx512() {
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return avx512;
}

bool cpuHasAvx512Bw() {
  static const bool bw = [] {
    __builtin_cpu_init();
    return cpuHasAvx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }();
  return bw;
}

namespace {
Bf16Mode autoBf16Mode() {
  __builtin_cpu_init();
  if (!cpuHasBf16()) return Bf16Mode::kEmulated;  // oneDNN would emulate bf16 itself, slower
  // AMX where oneDNN runs it, not where the CPU has it: a kernel that does not grant the tiles
  // (before Linux 5.16, some VMs) or ONEDNN_MAX_CPU_ISA below AMX leaves Intel's vdpbf16ps,
  // at half the FMA units' rate (docs/engine.md).
  return oneDnnRunsAmx() || __builtin_cpu_is("amd") ? Bf16Mode::kNative : Bf16Mode::kEmulated;
}
Bf16Mode& bf16ModeSlot() {
  static Bf16Mode m = [] {
    const char* env = std::getenv("XS_ENGINE_BF16");
    const std::string v = env ? env : "";
    if (v.empty() || v == "auto") return autoBf16Mode();
    if (v == "native") return Bf16Mode::kNative;
    XS_CHECK(v == "emulated", UsageError,
             "XS_ENGINE_BF16=" + v + ": use auto, native (oneDNN's bf16 kernels) or emulated (fp32 kernels on "
             "operands rounded to bf16)");
    return Bf16Mode::kEmulated;
  }();
  return m;
}
}  // namespace

const char* bf16ModeName(Bf16Mode m) { return m == Bf16Mode::kNative ? "native" : "emulated"; }
Bf16Mode bf16Mode() { return bf16ModeSlot(); }
void setBf16Mode(Bf16Mode m) { bf16ModeSlot() = m; }
bool emulatesBf16(const Device& dev) {
  return dev.precision() == Precision::kBf16 && bf16Mode() == Bf16Mode::kEmulated;
}
bool nativeBf16(const Device& dev) { return dev.precision() == Precision::kBf16 && bf16Mode() == Bf16Mode::kNative; }

__attribute__((target_clones("avx512f", "avx2", "default")))
void roundToBf16(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = roundToBf16(src[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void toBf16Bits(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = toBf16Bits(src[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void bf16BitsOfRounded(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(src[i]) >> 16);
}

const float* roundedCopy(Device& dev, Tensor& t, const float* src, std::size_t n) {
  t.ensure(dev, Shape{static_cast<int>(n)}, "bf16-rounded operand");
  roundToBf16(src, t.data(), n);
  return t.data();
}

const float* roundedScratch(Device& dev, int slot, const float* src, std::size_t n) {
  float* out = detail::scratch(dev, slot, n);
  roundToBf16(src, out, n);
  return out;
}

void gemmOfRounded(Device& dev, bool transA, bool transB, int M, int N, int K, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  if (emulatesBf16(dev) && gemmBackend() == GemmBackend::kOneDnn && M > 0 && N > 0 && K > 0)
    sgemmOneDnn(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else
    gemm(dev, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Device& dev, bool transA, bool transB, int M, int N, int K, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  XS_CHECK(M >= 0 && N >= 0 && K >= 0, ShapeError, "gemm with a negative dimension");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    scaleC(M, N, beta, C, ldc);
    return;
  }
  bool bf16 = dev.precision() == Precision::kBf16;
  GemmBackend b = gemmBackend();
  if (b == GemmBackend::kOneDnn && emulatesBf16(dev)) {  // oneDNN's sgemm on rounded dense copies
    const float* a = roundedDense(dev, 4, A, lda, transA ? K : M, transA ? M : K);
    const float* bb = roundedDense(dev, 5, B, ldb, transB ? N : K, transB ? K : N);
    sgemmOneDnn(transA, transB, M, N, K, a, transA ? M : K, bb, transB ? K : N, beta, C, ldc);
    return;
  }
  if (b == GemmBackend::kOneDnn) {
    if (gemmOneDnn(dev, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc)) return;
    b = GemmBackend::kOpenBlas;  // exact bf16 emulation below
  }
  if (b == GemmBackend::kOpenBlas && !bf16) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Exact bf16 emulation and our kernel both work on dense packed copies.
  float* a = detail::scratch(dev, 4, static_cast<std::size_t>(M) * K);
  float* bb = detail::scratch(dev, 5, static_cast<std::size_t>(K) * N);
  pack(A, lda, transA, M, K, a, bf16);
  pack(B, ldb, transB, K, N, bb, bf16);
  if (b == GemmBackend::kOpenBlas) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a, K, bb, N, beta, C, ldc);
    return;
  }
  scaleC(M, N, beta, C, ldc);
  ownKernel(M, N, K, a, bb, C, ldc);
}

}  // namespace xs::engine
