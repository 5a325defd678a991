// hierarchical.cpp: the collectives of a job spanning machines. Inside a machine they run
// over shared memory as everywhere; between machines the launcher's proxy runs the transport
// (MPI) on the same shared buffers, so workers never touch the network.
//
//   all_reduce      reduce-scatter in shared memory (each local rank sums its 1/N slice),
//                   the proxy all-reduces every slice across machines in place, then every
//                   rank gathers all slices (scaling once for the mean): per rank the bytes
//                   of the one-machine two-shot, plus S/N on the wire per rank. Staged
//                   chunks are pipelined: chunk c is reduced here while c-1 crosses machines.
//   broadcast       the root copies a chunk into its staging buffer, the proxy broadcasts it
//                   to the same buffer on every machine, every rank copies it out.
//   all_gather      the machine's ranks gather the machine's block, then every machine's
//                   block is broadcast to all (global slices are contiguous per machine).
//   reduce_scatter  all_reduce, then each rank keeps its slice.
// Reduction order: rank order inside a machine, then MPI's (fixed for a given machine count
// and size), so results are identical on every rank and across runs of the same shape.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "collectives_impl.hpp"
#include "reduce_kernels.hpp"

namespace xs::detail {
namespace {

// The machine sums; the mean's division happens once, by the global world, as ranks copy out.
ReduceOp machineOp(ReduceOp op) { return op == ReduceOp::kMean ? ReduceOp::kSum : op; }

}  // namespace

void Collectives::allReduceMachines(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                    ReduceOp op, bool zeroCopy, std::uint64_t offset) {
  const std::size_t es = dtypeSize(type);
  const int divisor = op == ReduceOp::kMean ? globalWorld_ : 1;
  auto fillAllReduce = [&](MachineRequest& req, int parity, std::size_t n, std::uint64_t heapOffset) {
    req.kind = static_cast<std::uint32_t>(MachineOpKind::kAllReduce);
    req.dtype = static_cast<std::uint32_t>(type);
    req.op = static_cast<std::uint32_t>(machineOp(op));
    req.parity = static_cast<std::uint32_t>(parity);
    req.count = n;
    req.heapOffset = heapOffset;
  };
  if (zeroCopy) {
    // In the shared heap: my slice, reduced from every local buffer into mine; the proxy
    // all-reduces each rank's slice where it lies; then every rank copies the others'.
    const Slice mine = slice_of(count, rank_, world_);
    for (int k = 0; k < world_; ++k) srcs_[k] = arena_.heap(k) + offset + mine.first * es;
    void* d[1] = {arena_.heap(rank_) + offset + mine.first * es};
    sync();  // every rank's input is complete
    // A machine of one rank has nothing to reduce: its slice is its whole input (here and below).
    if (world_ > 1) reduceInto(type, machineOp(op), srcs_.data(), world_, d, 1, mine.size, 1);
    sync();  // every slice is reduced on this machine
    machine_->serve([&](MachineRequest& req) { fillAllReduce(req, 0, count, offset); }, deadline_);
    if (divisor != 1) scaleCopy(type, d[0], d[0], mine.size, divisor);
    sync();  // every slice is final
    for (int k = 0; k < world_; ++k) {
      if (k == rank_) continue;
      const Slice s = slice_of(count, k, world_);
      std::memcpy(arena_.heap(rank_) + offset + s.first * es, arena_.heap(k) + offset + s.first * es, s.size * es);
    }
    sync();  // nobody rewrites a slice another rank still copies
    return;
  }
  // Staged, pipelined: while the proxy all-reduces chunk c-1 across machines, the ranks copy
  // in and reduce-scatter chunk c. Chunk c's staging parity was last read when chunk c-2 was
  // copied out, and a sync follows every copy-out, so nobody overwrites what a slower rank
  // still copies; the proxy works on the other parity meanwhile.
  struct InFlight {
    std::uint64_t seq;
    std::size_t at, n;
    int parity;
  };
  auto copyOut = [&](const InFlight& f) {
    machine_->wait(f.seq, deadline_);
    for (int k = 0; k < world_; ++k) {
      const Slice s = slice_of(f.n, k, world_);
      scaleCopy(type, arena_.stage(k, f.parity) + s.first * es, out + (f.at + s.first) * es, s.size, divisor);
    }
  };
  const std::size_t perChunk = chunkElements(es);
  std::optional<InFlight> previous;
  for (std::size_t at = 0; at < count; at += perChunk) {
    const std::size_t n = std::min(perChunk, count - at);
    const int par = nextParity();
    std::memcpy(arena_.stage(rank_, par), in + at * es, n * es);
    sync();  // every rank's chunk is staged
    const Slice mine = slice_of(n, rank_, world_);
    for (int k = 0; k < world_; ++k) srcs_[k] = arena_.stage(k, par) + mine.first * es;
    void* d[1] = {arena_.stage(rank_, par) + mine.first * es};
    if (world_ > 1) reduceInto(type, machineOp(op), srcs_.data(), world_, d, 1, mine.size, 1);
    sync();  // every slice of the chunk is reduced on this machine
    const std::uint64_t seq = machine_->post([&](MachineRequest& req) { fillAllReduce(req, par, n, ~0ULL); });
    if (previous) {
      copyOut(*previous);
      sync();  // every rank has copied chunk c-1 out: its parity is free for chunk c+1
    }
    previous = InFlight{seq, at, n, par};
  }
  if (previous) copyOut(*previous);
}

void Collectives::broadcastChunks(std::byte* data, std::size_t bytes, int rootMachine, int rootRank) {
  const bool root = machine_->machine() == rootMachine && rank_ == rootRank;
  const std::size_t chunk = chunkElements(1);
  for (std::size_t at = 0; at < bytes; at += chunk) {
    const std::size_t n = std::min(chunk, bytes - at);
    const int par = nextParity();
    if (root) std::memcpy(arena_.stage(rootRank, par), data + at, n);
    sync();  // the root's chunk is staged (and nobody still reads this parity's last use)
    machine_->serve(
        [&](MachineRequest& req) {
          req.kind = static_cast<std::uint32_t>(MachineOpKind::kBroadcast);
          req.parity = static_cast<std::uint32_t>(par);
          req.root = rootMachine;
          req.rootRank = rootRank;
          req.count = n;
        },
        deadline_);
    if (!root) std::memcpy(data + at, arena_.stage(rootRank, par), n);
  }
}

void Collectives::allGatherMachines(const std::byte* in, std::byte* dst, std::size_t count, std::size_t es) {
  // Machine m's block: the slices of global ranks m*N .. m*N+N-1, contiguous. Inside the
  // block, slice_of(block, k, N) is exactly global rank m*N+k's slice (sizes differ by one at
  // most, larger first), so the machine gathers its block like a job of its own.
  auto block = [&](int m) {
    const Slice first = slice_of(count, m * world_, globalWorld_);
    const Slice last = slice_of(count, m * world_ + world_ - 1, globalWorld_);
    return Slice{first.first, last.first + last.size - first.first};
  };
  const Slice own = block(machine_->machine());
  allGatherStaged(in, dst + own.first * es, own.size, es);
  for (int m = 0; m < machines_; ++m) {
    const Slice b = block(m);
    broadcastChunks(dst + b.first * es, b.size * es, m, 0);
  }
}

void Collectives::reduceScatterMachines(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                        ReduceOp op) {
  const std::size_t es = dtypeSize(type);
  std::vector<std::byte> all(count * es);
  if (count > 0) allReduceMachines(in, all.data(), count, type, op, false, 0);
  const Slice mine = slice_of(count, globalRank_, globalWorld_);
  if (mine.size) std::memcpy(out, all.data() + mine.first * es, mine.size * es);
}

}  // namespace xs::detail
