// arena.hpp: typed views of the collectives' arena inside the job segment: each rank's two
// staging buffers, each rank's inbound ring FIFO, each rank's region of the shared heap.
#pragma once

#include <cstddef>

#include "segment.hpp"

namespace xs::detail {

class Arena {
 public:
  explicit Arena(const Segment& segment) : segment_(segment), h_(segment.header()) {}

  std::size_t stageBytes() const { return h_.stageBytes; }
  // Rank r's staging buffer of the given parity.
  std::byte* stage(int rank, int parity) const {
    return base() + h_.stageOffset + rank * stride(2 * h_.stageBytes) + parity * h_.stageBytes;
  }
  // The FIFO that carries data into rank r (from rank r-1).
  FifoControl& fifo(int rank) const {
    return *reinterpret_cast<FifoControl*>(base() + h_.fifoOffset + rank * fifoStride());
  }
  std::byte* fifoSlot(int rank, std::uint64_t slot) const {
    return reinterpret_cast<std::byte*>(&fifo(rank)) + sizeof(FifoControl) + slot * h_.ringSlotBytes;
  }
  std::size_t ringSlots() const { return h_.ringSlots; }
  std::size_t ringSlotBytes() const { return h_.ringSlotBytes; }
  std::byte* heap(int rank) const { return base() + h_.heapOffset + rank * stride(h_.heapBytes); }
  std::size_t heapBytes() const { return h_.heapBytes; }

 private:
  std::byte* base() const { return segment_.arena(); }
  static std::size_t stride(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
  std::size_t fifoStride() const { return stride(sizeof(FifoControl) + h_.ringSlots * h_.ringSlotBytes); }

  const Segment& segment_;
  const SegmentHeader& h_;
};

}  // namespace xs::detail
