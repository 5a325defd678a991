// linear_amx.cpp: a linear layer's three products on AMX tiles in native bf16, for the layers
// with many weights at a small batch (AlexNet's classifier), where oneDNN 2.6's matmul streams
// the weights at a fraction of the core's bandwidth:
//
//   forward        y [B, O] = x [B, I] * w^T,  as y^T = w * x^T     (w the tiles' A, as stored)
//   data gradient  dx [B, I] = dy [B, O] * w                        (w's row pairs interleaved)
//   weight grad.   dw [O, I] (+)= dy^T [O, B] * x [B, I]            (dw streamed out)
//
// Operands are bf16 bits (w: the store's bits mirror), outputs float32. A tile holds 16 rows of
// 64 bytes: A[16 x 32 bf16], B[32 x 16 bf16] in AMX's pair-interleaved (VNNI) order (row r holds
// K rows 2r and 2r + 1 interleaved), C[16 x 16 fp32]; tdpbf16ps adds A * B into C. K is padded
// with zeros to a multiple of 32. AlexNet's fc1 (O = 4096, I = 9216, B = 32) took 8.6, 16 and
// 26 ms in oneDNN's matmul for the three; streaming its 75 MB of bf16 weights once takes about
// 4 ms, writing its 151 MB float32 gradient 9 ms (streaming stores).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "device_internals.hpp"
#include "gemm.hpp"
#include "ops.hpp"

namespace xs::engine {
namespace {

// Scratch slots: the bf16 matmul's (gemm_onednn.cpp), never live while this runs.
constexpr int kScratchA = 4, kScratchB = 5;

constexpr int kRows = 16;         // rows of every tile
constexpr int kK = 32;            // bf16 of K per tile row (64 bytes)
constexpr int kCols = 16;         // fp32 columns of a C tile
constexpr int kBlockCols = 4 * kCols;  // columns of dw per block: 4 C tiles share an A tile

// Linux hands out AMX's tile state only on request (once per process).
bool amxGranted() {
  static const bool granted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

// GCC's tile loads and stores (_tile_loadd, _tile_stored) are asm statements without a memory
// clobber: the compiler does not see them read or write memory, so it could drop or move the
// stores that fill a stage before a tile load reads it, or the loads that read a stage a tile
// store filled. Every such hand-over goes through this barrier.
inline void tileBarrier() { asm volatile("" ::: "memory"); }

// LDTILECFG's 64-byte operand, palette 1: 8 tiles of 16 rows x 64 bytes. Every kernel keeps C
// in tiles 0-3; the weight gradient's A is tile 4 (B 5-7), the others' A are 4-5 (B 6-7).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, startRow = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytesPerRow[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

TileConfig tileConfig() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = kRows;
    c.bytesPerRow[t] = 64;
  }
  return c;
}

// Loads the tiles' configuration, runs body, releases the tiles.
template <class Body>
__attribute__((target("amx-tile"))) void withTiles(Body body) {
  static const TileConfig config = tileConfig();
  _tile_loadconfig(&config);
  tileBarrier();  // the operands are laid out
  body();
  tileBarrier();  // the outputs are written
  _tile_release();
}

// ---- weight gradient ------------------------------------------------------------------------

// dw rows [o0, o0 + 16), columns [i0, i0 + 64): 4 C tiles over every K chunk, then to dw (stage
// null: the tiles stored straight into dw, whose rows are not 64-byte aligned).
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void weightGradBlock(float* dw, const std::uint16_t* a,
                                                                           const std::uint16_t* b, int I, int chunks,
                                                                           bool add, float* stage) {
  const std::size_t dwStride = static_cast<std::size_t>(I) * sizeof(float);
  if (add) {
    _tile_loadd(0, dw, dwStride);
    _tile_loadd(1, dw + kCols, dwStride);
    _tile_loadd(2, dw + 2 * kCols, dwStride);
    _tile_loadd(3, dw + 3 * kCols, dwStride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  // B rows are pairs of K: row r of chunk k holds x's rows 2r, 2r + 1 interleaved, I pairs long.
  const std::size_t bStride = static_cast<std::size_t>(I) * 2 * sizeof(std::uint16_t);
  for (int k = 0; k < chunks; ++k) {
    const std::uint16_t* bk = b + static_cast<std::size_t>(k) * kRows * I * 2;
    _tile_loadd(4, a + k * kK, static_cast<std::size_t>(chunks) * kK * sizeof(std::uint16_t));
    _tile_loadd(5, bk, bStride);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, bk + 2 * kCols, bStride);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, bk + 4 * kCols, bStride);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, bk + 6 * kCols, bStride);
    _tile_dpbf16ps(3, 4, 5);
  }
  if (add || !stage) {  // adding, dw's lines are in the cache already: the tiles go straight back
    _tile_stored(0, dw, dwStride);
    _tile_stored(1, dw + kCols, dwStride);
    _tile_stored(2, dw + 2 * kCols, dwStride);
    _tile_stored(3, dw + 3 * kCols, dwStride);
    return;
  }
  // Overwriting: through a 4 KiB stage and streaming stores, so dw's lines are not read first.
  constexpr std::size_t kStageStride = kBlockCols * sizeof(float);
  tileBarrier();  // the previous block's reads of the stage come first
  _tile_stored(0, stage, kStageStride);
  _tile_stored(1, stage + kCols, kStageStride);
  _tile_stored(2, stage + 2 * kCols, kStageStride);
  _tile_stored(3, stage + 3 * kCols, kStageStride);
  tileBarrier();  // the stage holds the tiles
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < 4; ++t)
      _mm512_stream_ps(dw + static_cast<std::size_t>(r) * I + t * kCols,
                       _mm512_load_ps(stage + r * kBlockCols + t * kCols));
}

// Every block of dw.
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void weightGradTiles(float* dw, const std::uint16_t* a,
                                                                           const std::uint16_t* b, int I, int O,
                                                                           int chunks, bool add) {
  alignas(64) float stage[kRows * kBlockCols];
  // Streaming stores need 64-byte aligned rows (I is a multiple of 64 floats: so is every row).
  const bool streamed = !add && reinterpret_cast<std::uintptr_t>(dw) % 64 == 0;
  const int kp = chunks * kK;
  for (int o0 = 0; o0 < O; o0 += kRows)
    for (int i0 = 0; i0 < I; i0 += kBlockCols)
      weightGradBlock(dw + static_cast<std::size_t>(o0) * I + i0, a + static_cast<std::size_t>(o0) * kp, b + 2 * i0,
                      I, chunks, add, streamed ? stage : nullptr);
  if (streamed) _mm_sfence();  // the streamed stores ordered before dw's next reader
}

}  // namespace

bool linearWeightGradientAmx(Device& dev, float* dw, const std::uint16_t* dy, const std::uint16_t* x, int B, int I,
                             int O, bool overwrite) {
  if (!oneDnnRunsAmx() || O % kRows != 0 || I % kBlockCols != 0 || B <= 0 || !amxGranted()) return false;
  const int chunks = (B + kK - 1) / kK, kp = chunks * kK;
  // A: dy^T [O, kp]; B: x's rows in pairs, [kp / 2, I, 2]; zeros past row B of either.
  auto* a = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kScratchA, (static_cast<std::size_t>(O) * kp + 1) / 2));
  auto* b = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kScratchB, static_cast<std::size_t>(kp) * I / 2));
  transposeBits(a, dy, B, O, kp);
  for (int k = 0; k < kp; ++k) {
    std::uint16_t* pairs = b + static_cast<std::size_t>(k / 2) * I * 2 + (k % 2);
    const std::uint16_t* row = x + static_cast<std::size_t>(k) * I;
    for (int i = 0; i < I; ++i) pairs[2 * static_cast<std::size_t>(i)] = k < B ? row[i] : 0;
  }
  withTiles([&] { weightGradTiles(dw, a, b, I, O, chunks, !overwrite); });
  return true;
}

namespace {

// ---- forward and data gradient --------------------------------------------------------------

// The 32 x 32 block of y^T at (o0, n0) from C tiles 0-3 (w rows 0-15 / 16-31 x batch 0-15 /
// 16-31), through a stage, into y [B, O] with the bias: batch columns past B are the padding's.
__attribute__((target("amx-tile,avx512f"))) void storeTransposed(float* y, int O, int B, int o0, int n0,
                                                                const float* bias) {
  alignas(64) float stage[32 * 32];
  constexpr std::size_t kStride = 32 * sizeof(float);
  _tile_stored(0, stage, kStride);
  _tile_stored(1, stage + 16, kStride);
  _tile_stored(2, stage + 16 * 32, kStride);
  _tile_stored(3, stage + 16 * 32 + 16, kStride);
  tileBarrier();  // the stage holds the tiles
  for (int r = 0; r < 32; ++r) {
    const float add = bias ? bias[o0 + r] : 0.f;
    for (int c = 0; c < 32 && n0 + c < B; ++c)
      y[static_cast<std::size_t>(n0 + c) * O + o0 + r] = stage[r * 32 + c] + add;
  }
  tileBarrier();  // ... and read before the next block's tiles go there
}

// y^T [O, Bp] = w [O, I] * x^T: for each 32 rows of w, 4 C tiles (w rows 0-15 / 16-31 x batch
// 0-15 / 16-31); A tiles straight from w, B tiles from xt = x's 32-bit pairs transposed,
// [I / 2, Bp] (VNNI order as it comes).
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void forwardTiles(float* y, const float* bias,
                                                                      const std::uint16_t* w,
                                                                      const std::uint32_t* xt, int B, int bp,
                                                                      int I, int O) {
  const std::size_t wStride = static_cast<std::size_t>(I) * sizeof(std::uint16_t);
  const std::size_t xStride = static_cast<std::size_t>(bp) * sizeof(std::uint32_t);
  for (int n0 = 0; n0 < bp; n0 += 32)
    for (int o0 = 0; o0 < O; o0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const std::uint16_t* wo = w + static_cast<std::size_t>(o0) * I;
      for (int k0 = 0; k0 < I; k0 += kK) {
        _tile_loadd(4, wo + k0, wStride);
        _tile_loadd(5, wo + 16 * static_cast<std::size_t>(I) + k0, wStride);
        const std::uint32_t* xk = xt + static_cast<std::size_t>(k0 / 2) * bp + n0;
        _tile_loadd(6, xk, xStride);
        _tile_loadd(7, xk + 16, xStride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      storeTransposed(y, O, B, o0, n0, bias);
    }
}

// Rows of w (in K chunks of 32) whose products one load and store of acc's C tiles spans.
constexpr int kSpan = 2;

// acc [bp, I] = dy [bp, O] * w [O, I], w read 64 rows side by side: for each 64 rows of w (two
// K chunks, A tiles 4-5 from dy) and each 32 of its columns, the 4 C tiles of acc there (batch
// rows 0-15 / 16-31 x columns 0-15 / 16-31) are loaded, added to twice and stored back; the B
// tiles come from the chunk's 32 rows with each pair interleaved on the way (vpermt2w into a
// stage). acc (1.2 MB for AlexNet's fc1) stays in the L2 cache. Walking w by columns instead,
// the C tiles held across all of K, read it 64 bytes a row at a time: 1.6x slower than oneDNN's
// matmul. Spans of 1, 2, 4, 8 and 16 chunks: 2 was fastest (AlexNet 64's two layers 14 ms).
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw"))) void dataTiles(float* acc, const std::uint16_t* dy,
                                                                            const std::uint16_t* w, int bp, int I,
                                                                            int O) {
  alignas(64) std::uint16_t stage[2][16 * 32];  // two B tiles: columns 0-15 and 16-31
  alignas(64) std::uint16_t lo[32], hi[32];
  for (int j = 0; j < 16; ++j) {  // lane 2j from the even row, 2j + 1 from the odd one
    lo[2 * j] = static_cast<std::uint16_t>(j), lo[2 * j + 1] = static_cast<std::uint16_t>(32 + j);
    hi[2 * j] = static_cast<std::uint16_t>(16 + j), hi[2 * j + 1] = static_cast<std::uint16_t>(48 + j);
  }
  const __m512i loIdx = _mm512_load_si512(lo), hiIdx = _mm512_load_si512(hi);
  const std::size_t dyStride = static_cast<std::size_t>(O) * sizeof(std::uint16_t);
  const std::size_t accStride = static_cast<std::size_t>(I) * sizeof(float);
  for (int m0 = 0; m0 < bp; m0 += 32)
    for (int kb = 0; kb < O; kb += kSpan * kK) {
      const int kEnd = std::min(O, kb + kSpan * kK);
      for (int i0 = 0; i0 < I; i0 += 32) {
        float* c = acc + static_cast<std::size_t>(m0) * I + i0;
        if (kb == 0) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, c, accStride);
          _tile_loadd(1, c + 16, accStride);
          _tile_loadd(2, c + 16 * static_cast<std::size_t>(I), accStride);
          _tile_loadd(3, c + 16 * static_cast<std::size_t>(I) + 16, accStride);
        }
        for (int k0 = kb; k0 < kEnd; k0 += kK) {
          const std::uint16_t* wk = w + static_cast<std::size_t>(k0) * I + i0;
          for (int r = 0; r < 16; ++r) {
            const __m512i even = _mm512_loadu_si512(wk + 2 * static_cast<std::size_t>(r) * I);
            const __m512i odd = _mm512_loadu_si512(wk + (2 * static_cast<std::size_t>(r) + 1) * I);
            _mm512_store_si512(stage[0] + r * 32, _mm512_permutex2var_epi16(even, loIdx, odd));
            _mm512_store_si512(stage[1] + r * 32, _mm512_permutex2var_epi16(even, hiIdx, odd));
          }
          const std::uint16_t* a = dy + static_cast<std::size_t>(m0) * O + k0;
          _tile_loadd(4, a, dyStride);
          _tile_loadd(5, a + 16 * static_cast<std::size_t>(O), dyStride);
          tileBarrier();  // the stage is filled
          _tile_loadd(6, stage[0], 64);
          _tile_loadd(7, stage[1], 64);
          tileBarrier();  // ... and read before the next chunk refills it
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, c, accStride);
        _tile_stored(1, c + 16, accStride);
        _tile_stored(2, c + 16 * static_cast<std::size_t>(I), accStride);
        _tile_stored(3, c + 16 * static_cast<std::size_t>(I) + 16, accStride);
      }
    }
}

// Shapes the two kernels take: 32 | O and 32 | I (whole blocks of 32 both ways).
bool rowsShape(int B, int I, int O) {
  return oneDnnRunsAmx() && B > 0 && O % 32 == 0 && I % 32 == 0 && amxGranted();
}

}  // namespace

bool linearForwardAmx(Device& dev, float* y, const std::uint16_t* x, const std::uint16_t* w, const float* b, int B,
                      int I, int O) {
  if (!rowsShape(B, I, O)) return false;
  const int bp = (B + 31) / 32 * 32;
  // x's 32-bit pairs [B, I / 2] transposed to [I / 2, bp], zeros past row B.
  auto* xt = reinterpret_cast<std::uint32_t*>(detail::scratch(dev, kScratchB, static_cast<std::size_t>(I / 2) * bp));
  pairsByColumn(xt, x, B, I, bp);
  withTiles([&] { forwardTiles(y, b, w, xt, B, bp, I, O); });
  return true;
}

bool linearDataGradientAmx(Device& dev, float* dx, const std::uint16_t* dy, const std::uint16_t* w, int B, int I,
                           int O) {
  if (!rowsShape(B, I, O)) return false;
  const int bp = (B + 31) / 32 * 32;
  const std::uint16_t* a = dy;
  if (bp != B) {  // dy's rows padded with zeros to whole A tiles
    auto* padded = reinterpret_cast<std::uint16_t*>(detail::scratch(dev, kScratchA, static_cast<std::size_t>(bp) * O / 2));
    std::memcpy(padded, dy, static_cast<std::size_t>(B) * O * sizeof(std::uint16_t));
    std::memset(padded + static_cast<std::size_t>(B) * O, 0,
                static_cast<std::size_t>(bp - B) * O * sizeof(std::uint16_t));
    a = padded;
  }
  // Accumulated in dx itself, or with padded rows in a buffer whose first B rows are then dx.
  float* acc = bp == B ? dx : detail::scratch(dev, kScratchB, static_cast<std::size_t>(bp) * I);
  withTiles([&] { dataTiles(acc, a, w, bp, I, O); });
  if (acc != dx) std::memcpy(dx, acc, static_cast<std::size_t>(B) * I * sizeof(float));
  return true;
}

}  // namespace xs::engine
