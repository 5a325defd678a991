// device.hpp: xs::engine::Device, one emulated accelerator core: its memory arena (capacity,
// peak use, clear out-of-memory errors), its CPU binding, its precision and its scratch space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

namespace xs::engine {

namespace detail {
struct DeviceInternals;
}

// How the matrix unit multiplies: fp32, or bf16 products with fp32 accumulation (a TPU's MXU).
enum class Precision { kFp32, kBf16 };

// "fp32" / "bf16"; parsePrecision throws UsageError on anything else.
const char* precisionName(Precision p);
Precision parsePrecision(const std::string& name);

// Settings of one emulated core (the trainer fills them from --device-memory, --precision).
struct DeviceOptions {
  int ordinal = 0;                          // the core's number: the device is named xcore:<ordinal>
  std::size_t memoryBytes = std::size_t{4} << 30;  // arena capacity (virtual until touched)
  Precision precision = Precision::kFp32;
  bool bindCpu = false;                     // pin the calling thread to one CPU core
  int cpu = -1;                             // that core; -1 means ordinal modulo the CPUs we may use
  // Ask the kernel for 2 MiB pages for the arena (madvise MADV_HUGEPAGE, the kernel's transparent
  // huge pages in their default 'madvise' mode): fewer TLB misses, 1-3% a step as measured
  // (docs/engine.md). $XS_ENGINE_HUGE_PAGES=0 or 1 overrides it for the process.
  bool hugePages = true;
};

// Parses a memory size such as "512M", "4G", "1073741824" into bytes; throws UsageError.
std::size_t parseMemorySize(const std::string& text);

// One emulated core. Not copyable; its tensors, models and optimizers must not outlive it.
class Device {
 public:
  // Reserves the arena (virtual memory, touched as used) and binds the thread when asked;
  // UsageError on bad options.
  explicit Device(const DeviceOptions& options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // "xcore:<ordinal>", and what the options say.
  const std::string& name() const { return name_; }
  int ordinal() const { return options_.ordinal; }
  Precision precision() const { return options_.precision; }
  const DeviceOptions& options() const { return options_; }
  int cpu() const { return cpu_; }  // the bound CPU, -1 when not bound
  // Whether the arena is advised for huge pages (hugePages, or the environment, and a kernel with
  // transparent huge pages); the kernel still grants them only where it has free 2 MiB pages.
  bool hugePages() const { return hugePages_; }

  // Arena allocation, 64-byte aligned; what names the buffer in out-of-memory errors
  // (OutOfMemoryError, with the arena's use and how to fix it). release(p) gives it back.
  float* allocate(std::size_t floats, const char* what);
  void release(float* p);
  // The arena's size, the bytes allocated now, the most ever allocated at once (since
  // resetPeak(), which starts the count again from now, as torch.cuda.reset_peak_memory_stats).
  std::size_t capacity() const { return options_.memoryBytes; }
  std::size_t inUse() const { return inUse_; }
  std::size_t peak() const { return peak_; }
  void resetPeak() { peak_ = inUse_; }

  // Host <-> device copies: the only way data enters or leaves the device.
  void copyToDevice(float* dst, const float* src, std::size_t floats);
  void copyToHost(float* dst, const float* src, std::size_t floats) const;
  // The bytes copyToDevice moved so far (what a step's input costs).
  std::uint64_t bytesToDevice() const { return bytesIn_; }

 private:
  DeviceOptions options_;
  std::string name_;
  int cpu_ = -1;
  bool hugePages_ = false;
  char* base_ = nullptr;
  std::size_t inUse_ = 0, peak_ = 0;
  std::map<std::size_t, std::size_t> free_;            // offset -> size of free blocks
  std::unordered_map<std::size_t, std::size_t> used_;  // offset -> size of live blocks
  std::uint64_t bytesIn_ = 0;
  // The kernels' scratch buffers and cached state (the engine's internals).
  friend struct detail::DeviceInternals;
  std::unique_ptr<detail::DeviceInternals> internals_;
};

}  // namespace xs::engine
