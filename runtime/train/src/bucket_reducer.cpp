// bucket_reducer.cpp: the communication thread and the bucket cutting (see bucket_reducer.hpp).
#include "bucket_reducer.hpp"

#include <fmt/format.h>

#include "telemetry.hpp"
#include "xspawn/error.hpp"
#include "xspawn/collectives.hpp"

namespace xs::detail {

BucketReducer::BucketReducer(float* base, std::size_t total, std::size_t gradOffset, std::size_t bucketFloats)
    : base_(base), total_(total), gradOffset_(gradOffset), bucketFloats_(bucketFloats) {
  // The thread inherits the worker's CPU binding: it shares the worker's core and only runs
  // while the compute thread would otherwise wait or between its layers.
  thread_ = std::thread([this] { serve(); });
  begin();
}

BucketReducer::~BucketReducer() {
  // Also reached while an exception from the compute thread unwinds mid-backward: the thread
  // first finishes the buckets already queued, which the other ranks reduce too (every rank
  // queues the same ones), or fails them when the job aborts; so the join cannot wait forever.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void BucketReducer::begin() {
  pending_.clear();
  frontier_ = sent_ = total_;
  buckets_ = 0;
}

void BucketReducer::ready(std::size_t offset, std::size_t count) {
  const std::size_t first = gradOffset_ + offset, last = first + count;
  XS_CHECK(last <= total_ && count > 0, UsageError,
                 fmt::format("gradient range [{}, {}) reported by backward lies outside the {} gradients",
                             offset, offset + count, total_ - gradOffset_));
  pending_[last] = first;
  // Join finished ranges to the suffix [frontier_, total_) while they touch it.
  for (auto it = pending_.find(frontier_); it != pending_.end(); it = pending_.find(frontier_)) {
    frontier_ = it->second;
    pending_.erase(it);
  }
  if (sent_ - frontier_ >= bucketFloats_) {
    std::lock_guard<std::mutex> lock(mutex_);
    send({frontier_, sent_});
    sent_ = frontier_;
  }
}

void BucketReducer::send(Range r) {
  queue_.push_back(r);
  ++inFlight_;
  ++buckets_;
  work_.notify_one();
}

void BucketReducer::finish() {
  XS_CHECK(frontier_ == gradOffset_ && pending_.empty(), UsageError,
                 fmt::format("backward reported gradients up to float {} of {} only; the bucketed all-reduce "
                             "needs every layer's range (run with --bucket-mb 0)",
                             frontier_ - gradOffset_, total_ - gradOffset_));
  std::unique_lock<std::mutex> lock(mutex_);
  send({0, sent_});  // the statistics at the front and the first layers' gradients
  // Waiting here on the condition variable orders the thread's reductions (written to the
  // buffer before it decrements inFlight_ under the mutex) before the optimizer reads them.
  done_.wait(lock, [this] { return inFlight_ == 0; });
  bucketsLastStep_ = buckets_;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void BucketReducer::serve() {
  telemetry::nameThread("bucket thread");  // its all-reduces get a track of their own
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    const Range r = queue_.front();
    queue_.pop_front();
    const bool failed = error_ != nullptr;
    lock.unlock();
    // The compute thread never touches [r.first, r.last) again this step (backward wrote it
    // before ready() queued it under the mutex), so the buffer is this thread's until done_.
    std::exception_ptr error;
    if (!failed) {
      try {
        xs::CollectiveOptions opt;
        opt.tag = "gradients";
        xs::all_reduce(base_ + r.first, base_ + r.first, r.last - r.first, xs::DType::kFloat32,
                       xs::ReduceOp::kMean, opt);
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--inFlight_ == 0) done_.notify_one();
  }
}

}  // namespace xs::detail
