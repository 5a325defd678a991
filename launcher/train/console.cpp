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
  // Where each rank's time went (compute, collectives, data, step times, the straggler) is the
  // launcher's utilisation report, printed after the job ends; this says how gradients travelled.
  if (s.zeroCopy) {
    std::string how = s.acrossMachines ? "gradients all-reduced in place in shared memory, then across machines"
                                       : "gradients all-reduced in place in shared memory";
    if (s.buckets > 1) how += fmt::format(", in {} buckets during backward", s.buckets);
    out.push_back(how);
  }
  out.push_back(fmt::format("weights identical on all {} ranks (FNV-1a 0x{:016x})", s.ranks.size(), s.weightsHash));
  return out;
}

}  // namespace xs::train
