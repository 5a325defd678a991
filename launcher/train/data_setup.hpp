// data_setup.hpp: from the options to datasets and transforms: the worker's loading, and the
// plan's cheap checks of the dataset files (headers and sizes, without reading the images).
#pragma once

#include "options.hpp"
#include "xspawn/data/catalog.hpp"
#include "xspawn/data/dataset.hpp"
#include "xspawn/data/transform.hpp"

namespace xs::train {

// Channels of the dataset's images: 3 for cifar10, 1 otherwise.
int datasetChannels(const TrainOptions& o);
// Channels the model sees: alexnet and resnet18 take RGB (grey images are repeated).
int modelChannels(const TrainOptions& o);

data::DatasetSpec datasetSpec(const TrainOptions& o);

// Train transform (resize, RGB, augmentation, normalisation) and test transform (the same
// without the random parts), for images of `channels` x `size` x `size`.
data::TransformConfig trainTransform(const TrainOptions& o, const data::Dataset& train);
data::TransformConfig testTransform(const TrainOptions& o, const data::Dataset& train);

// Loads a split, cut to --train-size / --test-size.
data::Dataset loadSplit(const TrainOptions& o, data::Split split);
// The same, collectively (every rank calls it): on each machine one rank reads the split (local
// rank 0 the training set, local rank 1 the test set) and the machine keeps one copy of it in
// shared memory (data::shareDataset). If the reader fails, its error is the job's (the others
// wait in a barrier until the job stops).
data::Dataset loadSplitShared(const TrainOptions& o, data::Split split);

// The shared heap each split a run uses takes (data::sharedDatasetBytes, after --train-size and
// --test-size).
struct SplitBytes {
  std::uint64_t train = 0, test = 0;
};
// Checks that the dataset's files exist and that their headers and sizes are consistent,
// reading a few bytes of each (the gzip trailer gives a .gz file's decompressed size), and
// returns the shared heap its splits take (synthetic: from its counts). Throws the data
// pipeline's errors (FileNotFoundError, FormatError, ...).
SplitBytes checkDatasetFiles(const TrainOptions& o);

}  // namespace xs::train
