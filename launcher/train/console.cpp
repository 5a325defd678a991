// console.cpp: progress lines and the end-of-run summary.
#include "console.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace xs::train {

std::string clock(double seconds) {
  auto s = static_cast<long>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

std::string Progress::format(const ProgressInfo& p) const {
  return fmt::format("epoch {}/{}  step {}/{}  {:.0f} images/s  loss {:.4f}  train acc {:.2f}%  ETA {}",
                     p.epoch + 1, p.epochs, p.stepInEpoch, p.stepsInEpoch, p.imagesPerSecond, p.loss,
                     100.0 * p.accuracy, clock(p.etaSeconds));
}

void Progress::update(const ProgressInfo& p) {
  if (!enabled_ || !tty_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  std::string text = format(p);
  std::printf("%-100s\r", text.c_str());
  std::fflush(stdout);
  drawn_ = true;
}

void Progress::finish(const ProgressInfo& p) {
  if (!enabled_) return;
  std::string text = format(p);
  std::printf(tty_ ? "%-100s\n" : "%s\n", text.c_str());
  std::fflush(stdout);
  drawn_ = false;
}

void Progress::log(const ProgressInfo& p) {
  if (enabled_ && !tty_) line(format(p));
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  std::printf(tty_ && drawn_ ? "%-100s\n" : "%s\n", text.c_str());
  std::fflush(stdout);
  drawn_ = false;
}

std::vector<std::string> summaryLines(const Summary& s) {
  std::vector<std::string> out;
  out.push_back(fmt::format("training done: {} steps, {} images in {:.1f} s wall time, {:.0f} images/s",
                            s.steps, s.images, s.wallSeconds, s.imagesPerSecond));
  std::string test = s.testAccuracy >= 0
                         ? fmt::format("test accuracy {:.2f}% ({} images, loss {:.4f})", 100.0 * s.testAccuracy,
                                       s.testCount, s.testLoss)
                         : "test accuracy not evaluated";
  out.push_back(fmt::format("final training loss {:.4f}, {}", s.finalLoss, test));
  if (s.ranks.empty()) return out;
  double lo = 1e300, hi = 0, sum = 0, fastest = 1e300, slowest = 0;
  double compute = 0, reduce = 0, wait = 0, wall = 0;
  for (const RankStats& r : s.ranks) {
    double mean = r.steps > 0 ? r.seconds / static_cast<double>(r.steps) : 0;
    lo = std::min(lo, mean), hi = std::max(hi, mean), sum += mean;
    fastest = std::min(fastest, r.stepMin), slowest = std::max(slowest, r.stepMax);
    compute += r.compute, reduce += r.allReduce, wait += r.dataWait, wall += r.seconds;
  }
  const double n = static_cast<double>(s.ranks.size());
  out.push_back(fmt::format("step time per rank (ms): min {:.1f} avg {:.1f} max {:.1f} (single steps {:.1f} to {:.1f})",
                            1e3 * lo, 1e3 * sum / n, 1e3 * hi, 1e3 * fastest, 1e3 * slowest));
  if (wall > 0) {
    const double other = std::max(0.0, wall - compute - reduce - wait);
    std::string how;
    if (s.zeroCopy) {
      how = s.acrossMachines ? "gradients all-reduced in place in shared memory, then across machines"
                             : "gradients all-reduced in place in shared memory";
      if (s.buckets > 1)
        how += fmt::format(", in {} buckets during backward; all-reduce counts only the wait after it", s.buckets);
      how = " (" + how + ")";
    }
    out.push_back(fmt::format("time share (all ranks): compute {:.1f}%, all-reduce {:.1f}%, waiting for data {:.1f}%, other {:.1f}%{}",
                              100 * compute / wall, 100 * reduce / wall, 100 * wait / wall, 100 * other / wall, how));
  }
  out.push_back(fmt::format("weights identical on all {} ranks (FNV-1a 0x{:016x})", s.ranks.size(), s.weightsHash));
  return out;
}

}  // namespace xs::train
