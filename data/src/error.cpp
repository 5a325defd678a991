// error.cpp: formatting of DataError messages ("<message> (<file>:<line>)").
#include "xspawn/data/error.h"

#include <cstring>

namespace xs::data {
namespace {

const char* baseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

}  // namespace

DataError::DataError(const std::string& message, const char* sourceFile, int sourceLine)
    : std::runtime_error(message + " (" + baseName(sourceFile) + ":" + std::to_string(sourceLine) +
                         ")"),
      message_(message),
      sourceFile_(sourceFile),
      sourceLine_(sourceLine) {}

}  // namespace xs::data
