// subprocess.hpp: running a helper program with its output captured (the launcher's `train
// --plan`, a stack tool at a stall), with a time budget.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace xs::detail {

struct Captured {
  std::string out;       // its stdout (and stderr when asked)
  int status = -1;       // exit status, or 128+signal
  bool timedOut = false;  // killed when the budget ran out
};

// "SIGSEGV" for 11 (report.cpp).
std::string signalName(int signal);

// Runs argv[0] (a path) with its stdout captured (and its stderr, when `withStderr`; else
// stderr passes through), with the signal mask cleared, for at most `budget`.
Captured runCaptured(const std::vector<std::string>& argv, bool withStderr,
                     std::chrono::milliseconds budget = std::chrono::hours(24));

}  // namespace xs::detail
