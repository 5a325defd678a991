// collectives_impl.hpp: one rank's collectives engine: the op bookkeeping every collective
// shares (checked entry, deadline, staging parity) and the algorithms, written against a few
// primitives: copy into my staging buffer, sync (a barrier round inside the op), reduce from
// everyone's buffers, and the ring's send/recv.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "arena.hpp"
#include "context.hpp"
#include "fifo.hpp"
#include "machine_client.hpp"
#include "telemetry.hpp"
#include "xspawn/collectives.hpp"

namespace xs::detail {

// An op's description ("sum float[1000] two-shot"), formatted without touching the heap:
// collectives run in the hot loop of training.
struct Description {
  Description() = default;
  template <class... Args>
  explicit Description(fmt::format_string<Args...> format, Args&&... args) {
    size = fmt::format_to_n(text, sizeof text - 1, format, std::forward<Args>(args)...).size;
    if (size > sizeof text - 1) size = sizeof text - 1;
  }
  std::string_view view() const;
  char text[kTagBytes] = {};
  std::size_t size = 0;
};

class Collectives {
 public:
  explicit Collectives(Context& context);

  void allReduce(const void* in, void* out, std::size_t count, DType type, ReduceOp op,
                 const CollectiveOptions& options);
  void broadcast(void* data, std::size_t count, DType type, int root, const CollectiveOptions& options);
  void allGather(const void* in, void* out, std::size_t count, DType type, const CollectiveOptions& options);
  void reduceScatter(const void* in, void* out, std::size_t count, DType type, ReduceOp op,
                     const CollectiveOptions& options);
  void* sharedAlloc(std::size_t bytes);
  void* sharedAllocCommon(std::size_t bytes, int owner);
  void sharedReset() {
    heapUsed_ = 0;
    commonTop_ = arena_.heapBytes();
  }

  // The algorithm `auto` picks for an all-reduce of `bytes` (zero-copy eligible or not).
  Algorithm chooseAllReduce(std::size_t bytes, bool zeroCopy) const;

 private:
  // Enters the op (checked against the peers: kind, tag, and `detail` = the arguments).
  // `bytes` and `algorithm` are what the trace shows of it.
  void begin(OpKind kind, const CollectiveOptions& options, std::string_view description,
             std::uint64_t detail, std::uint64_t bytes, Algorithm algorithm = Algorithm::kAuto);
  // Elements per staged chunk.
  std::size_t chunkElements(std::size_t es) const;
  // Leaves the op and accounts for it (telemetry.hpp): its wait for the last rank ends with
  // its first sync.
  void end() {
    control_.leaveOp();
    telemetry::collective(opKind_, control_.opTag(), control_.opEnteredNs(), opSyncNs_, telemetry::nowNs(), opBytes_,
                          opAlgorithm_);
  }
  void sync() {
    control_.sync(deadline_);
    if (opSyncNs_ == 0) opSyncNs_ = telemetry::nowNs();
  }
  // Staging buffers alternate between two parities, one use after another. A rank writes a
  // parity again only after the next use's sync, which every rank reaches only after it has
  // finished reading this use: so no rank overwrites what a slower one still reads.
  int nextParity() { return static_cast<int>(stageUses_++ & 1); }
  // Is [p, p+bytes) in this rank's region of the shared heap? Sets its offset there.
  bool inHeap(const void* p, std::size_t bytes, std::uint64_t* offset) const;

  // Streams `count` elements of `in` through the staging buffers, one chunk per use: copies
  // the chunk into this rank's buffer (next parity), syncs, then runs body(at, n, parity).
  void stageChunks(const std::byte* in, std::size_t count, std::size_t es,
                   const std::function<void(std::size_t at, std::size_t n, int parity)>& body);
  void allReduceSliced(const std::byte* in, std::byte* out, std::size_t count, DType type,
                       ReduceOp op, int slicers);
  // Two ranks, private buffers: two-shot pipelined through the pair's ring FIFOs.
  void allReducePair(const std::byte* in, std::byte* out, std::size_t count, DType type, ReduceOp op);
  // Two ranks: one-shot with the FIFO's head as the only flag.
  void allReducePairOneShot(const std::byte* in, std::byte* out, std::size_t count, DType type,
                            ReduceOp op);
  void allReduceOneShot(const std::byte* in, std::byte* out, std::size_t count, DType type, ReduceOp op);
  void allReduceZeroCopy(std::uint64_t offset, std::size_t count, DType type, ReduceOp op);
  void allReduceRing(const std::byte* in, std::byte* out, std::size_t count, DType type, ReduceOp op);
  void ringStep(std::byte* data, std::size_t elem, std::size_t sendFirst, std::size_t sendCount,
                std::size_t recvFirst, std::size_t recvCount, DType type, ReduceOp op, bool reduce);
  // Every rank's slice of `count` elements (slice_of(count, r, N)) to every rank, through the
  // staging buffers; `in` is this rank's slice.
  void allGatherStaged(const std::byte* in, std::byte* out, std::size_t count, std::size_t es);

  // Jobs spanning machines (hierarchical.cpp): the body of each op once it has been entered,
  // its part on this machine over shared memory, the cross-machine part handed to the
  // launcher's proxy. Roots and slices are global.
  bool acrossMachines() const { return machines_ > 1; }
  void allReduceMachines(const std::byte* in, std::byte* out, std::size_t count, DType type, ReduceOp op,
                         bool zeroCopy, std::uint64_t offset);
  void broadcastChunks(std::byte* data, std::size_t bytes, int rootMachine, int rootRank);
  void allGatherMachines(const std::byte* in, std::byte* out, std::size_t count, std::size_t es);
  void reduceScatterMachines(const std::byte* in, std::byte* out, std::size_t count, DType type, ReduceOp op);

  Context& context_;
  ControlPlane& control_;
  Arena arena_;
  RingLink ring_;
  int rank_;
  int world_;
  // Every rank's source / destination pointer for one reduction: kept, not allocated per call.
  std::vector<const void*> srcs_;
  std::vector<void*> dsts_;
  MachineClient* machine_ = nullptr;  // set when the job spans machines
  int machines_ = 1;
  int globalRank_ = 0;
  int globalWorld_ = 1;
  // The last all-reduce's arguments and their description.
  struct AllReduceKey {
    std::size_t count = ~std::size_t{0};
    DType type{};
    ReduceOp op{};
    Algorithm algo{};
    bool zeroCopy = false;
    bool operator==(const AllReduceKey&) const = default;
  };
  AllReduceKey lastAllReduce_;
  Description allReduceText_;
  std::uint64_t stageUses_ = 0;
  std::size_t heapUsed_ = 0;  // shared_alloc's cursor, from the bottom of this rank's region
  // shared_alloc_common's, from the top of every region: the same on every rank.
  std::size_t commonTop_ = 0;
  Clock::time_point deadline_{};
  // The op in progress, for its account (it started at control_.opEnteredNs()).
  OpKind opKind_ = OpKind::kAllReduce;
  std::uint64_t opSyncNs_ = 0;
  std::uint64_t opBytes_ = 0;
  int opAlgorithm_ = 0;
};

// This process's collectives engine (created on first use).
Collectives& collectives();

}  // namespace xs::detail
