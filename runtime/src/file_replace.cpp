// file_replace.cpp: replacing a file whole through a temporary name (file_replace.hpp).
#include "file_replace.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

namespace xs::detail {

int replaceFile(const std::string& path, std::initializer_list<std::string_view> pieces) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return errno;
  int err = 0;
  for (std::string_view piece : pieces) {
    if (std::fwrite(piece.data(), 1, piece.size(), f) != piece.size()) {
      err = errno;
      break;
    }
  }
  // fclose flushes the buffer: a full disk often shows only here.
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) == 0) return 0;
  if (err == 0) err = errno;
  std::remove(tmp.c_str());  // nothing half-written stays behind
  return err != 0 ? err : EIO;
}

}  // namespace xs::detail
