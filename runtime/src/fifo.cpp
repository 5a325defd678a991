// fifo.cpp: the ring FIFO's producer and consumer sides.
#include "fifo.hpp"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace xs::detail {
namespace {

// A streamed all-reduce waits once or twice per FIFO slot for a peer doing the same work at
// the same pace: usually a few microseconds, sometimes tens. The waiter's adaptive spin
// (tuned for barriers) sleeps at once after a few waits over 3 us; then every slot costs a
// futex round trip, each rank's wake-up delays the other, the waits grow and spinning never
// resumes (measured at N=2: 4 MiB in 3.1 ms instead of 1.0 ms). So the FIFO polls for up to
// kStreamSpin first, as long as its polls succeed. A poll that runs out means the peer is not
// running (it may share our core while other jobs load the machine, and our polling only
// delays it: 4 KiB calls took 55 us): then only every kProbeEvery-th wait polls, until one
// succeeds again. Ranks pinned to cores of their own (--bind-to core) never share one: they
// always poll. The waiter's checked wait (abort, deadline) follows a poll that ran out.
constexpr std::chrono::microseconds kStreamSpin{50};
constexpr std::uint32_t kProbeEvery = 8;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

bool RingLink::ownCores(int peer) const {
  const int mine = segment_.slot(control_.rank()).boundCpu.load(std::memory_order_relaxed);
  const int theirs = segment_.slot(peer).boundCpu.load(std::memory_order_relaxed);
  return mine >= 0 && theirs >= 0 && mine != theirs;
}

template <class Ready>
bool RingLink::spinFor(int peer, Ready&& ready) {
  if (ready()) return true;
  if (!spin_ || (!ownCores(peer) && misses_ > 0 && ++waits_ % kProbeEvery != 0)) return false;
  const auto until = Clock::now() + kStreamSpin;
  for (std::uint32_t i = 1;; ++i) {
    if (ready()) {
      misses_ = 0;
      return true;
    }
    relax();
    if ((i & 63) == 0 && Clock::now() >= until) {
      ++misses_;
      return false;
    }
  }
}

RingLink::RingLink(Segment& segment, ControlPlane& control)
    : segment_(segment),
      control_(control),
      arena_(segment),
      left_((control.rank() + control.worldSize() - 1) % control.worldSize()),
      right_((control.rank() + 1) % control.worldSize()),
      spin_(control.waiter().mode() != WaitMode::kFutex &&
            segment.header().worldSize <= segment.header().usableCpus) {}

void RingLink::send(const void* data, std::size_t bytes, Clock::time_point deadline) {
  std::memcpy(reserve(deadline), data, bytes);
  commit(bytes);
}

std::byte* RingLink::reserve(Clock::time_point deadline) {
  FifoControl& f = arena_.fifo(right_);
  const std::uint64_t slots = arena_.ringSlots();
  // Only this rank writes head, so its own last store is the current value.
  const std::uint64_t head = f.head.load(std::memory_order_relaxed);
  if (head - seenTail_ >= slots) {
    // Acquire on tail: the consumer's release of a slot (after it finished reading it)
    // happens before we overwrite that slot; without it we could scribble over data still
    // being read.
    std::uint64_t tail = f.tail.load(std::memory_order_acquire);
    if (head - tail >= slots) {
      if (spinFor(right_, [&] { return head - f.tail.load(std::memory_order_acquire) < slots; })) {
        tail = f.tail.load(std::memory_order_acquire);
      }
      const int need[1] = {right_};
      while (head - tail >= slots) {
        control_.waiter().waitChange(f.tail, tail, f.tailSleepers,
                                     [&] { control_.checkWhileWaiting(deadline, need); });
        tail = f.tail.load(std::memory_order_acquire);
      }
    }
    seenTail_ = tail;
  }
  return arena_.fifoSlot(right_, head % slots);
}

void RingLink::commit(std::size_t bytes) {
  FifoControl& f = arena_.fifo(right_);
  const std::uint64_t head = f.head.load(std::memory_order_relaxed);
  f.slotBytes[head % arena_.ringSlots()].store(bytes, std::memory_order_relaxed);
  // Release on head: the slot's bytes and size are visible to the consumer that acquires
  // the new head; without it the consumer could read the slot before our writes land.
  f.head.store(head + 1, std::memory_order_seq_cst);
  Waiter::wake(&f.head, f.headSleepers);
}

void RingLink::recv(const std::function<void(const std::byte*, std::size_t)>& consume,
                    Clock::time_point deadline) {
  const std::byte* data = peek(deadline);
  FifoControl& f = arena_.fifo(control_.rank());
  const std::uint64_t tail = f.tail.load(std::memory_order_relaxed);
  consume(data, f.slotBytes[tail % arena_.ringSlots()].load(std::memory_order_relaxed));
  release();
}

const std::byte* RingLink::peek(Clock::time_point deadline) {
  FifoControl& f = arena_.fifo(control_.rank());
  const std::uint64_t tail = f.tail.load(std::memory_order_relaxed);  // only we write tail
  if (seenHead_ == tail) {
    // Acquire on head: pairs with the producer's release, so the slot's contents are complete.
    std::uint64_t head = f.head.load(std::memory_order_acquire);
    if (head == tail) {
      if (spinFor(left_, [&] { return f.head.load(std::memory_order_acquire) != tail; })) {
        head = f.head.load(std::memory_order_acquire);
      }
      const int need[1] = {left_};
      while (head == tail) {
        control_.waiter().waitChange(f.head, head, f.headSleepers,
                                     [&] { control_.checkWhileWaiting(deadline, need); });
        head = f.head.load(std::memory_order_acquire);
      }
    }
    seenHead_ = head;
  }
  return arena_.fifoSlot(control_.rank(), tail % arena_.ringSlots());
}

void RingLink::release() {
  FifoControl& f = arena_.fifo(control_.rank());
  const std::uint64_t tail = f.tail.load(std::memory_order_relaxed);
  // Release on tail: our reads of the slot are finished before the producer may refill it.
  f.tail.store(tail + 1, std::memory_order_seq_cst);
  Waiter::wake(&f.tail, f.tailSleepers);
}

}  // namespace xs::detail
