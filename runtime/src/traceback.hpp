// traceback.hpp: finds the Python traceback in a worker's stderr, as the interpreter prints it
// when an exception ends the program, so that the failure report names a Python worker's
// exception and where it was raised without anything added to the program (torchrun needs its
// @record decorator for that). Chained exceptions ("During handling of the above exception",
// "The above exception was the direct cause") stay in one traceback.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xs::detail {

class TracebackCatcher {
 public:
  // One line of stderr, without its newline.
  void line(const std::string& text);
  // The last complete traceback (its lines, the exception's last), or empty.
  const std::vector<std::string>& traceback() const { return done_; }
  // "ValueError: boom", the exception line of the last traceback, or "".
  std::string exception() const { return done_.empty() ? "" : done_.back(); }
  void clear();

  static constexpr std::size_t kMaxLines = 200;  // a deep recursion keeps its first and last lines

 private:
  void add(const std::string& text);
  enum class State { kIdle, kInside, kAfter };
  State state_ = State::kIdle;
  std::vector<std::string> open_, done_;
  std::size_t dropped_ = 0;
};

}  // namespace xs::detail
