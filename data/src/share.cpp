// share.cpp: one copy of a dataset for every rank of a machine (shareDataset): its header, labels,
// name and pixels in the job's shared memory, in the region of the rank that loaded them, on
// each machine; without room, a private copy on every rank.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "xspawn/collectives.hpp"
#include "xspawn/data/dataset.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::data {
namespace {

// What the owner tells every rank before the data: the dataset's shape and whether it holds
// together (every rank then throws the same error, instead of the others waiting).
enum Field { kImages, kChannels, kHeight, kWidth, kClasses, kPixels, kSplit, kNameBytes, kConsistent, kFields };
using Header = std::array<std::int64_t, kFields>;

Header headerOf(const Dataset& d) {
  Header f{};
  f[kImages] = d.size();
  f[kChannels] = d.channels;
  f[kHeight] = d.height;
  f[kWidth] = d.width;
  f[kClasses] = d.numClasses;
  f[kPixels] = static_cast<std::int64_t>(d.pixelCount());
  f[kSplit] = d.split == Split::kTrain ? 0 : 1;
  f[kNameBytes] = static_cast<std::int64_t>(d.name.size());
  f[kConsistent] = d.pixelCount() == static_cast<std::size_t>(d.size() * d.imageSize()) ? 1 : 0;
  return f;
}

// Every rank throws the same error where the owner's dataset does not hold together.
void checkConsistent(const Header& f, int owner) {
  XS_CHECK(f[kConsistent] == 1, UsageError,
           fmt::format("shareDataset: the dataset of local rank {} holds {} pixel values for {} images of {}x{}x{}: "
                       "give it count * channels * height * width pixels",
                       owner, f[kPixels], f[kImages], f[kChannels], f[kHeight], f[kWidth]));
}

// The header's shape and split into `d`, its labels sized to be filled.
void takeHeader(Dataset& d, const Header& f) {
  d.split = f[kSplit] == 0 ? Split::kTrain : Split::kTest;
  d.channels = static_cast<int>(f[kChannels]);
  d.height = static_cast<int>(f[kHeight]);
  d.width = static_cast<int>(f[kWidth]);
  d.numClasses = static_cast<int>(f[kClasses]);
  d.labels.resize(static_cast<std::size_t>(f[kImages]));
}

// `bytes` of `data` from the owner to every rank, as 32-bit words (the last one padded).
void broadcastBytes(std::vector<std::uint8_t>& data, std::size_t bytes, int owner, const CollectiveOptions& opt) {
  data.resize((bytes + 3) / 4 * 4);
  xs::broadcast(data.data(), data.size() / 4, DType::kInt32, owner, opt);
  data.resize(bytes);
}

// Everything but the pixels from the owner's `d` into every rank's; returns the header.
Header broadcastHeader(Dataset& d, bool mine, int owner, const CollectiveOptions& opt) {
  Header f = mine ? headerOf(d) : Header{};
  xs::broadcast(std::span<std::int64_t>(f), owner, opt);
  std::vector<std::uint8_t> name(d.name.begin(), d.name.end());
  broadcastBytes(name, static_cast<std::size_t>(f[kNameBytes]), owner, opt);
  d.name.assign(name.begin(), name.end());
  checkConsistent(f, owner);
  takeHeader(d, f);
  xs::broadcast(std::span<std::int32_t>(d.labels), owner, opt);
  return f;
}

// Without room in shared memory: on one machine, the owner's dataset broadcast into a private
// copy on every rank; across machines, every rank loads its own (a broadcast would cross them).
Dataset privateCopies(const std::function<Dataset()>& load, Dataset d, bool mine, int owner) {
  if (mine && d.pixelCount() > 0)
    std::fprintf(stderr,
                 "xspawn: shareDataset: no room in shared memory for the %zu bytes of pixels of '%s' (%s): every "
                 "rank keeps a copy; raise the shared heap (--shared-heap) or /dev/shm to keep one\n",
                 d.pixelCount(), d.name.c_str(), splitName(d.split));
  if (xs::world_size() != xs::local_world_size()) return mine ? d : load();
  CollectiveOptions opt;
  opt.tag = "shareDataset";
  const Header f = broadcastHeader(d, mine, owner, opt);
  const auto bytes = static_cast<std::size_t>(f[kPixels]);
  if (mine && !d.sharedPixels.empty()) d.pixels.assign(d.sharedPixels.begin(), d.sharedPixels.end());
  d.sharedPixels = {};
  if (!mine) d.pixels = pixelBuffer((bytes + 3) / 4 * 4);
  broadcastBytes(d.pixels, bytes, owner, opt);
  return d;
}

// After the header, one buffer of pixels (first: 64-byte aligned), labels and name.
std::size_t bodyBytes(std::int64_t images, std::int64_t pixels, std::int64_t nameBytes) {
  return static_cast<std::size_t>(pixels) + static_cast<std::size_t>(images) * sizeof(std::int32_t) +
         static_cast<std::size_t>(nameBytes);
}
std::size_t bodyBytes(const Header& f) { return bodyBytes(f[kImages], f[kPixels], f[kNameBytes]); }

void writeBody(std::uint8_t* to, const Dataset& d) {
  const std::size_t pixels = d.pixelCount(), labels = d.labels.size() * sizeof(std::int32_t);
  if (pixels > 0) std::memcpy(to, d.pixelData(), pixels);
  if (labels > 0) std::memcpy(to + pixels, d.labels.data(), labels);
  if (!d.name.empty()) std::memcpy(to + pixels + labels, d.name.data(), d.name.size());
}

// Reads one byte of every page of [from, from + bytes), in address order: this rank's page tables
// then map the whole shared copy before the loader reads its images in random order. Measured on
// the AMD EPYC virtual machine of docs/benchmarks.md (8 ranks on 2 cores, Fashion-MNIST): a rank
// that met the pages in the loader's random order spent 12.6 us an image building its batches
// over the first epoch and 6.3 over the second, where the owner (which wrote every page) spent
// 1.8; after this pass every rank spends about 2.1. The pass itself costs what the faults did
// (85-113 ms for the 47 MB of Fashion-MNIST's training set there, about 7.5 us a page), but
// once, before training, instead of in every epoch that still meets pages for the first time,
// and in order, which costs about half as much a page: training images/s 1.063x at 8 ranks and
// 1.022x at 2 (medians of 8 and 6 runs alternated), the whole job's wall time 1.02x and 1.01x.
// madvise's MADV_POPULATE_READ, which maps the pages without reading them, left the per-image
// cost where it was. Through a read-only mapping (readBody) the pass takes 31-40 ms there.
void mapByReading(const std::uint8_t* from, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const volatile std::uint8_t* p = from;
  std::uint8_t sink = 0;
  for (std::size_t at = 0; at < bytes; at += page) sink ^= p[at];
  if (bytes > 0) sink ^= p[bytes - 1];
  static_cast<void>(sink);
}

// Every rank's dataset from the header and body the owner wrote (the owner keeps its fields).
void readBody(Dataset& d, const Header& f, const std::uint8_t* from, bool mine) {
  const auto pixels = static_cast<std::size_t>(f[kPixels]);
  const std::size_t labels = static_cast<std::size_t>(f[kImages]) * sizeof(std::int32_t);
  if (!mine) {
    takeHeader(d, f);
    if (labels > 0) std::memcpy(d.labels.data(), from + pixels, labels);
    d.name.assign(reinterpret_cast<const char*>(from + pixels + labels), static_cast<std::size_t>(f[kNameBytes]));
    // Read through a read-only mapping of the same pages where the system gives one: the pass
    // below costs a third as much through it (docs/collectives.md, "A read-only view").
    d.sharedView = xs::shared_view(from, pixels);
    if (d.sharedView) from = reinterpret_cast<const std::uint8_t*>(d.sharedView.get());
    mapByReading(from, pixels);  // the owner's own writes mapped them for it
  }
  d.pixels = std::vector<std::uint8_t>();  // the owner's memory back: the shared copy serves it too
  d.sharedPixels = std::span<const std::uint8_t>(from, pixels);
}

}  // namespace

std::size_t sharedDatasetBytes(std::int64_t images, std::int64_t imageBytes, std::size_t nameBytes) {
  // shared_alloc_common carves each block from the top, 64-byte aligned.
  const auto block = [](std::size_t bytes) { return (bytes + 63) / 64 * 64; };
  return block(sizeof(Header)) +
         block(bodyBytes(images, images * imageBytes, static_cast<std::int64_t>(nameBytes)));
}

Dataset shareDataset(const std::function<Dataset()>& load, int owner) {
  XS_CHECK(static_cast<bool>(load), UsageError, "shareDataset: give a function that loads the dataset");
  // A process of its own, or one rank on this machine: nothing to share.
  if (!xs::initialized() || xs::local_world_size() == 1) return load();
  XS_CHECK(owner >= 0 && owner < xs::local_world_size(), UsageError,
           fmt::format("shareDataset: owner {} is not a rank of this machine (0-{})", owner,
                       xs::local_world_size() - 1));
  const bool mine = xs::get_local_ordinal() == owner;
  // The header first (every rank learns the body's size from it), then the body. On each
  // machine its local rank `owner` loads and writes them; every rank reads them after a barrier.
  auto* header = static_cast<Header*>(xs::shared_alloc_common(sizeof(Header), owner));
  Dataset d;
  if (mine) d = load();
  if (!header) return privateCopies(load, std::move(d), mine, owner);
  if (mine) *header = headerOf(d);
  xs::barrier("shareDataset: header written");
  const Header f = *header;
  checkConsistent(f, owner);
  auto* body = static_cast<std::uint8_t*>(xs::shared_alloc_common(bodyBytes(f), owner));
  if (!body) return privateCopies(load, std::move(d), mine, owner);
  if (mine) writeBody(body, d);
  xs::barrier("shareDataset: body written");
  readBody(d, f, body, mine);
  return d;
}

}  // namespace xs::data
