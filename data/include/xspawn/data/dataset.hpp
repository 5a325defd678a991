// dataset.hpp: an in-memory image classification dataset: uint8 pixels [N, C, H, W] + int32 labels.
// Readers (IDX, CIFAR-10) and the synthetic generator all produce this; transforms turn one
// image into float32 CHW.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace xs::data {

enum class Split { kTrain, kTest };

const char* splitName(Split split);  // "train" / "test"

struct Dataset {
  std::string name;  // "fashion-mnist", "mnist", "cifar10", "synthetic"
  Split split = Split::kTrain;
  int channels = 0;
  int height = 0;
  int width = 0;
  int numClasses = 0;
  std::vector<std::uint8_t> pixels;  // [N, C, H, W], unless sharedPixels holds them
  std::vector<std::int32_t> labels;  // [N], each in [0, numClasses)
  // The pixels when one copy in the job's shared memory serves every rank of the machine
  // (shareDataset), read-only and valid until xs::shared_reset or the job's end; `pixels` is then
  // empty. Empty otherwise. Not a buffer for the collectives to write into (it is in one rank's
  // region of the shared heap only).
  std::span<const std::uint8_t> sharedPixels;
  // The read-only mapping of the shared memory that sharedPixels views on a rank other than the
  // owner (xs::shared_view), kept as long as a copy of the dataset is; null otherwise.
  std::shared_ptr<const std::byte> sharedView;

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  std::int64_t imageSize() const { return std::int64_t{channels} * height * width; }  // C*H*W
  // [N, C, H, W] wherever they are held (pixels or sharedPixels), and their number.
  const std::uint8_t* pixelData() const { return sharedPixels.empty() ? pixels.data() : sharedPixels.data(); }
  std::size_t pixelCount() const { return sharedPixels.empty() ? pixels.size() : sharedPixels.size(); }
  const std::uint8_t* image(std::int64_t i) const { return pixelData() + i * imageSize(); }
};

// A dataset of the program's own images held in memory: pixels [count, c, h, w] as uint8 and
// labels in [0, numClasses). UsageError (naming the first bad label or the size mismatch) when
// they do not fit together.
Dataset fromMemory(std::string name, Split split, int channels, int height, int width, int numClasses,
                   std::vector<std::uint8_t> pixels, std::vector<std::int32_t> labels);

// `bytes` zero pixel values, to fill before fromMemory (or to shrink; growing it reallocates
// without the advice): their memory on 2 MiB pages where the kernel's transparent huge pages
// allow it (madvise), else as any vector.
// A dataset's first touch of fresh memory is most of what loading it costs: 4 KiB pages made
// reading Fashion-MNIST's 47 MB of training images about 3.5x slower on a 2-core VM.
std::vector<std::uint8_t> pixelBuffer(std::size_t bytes);

// A dataset made by calling `sample(index, pixels)` for index 0..count-1: it writes the image
// (c * h * w uint8 values) and returns its label. Called once per sample, in order, at
// construction (so every rank holds the same data and the loader's threads never call it).
using SampleFn = std::function<std::int32_t(std::int64_t index, std::uint8_t* pixels)>;
Dataset fromFunction(std::string name, Split split, std::int64_t count, int channels, int height, int width,
                     int numClasses, const SampleFn& sample);

// The dataset `load` returns, loaded once for each machine: `load` runs on local rank `owner`
// only, the dataset goes once into the job's shared memory (xs::shared_alloc_common, in the
// owner's region) and every rank of the machine reads it there: sharedPixels views the pixels,
// and the labels, name and shape are copied. Where the shared heap or /dev/shm has no room for
// it, each rank gets a private copy in `pixels` instead: broadcast from the owner on one
// machine, loaded by every rank across machines; the owner says so on stderr in one line. With
// one rank on the machine, or in a process outside any job, `load` runs and its dataset is
// returned as it is. Collective: every rank calls it at the same point with the same owner, and
// every machine loads the same dataset. With 8 ranks it spares 7 copies (7 x 47 MB of
// Fashion-MNIST's training images) and the start-up's first touch of that memory (docs/data.md).
Dataset shareDataset(const std::function<Dataset()>& load, int owner = 0);
// The shared heap shareDataset takes for a dataset of `images` images of `imageBytes` pixel bytes
// each, named with `nameBytes` bytes: its header, then its pixels, labels and name, each block
// 64-byte aligned. Size --shared-heap for it beside the program's own shared_alloc calls.
std::size_t sharedDatasetBytes(std::int64_t images, std::int64_t imageBytes, std::size_t nameBytes);

// One line for logs, e.g. "fashion-mnist train: 60000 images of 1x28x28, 10 classes".
std::string describe(const Dataset& dataset);

// Per-channel mean and standard deviation of the pixels in [0, 1] (for normalisation), e.g.
// about 0.2860 / 0.3530 for the Fashion-MNIST training set.
struct ChannelStats {
  std::vector<float> mean;
  std::vector<float> std;
};
ChannelStats computeChannelStats(const Dataset& dataset);

}  // namespace xs::data
