// wait.cpp: spin-then-futex waiting on shared words.
#include "wait.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>

#include "segment.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define XS_CPU_RELAX() _mm_pause()
#else
#define XS_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace xs::detail {

void futexWait(const void* word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // FUTEX_WAIT without FUTEX_PRIVATE_FLAG: the word is in a shared mapping and the wakers are
  // other processes; a private futex would key on this process's address space only.
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(const void* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

Waiter::Waiter(Segment& segment, int rank, WaitMode mode)
    : segment_(segment),
      rank_(rank),
      mode_(mode),
      oversubscribed_(segment.header().worldSize > segment.header().usableCpus) {}

std::chrono::nanoseconds Waiter::spinBudget() {
  // Measured (docs/benchmarks.md): when the awaited rank runs on another core, a short spin
  // answers in well under a microsecond where a futex round trip costs several; when it does
  // not (more ranks than cores, or a busy machine), every spin steals the time that rank
  // needs, and sleeping at once is fastest. So: never spin oversubscribed; otherwise spin
  // only while recent waits were short (a few microseconds), for a few times their length,
  // and every 32nd wait probe with a short spin so that a machine that became free is noticed.
  if (mode_ == WaitMode::kSpin) return std::chrono::nanoseconds::max();
  if (mode_ == WaitMode::kFutex || oversubscribed_) return std::chrono::nanoseconds(0);
  ++waits_;
  if (expectedWaitNs_ <= kShortWait.count()) {
    return std::chrono::nanoseconds(std::clamp<std::int64_t>(expectedWaitNs_ * 4, 1000, kMaxSpin.count()));
  }
  return (waits_ & 31) == 0 ? kShortWait : std::chrono::nanoseconds(0);
}

void Waiter::recordWait(std::chrono::nanoseconds waited) {
  expectedWaitNs_ = (expectedWaitNs_ * 7 + waited.count()) / 8;
}

void Waiter::wake(const void* word, std::atomic<std::uint32_t>& sleepers) {
  // The caller's store to `word` (seq_cst) and this load are ordered against the sleeper's
  // increment of `sleepers` and its reload of `word` (both seq_cst): either we see the
  // sleeper and wake it, or it sees the new value and never sleeps. No lost wake-up.
  if (sleepers.load(std::memory_order_seq_cst) != 0) futexWakeAll(word);
}

void Waiter::waitSlow(const std::function<bool()>& changed, const void* futexWord,
                      std::uint32_t futexSeen, std::atomic<std::uint32_t>& sleepers,
                      const std::function<void()>& check) {
  check();
  const auto start = Clock::now();
  auto lastCheck = start;
  const auto budget = spinBudget();
  if (budget.count() > 0) {
    const auto spinUntil = budget == std::chrono::nanoseconds::max() ? Clock::time_point::max() : start + budget;
    for (std::uint64_t i = 1;; ++i) {
      if (changed()) {
        recordWait(Clock::now() - start);
        return;
      }
      XS_CPU_RELAX();
      // A pause is ~40-140 cycles; look at the clock every 16 of them (~1 us).
      if ((i & 15) == 0) {
        auto now = Clock::now();
        if (now >= spinUntil) break;
        if (now - lastCheck >= kTick) {
          check();
          lastCheck = now;
        }
      }
    }
  }

  RankSlot& me = segment_.slot(rank_);
  for (;;) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    // Tell an aborter which word to wake us on (offset + 1; 0 means "not sleeping").
    me.sleepingOn.store(segment_.offsetOf(futexWord) + 1, std::memory_order_seq_cst);
    // Re-check after registering: a change made before our registration is visible to us
    // now; one made after it finds `sleepers` non-zero and wakes us.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    bool done = changed();
    bool aborted = segment_.header().abortWord.load(std::memory_order_seq_cst) != 0;
    if (!done && !aborted) futexWait(futexWord, futexSeen, kTick);
    me.sleepingOn.store(0, std::memory_order_relaxed);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (changed()) {
      recordWait(Clock::now() - start);
      return;
    }
    check();
  }
}

}  // namespace xs::detail
