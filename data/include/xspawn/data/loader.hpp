// loader.hpp: a parallel, prefetching batch loader (the role of PyTorch's DataLoader plus
// PyTorch/XLA's ParallelLoader). Background threads decode, transform and assemble batches of
// this rank's sampler indices ahead of the consumer, at most `prefetch` batches ahead, and call
// an optional transfer hook on the background thread so the batch is on the device before the
// step asks for it (or, with no threads, the consumer builds each batch itself in next()).
// Batches come out in order and their content does not depend on the number of threads; an
// exception raised while building a batch is re-raised by next() for that batch.
#pragma once

#include <any>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "xspawn/data/dataset.hpp"
#include "xspawn/data/sampler.hpp"
#include "xspawn/data/transform.hpp"

namespace xs::data {

// One host batch (float32 NCHW + int32 labels). `device` is free for the transfer hook.
struct Batch {
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch number within the epoch (position / batchSize)
  int size = 0;            // images in this batch (the last one may be short)
  int channels = 0;
  int height = 0;
  int width = 0;
  std::vector<float> images;                // [size, channels, height, width]
  std::vector<std::int32_t> labels;         // [size]
  std::vector<std::int64_t> sampleIndices;  // dataset index of each image
  std::any device;                          // set by the transfer hook, e.g. device tensors
};

// Called on a loader thread (on the consumer's, without threads) once per batch, after assembly.
// Calls are serialised (never two at once) but, with several threads, not necessarily in batch
// order.
using TransferHook = std::function<void(Batch&)>;

// LoaderConfig::numThreads: defaultLoaderThreads(xs::local_world_size(), xs::usableCores(), this
// worker bound to a core) when the loader is made (a process outside a job, or one made before
// xs::init(): one rank, not bound).
inline constexpr int kAutoThreads = -1;

// The loader threads that pay on a worker: 1 where its machine has a core to spare for them
// (fewer local ranks than usable cores), 0 where its ranks take every core or it is bound to one.
// A thread there only shares a rank's core and adds switches: 8 ranks on 2 cores switched 42%
// less and trained 2.7-3.6% faster without one (docs/data.md).
int defaultLoaderThreads(int localRanks, int usableCores, bool boundToACore);

struct LoaderConfig {
  int batchSize = 32;
  // Background threads building batches (>= 1), or 0: next() builds each batch on the calling
  // thread, nothing ahead; or kAutoThreads: defaultLoaderThreads for this worker.
  int numThreads = kAutoThreads;
  int prefetch = 2;    // batches built ahead of the consumer (>= 1): queue bound (threads only)
  bool dropLast = false;  // drop this rank's last short batch
  std::uint64_t seed = 0;  // for random transforms: rng = f(seed, epoch, dataset index)
  TransferHook transfer{};  // optional
};

struct LoaderStats {
  double waitSeconds = 0;   // consumer time blocked in next() waiting for a batch (0 without threads)
  double buildSeconds = 0;  // time building batches (all threads summed; the consumer's without)
  double transferSeconds = 0;  // time in the transfer hook (likewise)
  std::int64_t batches = 0;    // delivered
  std::int64_t samples = 0;    // delivered
};

class ParallelLoader {
 public:
  // `dataset` must outlive the loader. Throws UsageError on bad settings or when the sampler's
  // dataset size differs from the dataset's.
  ParallelLoader(const Dataset& dataset, Transform transform, DistributedSampler sampler,
                 LoaderConfig config);
  ~ParallelLoader();  // stops and joins the threads, even mid-epoch
  ParallelLoader(const ParallelLoader&) = delete;
  ParallelLoader& operator=(const ParallelLoader&) = delete;

  // Starts producing the batches of `epoch`: from position 0, or from the restored position when
  // restore() was called with this epoch. Stops a running epoch first.
  void startEpoch(std::int64_t epoch);
  // The next batch in order, or nullopt at the end of the epoch. Re-raises a build error.
  std::optional<Batch> next();
  // Stops the background threads (pending batches are discarded). Safe to call twice.
  void stop();

  // Optional: hand a consumed batch back so its image buffer is reused for a later batch
  // (saves the allocation and zeroing of large batches, e.g. 32x3x224x224 floats).
  void recycle(Batch&& batch);

  std::int64_t batchesPerEpoch() const;  // for a full epoch from position 0
  SamplerState state() const;  // epoch + samples delivered so far: save it in a checkpoint
  void restore(const SamplerState& state);  // then startEpoch(state.epoch) resumes there
  LoaderStats stats() const;
  void resetStats();
  const Transform& transform() const { return transform_; }
  int threads() const { return threadCount_; }  // the background threads (0: built in next())

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void workerLoop();
  std::optional<Batch> nextInline();
  // Under mutex_: the next batch number to build, with a spare image buffer in slot if any.
  std::int64_t claim(Slot& slot);
  // Builds batch b into slot (and runs the transfer hook), an error kept in slot.error.
  void fill(std::int64_t b, Slot& slot);
  // Under mutex_: the consumer takes slot, the next batch: the position and the counts move on.
  void pass(const Slot& slot);
  void buildBatch(std::int64_t b, Batch& batch) const;
  std::int64_t batchCount(std::int64_t samples) const;

  const Dataset& dataset_;
  const Transform transform_;
  DistributedSampler sampler_;
  const LoaderConfig config_;
  int threadCount_ = 0;  // config_.numThreads, kAutoThreads resolved

  // Epoch plan, fixed while threads run.
  std::int64_t epoch_ = 0;
  std::vector<std::int64_t> order_;  // this rank's indices for the epoch
  std::int64_t startPosition_ = 0;
  std::int64_t numBatches_ = 0;
  std::optional<SamplerState> pendingResume_;

  mutable std::mutex mutex_;
  std::condition_variable workCv_;   // threads wait for room in the prefetch window
  std::condition_variable readyCv_;  // consumer waits for the next batch
  std::mutex transferMutex_;
  std::int64_t nextToBuild_ = 0;
  std::int64_t nextToDeliver_ = 0;
  std::map<std::int64_t, Slot> ready_;
  std::vector<std::vector<float>> spare_;  // recycled image buffers
  std::atomic<bool> stopping_{false};  // set under mutex_, read by builders between samples
  LoaderStats stats_;
  std::vector<std::thread> threads_;
  bool running_ = false;  // between startEpoch and stop
};

}  // namespace xs::data
