// collectives.hpp: all_reduce, broadcast, all_gather and reduce_scatter among the ranks of a
// job, over the job's shared memory; and shared_alloc, for tensors the collectives can reduce
// without copying them in or out.
//
// Threads: a rank may call them from any thread (e.g. a communication thread reducing gradient
// buckets while the main thread runs backward), one call at a time per rank, with the hand-over
// between threads ordered by the caller (a mutex or a join).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

namespace xs {

// bfloat16 storage: the upper half of a float32. Reductions accumulate in float32.
struct bfloat16 {
  std::uint16_t bits = 0;
};

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBFloat16 };
enum class ReduceOp { kSum, kMean, kMax, kMin };
enum class Algorithm {
  kAuto,             // picked from the size and the number of ranks (docs/collectives.md)
  kRing,             // reduce-scatter then all-gather around the ranks' ring FIFOs
  kTwoShot,          // each rank reduces its 1/N slice from everyone's buffer, then all gather
  kOneShot,          // every rank reduces everything: one synchronisation, for small messages
  kParameterServer,  // `psServers` ranks reduce (1: one server; N: sharded like two-shot)
};

struct CollectiveOptions {
  std::string tag;  // names the op in divergence and timeout errors (default: a description)
  std::chrono::milliseconds timeout{0};  // 0: the job's --timeout
  Algorithm algorithm = Algorithm::kAuto;
  int psServers = 1;  // kParameterServer: how many ranks hold a shard of the parameters
  // An in-place all-reduce of a shared-heap buffer at least this large reduces straight in
  // the ranks' buffers (zero-copy); smaller ones take one-shot through the staging buffers,
  // whose single sync is faster for a few KiB (measured: docs/benchmarks.md).
  std::size_t zeroCopyMinBytes = 64u << 10;
};

std::size_t dtypeSize(DType type);
const char* dtypeName(DType type);
const char* reduceOpName(ReduceOp op);
const char* algorithmName(Algorithm algorithm);
// "ring", "two-shot", "one-shot", "ps", "auto" -> Algorithm; UsageError otherwise.
Algorithm parseAlgorithm(const std::string& name);

// The slice of `count` elements rank `rank` of `world` owns in reduce_scatter / all_gather:
// [first, first + size), sizes differing by at most one.
struct Slice {
  std::size_t first = 0;
  std::size_t size = 0;
};
Slice slice_of(std::size_t count, int rank, int world);

// out[i] = op over ranks (in rank order) of in[i], on every rank. `in` may equal `out`.
// Every rank must pass the same count, type, op and algorithm (DivergenceError otherwise).
void all_reduce(const void* in, void* out, std::size_t count, DType type, ReduceOp op = ReduceOp::kSum,
                const CollectiveOptions& options = {});
// data on every rank = data on `root`.
void broadcast(void* data, std::size_t count, DType type, int root = 0,
               const CollectiveOptions& options = {});
// out (count elements) = every rank's slice_of(count, r, N), concatenated in rank order; `in`
// holds this rank's slice.
void all_gather(const void* in, void* out, std::size_t count, DType type,
                const CollectiveOptions& options = {});
// out (this rank's slice_of(count, rank, N)) = op over ranks of that slice of `in` (count).
void reduce_scatter(const void* in, void* out, std::size_t count, DType type,
                    ReduceOp op = ReduceOp::kSum, const CollectiveOptions& options = {});

// Allocates `bytes` in this rank's region of the job's shared heap (launcher option
// --shared-heap). A buffer allocated at the same point of the program on every rank can be
// all-reduced in place with no copy in or out. Throws if the heap is too small.
void* shared_alloc(std::size_t bytes);
// Frees every shared_alloc and shared_alloc_common allocation of this rank (all ranks must do it
// together, when no rank reads them any more: a dataset of data::shareDataset lives there).
void shared_reset();
// One buffer of `bytes` that every rank of the machine shares, not one per rank: held in local
// rank `owner`'s region of the shared heap (only that rank's pages are taken), carved from the top of
// the heap by a cursor that only this call moves, so it is the same buffer on every rank whatever
// each rank's own shared_alloc calls took, and it leaves them the rest of the heap. For
// read-mostly data that the machine needs once, not once per rank (a dataset: see
// xs::data::shareDataset). Collective: every rank calls it at the same point with the same
// `bytes` and `owner` (a UsageError on every rank otherwise). Returns the same memory on every
// rank, 64-byte aligned, or null on every rank when there is no room for it (in the shared heap,
// --shared-heap, or in /dev/shm) or `bytes` is 0: the caller keeps private copies then. `owner`
// writes it; the others read it after a collective that follows the writes (xs::barrier). It is
// no operand of the zero-copy collectives (it is in the owner's region only). In a job spanning
// machines each machine gets its own buffer, in its local rank `owner`'s region, and every
// machine must ask for the same size (the answer, null or not, is the same on every machine).
// Freed by shared_reset.
void* shared_alloc_common(std::size_t bytes, int owner = 0);

// A second mapping, read-only, of [p, p + bytes) of this machine's shared heap (memory from
// shared_alloc or shared_alloc_common): the same pages, for data this rank only reads. Its
// pointer reads what p reads; the mapping goes when the last copy of the pointer does. Where
// page tables are shadowed (a virtual machine), a rank's first read of a page costs it about a
// third as much through a read-only mapping (docs/collectives.md). Null where the job's memory
// is this process's own (one process, no shared memory), or when the system refuses the
// mapping: then read p. UsageError when [p, p + bytes) is not in the shared heap.
std::shared_ptr<const std::byte> shared_view(const void* p, std::size_t bytes);

template <class T>
constexpr DType dtypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::kInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::kInt64;
  else if constexpr (std::is_same_v<T, bfloat16>) return DType::kBFloat16;
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

template <class T>
void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::kSum, const CollectiveOptions& options = {}) {
  all_reduce(data.data(), data.data(), data.size(), dtypeOf<T>(), op, options);
}
template <class T>
void broadcast(std::span<T> data, int root = 0, const CollectiveOptions& options = {}) {
  broadcast(data.data(), data.size(), dtypeOf<T>(), root, options);
}
template <class T>
std::span<T> shared_alloc(std::size_t count) {
  return {static_cast<T*>(shared_alloc(count * sizeof(T))), count};
}

// float <-> bfloat16 (round to nearest even; NaN stays NaN).
float toFloat(bfloat16 v);
bfloat16 toBFloat16(float v);

}  // namespace xs
