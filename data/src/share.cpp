// share.cpp: one copy of a dataset for every rank of a machine (shareDataset): its pixels in the
// job's shared memory, owned by the rank that loaded them; its shape, name and labels broadcast.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

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
  XS_CHECK(f[kConsistent] == 1, UsageError,
           fmt::format("shareDataset: dataset '{}' of rank {} holds {} pixel values for {} images of {}x{}x{}: give it "
                       "count * channels * height * width pixels",
                       d.name, owner, f[kPixels], f[kImages], f[kChannels], f[kHeight], f[kWidth]));
  d.split = f[kSplit] == 0 ? Split::kTrain : Split::kTest;
  d.channels = static_cast<int>(f[kChannels]);
  d.height = static_cast<int>(f[kHeight]);
  d.width = static_cast<int>(f[kWidth]);
  d.numClasses = static_cast<int>(f[kClasses]);
  d.labels.resize(static_cast<std::size_t>(f[kImages]));
  xs::broadcast(std::span<std::int32_t>(d.labels), owner, opt);
  return f;
}

// The owner's pixels into one buffer for every rank, or, with no room for it, a copy each.
void sharePixels(Dataset& d, std::size_t bytes, bool mine, int owner, const CollectiveOptions& opt) {
  void* common = xs::shared_alloc_common(bytes, owner);
  if (!common) {
    if (mine && bytes > 0)
      std::fprintf(stderr,
                   "xspawn: shareDataset: no room in shared memory for the %zu bytes of pixels of '%s' (%s): every "
                   "rank keeps a copy; raise the shared heap (--shared-heap) or /dev/shm to keep one\n",
                   bytes, d.name.c_str(), splitName(d.split));
    if (mine && !d.sharedPixels.empty()) d.pixels.assign(d.sharedPixels.begin(), d.sharedPixels.end());
    d.sharedPixels = {};
    if (!mine) d.pixels = pixelBuffer((bytes + 3) / 4 * 4);
    return broadcastBytes(d.pixels, bytes, owner, opt);
  }
  if (mine) {
    std::memcpy(common, d.pixelData(), bytes);
    d.pixels = std::vector<std::uint8_t>();  // its memory back: the shared copy serves this rank too
  }
  xs::barrier("shareDataset: pixels written");  // the owner's copy before anyone reads it
  d.sharedPixels = std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(common), bytes);
}

}  // namespace

Dataset shareDataset(const std::function<Dataset()>& load, int owner) {
  XS_CHECK(static_cast<bool>(load), UsageError, "shareDataset: give a function that loads the dataset");
  // A process of its own, one rank, or ranks on other machines (which do not share this memory).
  if (!xs::initialized() || xs::world_size() == 1 || xs::local_world_size() != xs::world_size()) return load();
  XS_CHECK(owner >= 0 && owner < xs::world_size(), UsageError,
           fmt::format("shareDataset: owner {} is not a rank of this job (0-{})", owner, xs::world_size() - 1));
  const bool mine = xs::get_ordinal() == owner;
  Dataset d;
  if (mine) d = load();
  CollectiveOptions opt;
  opt.tag = "shareDataset";
  const Header f = broadcastHeader(d, mine, owner, opt);
  sharePixels(d, static_cast<std::size_t>(f[kPixels]), mine, owner, opt);
  return d;
}

}  // namespace xs::data
