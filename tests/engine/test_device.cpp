// test_device.cpp: the emulated core: naming, arena accounting, out-of-memory errors, transfers.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "xspawn/engine/device.hpp"
#include "xspawn/error.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine {
namespace {

TEST(Device, NamedByOrdinal) {
  DeviceOptions o;
  o.ordinal = 3;
  o.memoryBytes = 8 << 20;
  Device dev(o);
  EXPECT_EQ(dev.name(), "xcore:3");
  EXPECT_EQ(dev.capacity(), 8u << 20);
}

TEST(Device, ArenaTracksUseAndPeakAndReusesFreedMemory) {
  DeviceOptions o;
  o.memoryBytes = 4 << 20;
  Device dev(o);
  float* a = dev.allocate(1000, "a");
  float* b = dev.allocate(1000, "b");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  EXPECT_GE(dev.inUse(), 8000u);
  std::size_t peak = dev.peak();
  dev.release(a);
  dev.release(b);
  EXPECT_EQ(dev.inUse(), 0u);
  EXPECT_EQ(dev.peak(), peak);
  // After coalescing, the whole arena is one block again.
  float* big = dev.allocate((4 << 20) / 4, "everything");
  EXPECT_NE(big, nullptr);
  dev.release(big);
}

TEST(Device, OutOfMemoryNamesSizes) {
  DeviceOptions o;
  o.ordinal = 2;
  o.memoryBytes = 2 << 20;
  Device dev(o);
  float* a = dev.allocate(256 * 1024, "weights");  // 1 MiB
  try {
    dev.allocate(512 * 1024, "activations");  // 2 MiB more
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("xcore:2"), std::string::npos) << m;
    EXPECT_NE(m.find("2.0 MiB for activations"), std::string::npos) << m;
    EXPECT_NE(m.find("in use 1.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("available 1.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("--device-memory"), std::string::npos) << m;
  }
  dev.release(a);
}

TEST(Device, TensorsReturnMemoryAndTransfer) {
  Device dev;
  std::vector<float> host{1, 2, 3, 4, 5, 6};
  {
    Tensor t = Tensor::fromHost(dev, Shape{2, 3}, host.data());
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    std::vector<float> back(6);
    dev.copyToHost(back.data(), t.data(), 6);
    EXPECT_EQ(back, host);
    EXPECT_EQ(dev.bytesToDevice(), 24u);
    t.reshape(Shape{6});
    EXPECT_THROW(t.reshape(Shape{4}), ShapeError);
  }
  EXPECT_EQ(dev.inUse(), 0u);
}

TEST(Device, BadOptionsAndReleaseAreClearErrors) {
  DeviceOptions o;
  o.memoryBytes = 1000;
  EXPECT_THROW(Device{o}, UsageError);
  o = DeviceOptions{};
  o.ordinal = -1;
  EXPECT_THROW(Device{o}, UsageError);
  Device dev;
  float x = 0;
  EXPECT_THROW(dev.release(&x), UsageError);
  EXPECT_THROW(Tensor(dev, Shape{0, 3}), ShapeError);
}

TEST(Device, ParsesSizesAndPrecisions) {
  EXPECT_EQ(parseMemorySize("512M"), 512u << 20);
  EXPECT_EQ(parseMemorySize("4G"), std::size_t{4} << 30);
  EXPECT_EQ(parseMemorySize("1024"), 1024u);
  EXPECT_THROW(parseMemorySize("lots"), UsageError);
  EXPECT_THROW(parseMemorySize("5T"), UsageError);
  EXPECT_THROW(parseMemorySize("0"), UsageError);
  EXPECT_EQ(parsePrecision("bf16"), Precision::kBf16);
  EXPECT_THROW(parsePrecision("fp16"), UsageError);
}

TEST(Device, BindsToOneCpu) {
  DeviceOptions o;
  o.bindCpu = true;
  o.cpu = 0;
  Device dev(o);
  EXPECT_EQ(dev.cpu(), 0);
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof all, &all);  // let the rest of the suite use every CPU
}

// The VmFlags of the mapping holding p in /proc/self/smaps ("hg": advised for huge pages).
std::string vmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-') inside = lo <= at && at < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0) return line + " ";
  }
  return "";
}

bool advisedForHugePages(DeviceOptions o) {
  o.memoryBytes = 8u << 20;
  Device dev(o);
  float* p = dev.allocate(1, "probe");
  const bool advised = vmFlagsOf(p).find(" hg ") != std::string::npos;
  EXPECT_EQ(advised, dev.hugePages());
  dev.release(p);
  return advised;
}

TEST(Device, ArenaIsAdvisedForHugePagesUnlessTurnedOff) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  void* probe = mmap(nullptr, 4u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool refused = madvise(probe, 4u << 20, MADV_HUGEPAGE) != 0;
  munmap(probe, 4u << 20);
  if (refused) GTEST_SKIP() << "madvise(MADV_HUGEPAGE) is refused here (a sandbox's kernel)";
  const char* before = std::getenv("XS_ENGINE_HUGE_PAGES");
  const std::string saved = before ? before : "";
  unsetenv("XS_ENGINE_HUGE_PAGES");
  DeviceOptions off;
  off.hugePages = false;
  EXPECT_TRUE(advisedForHugePages({}));
  EXPECT_FALSE(advisedForHugePages(off));
  setenv("XS_ENGINE_HUGE_PAGES", "0", 1);
  EXPECT_FALSE(advisedForHugePages({}));
  setenv("XS_ENGINE_HUGE_PAGES", "1", 1);
  EXPECT_TRUE(advisedForHugePages(off));
  setenv("XS_ENGINE_HUGE_PAGES", "yes", 1);
  try {
    Device dev;
    ADD_FAILURE() << "XS_ENGINE_HUGE_PAGES=yes was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("XS_ENGINE_HUGE_PAGES=yes: use 1"), std::string::npos) << e.what();
  }
  if (saved.empty()) unsetenv("XS_ENGINE_HUGE_PAGES");
  else setenv("XS_ENGINE_HUGE_PAGES", saved.c_str(), 1);
}

}  // namespace
}  // namespace xs::engine
