// error.hpp: the typed errors the xspawn runtime throws, each carrying the file:line
// that raised it. Library code throws; only a program's main decides exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace xs {

// Base of every xspawn error. what() is the one-line message; where() is file:line.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message), file_(file), line_(line) {}
  std::string where() const { return std::string(file_) + ":" + std::to_string(line_); }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  const char* file_;
  int line_;
};

// A bad argument or option from the user (the launcher maps it to exit status 2).
class UsageError : public Error { using Error::Error; };
// An operating-system call failed (shm_open, fork, pipe, ...).
class SystemError : public Error { using Error::Error; };
// Not enough room in /dev/shm for the job's segment.
class ShmSpaceError : public Error { using Error::Error; };
// A job segment could not be created, opened or validated.
class SegmentError : public Error { using Error::Error; };
// An API call made outside a worker (no xs::init() and not inside xs::spawn).
class NotInitializedError : public Error { using Error::Error; };
// A collective or rendezvous gave up because another rank failed, exited or the job was stopped.
class AbortedError : public Error { using Error::Error; };
// Ranks reached different rendezvous points or collectives (they would hang elsewhere).
class DivergenceError : public AbortedError { using AbortedError::AbortedError; };
// A rendezvous or collective passed its deadline.
class TimeoutError : public AbortedError { using AbortedError::AbortedError; };

}  // namespace xs

// Throws `Type` with a message and the current file:line.
#define XS_THROW(Type, message) throw Type((message), __FILE__, __LINE__)
