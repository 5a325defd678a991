// options.hpp: the options of `xspawn train`, their parsing and their per-model defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xs::train {

struct TrainOptions {
  // What to train.
  std::string model = "convnet";
  std::string dataset;      // fashion-mnist | mnist | cifar10 | synthetic
  std::string dataDir;      // empty: the dataset's system directory
  std::string datasetNotice;  // set when the default fell back to synthetic
  int imageSize = 0;        // side of the square images the model sees
  std::int64_t trainSize = 0;  // first N training images only (0: all)
  std::int64_t testSize = 0;   // first N test images only (0: all)
  bool augment = false;     // random crop (padding 4) and horizontal flip
  // How.
  int epochs = 0;
  int batchSize = 0;        // per worker
  std::string optimizer;    // sgd | adam
  double lr = 0;
  double momentum = 0;
  double weightDecay = 0;
  double beta1 = 0.9, beta2 = 0.999;  // Adam's
  double labelSmoothing = 0;          // of the cross-entropy loss, in [0, 1]
  std::string lrSchedule = "step";  // step (StepLR by epoch) | onecycle (OneCycleLR by step, --lr its peak)
  int lrStep = 0;           // epochs between decays (0: constant learning rate)
  double lrDecay = 0.1;
  std::uint64_t seed = 1234;
  std::string precision = "fp32";
  int evalEvery = 1;        // epochs between evaluations (0: only at the end)
  std::int64_t maxSteps = 0;  // stop after this many steps in total (0: no limit)
  std::int64_t logEvery = 0;  // steps between progress lines in a log and the metrics (0: none)
  double stopAtAccuracy = 0;  // percent: stop at the first evaluation reaching it (0: never)
  // Where.
  std::string checkpointDir;
  std::int64_t checkpointEvery = 0;  // steps between checkpoints (0: at the end of every epoch only)
  std::string resume;       // a checkpoint directory (or its latest.json)
  std::string metrics;      // JSON lines file
  std::string deviceMemory = "4G";
  int prefetch = 2;
  int loaderThreads = -1;   // -1 (xs::data::kAutoThreads): the loader's own choice, defaultLoaderThreads
  double bucketMb = 0;      // gradient buckets all-reduced during backward (0: one after it)
  bool moduleTimes = false; // --module-times: rank 0 prints each module's own time a step at the end
  bool moduleCpuClock = false;  // --module-clock cpu: ... in its thread's CPU time
  bool plan = false;        // --plan: validate and print the shared-heap plan
  bool help = false;
};

// Parses argv (without the program name). Throws UsageError on a bad option; fills defaults
// that do not need the file system. resolveDefaults() completes them.
TrainOptions parseOptions(const std::vector<std::string>& args);

// Fills the defaults that depend on the model and the dataset (choosing the default dataset
// looks at the file system) and validates the combination. Throws UsageError.
void resolveDefaults(TrainOptions& o);

// The usage text of --help.
std::string usage();

// One line describing the effective settings, e.g. for the console and the metrics file.
std::string describe(const TrainOptions& o);

}  // namespace xs::train
