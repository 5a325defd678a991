// error.h: typed errors of the data pipeline. Each carries the source file:line that raised it;
// the message says what is wrong, in which file, and how to fix it, on one line.
#pragma once

#include <stdexcept>
#include <string>

namespace xs::data {

// Base of every error thrown by xspawn_data.
class DataError : public std::runtime_error {
 public:
  DataError(const std::string& message, const char* sourceFile, int sourceLine);
  const std::string& message() const { return message_; }  // without the file:line suffix
  const char* sourceFile() const { return sourceFile_; }
  int sourceLine() const { return sourceLine_; }

 private:
  std::string message_;
  const char* sourceFile_;
  int sourceLine_;
};

// A dataset file (or directory) does not exist or cannot be opened.
class FileNotFoundError : public DataError {
  using DataError::DataError;
};
// A file exists but its content is not what the format requires (bad magic, corrupt gzip...).
class FormatError : public DataError {
  using DataError::DataError;
};
// A file is shorter (or longer) than its header or record size says.
class TruncatedError : public FormatError {
  using FormatError::FormatError;
};
// Two files that belong together disagree (e.g. 10000 images but 9999 labels).
class MismatchError : public FormatError {
  using FormatError::FormatError;
};
// A label is outside [0, number of classes).
class LabelRangeError : public FormatError {
  using FormatError::FormatError;
};
// A caller passed an invalid setting (unknown dataset name, batch size 0, rank >= world...).
class ConfigError : public DataError {
  using DataError::DataError;
};

}  // namespace xs::data

// Throws Type(msg) with the current file:line.
#define XS_DATA_THROW(Type, msg) throw Type((msg), __FILE__, __LINE__)
