// gemm.cpp: backend selection, bf16 rounding, the OpenBLAS path and our own portable kernel.
#include "gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

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

std::uint16_t toBf16Bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float roundToBf16(float x) {
  std::uint32_t u = static_cast<std::uint32_t>(toBf16Bits(x)) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

void roundToBf16(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = roundToBf16(src[i]);
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
  float* a = dev.scratch(4, static_cast<std::size_t>(M) * K);
  float* bb = dev.scratch(5, static_cast<std::size_t>(K) * N);
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
