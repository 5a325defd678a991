// file_bytes.cpp: whole-file reads through zlib's gz* interface (transparent for raw files).
#include "file_bytes.hpp"

#include <zlib.h>

#include <string>

#include "xspawn/error.hpp"

namespace xs::data::detail {

std::vector<std::uint8_t> readFileBytes(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    XS_THROW(FileNotFoundError, path.string() + ": no such file");
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    XS_THROW(FileNotFoundError, path.string() + ": cannot open (check permissions)");
  }
  gzbuffer(file, 1 << 17);
  std::vector<std::uint8_t> bytes;
  constexpr std::size_t kChunk = 1 << 20;
  int errnum = Z_OK;
  for (;;) {
    const std::size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const int got = gzread(file, bytes.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      bytes.resize(old);
      break;
    }
    bytes.resize(old + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  const char* zmessage = gzerror(file, &errnum);
  const std::string detail = zmessage != nullptr ? zmessage : "unknown zlib error";
  gzclose(file);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    XS_THROW(FormatError, path.string() + ": corrupt gzip stream (zlib: " + detail +
                                   ") after " + std::to_string(bytes.size()) +
                                   " decompressed bytes; re-download or re-extract the file");
  }
  return bytes;
}

}  // namespace xs::data::detail
