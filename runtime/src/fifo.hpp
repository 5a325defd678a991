// fifo.hpp: the ring transport: a bounded single-producer single-consumer FIFO of fixed slots
// from each rank to its right neighbour, streamed with monotonic 64-bit positions. The ring
// all-reduce is written against two primitives: send (into the right neighbour's FIFO) and
// recv (from our own), as NCCL's collectives are written against send/recvReduceSend.
#pragma once

#include <cstddef>
#include <functional>

#include "arena.hpp"
#include "control.hpp"

namespace xs::detail {

class RingLink {
 public:
  RingLink(Segment& segment, ControlPlane& control);

  std::size_t slotBytes() const { return arena_.ringSlotBytes(); }
  // Copies `bytes` (<= slotBytes) into the next slot of the right neighbour's FIFO, waiting
  // while all its slots are full.
  void send(const void* data, std::size_t bytes, Clock::time_point deadline);
  // The same in two steps, for a writer that fills the slot itself (a reduction storing its
  // result straight into the neighbour's FIFO): reserve waits for the next free slot of the
  // right neighbour's FIFO and returns it; commit publishes its first `bytes` bytes.
  std::byte* reserve(Clock::time_point deadline);
  void commit(std::size_t bytes);
  // Waits for the next slot of our FIFO, hands its bytes to `consume`, then frees the slot.
  void recv(const std::function<void(const std::byte* data, std::size_t bytes)>& consume,
            Clock::time_point deadline);
  // The same in two steps, for a reader that knows the size: peek waits for the next slot
  // of our FIFO and returns it (the size word, on a line of its own, is not read); release
  // frees it.
  const std::byte* peek(Clock::time_point deadline);
  void release();

 private:
  Segment& segment_;
  ControlPlane& control_;
  Arena arena_;
  // Before the waiter's own spin-then-sleep, polls `ready` for up to kStreamSpin when the
  // ranks have a core each and recent polls succeeded (see fifo.cpp). Returns whether it
  // became true.
  template <class Ready>
  bool spinFor(int peer, Ready&& ready);
  // Are this rank and `peer` pinned to different cores (as the launcher records them)?
  bool ownCores(int peer) const;

  int left_;
  int right_;
  bool spin_;
  std::uint32_t misses_ = 0;  // polls that ran out since the last one that succeeded
  std::uint32_t waits_ = 0;   // waits without a poll since then
  // The last tail of the right neighbour's FIFO and head of ours this rank read: both only
  // grow, so a slot known free (or full) stays so, and the peer's line is read only when
  // the cached value says wait.
  std::uint64_t seenTail_ = 0;
  std::uint64_t seenHead_ = 0;
};

}  // namespace xs::detail
