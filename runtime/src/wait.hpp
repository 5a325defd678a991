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
void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::chrono::nanoseconds timeout);
// FUTEX_WAKE of every sleeper on the word.
void futexWakeAll(std::atomic<std::uint32_t>& word);

using Clock = std::chrono::steady_clock;

// Everything one rank needs to wait safely inside a job segment.
class Waiter {
 public:
  Waiter(Segment& segment, int rank, WaitMode mode);

  // Blocks until `word` no longer holds `seen` (acquire). Before sleeping it registers in
  // `sleepers` so that the writer can skip the wake syscall when nobody sleeps. At least
  // every kTick and on every wake it calls `check` (which throws to give up: abort word,
  // deadline, divergence, dead peer).
  void waitChange(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                  std::atomic<std::uint32_t>& sleepers, const std::function<void()>& check);

  // Wakes the sleepers of `word` after the caller changed it (seq_cst store), if any.
  static void wake(std::atomic<std::uint32_t>& word, std::atomic<std::uint32_t>& sleepers);

  // The longest a sleeper sleeps before it checks again on its own.
  static constexpr std::chrono::milliseconds kTick{20};
  // The longest a hybrid waiter spins.
  static constexpr std::chrono::nanoseconds kMaxSpin{20000};

  WaitMode mode() const { return mode_; }

 private:
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
