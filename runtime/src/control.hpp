// control.hpp: one rank's view of the job's control plane: checked operations (each rank
// records the tag and sequence number of every rendezvous/collective it enters, so ranks that
// diverge fail at once with who-is-where instead of hanging), the central barrier, rendezvous
// with payloads of any size, and the job-wide abort.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "segment.hpp"
#include "wait.hpp"

namespace xs::detail {

// One rank's published op, read consistently through the slot's seqlock.
struct OpSnapshot {
  std::uint64_t seq = 0;
  std::uint64_t hash = 0;
  OpState state = OpState::kIdle;
  OpKind kind = OpKind::kRendezvous;
  std::string tag;
  // "'init'#3" for a rendezvous, "all_reduce 'grads'#7" for a collective.
  std::string describe() const;
};

class ControlPlane {
 public:
  ControlPlane(Segment& segment, int rank, WaitMode mode, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int worldSize() const { return world_; }
  Segment& segment() { return segment_; }
  Waiter& waiter() { return waiter_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The op this rank entered last: sequence number, hash (tag and arguments) and tag.
  std::uint64_t opSeq() const { return seq_; }
  std::uint64_t opHash() const { return hash_; }
  const std::string& opTag() const { return tag_; }
  // CLOCK_MONOTONIC ns when this rank entered its last op.
  std::uint64_t opEnteredNs() const { return enteredNs_; }

  // Publishes "this rank is now in op `tag`" with the next sequence number and fails at once
  // (DivergenceError) if a peer already sits at that sequence number with another tag.
  // `kind` distinguishes a rendezvous 'x' from a collective 'x'. Returns the sequence number.
  std::uint64_t enterOp(OpKind kind, std::string_view tag, std::uint64_t detail = 0);
  // Marks the current op finished (peers then see this rank as busy after it).
  void leaveOp();

  // The checks every wait runs on each wake: the abort word, the op's deadline, divergence
  // against the peers at the same sequence number, and peers that exited before arriving.
  // `need` lists the ranks this wait depends on (empty: all).
  void checkWhileWaiting(Clock::time_point deadline, std::span<const int> need = {});
  // Throws AbortedError (or the subclass matching the abort reason) if the job is aborting.
  void throwIfAborted() const;

  // A checked barrier over all ranks.
  void barrier(std::string_view tag);
  // One more synchronisation inside the current op (collectives synchronise several times):
  // returns when every rank has arrived at it. With a core per rank, each rank raises its own
  // counter and polls its peers' (one cache line each way, no shared atomic to fight over);
  // when ranks share cores, the central barrier (one futex wake for all sleepers).
  void sync(Clock::time_point deadline) {
    if (oversubscribed_) barrierRound(seq_, hash_, deadline);
    else syncFlags(deadline);
  }
  // Every rank's payload in rank order (payloads of any size, streamed in chunks).
  std::vector<std::vector<std::byte>> rendezvous(std::string_view tag,
                                                 std::span<const std::byte> payload);

  // Sets the abort word (the first cause wins), records `text` and wakes every sleeping rank.
  // Returns false when another cause was first.
  static bool raiseAbort(Segment& segment, AbortReason reason, int rank, const std::string& text);
  // Wakes every rank sleeping in a wait, so it re-runs its checks (a peer exited, abort...).
  static void wakeSleepers(Segment& segment);
  // "rank 3 at 'save'#12; ranks 0-2,4-7 at 'epoch_end'#12" from the slots as they are now
  // (global ranks).
  static std::string describeRanks(const Segment& segment);
  // The rank's op; without the tag text when only seq and hash matter (the hot path).
  static OpSnapshot snapshot(const RankSlot& slot, bool withTag = true);

 private:
  void barrierRound(std::uint64_t seq, std::uint64_t hash, Clock::time_point deadline);
  void syncFlags(Clock::time_point deadline);
  void checkDivergence(std::uint64_t seq, std::uint64_t hash, bool allArrived);
  [[noreturn]] void failTimeout(std::uint64_t seq);
  // Before reporting a divergence, waits briefly for ranks not yet at `seq`.
  void awaitStragglers(std::uint64_t seq);
  static constexpr std::chrono::milliseconds kDivergenceGrace{250};

  Segment& segment_;
  int rank_;
  int world_;
  Waiter waiter_;
  std::chrono::milliseconds timeout_;
  std::uint64_t seq_ = 0;         // sequence number of the last op entered
  std::uint64_t hash_ = 0;        // its hash
  std::string tag_;               // its tag
  std::uint64_t enteredNs_ = 0;   // when it was entered
  std::uint64_t payloadRound_ = 0;  // rendezvous rounds so far (payload parity)
  std::uint64_t syncCount_ = 0;     // collective syncs so far (mirror of our slot's syncCount)
  bool oversubscribed_ = false;     // more ranks than cores
  int base_ = 0;                    // rankBase(segment): this machine's first global rank
};

// The global rank of the segment's local rank 0: machine x ranks per machine under mpirun,
// 0 on one machine. Messages name global ranks.
int rankBase(const Segment& segment);

// "0-2,4-7" for {0,1,2,4,5,6,7}.
std::string formatRankRanges(const std::vector<int>& ranks);
// "rank 3" or "ranks 0-2,4-7".
std::string formatRanks(const std::vector<int>& ranks);
// 64-bit FNV-1a.
std::uint64_t hashOp(OpKind kind, std::string_view tag);

}  // namespace xs::detail
