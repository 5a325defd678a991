// bucket_reducer.hpp: gradients all-reduced in buckets while backward still runs, as
// DistributedDataParallel's buckets and Horovod's fusion buffer do. backward() reports each
// layer's finished gradient range (Model::setGradReadyHook); once the finished suffix of the flat
// buffer not yet sent reaches the bucket size, a communication thread all-reduces it in place
// while the compute thread goes on with the earlier layers. finish() sends the rest (the front
// of the buffer, where the step's statistics live) and waits for every bucket.
//
// Every rank runs the same network, so every rank cuts the same buckets in the same order: the
// sequence of collectives is identical on all ranks, as the runtime requires.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace xs::detail {

class BucketReducer {
 public:
  // base: `total` floats in the shared heap; the gradients are [gradOffset, total). Buckets of at
  // least `bucketFloats` (> 0) floats.
  BucketReducer(float* base, std::size_t total, std::size_t gradOffset, std::size_t bucketFloats);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // Before the step's backward: nothing is finished yet.
  void begin();
  // From backward (the compute thread): [offset, offset + count) of the gradients is final.
  void ready(std::size_t offset, std::size_t count);
  // After backward: all-reduces what is left, [0, last bucket), and waits for every bucket.
  // Rethrows the first collective error of the step.
  void finish();

  int bucketsLastStep() const { return bucketsLastStep_; }

 private:
  struct Range {
    std::size_t first, last;
  };
  void send(Range r);  // caller holds mutex_
  void serve();        // the communication thread

  float* base_;
  std::size_t total_, gradOffset_, bucketFloats_;
  // Compute-thread state: finished ranges not yet joined to the suffix (keyed by their end),
  // the start of the finished suffix, and the start of what was already sent.
  std::map<std::size_t, std::size_t> pending_;
  std::size_t frontier_ = 0, sent_ = 0;
  int buckets_ = 0, bucketsLastStep_ = 0;

  // Shared with the communication thread, under mutex_.
  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<Range> queue_;
  int inFlight_ = 0;  // queued or being reduced
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace xs::detail
