// wait.hpp: how a rank waits for a shared word to change: a short spin, then a futex sleep
// on the shared (non-private) word, with every wake checking the job's abort word, the
// deadline and a caller-supplied health check. Also the futex wrappers themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace xs::detail {

class Segment;

// How waiters wait. kHybrid is the default; the other two exist for the benchmark that
// justifies it (and for users who own their cores exclusively).
enum class WaitMode : std::uint32_t { kHybrid = 0, kSpin = 1, kFutex = 2 };

// FUTEX_WAIT on a word shared between processes; returns on change, wake, timeout or signal.
// `word` is the address of a 32-bit word (or the low half of a 64-bit one).
void futexWait(const void* word, std::uint32_t expected, std::chrono::nanoseconds timeout);
// FUTEX_WAKE of every sleeper on the word.
void futexWakeAll(const void* word);

using Clock = std::chrono::steady_clock;

// Everything one rank needs to wait safely inside a job segment.
class Waiter {
 public:
  Waiter(Segment& segment, int rank, WaitMode mode);

  // Blocks until `word` no longer holds `seen` (acquire). Before sleeping it registers in
  // `sleepers` so that the writer can skip the wake syscall when nobody sleeps. At least
  // every kTick and on every wake it calls `check` (which throws to give up: abort word,
  // deadline, divergence, dead peer). A 64-bit word sleeps on its low half (x86: little end).
  template <class Word>
  void waitChange(std::atomic<Word>& word, Word seen, std::atomic<std::uint32_t>& sleepers,
                  const std::function<void()>& check) {
    static_assert(sizeof(Word) == 4 || sizeof(Word) == 8);
    if (word.load(std::memory_order_acquire) != seen) return;
    waitSlow([&] { return word.load(std::memory_order_acquire) != seen; },
             &word, static_cast<std::uint32_t>(seen), sleepers, check);
  }

  // Wakes the sleepers of `word` after the caller changed it (seq_cst store), if any.
  static void wake(const void* word, std::atomic<std::uint32_t>& sleepers);

  // The longest a sleeper sleeps before it checks again on its own.
  static constexpr std::chrono::milliseconds kTick{20};
  // The longest a hybrid waiter spins, and the recent wait below which it spins at all.
  static constexpr std::chrono::nanoseconds kMaxSpin{10000};
  static constexpr std::chrono::nanoseconds kShortWait{3000};

  WaitMode mode() const { return mode_; }

 private:
  void waitSlow(const std::function<bool()>& changed, const void* futexWord,
                std::uint32_t futexSeen, std::atomic<std::uint32_t>& sleepers,
                const std::function<void()>& check);
  // How long to spin before sleeping, from how long recent waits lasted.
  std::chrono::nanoseconds spinBudget();
  void recordWait(std::chrono::nanoseconds waited);

  Segment& segment_;
  int rank_;
  WaitMode mode_;
  bool oversubscribed_;
  std::int64_t expectedWaitNs_ = 0;  // moving average of recent waits
  std::uint32_t waits_ = 0;
};

}  // namespace xs::detail
