// file_bytes.hpp: reads a whole file into memory, gunzipping it when it is gzip (raw files pass
// through unchanged), with errors that name the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace xs::data::detail {

// Decompressed content of `path` (gzip, one or more members, or raw). Throws FileNotFoundError,
// TruncatedError (a gzip stream that ends early, an empty .gz file) or FormatError (a corrupt
// gzip stream, bytes after it that are not another gzip member).
std::vector<std::uint8_t> readFileBytes(const std::filesystem::path& path);

// Makes `bytes` hold at least `size` bytes of capacity, advising the kernel to back the new
// buffer with 2 MiB pages (madvise MADV_HUGEPAGE, where transparent huge pages are on "madvise")
// before any of it is touched. A dataset's first touch of fresh memory is what reading it costs
// most: 4 KiB page faults took about three quarters of reading the 47 MB Fashion-MNIST training
// images on a 2-core VM, and 2 MiB pages cut that read from 440-517 ms to 111-193 ms
// (docs/data.md).
void reserveLarge(std::vector<std::uint8_t>& bytes, std::size_t size);
// reserveLarge, then resize to `size` (new bytes zero).
void resizeLarge(std::vector<std::uint8_t>& bytes, std::size_t size);

// Big-endian 32-bit unsigned integer at p.
inline std::uint32_t readBigEndian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace xs::data::detail
