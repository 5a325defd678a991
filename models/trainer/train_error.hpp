// train_error.hpp: the trainer's own error type (a bad option or setting from the user), with
// the file:line that raised it, and how any error becomes the one line the user sees.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace xs::train {

// A bad option, a bad combination of options or an unusable input; exit status 2.
class TrainError : public std::runtime_error {
 public:
  TrainError(const std::string& message, const char* file, int line)
      : std::runtime_error(message), file_(file), line_(line) {}
  std::string where() const { return std::string(file_) + ":" + std::to_string(line_); }

 private:
  const char* file_;
  int line_;
};

// The message of any exception without a trailing " [file:line]" or " (file.cpp:12)" location,
// so the user gets one readable line.
std::string userMessage(const std::exception& e);

}  // namespace xs::train

#define XS_TRAIN_THROW(msg) throw ::xs::train::TrainError((msg), __FILE__, __LINE__)
#define XS_TRAIN_CHECK(cond, msg)    \
  do {                               \
    if (!(cond)) XS_TRAIN_THROW(msg); \
  } while (0)
