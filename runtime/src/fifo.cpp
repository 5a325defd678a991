// fifo.cpp: the ring FIFO's producer and consumer sides.
#include "fifo.hpp"

#include <cstring>

namespace xs::detail {

RingLink::RingLink(Segment& segment, ControlPlane& control)
    : segment_(segment),
      control_(control),
      arena_(segment),
      left_((control.rank() + control.worldSize() - 1) % control.worldSize()),
      right_((control.rank() + 1) % control.worldSize()) {}

void RingLink::send(const void* data, std::size_t bytes, Clock::time_point deadline) {
  FifoControl& f = arena_.fifo(right_);
  const std::uint64_t slots = arena_.ringSlots();
  // Only this rank writes head, so its own last store is the current value.
  const std::uint64_t head = f.head.load(std::memory_order_relaxed);
  // Acquire on tail: the consumer's release of a slot (after it finished reading it) happens
  // before we overwrite that slot; without it we could scribble over data still being read.
  std::uint64_t tail = f.tail.load(std::memory_order_acquire);
  const int need[1] = {right_};
  while (head - tail >= slots) {
    control_.waiter().waitChange(f.tail, tail, f.tailSleepers,
                                 [&] { control_.checkWhileWaiting(deadline, need); });
    tail = f.tail.load(std::memory_order_acquire);
  }
  const std::uint64_t slot = head % slots;
  std::memcpy(arena_.fifoSlot(right_, slot), data, bytes);
  f.slotBytes[slot].store(bytes, std::memory_order_relaxed);
  // Release on head: the slot's bytes and size are visible to the consumer that acquires
  // the new head; without it the consumer could read the slot before our copy lands.
  f.head.store(head + 1, std::memory_order_seq_cst);
  Waiter::wake(&f.head, f.headSleepers);
}

void RingLink::recv(const std::function<void(const std::byte*, std::size_t)>& consume,
                    Clock::time_point deadline) {
  FifoControl& f = arena_.fifo(control_.rank());
  const std::uint64_t slots = arena_.ringSlots();
  const std::uint64_t tail = f.tail.load(std::memory_order_relaxed);  // only we write tail
  // Acquire on head: pairs with the producer's release, so the slot's contents are complete.
  std::uint64_t head = f.head.load(std::memory_order_acquire);
  const int need[1] = {left_};
  while (head == tail) {
    control_.waiter().waitChange(f.head, head, f.headSleepers,
                                 [&] { control_.checkWhileWaiting(deadline, need); });
    head = f.head.load(std::memory_order_acquire);
  }
  const std::uint64_t slot = tail % slots;
  consume(arena_.fifoSlot(control_.rank(), slot), f.slotBytes[slot].load(std::memory_order_relaxed));
  // Release on tail: our reads of the slot are finished before the producer may refill it.
  f.tail.store(tail + 1, std::memory_order_seq_cst);
  Waiter::wake(&f.tail, f.tailSleepers);
}

}  // namespace xs::detail
