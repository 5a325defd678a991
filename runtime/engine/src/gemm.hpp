// gemm.hpp: the matrix unit: row-major C = op(A) * op(B) + beta * C on one thread, in fp32 or
// bf16 (bf16 products, fp32 accumulation), with a choice of backend measured in docs/engine.md.
#pragma once

#include <cstdint>
#include <string>

#include "xspawn/engine/device.hpp"

namespace xs::engine {

enum class GemmBackend {
  kOneDnn,    // oneDNN: dnnl_sgemm for fp32, a bf16 matmul primitive (AVX512-BF16 / AMX) for bf16
  kOpenBlas,  // OpenBLAS cblas_sgemm; bf16 by exact emulation (operands rounded to bf16)
  kOwn,       // our portable blocked kernel; bf16 by exact emulation
};

const char* gemmBackendName(GemmBackend b);
// "onednn", "openblas", "own"; throws UsageError on anything else.
GemmBackend parseGemmBackend(const std::string& name);
// Process-wide backend; the default is oneDNN, or $XS_ENGINE_GEMM when set.
GemmBackend gemmBackend();
void setGemmBackend(GemmBackend b);

// C[M,N] = op(A)[M,K] * op(B)[K,N] + beta * C, op(X) = X or X^T; ld* are row strides.
// A is [M,K] (transA: [K,M]); B is [K,N] (transB: [N,K]).
void gemm(Device& dev, bool transA, bool transB, int M, int N, int K, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// Rounds to the nearest bfloat16 (ties to even), returned as a float / as its 16 bits.
float roundToBf16(float x);
std::uint16_t toBf16Bits(float x);
void roundToBf16(const float* src, float* dst, std::size_t n);

// True when this CPU has AVX512-BF16 (vdpbf16ps); bf16 then runs natively in oneDNN.
bool cpuHasBf16();

}  // namespace xs::engine
