// error.hpp: the one error hierarchy of xspawn. Every error the libraries throw (runtime,
// engine, data, training API) is an xs::Error of one of the kinds below; its what() says what
// is wrong, where (the file, rank, tag or option concerned) and how to fix it, and where()
// names the source line that raised it. Library code throws; only a program's main decides
// exit codes (the launcher and xspawn-train map UsageError to 2, anything else to 1).
#pragma once

#include <stdexcept>
#include <string>

namespace xs {

// Base of every xspawn error. what() is the one-line message; where() is "file:line".
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

// A bad argument, option or setting from the user (unknown model, negative rate, batch 0,
// an optimizer built for another model...).
class UsageError : public Error { using Error::Error; };
// A tensor, batch or network whose shape does not fit (images of the wrong size for the
// network, models of different shapes on different ranks...).
class ShapeError : public UsageError { using UsageError::UsageError; };

// An operating-system call failed (shm_open, fork, pipe, ...).
class SystemError : public Error { using Error::Error; };
// Not enough room in /dev/shm for the job's segment or the shared heap.
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

// A failure acted out on purpose (--inject-fault, XSPAWN_INJECT_FAULT with kind=throw).
class FaultInjectedError : public Error { using Error::Error; };

// An emulated core's memory (--device-memory) cannot hold an allocation.
class OutOfMemoryError : public Error { using Error::Error; };
// A math backend (oneDNN, OpenBLAS) refused an operation.
class BackendError : public Error { using Error::Error; };
// A checkpoint file is missing, truncated, corrupt, or of another network or optimizer.
class CheckpointError : public Error { using Error::Error; };

// A dataset could not be read.
class DataError : public Error { using Error::Error; };
// A dataset file (or directory) does not exist or cannot be opened.
class FileNotFoundError : public DataError { using DataError::DataError; };
// A file exists but its content is not what the format requires (bad magic, corrupt gzip...).
class FormatError : public DataError { using DataError::DataError; };
// A file is shorter (or longer) than its header or record size says.
class TruncatedError : public FormatError { using FormatError::FormatError; };
// Two files that belong together disagree (e.g. 10000 images but 9999 labels).
class MismatchError : public FormatError { using FormatError::FormatError; };
// A label is outside [0, number of classes).
class LabelRangeError : public FormatError { using FormatError::FormatError; };

}  // namespace xs

// Throws `Type` (an xs::Error kind) with a message and the current file:line.
#define XS_THROW(Type, message) throw Type((message), __FILE__, __LINE__)
// Throws `Type` with `message` unless `cond` holds.
#define XS_CHECK(cond, Type, message)   \
  do {                                  \
    if (!(cond)) XS_THROW(Type, message); \
  } while (0)
