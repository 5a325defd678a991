// gemm.hpp: the matrix unit: row-major C = op(A) * op(B) + beta * C on one thread, in fp32 or
// bf16 (bf16 products, fp32 accumulation), with a choice of backend measured in docs/engine.md.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "xspawn/engine/device.hpp"
#include "xspawn/engine/tensor.hpp"

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

// The one rounding rule: nearest bfloat16, ties to even, as the float's upper 16 bits (the
// lower 16 zero); a NaN stays a (quiet) NaN. Branch-free and inline, so the loops that use it
// (the array form below, the kernels that write rounded outputs) vectorise.
inline std::uint32_t bf16RoundedBits(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) & 0xffff0000u : rounded;
}

// Rounds to the nearest bfloat16 (ties to even), returned as a float / as its 16 bits; the
// array form is vectorised (src == dst allowed).
inline float roundToBf16(float x) { return std::bit_cast<float>(bf16RoundedBits(x)); }
inline std::uint16_t toBf16Bits(float x) { return static_cast<std::uint16_t>(bf16RoundedBits(x) >> 16); }
// The same rule over an array (vectorised): the bits of roundToBf16's values, denormals kept.
void toBf16Bits(const float* src, std::uint16_t* dst, std::size_t n);
// The bits of values that are bf16 already (a rounding producer's: their low halves zero).
void bf16BitsOfRounded(const float* src, std::uint16_t* dst, std::size_t n);
// The float a bfloat16's bits stand for (exact).
inline float bf16BitsToFloat(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
void roundToBf16(const float* src, float* dst, std::size_t n);

// src (n floats) rounded to bf16 into t, which grows to fit: emulated bf16's operands, rounded
// once where a caller reuses them (a weight in forward and backward).
const float* roundedCopy(Device& dev, Tensor& t, const float* src, std::size_t n);
// The same into dev's scratch slot `slot` (grown to fit), for a caller with no tensor of its own.
const float* roundedScratch(Device& dev, int slot, const float* src, std::size_t n);
// gemm() on operands that are bf16 values already (roundedCopy): no second rounding.
void gemmOfRounded(Device& dev, bool transA, bool transB, int M, int N, int K, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc);

// fp32 C = op(A) * op(B) + beta * C through oneDNN's sgemm, whatever dev's precision.
// (gemm_onednn.cpp)
void sgemmOneDnn(bool transA, bool transB, int M, int N, int K, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc);

// True when this CPU has AVX512-BF16 (vdpbf16ps).
bool cpuHasBf16();
// True when oneDNN runs its AMX kernels here: the CPU has AMX and ONEDNN_MAX_CPU_ISA allows it.
bool oneDnnRunsAmx();
// True when oneDNN runs at least avx512_core_bf16 here (ONEDNN_MAX_CPU_ISA may hold it below):
// its bf16 conversions are then vcvtneps2bf16's.
bool oneDnnRunsAvx512Bf16();
// True where our own kernels on vdpbf16ps run in native bf16 (the big linear layers', the narrow
// convolutions'): AVX512-BF16 (with AVX512-BW and VL, as every such CPU has) and oneDNN running
// no AMX, whose tiles outrun them. On AMD Zen 4 vdpbf16ps makes twice the FMA units'
// multiply-adds; on Intel CPUs without AMX native bf16 is not the default (bf16Mode).
bool dpbf16Kernels();
// True when this CPU has AVX-512 (AVX512F): the kernels written with its intrinsics may run.
bool cpuHasAvx512();
// The same with AVX512-BW and VL too (16-bit lanes, 256-bit forms of the AVX-512 operations).
bool cpuHasAvx512Bw();
// The mask of a 16-lane vector's first n lanes (all of them from 16 on), for AVX-512's masked
// loads and stores (a __mmask16).
inline std::uint16_t firstLanes(int n) {
  return n >= 16 ? std::uint16_t{0xffff} : static_cast<std::uint16_t>((1u << n) - 1);
}

// How bf16 precision runs. kNative: oneDNN's bf16 kernels (AMX tiles, or vdpbf16ps).
// kEmulated: the operands are rounded to bf16 and the fp32 kernels run on them. A product of
// two bf16 values is exact in fp32, so both compute the matrix unit's numerics (bf16 products,
// fp32 accumulation); only the order of the sums differs, so weights are bitwise reproducible
// per CPU and mode. The default (auto) is native with AMX or on AMD CPUs with AVX512-BF16, and
// emulated elsewhere: on Intel CPUs without AMX vdpbf16ps runs at half the FMA units' rate
// (docs/engine.md). $XS_ENGINE_BF16=auto|native|emulated overrides it for the process.
enum class Bf16Mode { kNative, kEmulated };
const char* bf16ModeName(Bf16Mode m);
Bf16Mode bf16Mode();
void setBf16Mode(Bf16Mode m);
// True when dev computes in bf16 by emulation (precision bf16, mode kEmulated).
bool emulatesBf16(const Device& dev);
// True when dev feeds bf16 operands to oneDNN's bf16 kernels (precision bf16, mode kNative).
bool nativeBf16(const Device& dev);
// True when dev's products take bf16 operands (precision bf16, in either mode). Then:
// - our own kernels of narrow convolutions (fewer than 16 channels: conv_one_channel.cpp,
//   conv_narrow_*.cpp) round their operands. On layers this narrow their emulation beats
//   oneDNN's bf16 kernels, which fill a few lanes of a vector or rows of a matrix tile, so
//   native mode runs them too (docs/engine.md), or their native forms on vdpbf16ps where
//   dpbf16Kernels holds (conv_onednn.hpp's narrowBf16);
// - a layer whose next layer's products take its output (or whose previous layer's take its
//   input gradient) writes it rounded to bf16 in a pass it makes anyway (rounding at the
//   producer): the reader's own rounding or bf16 conversion then has nothing left to change.
inline bool bf16Products(const Device& dev) { return dev.precision() == Precision::kBf16; }
// True when dev's bf16 products run on oneDNN's bf16 matmul on bf16 bits (native mode, the oneDNN
// backend, a CPU with AVX512-BF16): operands are handed over as bits (gemmBf16, the AMX kernels).
inline bool bf16Matmul(const Device& dev) {
  return nativeBf16(dev) && gemmBackend() == GemmBackend::kOneDnn && cpuHasBf16();
}

}  // namespace xs::engine
