// loader.cpp: ParallelLoader. Threads claim batch numbers in order (at most `prefetch` ahead of
// the consumer), build them independently, and park them in a map the consumer drains in order;
// without threads, next() builds each batch itself.
#include "xspawn/data/loader.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "telemetry.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::data {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int defaultLoaderThreads(int localRanks, int usableCores, bool boundToACore) {
  return boundToACore || localRanks >= usableCores ? 0 : 1;
}

ParallelLoader::ParallelLoader(const Dataset& dataset, Transform transform,
                               DistributedSampler sampler, LoaderConfig config)
    : dataset_(dataset),
      transform_(std::move(transform)),
      sampler_(std::move(sampler)),
      config_(std::move(config)) {
  if (config_.batchSize < 1 || (config_.numThreads < 0 && config_.numThreads != kAutoThreads) ||
      config_.prefetch < 1) {
    XS_THROW(UsageError, "loader: batch size (" + std::to_string(config_.batchSize) + ") and prefetch (" +
                             std::to_string(config_.prefetch) + ") must be >= 1 and threads (" +
                             std::to_string(config_.numThreads) +
                             ") >= 0 (0: built in next()) or kAutoThreads");
  }
  const bool inJob = xs::initialized();  // else a process of its own: one rank, not bound
  threadCount_ = config_.numThreads != kAutoThreads
                     ? config_.numThreads
                     : defaultLoaderThreads(inJob ? xs::local_world_size() : 1, xs::usableCores(),
                                            inJob && xs::device().cpu >= 0);
  if (sampler_.config().datasetSize != dataset_.size()) {
    XS_THROW(UsageError, "loader: the sampler covers " +
                                   std::to_string(sampler_.config().datasetSize) +
                                   " samples but dataset '" + dataset_.name + "' holds " +
                                   std::to_string(dataset_.size()));
  }
  if (transform_.inChannels() != dataset_.channels || transform_.inHeight() != dataset_.height ||
      transform_.inWidth() != dataset_.width) {
    XS_THROW(UsageError, "loader: the transform expects " +
                                   std::to_string(transform_.inChannels()) + "x" +
                                   std::to_string(transform_.inHeight()) + "x" +
                                   std::to_string(transform_.inWidth()) + " images but dataset '" +
                                   dataset_.name + "' has " + std::to_string(dataset_.channels) +
                                   "x" + std::to_string(dataset_.height) + "x" +
                                   std::to_string(dataset_.width));
  }
}

ParallelLoader::~ParallelLoader() { stop(); }

std::int64_t ParallelLoader::batchCount(std::int64_t samples) const {
  const std::int64_t b = config_.batchSize;
  return config_.dropLast ? samples / b : (samples + b - 1) / b;
}

std::int64_t ParallelLoader::batchesPerEpoch() const { return batchCount(sampler_.numSamples()); }

void ParallelLoader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  workCv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  ready_.clear();
  running_ = false;
}

void ParallelLoader::restore(const SamplerState& state) {
  stop();
  sampler_.restore(state);
  pendingResume_ = state;
}

void ParallelLoader::startEpoch(std::int64_t epoch) {
  stop();
  if (pendingResume_ && pendingResume_->epoch == epoch) {
    sampler_.restore(*pendingResume_);
  } else {
    sampler_.setEpoch(epoch);
  }
  pendingResume_.reset();
  epoch_ = sampler_.epoch();
  order_ = sampler_.indices();
  startPosition_ = sampler_.position();
  numBatches_ = batchCount(sampler_.numSamples() - startPosition_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    nextToBuild_ = 0;
    nextToDeliver_ = 0;
    stopping_ = false;
    running_ = true;
  }
  try {
    for (int i = 0; i < threadCount_; ++i) threads_.emplace_back([this] { workerLoop(); });
  } catch (...) {
    stop();  // the threads that started, joined; next() then says the epoch is not running
    throw;
  }
}

void ParallelLoader::workerLoop() {
  for (;;) {
    std::int64_t b = 0;
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      workCv_.wait(lock, [this] {
        return stopping_ || nextToBuild_ >= numBatches_ ||
               nextToBuild_ < nextToDeliver_ + config_.prefetch;
      });
      if (stopping_ || nextToBuild_ >= numBatches_) return;
      b = claim(slot);
    }
    fill(b, slot);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(b, std::move(slot));
    }
    readyCv_.notify_all();
  }
}

std::int64_t ParallelLoader::claim(Slot& slot) {
  if (!spare_.empty()) {
    slot.batch.images = std::move(spare_.back());
    spare_.pop_back();
  }
  return nextToBuild_++;
}

void ParallelLoader::fill(std::int64_t b, Slot& slot) {
  double buildSeconds = 0;
  double transferSeconds = 0;
  try {
    const auto t0 = Clock::now();
    buildBatch(b, slot.batch);
    buildSeconds = secondsSince(t0);
    if (config_.transfer && !stopping_) {
      std::lock_guard<std::mutex> transferLock(transferMutex_);
      const auto t1 = Clock::now();
      config_.transfer(slot.batch);
      transferSeconds = secondsSince(t1);
    }
  } catch (...) {
    slot.error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.buildSeconds += buildSeconds;
  stats_.transferSeconds += transferSeconds;
}

void ParallelLoader::pass(const Slot& slot) {
  ++nextToDeliver_;
  // The position moves past this batch even when it failed, so that state() stays aligned.
  sampler_.restore({epoch_, std::min(sampler_.numSamples(), startPosition_ + nextToDeliver_ * config_.batchSize)});
  if (!slot.error) {
    stats_.batches += 1;
    stats_.samples += slot.batch.size;
  }
}

void ParallelLoader::buildBatch(std::int64_t b, Batch& batch) const {
  const std::int64_t first = startPosition_ + b * config_.batchSize;
  const std::int64_t count =
      std::min<std::int64_t>(config_.batchSize, static_cast<std::int64_t>(order_.size()) - first);
  batch.epoch = epoch_;
  batch.index = first / config_.batchSize;
  batch.size = static_cast<int>(count);
  batch.channels = transform_.outChannels();
  batch.height = transform_.outHeight();
  batch.width = transform_.outWidth();
  const std::size_t image = transform_.outSize();
  batch.images.resize(static_cast<std::size_t>(count) * image);
  batch.labels.resize(static_cast<std::size_t>(count));
  batch.sampleIndices.resize(static_cast<std::size_t>(count));
  for (std::int64_t k = 0; k < count && !stopping_; ++k) {
    const std::int64_t idx = order_[static_cast<std::size_t>(first + k)];
    SampleRng rng(config_.seed, static_cast<std::uint64_t>(batch.epoch), static_cast<std::uint64_t>(idx));
    transform_.apply(dataset_.image(idx), batch.images.data() + static_cast<std::size_t>(k) * image, rng);
    batch.labels[static_cast<std::size_t>(k)] = dataset_.labels[static_cast<std::size_t>(idx)];
    batch.sampleIndices[static_cast<std::size_t>(k)] = idx;
  }
}

std::optional<Batch> ParallelLoader::nextInline() {
  Slot slot;
  std::int64_t b = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_ || nextToDeliver_ >= numBatches_) return std::nullopt;
    b = claim(slot);
  }
  {
    xs::detail::telemetry::Span span(xs::detail::Category::kData, "data");  // the rank builds it
    fill(b, slot);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pass(slot);
  }
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

std::optional<Batch> ParallelLoader::next() {
  if (threadCount_ == 0) return nextInline();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!running_ || nextToDeliver_ >= numBatches_) return std::nullopt;
  const auto t0 = Clock::now();
  {
    xs::detail::telemetry::Span span(xs::detail::Category::kData, "data");  // waiting for the batch
    readyCv_.wait(lock, [this] { return ready_.count(nextToDeliver_) != 0; });
  }
  stats_.waitSeconds += secondsSince(t0);
  Slot slot = std::move(ready_.at(nextToDeliver_));
  ready_.erase(nextToDeliver_);
  pass(slot);
  lock.unlock();
  workCv_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

void ParallelLoader::recycle(Batch&& batch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (spare_.size() < static_cast<std::size_t>(config_.prefetch + threadCount_)) {
    spare_.push_back(std::move(batch.images));
  }
}

SamplerState ParallelLoader::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sampler_.state();
}

LoaderStats ParallelLoader::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ParallelLoader::resetStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
}

}  // namespace xs::data
