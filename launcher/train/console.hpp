// console.hpp: what the master prints: one progress line per epoch (redrawn in place with '\r'
// on a terminal, printed once at the end of the epoch otherwise), and the end-of-run summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace xs::train {

struct ProgressInfo {
  int epoch = 0;  // 0-based
  int epochs = 0;
  std::int64_t stepInEpoch = 0;
  std::int64_t stepsInEpoch = 0;
  double imagesPerSecond = 0;
  double loss = 0;        // mean training loss of the epoch so far, over all ranks
  double accuracy = 0;    // training accuracy of the epoch so far
  double etaSeconds = 0;  // of the whole run
};

class Progress {
 public:
  Progress(bool enabled, bool tty) : enabled_(enabled), tty_(tty) {}
  // Redraws the line (terminal only, at most every 200 ms).
  void update(const ProgressInfo& p);
  // The epoch's final line, ended by a newline.
  void finish(const ProgressInfo& p);
  // The line so far, printed once (--log-every in a log; a terminal has the redrawn line).
  void log(const ProgressInfo& p);
  // A line of its own (clears a pending progress line first).
  void line(const std::string& text);

 private:
  std::string format(const ProgressInfo& p) const;
  bool enabled_, tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// Per-rank figures of a run, gathered on the master with mesh_reduce (where the time went is the
// launcher's utilisation report).
struct RankStats {
  std::int64_t steps = 0;
  double seconds = 0;  // the training loop's wall time
};

struct Summary {
  double wallSeconds = 0;
  double imagesPerSecond = 0;
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double finalLoss = 0;
  double testAccuracy = -1;  // < 0: not evaluated
  double testLoss = 0;
  std::int64_t testCount = 0;
  std::vector<RankStats> ranks;
  bool zeroCopy = false;
  int buckets = 1;              // gradient all-reduces per step (> 1: bucketed during backward)
  bool acrossMachines = false;  // the job spans machines (mpirun): hierarchical all-reduce
  std::uint64_t weightsHash = 0;
};

// The summary lines (printed by the master).
std::vector<std::string> summaryLines(const Summary& s);

// "1:05" / "12:34" / "1:02:03".
std::string clock(double seconds);

}  // namespace xs::train
