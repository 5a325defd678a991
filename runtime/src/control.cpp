// control.cpp: checked ops, the central barrier, rendezvous and the job-wide abort.
#include "control.hpp"

#include <algorithm>
#include <climits>
#include <ctime>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "fault.hpp"
#include "telemetry.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {

std::uint64_t hashOp(OpKind kind, std::string_view tag) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ULL;
  };
  mix(static_cast<unsigned char>(kind));
  for (char c : tag) mix(static_cast<unsigned char>(c));
  return h == 0 ? 1 : h;
}

int rankBase(const Segment& segment) {
  const MachineChannel* ch = segment.machineChannel();
  return ch ? static_cast<int>(ch->machine) * segment.worldSize() : 0;
}

std::string formatRankRanges(const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  std::string out;
  for (std::size_t i = 0; i < r.size();) {
    std::size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? fmt::format("{}", r[i]) : fmt::format("{}-{}", r[i], r[j]);
    i = j + 1;
  }
  return out;
}

std::string formatRanks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + formatRankRanges(ranks);
}

std::string OpSnapshot::describe() const {
  if (kind == OpKind::kRendezvous) return fmt::format("'{}'#{}", tag, seq);
  return fmt::format("{} '{}'#{}", opKindName(kind), tag, seq);
}

OpSnapshot ControlPlane::snapshot(const RankSlot& slot, bool withTag) {
  OpSnapshot s;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    // Seqlock read: seq (acquire), fields, fence, seq again; equal and not "writing" means the
    // fields belong to that seq.
    std::uint64_t before = slot.opSeq.load(std::memory_order_acquire);
    s.hash = slot.opHash.load(std::memory_order_relaxed);
    s.state = static_cast<OpState>(slot.opState.load(std::memory_order_relaxed));
    s.kind = static_cast<OpKind>(slot.opKind.load(std::memory_order_relaxed));
    if (withTag) s.tag = slot.opTag.load();
    std::atomic_thread_fence(std::memory_order_acquire);
    std::uint64_t after = slot.opSeq.load(std::memory_order_relaxed);
    if (before == after && before != kSeqWriting) {
      s.seq = before;
      return s;
    }
  }
  s.seq = 0;
  s.tag = "?";
  return s;
}

ControlPlane::ControlPlane(Segment& segment, int rank, WaitMode mode,
                           std::chrono::milliseconds timeout)
    : segment_(segment),
      rank_(rank),
      world_(segment.worldSize()),
      waiter_(segment, rank, mode),
      timeout_(timeout),
      oversubscribed_(segment.header().worldSize > segment.header().usableCpus),
      base_(rankBase(segment)) {}

std::uint64_t ControlPlane::enterOp(OpKind kind, std::string_view tag, std::uint64_t detail) {
  if (fault::gArmed) fault::atOp(kind, tag);
  throwIfAborted();
  if (tag.size() >= kTagBytes) {
    XS_THROW(UsageError, fmt::format("tag '{}' is {} characters long; tags hold at most {}",
                                     tag, tag.size(), kTagBytes - 1));
  }
  seq_ += 1;
  // `detail` (a collective's count, type, op, ...) makes the same tag with other arguments a
  // different op, so mismatched arguments are caught like mismatched tags.
  hash_ = hashOp(kind, tag) ^ (detail * 0x9e3779b97f4a7c15ULL);
  if (hash_ == 0) hash_ = 1;
  const bool sameTag = tag == tag_;
  if (!sameTag) tag_ = std::string(tag);
  RankSlot& me = segment_.slot(rank_);
  // Seqlock write: mark "writing" first so a reader never pairs the old seq with new fields.
  me.opSeq.store(kSeqWriting, std::memory_order_relaxed);
  enteredNs_ = telemetry::nowNs();  // the launcher's steady clock
  me.opEnterNs.store(enteredNs_, std::memory_order_relaxed);
  if (seq_ == 1) me.firstOpNs.store(enteredNs_, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  me.opHash.store(hash_, std::memory_order_relaxed);
  me.opKind.store(static_cast<std::uint32_t>(kind), std::memory_order_relaxed);
  me.opState.store(static_cast<std::uint32_t>(OpState::kWaiting), std::memory_order_relaxed);
  if (!sameTag) me.opTag.store(tag);  // a loop repeating one op rewrites no text
  // seq_cst publish + the seq_cst reads in checkDivergence: of two ranks entering the same
  // sequence number with different tags at the same moment, at least one sees the other
  // (store-load ordering). The last arrival's full check catches everything else.
  me.opSeq.store(seq_, std::memory_order_seq_cst);
  checkDivergence(seq_, hash_, false);
  return seq_;
}

void ControlPlane::leaveOp() {
  segment_.slot(rank_).opState.store(static_cast<std::uint32_t>(OpState::kIdle),
                                     std::memory_order_release);
}

void ControlPlane::throwIfAborted() const {
  const SegmentHeader& h = segment_.header();
  std::uint64_t word = h.abortWord.load(std::memory_order_acquire);
  if (word == 0) return;
  // The aborter writes the text between claiming the word and publishing the cause; wait
  // for it (bounded: the aborter may have died in between).
  for (int i = 0; word == kAbortPending && i < 10000; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(1));
    word = h.abortWord.load(std::memory_order_acquire);
  }
  std::string text = word == kAbortPending ? std::string("the job is aborting") : h.abortText.load();
  AbortReason reason = abortReasonOf(word);
  std::string where = tag_.empty() ? std::string("") : fmt::format(" (rank {} was in '{}'#{})", base_ + rank_, tag_, seq_);
  switch (reason) {
    case AbortReason::kDivergence: XS_THROW(DivergenceError, text);
    case AbortReason::kTimeout: XS_THROW(TimeoutError, text);
    default: XS_THROW(AbortedError, "aborted: " + text + where);
  }
}

bool ControlPlane::raiseAbort(Segment& segment, AbortReason reason, int rank,
                              const std::string& text) {
  SegmentHeader& h = segment.header();
  // Claim the right to write the text with a "pending" value first, so that nobody reads the
  // abort word before the text is there.
  std::uint64_t expected = 0;
  const std::uint64_t word = packAbort(reason, rank);
  if (!h.abortWord.compare_exchange_strong(expected, kAbortPending, std::memory_order_acq_rel)) {
    return false;
  }
  h.abortText.store(text);
  h.abortTimeNs.store(static_cast<std::uint64_t>(
                          std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count()),
                      std::memory_order_relaxed);
  h.abortWord.store(word, std::memory_order_seq_cst);
  wakeSleepers(segment);
  return true;
}

void ControlPlane::wakeSleepers(Segment& segment) {
  // Wake every sleeper on the word it registered (see Waiter::waitChange). One that
  // registers after this loop re-reads the abort word and peer states before it sleeps, and
  // sleeps at most Waiter::kTick anyway.
  for (int r = 0; r < segment.worldSize(); ++r) {
    std::uint64_t off = segment.slot(r).sleepingOn.load(std::memory_order_seq_cst);
    if (off != 0 && off - 1 + 4 <= segment.size()) {
      futexWakeAll(segment.base() + off - 1);
    }
  }
}

std::string ControlPlane::describeRanks(const Segment& segment) {
  // Group ranks by what they are doing.
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (int r = 0; r < segment.worldSize(); ++r) {
    const RankSlot& slot = segment.slot(r);
    OpSnapshot op = snapshot(slot);
    auto state = static_cast<RankState>(slot.state.load(std::memory_order_acquire));
    std::string what;
    if (op.seq == 0) {
      what = "before its first rendezvous";
    } else if (op.state == OpState::kWaiting) {
      what = "at " + op.describe();
    } else {
      what = "past " + op.describe();
    }
    if (state == RankState::kExited) what = "exited (code 0) " + what;
    if (state == RankState::kFailed) what = "dead " + what;
    if (!groups.count(what)) order.push_back(what);
    groups[what].push_back(rankBase(segment) + r);
  }
  // The odd ones out first: smaller groups before larger ones, then by lowest rank.
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return groups[a].size() < groups[b].size();
  });
  std::string out;
  for (const std::string& what : order) {
    if (!out.empty()) out += "; ";
    out += formatRanks(groups[what]) + " " + what;
  }
  return out;
}

void ControlPlane::checkDivergence(std::uint64_t seq, std::uint64_t hash, bool allArrived) {
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    OpSnapshot peer = snapshot(segment_.slot(r), false);
    bool mismatch = peer.seq == seq && peer.hash != hash;
    // When all have arrived, every peer must be at exactly this op.
    if (allArrived && peer.seq != seq) mismatch = true;
    if (!mismatch) continue;
    awaitStragglers(seq);
    std::string text = fmt::format("ranks diverged: {} (every rank must reach the same "
                                   "rendezvous and collectives in the same order)",
                                   describeRanks(segment_));
    raiseAbort(segment_, AbortReason::kDivergence, rank_, text);
    throwIfAborted();
  }
}

void ControlPlane::awaitStragglers(std::uint64_t seq) {
  // Ranks still on their way to this sequence number usually arrive within moments; give
  // them that long so the report shows where everybody went, not a half-arrived picture.
  const auto until = Clock::now() + kDivergenceGrace;
  while (Clock::now() < until) {
    if (segment_.header().abortWord.load(std::memory_order_acquire) != 0) return;
    bool all = true;
    for (int r = 0; r < world_ && all; ++r) {
      const RankSlot& slot = segment_.slot(r);
      auto state = static_cast<RankState>(slot.state.load(std::memory_order_acquire));
      if (state == RankState::kExited || state == RankState::kFailed) continue;
      all = snapshot(slot, false).seq >= seq;
    }
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ControlPlane::failTimeout(std::uint64_t seq) {
  // The wait measured, not the job's --timeout: a call may have given its own deadline.
  const std::uint64_t waitedMs = (telemetry::nowNs() - enteredNs_) / 1000000;
  std::string text = fmt::format(
      "'{}'#{} timed out after {} ms on rank {}: {} (raise --timeout, or the call's own timeout, "
      "if a rank legitimately needs longer)",
      tag_, seq, waitedMs, base_ + rank_, describeRanks(segment_));
  raiseAbort(segment_, AbortReason::kTimeout, rank_, text);
  throwIfAborted();
  XS_THROW(TimeoutError, text);
}

void ControlPlane::checkWhileWaiting(Clock::time_point deadline, std::span<const int> need) {
  throwIfAborted();
  checkDivergence(seq_, hash_, false);
  // A peer we need that has already exited cleanly will never arrive. A failed one is the
  // launcher's to report: it marks the rank failed, then aborts the job naming its pid and
  // end; a peer that looked in between must not abort first with less to say.
  auto check = [&](int r) {
    const RankSlot& slot = segment_.slot(r);
    auto state = static_cast<RankState>(slot.state.load(std::memory_order_acquire));
    if (state != RankState::kExited) return;
    OpSnapshot peer = snapshot(slot, false);
    if (peer.seq >= seq_ && peer.hash == hash_) return;  // it got here before it left
    std::string text = fmt::format("rank {} exited before reaching '{}'#{}: {}", base_ + r, tag_, seq_,
                                   describeRanks(segment_));
    raiseAbort(segment_, AbortReason::kRankFailed, r, text);
    throwIfAborted();
  };
  if (need.empty()) {
    for (int r = 0; r < world_; ++r)
      if (r != rank_) check(r);
  } else {
    for (int r : need) check(r);
  }
  if (Clock::now() >= deadline) failTimeout(seq_);
}

void ControlPlane::barrierRound(std::uint64_t seq, std::uint64_t hash, Clock::time_point deadline) {
  SegmentHeader& h = segment_.header();
  // Read the generation before arriving: it cannot move until we arrive (we are one of the
  // N), so after arriving we wait exactly for the next one. The acq_rel RMW below keeps this
  // load before it.
  const std::uint32_t gen = h.generation.load(std::memory_order_acquire);
  // acq_rel: release publishes our slot (op, payload) to the last arriver; acquire lets the
  // last arriver see every earlier arrival's slot through the RMW chain on `arrived`.
  const std::uint32_t arrivedNow = h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (arrivedNow == static_cast<std::uint32_t>(world_)) {
    checkDivergence(seq, hash, true);
    h.arrived.store(0, std::memory_order_relaxed);
    // seq_cst store: release for the slots read after the barrier, and ordered before the
    // sleepers check in wake() (no lost wake-up).
    h.generation.store(gen + 1, std::memory_order_seq_cst);
    Waiter::wake(&h.generation, h.generationSleepers);
    return;
  }
  waiter_.waitChange(h.generation, gen, h.generationSleepers,
                     [&] { checkWhileWaiting(deadline); });
}

void ControlPlane::syncFlags(Clock::time_point deadline) {
  RankSlot& me = segment_.slot(rank_);
  const std::uint64_t target = ++syncCount_;
  // Release (seq_cst): everything this rank wrote before the sync (its staging chunk, its
  // reduced slice) is visible to a peer that acquires this count; without it a peer could
  // read our buffer before our writes land.
  me.syncCount.store(target, std::memory_order_seq_cst);
  Waiter::wake(&me.syncCount, me.syncSleepers);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    RankSlot& peer = segment_.slot(r);
    // Acquire: pairs with the peer's release above, so its writes are visible to our reads
    // after the sync.
    std::uint64_t seen = peer.syncCount.load(std::memory_order_acquire);
    const int need[1] = {r};
    while (seen < target) {
      waiter_.waitChange(peer.syncCount, seen, peer.syncSleepers,
                         [&] { checkWhileWaiting(deadline, need); });
      seen = peer.syncCount.load(std::memory_order_acquire);
    }
  }
}

void ControlPlane::barrier(std::string_view tag) {
  std::uint64_t seq = enterOp(OpKind::kRendezvous, tag);
  barrierRound(seq, hash_, Clock::now() + timeout_);
  leaveOp();
}

std::vector<std::vector<std::byte>> ControlPlane::rendezvous(std::string_view tag,
                                                             std::span<const std::byte> payload) {
  const std::uint64_t chunk = segment_.header().payloadChunk;
  std::vector<std::vector<std::byte>> out(world_);
  std::vector<std::uint64_t> sizes(world_, 0);
  std::uint64_t rounds = 1;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    std::uint64_t seq = enterOp(OpKind::kRendezvous, tag);
    // Two parities: a rank may write round r+2 only after everyone passed round r+1's
    // barrier, i.e. after everyone finished reading round r. So round r+1 never overwrites
    // what a slow rank is still reading.
    const int parity = static_cast<int>(payloadRound_++ & 1);
    RankSlot& me = segment_.slot(rank_);
    const std::uint64_t offset = round * chunk;
    const std::uint64_t mine =
        offset < payload.size() ? std::min<std::uint64_t>(chunk, payload.size() - offset) : 0;
    if (mine) std::memcpy(segment_.payload(rank_, parity), payload.data() + offset, mine);
    me.payloadBytes[parity].store(payload.size(), std::memory_order_relaxed);
    barrierRound(seq, hash_, Clock::now() + timeout_);
    for (int r = 0; r < world_; ++r) {
      const std::uint64_t size = segment_.slot(r).payloadBytes[parity].load(std::memory_order_relaxed);
      if (round == 0) {
        sizes[r] = size;
        out[r].resize(size);
        rounds = std::max<std::uint64_t>(rounds, (size + chunk - 1) / chunk);
      }
      if (offset < sizes[r]) {
        const std::uint64_t n = std::min<std::uint64_t>(chunk, sizes[r] - offset);
        std::memcpy(out[r].data() + offset, segment_.payload(r, parity), n);
      }
    }
    leaveOp();
  }
  return out;
}

}  // namespace xs::detail
