// error.hpp: typed errors of the training engine, each carrying the file:line that threw it.
#pragma once

#include <stdexcept>
#include <string>

namespace xs::engine {

// Base of every engine error; what() reads "message [file:line]".
class EngineError : public std::runtime_error {
 public:
  EngineError(const std::string& msg, const char* file, int line)
      : std::runtime_error(msg + " [" + file + ":" + std::to_string(line) + "]") {}
};

// A tensor or argument has the wrong shape, size or value.
class ShapeError : public EngineError {
  using EngineError::EngineError;
};
// A bad argument that is not a shape (unknown model name, negative rate, ...).
class ArgumentError : public EngineError {
  using EngineError::EngineError;
};
// The device arena cannot hold an allocation.
class DeviceOutOfMemory : public EngineError {
  using EngineError::EngineError;
};
// A checkpoint file is missing, truncated, corrupt or of another model.
class CheckpointError : public EngineError {
  using EngineError::EngineError;
};
// A math backend (oneDNN, OpenBLAS) refused an operation.
class BackendError : public EngineError {
  using EngineError::EngineError;
};

}  // namespace xs::engine

// Throws Type(msg) with the current file and line.
#define XS_THROW(Type, msg) throw Type((msg), __FILE__, __LINE__)
// Throws Type(msg) unless cond holds.
#define XS_CHECK(cond, Type, msg) \
  do {                            \
    if (!(cond)) XS_THROW(Type, msg); \
  } while (0)
