// device_internals.hpp: what the engine's kernels keep in a Device beyond its public face
// (internal header): numbered scratch buffers and per-device kernel state (cached oneDNN
// primitives and their staging buffers), all in the device's arena.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "xspawn/engine/device.hpp"

namespace xs::engine::detail {

// State a kernel keeps per device; released before the arena when the device goes away.
struct KernelState {
  virtual ~KernelState() = default;
};

inline constexpr int kScratchSlots = 9;
// The slot no kernel but the pool fused into a narrow convolution uses: its gradient's bits live
// from the spread through both backward passes, which use slots 1 to 6 meanwhile.
inline constexpr int kFusedPoolGradSlot = 8;
inline constexpr int kKernelSlots = 2;

struct DeviceInternals {
  std::vector<std::pair<float*, std::size_t>> scratch = std::vector<std::pair<float*, std::size_t>>(kScratchSlots);
  std::unique_ptr<KernelState> kernelStates[kKernelSlots];

  static DeviceInternals& of(Device& dev) { return *dev.internals_; }
};

// Scratch buffer number slot (0..kScratchSlots-1) of at least floats floats, 64-byte aligned
// (an arena allocation); reused by kernels (im2col columns, bf16 copies). Valid until the next
// call with the same slot.
float* scratch(Device& dev, int slot, std::size_t floats);

inline KernelState* kernelState(Device& dev, int slot) { return DeviceInternals::of(dev).kernelStates[slot].get(); }
inline void setKernelState(Device& dev, int slot, std::unique_ptr<KernelState> s) {
  DeviceInternals::of(dev).kernelStates[slot] = std::move(s);
}

}  // namespace xs::engine::detail
