// device.cpp: the emulated core's arena allocator (first fit with coalescing), CPU binding and
// single-thread settings of the math libraries.
#include "xspawn/engine/device.hpp"


#include <sched.h>
#include <sys/mman.h>

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "device_internals.hpp"
#include "telemetry.hpp"
#include "xspawn/error.hpp"

namespace xs::engine {
namespace {
constexpr std::size_t kAlign = 64;

std::string mib(std::size_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

// DeviceOptions::hugePages, unless $XS_ENGINE_HUGE_PAGES says 0 or 1.
bool hugePagesWanted(bool option) {
  const char* env = std::getenv("XS_ENGINE_HUGE_PAGES");
  if (!env || !*env) return option;
  const std::string v = env;
  XS_CHECK(v == "0" || v == "1", UsageError,
           "XS_ENGINE_HUGE_PAGES=" + v + ": use 1 (advise the device arena for 2 MiB pages) or 0 (4 KiB pages)");
  return v == "1";
}
}  // namespace

const char* precisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

Precision parsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  XS_THROW(UsageError, "unknown precision '" + name + "': use fp32 or bf16");
}

std::size_t parseMemorySize(const std::string& text) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    XS_THROW(UsageError, "bad memory size '" + text + "': write e.g. 512M, 4G or a byte count");
  }
  std::string unit = text.substr(pos);
  std::size_t mult = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") mult = std::size_t{1} << 10;
  else if (unit == "M" || unit == "MiB") mult = std::size_t{1} << 20;
  else if (unit == "G" || unit == "GiB") mult = std::size_t{1} << 30;
  else if (!unit.empty())
    XS_THROW(UsageError, "bad memory size unit in '" + text + "': use K, M or G");
  XS_CHECK(v > 0, UsageError, "memory size '" + text + "' must be positive");
  return static_cast<std::size_t>(v) * mult;
}

Device::Device(const DeviceOptions& options)
    : options_(options), internals_(std::make_unique<detail::DeviceInternals>()) {
  XS_CHECK(options.ordinal >= 0, UsageError,
           fmt::format("device ordinal {} is negative: use 0 or more", options.ordinal));
  XS_CHECK(options.memoryBytes >= (1u << 20), UsageError,
           fmt::format("device memory {} bytes is below 1 MiB: raise --device-memory",
                       options.memoryBytes));
  name_ = fmt::format("xcore:{}", options.ordinal);
  options_.memoryBytes = (options.memoryBytes + kAlign - 1) / kAlign * kAlign;
  const bool wantHugePages = hugePagesWanted(options.hugePages);  // may throw: before the arena exists
  void* p = mmap(nullptr, options_.memoryBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  XS_CHECK(p != MAP_FAILED, OutOfMemoryError,
           fmt::format("{}: cannot reserve {} of address space for the arena: lower "
                       "--device-memory", name_, mib(options_.memoryBytes)));
  base_ = static_cast<char*>(p);
  // Advice only: a kernel without transparent huge pages says EINVAL, and one set to 'never'
  // ignores it; the arena then works on 4 KiB pages as before.
  hugePages_ = wantHugePages && madvise(p, options_.memoryBytes, MADV_HUGEPAGE) == 0;
  free_[0] = options_.memoryBytes;
  if (options.bindCpu) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof allowed, &allowed);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    int want = options.cpu >= 0 ? options.cpu : cpus[options.ordinal % cpus.size()];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(want, &one);
    XS_CHECK(sched_setaffinity(0, sizeof one, &one) == 0, UsageError,
             fmt::format("{}: cannot bind to CPU {}: pick a CPU this process may use", name_, want));
    cpu_ = want;
  }
  // One core computes on one thread: the libraries must not start their own pools.
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
}

Device::~Device() {
  for (auto& k : internals_->kernelStates) k.reset();  // their tensors return memory to this arena
  for (auto& [ptr, size] : internals_->scratch) release(ptr);
  if (base_) munmap(base_, options_.memoryBytes);
}

float* Device::allocate(std::size_t floats, const char* what) {
  std::size_t bytes = (std::max<std::size_t>(floats, 1) * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    std::size_t off = it->first, size = it->second;
    free_.erase(it);
    if (size > bytes) free_[off + bytes] = size - bytes;
    used_[off] = bytes;
    inUse_ += bytes;
    peak_ = std::max(peak_, inUse_);
    xs::detail::telemetry::deviceMemory(inUse_, peak_, options_.memoryBytes);  // what top and the report show
    return reinterpret_cast<float*>(base_ + off);
  }
  std::size_t largest = 0;
  for (auto& [off, size] : free_) largest = std::max(largest, size);
  XS_THROW(OutOfMemoryError,
           fmt::format("{}: out of device memory allocating {} for {} (in use {}, available {}, "
                       "largest free block {}, capacity {}): raise --device-memory or lower --batch",
                       name_, mib(bytes), what, mib(inUse_), mib(options_.memoryBytes - inUse_),
                       mib(largest), mib(options_.memoryBytes)));
}

void Device::release(float* p) {
  if (!p) return;
  std::size_t off = reinterpret_cast<char*>(p) - base_;
  auto u = used_.find(off);
  XS_CHECK(u != used_.end(), UsageError,
           fmt::format("{}: release of a pointer this device did not allocate", name_));
  std::size_t size = u->second;
  used_.erase(u);
  inUse_ -= size;
  xs::detail::telemetry::deviceMemory(inUse_, peak_, options_.memoryBytes);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + size) {
    size += next->second;
    free_.erase(next);
  }
  auto it = free_.emplace(off, size).first;
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == off) {
      prev->second += size;
      free_.erase(it);
    }
  }
}

float* detail::scratch(Device& dev, int slot, std::size_t floats) {
  XS_CHECK(slot >= 0 && slot < kScratchSlots, UsageError,
           fmt::format("scratch slot {} out of range 0..{}", slot, kScratchSlots - 1));
  auto& [ptr, size] = DeviceInternals::of(dev).scratch[slot];
  if (size < floats) {
    dev.release(ptr);
    ptr = nullptr;
    size = 0;
    ptr = dev.allocate(floats, "kernel scratch space");
    size = floats;
  }
  return ptr;
}

void Device::copyToDevice(float* dst, const float* src, std::size_t floats) {
  std::memcpy(dst, src, floats * sizeof(float));
  bytesIn_ += floats * sizeof(float);
}

void Device::copyToHost(float* dst, const float* src, std::size_t floats) const {
  std::memcpy(dst, src, floats * sizeof(float));
}

}  // namespace xs::engine
