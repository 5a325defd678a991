// allreduce.cpp: the all-reduce algorithms.
//
//   bytes per rank moved (reads + writes) for S bytes among N ranks:
//   zero-copy two-shot  2S          reduce my 1/N slice from every buffer, write it to all
//   pair two-shot       4S          N=2: streamed through the pair's FIFOs, 2S of it to memory
//   pair one-shot       5S          N=2: input into the peer's FIFO, reduce mine + its copy
//   two-shot (staged)   5S + S/N    copy in, reduce my slice, copy every slice out
//   parameter server    servers reduce their shard; one server moves N*S alone
//   one-shot            (N+3)S      copy in, every rank reduces everything (one sync)
//   ring                ~9S(N-1)/N  reduce-scatter then all-gather through the ring FIFOs
// Every algorithm reduces in a fixed order (rank order; the ring: around the ring), so every
// rank gets bit-identical results and so does a rerun with the same N and algorithm.
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "collectives_impl.hpp"
#include "reduce_kernels.hpp"

namespace xs::detail {
namespace {

// Up to this many bytes `auto` takes one-shot (one sync, N-fold reads); above, two-shot.
// Measured with `xspawn bench allreduce --algo one-shot|two-shot` on 2 cores
// (docs/benchmarks.md): the cross-over is near 32 KiB up to 4 ranks, 16 KiB beyond, as
// one-shot's reads grow with N.
std::size_t oneShotMaxBytes(int world) { return world <= 4 ? 32 * 1024 : 16 * 1024; }

}  // namespace

std::size_t Collectives::chunkElements(std::size_t es) const {
  // One staging buffer per chunk. Smaller chunks that stay in cache between copy-in and
  // copy-out were measured slower on a loaded machine (every extra sync waits for the
  // slowest rank); --stage-size tunes it.
  return std::max<std::size_t>(arena_.stageBytes() / es, 1);
}

Algorithm Collectives::chooseAllReduce(std::size_t bytes, bool zeroCopy) const {
  if (bytes <= oneShotMaxBytes(world_) && !zeroCopy) return Algorithm::kOneShot;
  return Algorithm::kTwoShot;
}

void Collectives::allReduce(const void* in, void* out, std::size_t count, DType type, ReduceOp op,
                            const CollectiveOptions& options) {
  const std::size_t es = dtypeSize(type), bytes = count * es;
  std::uint64_t offset = 0;
  const bool zeroCopy = in == out && bytes > 0 && bytes >= options.zeroCopyMinBytes && inHeap(out, bytes, &offset);
  Algorithm algo = options.algorithm == Algorithm::kAuto ? chooseAllReduce(bytes, zeroCopy) : options.algorithm;
  if (algo == Algorithm::kParameterServer && (options.psServers < 1 || options.psServers > world_)) {
    XS_THROW(UsageError, fmt::format("all_reduce: {} parameter servers among {} ranks; use 1 to {}",
                                     options.psServers, world_, world_));
  }
  const bool useZeroCopy = zeroCopy && algo == Algorithm::kTwoShot;
  const std::uint64_t detail = (count << 12) ^ (static_cast<std::uint64_t>(type) << 8) ^
                               (static_cast<std::uint64_t>(op) << 4) ^ static_cast<std::uint64_t>(algo) ^
                               (static_cast<std::uint64_t>(options.psServers) << 52) ^
                               (useZeroCopy ? (offset + 1) * 0x100000001b3ULL : 0);
  // The description is formatted only when the arguments change (formatting costs about as
  // much as a small all-reduce's synchronisation; training repeats one call).
  const AllReduceKey key{count, type, op, algo, useZeroCopy};
  if (!(key == lastAllReduce_)) {
    allReduceText_ = Description("{} {}[{}] {}{}", reduceOpName(op), dtypeName(type), count, algorithmName(algo),
                                 useZeroCopy ? " zero-copy" : "");
    lastAllReduce_ = key;
  }
  begin(OpKind::kAllReduce, options, allReduceText_.view(), detail, bytes, algo);
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  if (acrossMachines()) {
    if (count > 0) allReduceMachines(src, dst, count, type, op, zeroCopy, offset);
  } else if (world_ == 1) {
    if (count) scaleCopy(type, src, dst, count, 1);
  } else if (count > 0) {
    switch (algo) {
      case Algorithm::kOneShot:
        if (world_ == 2) allReducePairOneShot(src, dst, count, type, op);
        else allReduceOneShot(src, dst, count, type, op);
        break;
      case Algorithm::kRing: allReduceRing(src, dst, count, type, op); break;
      case Algorithm::kParameterServer: allReduceSliced(src, dst, count, type, op, options.psServers); break;
      default:
        if (useZeroCopy) allReduceZeroCopy(offset, count, type, op);
        else if (world_ == 2) allReducePair(src, dst, count, type, op);
        else allReduceSliced(src, dst, count, type, op, world_);
    }
  }
  end();
}

void Collectives::stageChunks(const std::byte* in, std::size_t count, std::size_t es,
                              const std::function<void(std::size_t at, std::size_t n, int parity)>& body) {
  const std::size_t perChunk = chunkElements(es);
  for (std::size_t at = 0; at < count; at += perChunk) {
    const std::size_t n = std::min(perChunk, count - at);
    const int parity = nextParity();
    std::memcpy(arena_.stage(rank_, parity), in + at * es, n * es);
    sync();  // every rank's chunk is in its staging buffer
    body(at, n, parity);
  }
}

void Collectives::allReduceSliced(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                  ReduceOp op, int slicers) {
  const std::size_t es = dtypeSize(type);
  stageChunks(in, count, es, [&](std::size_t at, std::size_t n, int par) {
    // The first `slicers` ranks each reduce one slice of the chunk from every staging buffer
    // (rank order) into their own; nobody else reads that slice of theirs in this phase.
    if (rank_ < slicers) {
      const Slice s = slice_of(n, rank_, slicers);
      for (int k = 0; k < world_; ++k) srcs_[k] = arena_.stage(k, par) + s.first * es;
      void* d[1] = {arena_.stage(rank_, par) + s.first * es};
      reduceInto(type, op, srcs_.data(), world_, d, 1, s.size, world_);
    }
    sync();  // every slice is reduced
    for (int j = 0; j < slicers; ++j) {
      const Slice s = slice_of(n, j, slicers);
      std::memcpy(out + (at + s.first) * es, arena_.stage(j, par) + s.first * es, s.size * es);
    }
  });
}

void Collectives::allReducePair(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                ReduceOp op) {
  // Chunks of two FIFO slots; rank r reduces half r of each. Per chunk each rank sends the
  // half its peer reduces (my input), reduces its own half from its private input and the
  // peer's staged half straight into its output and into the peer's FIFO, and copies the
  // peer's reduced half out. The next chunk's half is sent before waiting for this chunk's
  // result, so both ranks reduce while the other copies. Both send in the same order
  // (input c, result c, input c+1, ...), and every message is received in the chunk it was
  // sent in, so two FIFO slots suffice. Bytes per rank: 4S (staging S/2: S; reducing 2 x S/2
  // into 2 x S/2: 2S; copying S/2 out: S), of which only the input read and the output
  // written (2S, the floor) go to memory: the FIFO slots are read while still in cache.
  const std::size_t es = dtypeSize(type);
  const std::size_t perChunk = 2 * std::max<std::size_t>(ring_.slotBytes() / es, 1);
  const std::size_t chunks = (count + perChunk - 1) / perChunk;
  const int peer = 1 - rank_;
  auto half = [&](std::size_t c, int r) {
    Slice s = slice_of(std::min(perChunk, count - c * perChunk), r, 2);
    s.first += c * perChunk;
    return s;
  };
  auto stage = [&](std::size_t c) {
    const Slice s = half(c, peer);
    ring_.send(in + s.first * es, s.size * es, deadline_);
  };
  stage(0);
  for (std::size_t c = 0; c < chunks; ++c) {
    const Slice mine = half(c, rank_);
    const std::byte* staged = ring_.peek(deadline_);
    const void* s[2] = {in + mine.first * es, staged};
    if (rank_ == 1) std::swap(s[0], s[1]);  // rank order, as everywhere
    void* d[2] = {out + mine.first * es, ring_.reserve(deadline_)};
    reduceInto(type, op, s, 2, d, 2, mine.size, 2);
    ring_.commit(mine.size * es);
    ring_.release();
    if (c + 1 < chunks) stage(c + 1);
    const Slice theirs = half(c, peer);
    std::memcpy(out + theirs.first * es, ring_.peek(deadline_), theirs.size * es);
    ring_.release();
  }
}

void Collectives::allReducePairOneShot(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                       ReduceOp op) {
  // Each rank sends its input, one FIFO slot at a time, and reduces every element from its
  // own input and the peer's copy (rank order). The FIFO's head is the only flag: no sync.
  const std::size_t es = dtypeSize(type);
  const std::size_t perSlot = std::max<std::size_t>(ring_.slotBytes() / es, 1);
  for (std::size_t at = 0; at < count; at += perSlot) {
    const std::size_t n = std::min(perSlot, count - at);
    ring_.send(in + at * es, n * es, deadline_);
    const void* s[2] = {in + at * es, ring_.peek(deadline_)};
    if (rank_ == 1) std::swap(s[0], s[1]);
    void* d[1] = {out + at * es};
    reduceInto(type, op, s, 2, d, 1, n, 2);
    ring_.release();
  }
}

void Collectives::allReduceOneShot(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                   ReduceOp op) {
  const std::size_t es = dtypeSize(type);
  stageChunks(in, count, es, [&](std::size_t at, std::size_t n, int par) {
    for (int k = 0; k < world_; ++k) srcs_[k] = arena_.stage(k, par);
    srcs_[rank_] = in + at * es;  // my own chunk from where it is still cached, unshared
    void* d[1] = {out + at * es};
    reduceInto(type, op, srcs_.data(), world_, d, 1, n, world_);
  });
}

void Collectives::allReduceZeroCopy(std::uint64_t offset, std::size_t count, DType type, ReduceOp op) {
  const std::size_t es = dtypeSize(type);
  const Slice s = slice_of(count, rank_, world_);
  for (int k = 0; k < world_; ++k) {
    dsts_[k] = arena_.heap(k) + offset + s.first * es;
    srcs_[k] = dsts_[k];
  }
  sync();  // every rank's input is complete
  // My slice, reduced from every rank's buffer and written back into every rank's buffer:
  // only this rank touches this slice anywhere, so reading and writing in place is safe.
  reduceInto(type, op, srcs_.data(), world_, dsts_.data(), world_, s.size, world_);
  sync();  // every slice is everywhere
}

void Collectives::ringStep(std::byte* data, std::size_t es, std::size_t sendFirst, std::size_t sendCount,
                           std::size_t recvFirst, std::size_t recvCount, DType type, ReduceOp op,
                           bool reduce) {
  // Pieces of one slot each, sending piece p then receiving piece p: every rank does the
  // same, so each FIFO holds at most a couple of pieces and nobody waits on a full ring.
  const std::size_t perSlot = ring_.slotBytes() / es;
  const std::size_t sendPieces = (sendCount + perSlot - 1) / perSlot;
  const std::size_t recvPieces = (recvCount + perSlot - 1) / perSlot;
  for (std::size_t p = 0; p < std::max(sendPieces, recvPieces); ++p) {
    if (p < sendPieces) {
      const std::size_t n = std::min(perSlot, sendCount - p * perSlot);
      ring_.send(data + (sendFirst + p * perSlot) * es, n * es, deadline_);
    }
    if (p < recvPieces) {
      std::byte* at = data + (recvFirst + p * perSlot) * es;
      ring_.recv(
          [&](const std::byte* piece, std::size_t bytes) {
            if (!reduce) {
              std::memcpy(at, piece, bytes);
              return;
            }
            // Partial from the left first, then mine: a fixed order around the ring.
            const void* s[2] = {piece, at};
            void* d[1] = {at};
            reduceInto(type, op == ReduceOp::kMean ? ReduceOp::kSum : op, s, 2, d, 1, bytes / es, 1);
          },
          deadline_);
    }
  }
}

void Collectives::allReduceRing(const std::byte* in, std::byte* out, std::size_t count, DType type,
                                ReduceOp op) {
  if (type == DType::kBFloat16) {
    // Partial sums travel in float32 so that the accumulation is float32, as everywhere.
    std::vector<float> wide(count);
    const auto* b = reinterpret_cast<const bfloat16*>(in);
    for (std::size_t i = 0; i < count; ++i) wide[i] = toFloat(b[i]);
    auto* w = reinterpret_cast<std::byte*>(wide.data());
    allReduceRing(w, w, count, DType::kFloat32, op);
    auto* o = reinterpret_cast<bfloat16*>(out);
    for (std::size_t i = 0; i < count; ++i) o[i] = toBFloat16(wide[i]);
    return;
  }
  const std::size_t es = dtypeSize(type);
  if (out != in) std::memcpy(out, in, count * es);
  const int r = rank_, n = world_;
  auto seg = [&](int k) { return slice_of(count, ((k % n) + n) % n, n); };
  // Reduce-scatter: after step s, rank r holds the partial of segment r-s-1 over s+2 ranks;
  // after n-1 steps it owns segment r+1 fully reduced.
  for (int s = 0; s < n - 1; ++s) {
    const Slice send = seg(r - s), recv = seg(r - s - 1);
    ringStep(out, es, send.first, send.size, recv.first, recv.size, type, op, true);
  }
  const Slice owned = seg(r + 1);
  if (op == ReduceOp::kMean) {
    scaleCopy(type, out + owned.first * es, out + owned.first * es, owned.size, n);
  }
  // All-gather: pass the finished segments around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const Slice send = seg(r + 1 - s), recv = seg(r - s);
    ringStep(out, es, send.first, send.size, recv.first, recv.size, type, op, false);
  }
}

}  // namespace xs::detail
