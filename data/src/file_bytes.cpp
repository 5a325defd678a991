// file_bytes.cpp: whole-file reads; gzip files are inflated member by member with libdeflate
// (2.3x zlib's speed on the Fashion-MNIST training images: docs/data.md). A file libdeflate
// refuses is inflated again with zlib's streaming inflate, which says where and why: a stream
// cut short, garbage after it, a corrupt stream and an empty .gz file each get their own message.
#include "file_bytes.hpp"

#include <libdeflate.h>
#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <new>
#include <string>

#include "xspawn/error.hpp"

namespace xs::data::detail {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::size_t kOutChunk = 1 << 20;
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kMaxPass = std::size_t{1} << 30;  // zlib counts in unsigned int
constexpr const char* kAgain = "download or copy the file again";

bool gzipAt(const Bytes& in, std::size_t pos) {
  return in.size() - pos >= 2 && in[pos] == 0x1f && in[pos + 1] == 0x8b;
}

// One read of the whole file into a buffer of its size (a byte-by-byte stream read took a
// third as long as inflating the 26 MB Fashion-MNIST training images).
Bytes readRaw(const std::filesystem::path& path, std::uintmax_t size) {
  std::ifstream file(path, std::ios::binary);
  if (!file) XS_THROW(FileNotFoundError, path.string() + ": cannot open (check permissions)");
  Bytes bytes;
  resizeLarge(bytes, static_cast<std::size_t>(size));
  file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (file.bad() || file.gcount() != static_cast<std::streamsize>(bytes.size()))
    XS_THROW(FileNotFoundError, path.string() + ": read error (" + std::to_string(file.gcount()) + " of " +
                                    std::to_string(size) + " bytes read); check the disk and the file");
  return bytes;
}

// The size the gzip trailer gives for the last member (ISIZE: the uncompressed size mod 2^32):
// the output buffer's first size, so one member never reallocates. A damaged trailer cannot ask
// for more than deflate's largest ratio (1032:1) allows.
std::size_t trailerSize(const Bytes& in) {
  if (in.size() < 18) return kOutChunk;
  const std::uint8_t* t = in.data() + in.size() - 4;
  const std::size_t isize = t[0] | t[1] << 8 | t[2] << 16 | std::size_t{t[3]} << 24;
  return std::min<std::size_t>(isize + 1, in.size() * 1032);  // +1: the end is seen without a resize
}

// An inflate stream for gzip members, ended on every path.
class Inflater {
 public:
  Inflater() {
    if (inflateInit2(&stream_, 15 + 16) != Z_OK) throw std::bad_alloc();
  }
  ~Inflater() { inflateEnd(&stream_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_{};
};

[[noreturn]] void throwTruncated(const std::filesystem::path& path, std::size_t size, std::size_t member,
                                 std::size_t decompressed) {
  const std::string which = member == 0 ? "" : " (in the gzip member that starts at byte " + std::to_string(member) + ")";
  XS_THROW(TruncatedError, path.string() + ": the gzip stream is truncated: it ends early, at the end of the file's " +
                               std::to_string(size) + " compressed bytes" + which +
                               ", before the end of its data and trailer (" + std::to_string(decompressed) +
                               " bytes decompressed by then); the download or copy was cut short: " + kAgain);
}

[[noreturn]] void throwTrailing(const std::filesystem::path& path, std::size_t size, std::size_t end,
                                std::size_t decompressed) {
  XS_THROW(FormatError, path.string() + ": trailing garbage after the gzip stream: the stream (" +
                            std::to_string(decompressed) + " decompressed bytes) ends at byte " +
                            std::to_string(end) + " but the file has " + std::to_string(size - end) +
                            " more bytes that are not a gzip member; the file was damaged or appended to: " + kAgain);
}

[[noreturn]] void throwCorrupt(const std::filesystem::path& path, const char* zmessage, std::size_t pos,
                               std::size_t size, std::size_t decompressed) {
  XS_THROW(FormatError, path.string() + ": corrupt gzip stream (zlib: " +
                            (zmessage != nullptr ? zmessage : "invalid data") + ") at byte " +
                            std::to_string(pos) + " of " + std::to_string(size) + ", after " +
                            std::to_string(decompressed) + " decompressed bytes; the file is damaged: " + kAgain);
}

// Inflates every gzip member of `in` with zlib; throws when it ends early, holds garbage or is
// corrupt, naming the byte.
Bytes gunzipDiagnosed(const std::filesystem::path& path, const Bytes& in) {
  Inflater inflater;
  z_stream& z = inflater.stream();
  Bytes out;
  resizeLarge(out, trailerSize(in));
  std::size_t pos = 0, have = 0, member = 0;
  for (;;) {
    if (have == out.size()) resizeLarge(out, out.size() + std::max(kOutChunk, out.size() / 2));
    z.next_in = const_cast<Bytef*>(in.data() + pos);
    z.avail_in = static_cast<uInt>(std::min(in.size() - pos, kMaxPass));
    z.next_out = out.data() + have;
    z.avail_out = static_cast<uInt>(std::min(out.size() - have, kMaxPass));
    const uInt availIn = z.avail_in, availOut = z.avail_out;
    const int rc = inflate(&z, Z_NO_FLUSH);
    pos += availIn - z.avail_in;
    have += availOut - z.avail_out;
    if (rc == Z_STREAM_END) {
      if (pos == in.size()) break;
      if (!gzipAt(in, pos)) throwTrailing(path, in.size(), pos, have);
      member = pos;  // another member (files may be concatenated gzip streams)
      inflateReset(&z);
    } else if (rc == Z_BUF_ERROR && pos == in.size()) {
      throwTruncated(path, in.size(), member, have);
    } else if (rc == Z_MEM_ERROR) {
      throw std::bad_alloc();
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throwCorrupt(path, z.msg, pos, in.size(), have);
    }
  }
  out.resize(have);
  return out;
}

// A libdeflate decompressor, freed on every path.
struct Decompressor {
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  Decompressor() {
    if (d == nullptr) throw std::bad_alloc();
  }
  ~Decompressor() { libdeflate_free_decompressor(d); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
};

// Inflates every gzip member of `in` with libdeflate (whole members, the output grown until one
// fits); anything it refuses goes to gunzipDiagnosed for the message.
Bytes gunzip(const std::filesystem::path& path, const Bytes& in) {
  Decompressor z;
  Bytes out;
  resizeLarge(out, trailerSize(in));
  std::size_t pos = 0, have = 0;
  while (pos < in.size()) {
    if (pos > 0 && !gzipAt(in, pos)) return gunzipDiagnosed(path, in);
    std::size_t used = 0, got = 0;
    const libdeflate_result rc = libdeflate_gzip_decompress_ex(z.d, in.data() + pos, in.size() - pos,
                                                               out.data() + have, out.size() - have, &used, &got);
    if (rc == LIBDEFLATE_INSUFFICIENT_SPACE) {
      resizeLarge(out, out.size() + std::max(kOutChunk, out.size()));
      continue;
    }
    if (rc != LIBDEFLATE_SUCCESS) return gunzipDiagnosed(path, in);
    pos += used, have += got;
  }
  out.resize(have);
  return out;
}

}  // namespace

void reserveLarge(std::vector<std::uint8_t>& bytes, std::size_t size) {
  if (size <= bytes.capacity()) return;
  Bytes fresh;
  fresh.reserve(size);  // allocated, not yet touched
  // The whole 2 MiB pages inside the new buffer, before anything touches them; a kernel without
  // transparent huge pages refuses, and the buffer keeps 4 KiB pages.
  const auto begin = reinterpret_cast<std::uintptr_t>(fresh.data());
  const std::uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage;
  const std::uintptr_t last = (begin + size) / kHugePage * kHugePage;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  fresh.insert(fresh.end(), bytes.begin(), bytes.end());  // what it held, within the capacity
  bytes.swap(fresh);
}

void resizeLarge(std::vector<std::uint8_t>& bytes, std::size_t size) {
  reserveLarge(bytes, size);
  bytes.resize(size);
}

std::vector<std::uint8_t> readFileBytes(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    XS_THROW(FileNotFoundError, path.string() + ": no such file");
  }
  Bytes bytes = readRaw(path, std::filesystem::file_size(path, ec));
  if (ec) XS_THROW(FileNotFoundError, path.string() + ": cannot read its size (" + ec.message() + ")");
  if (bytes.empty() && path.extension() == ".gz") {
    XS_THROW(TruncatedError, path.string() + ": empty file (0 bytes) where a gzip stream was expected; the download or copy was interrupted: " +
                                 kAgain);
  }
  if (gzipAt(bytes, 0)) return gunzip(path, bytes);
  return bytes;  // moved out (a conditional expression would copy it into fresh pages)
}

}  // namespace xs::data::detail
