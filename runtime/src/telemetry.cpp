// telemetry.cpp: the rank's running account in its slot and its trace ring (see telemetry.hpp).
#include "telemetry.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "segment.hpp"

namespace xs::detail {

const char* categoryName(Category category) {
  static constexpr const char* kNames[kCategories] = {
      "forward", "backward", "update",  "data", "collective_wait", "collective_move", "rendezvous",
      "fault",   "collective", "step", "eval", "checkpoint",      "user"};
  const auto i = static_cast<std::size_t>(category);
  return i < kCategories ? kNames[i] : "?";
}

}  // namespace xs::detail

namespace xs::detail::telemetry {
namespace {

RankTelemetry* gTele = nullptr;      // this rank's telemetry in its slot
TraceRingHeader* gRing = nullptr;    // its trace ring, nullptr when not tracing
TraceRecord* gRecords = nullptr;
std::uint64_t gCapacity = 0;
char* gNames = nullptr;
std::atomic<int> gThreads{1};        // thread indices handed out (0: the main thread)
thread_local int tThread = -1;       // this thread's index (bind: 0), -1 until its first record

// The name table: written under the mutex (any thread may record), read after the rank ends.
// Looked up by string_view (transparent hash): a span's name is copied only the first time.
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
std::mutex gNamesMutex;
std::unordered_map<std::string, std::uint32_t, NameHash, std::equal_to<>>* gNameIds = nullptr;

bool isMain() { return tThread == 0; }

int threadIndex() {
  if (tThread < 0) tThread = std::min(gThreads.fetch_add(1), static_cast<int>(kTraceThreads) - 1);
  return tThread;
}

// The name's offset + 1 in the ring's table; 0 when the table is full.
std::uint32_t intern(std::string_view name) {
  std::lock_guard<std::mutex> lock(gNamesMutex);
  if (!gNameIds) gNameIds = new std::remove_pointer_t<decltype(gNameIds)>();  // lives as the process
  auto it = gNameIds->find(name);
  if (it != gNameIds->end()) return it->second;
  const std::uint32_t used = gRing->namesUsed.load(std::memory_order_relaxed);
  if (used + name.size() + 1 > kTraceNameBytes) return 0;
  std::memcpy(gNames + used, name.data(), name.size());
  gNames[used + name.size()] = '\0';
  gRing->namesUsed.store(static_cast<std::uint32_t>(used + name.size() + 1), std::memory_order_release);
  gNameIds->emplace(std::string(name), used + 1);
  return used + 1;
}

void write(Category category, std::string_view name, std::uint64_t startNs, std::uint64_t endNs, std::uint64_t bytes,
           std::uint64_t waitNs, OpKind kind, int algorithm) {
  const std::uint32_t id = intern(name);
  const std::uint64_t index = gRing->head.fetch_add(1, std::memory_order_relaxed);
  TraceRecord& r = gRecords[index % gCapacity];
  // Unpublish first: a reader of a ring that wrapped must not pair the old seq with new fields.
  r.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.startNs = startNs;
  r.durNs = endNs - startNs;
  r.bytes = bytes;
  r.waitNs = waitNs;
  r.name = id;
  r.category = static_cast<std::uint8_t>(category);
  r.thread = static_cast<std::uint8_t>(threadIndex());
  r.opKind = static_cast<std::uint8_t>(kind);
  r.algorithm = static_cast<std::uint8_t>(algorithm);
  r.seq.store(index + 1, std::memory_order_release);
}

void count(Category category, std::uint64_t startNs, std::uint64_t ns) {
  gTele->categoryNs[static_cast<std::size_t>(category)].fetch_add(ns, std::memory_order_relaxed);
  if (gTele->windowStartNs.load(std::memory_order_relaxed) == 0)
    gTele->windowStartNs.store(startNs, std::memory_order_relaxed);
  gTele->windowEndNs.store(startNs + ns, std::memory_order_relaxed);
}

}  // namespace

std::uint64_t nowNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

void bind(Segment& segment, int localRank) {
  gTele = &segment.slot(localRank).telemetry;
  tThread = 0;
  gRing = segment.traceRing(localRank);
  if (gRing) {
    gNames = Segment::traceNames(gRing);
    gRecords = Segment::traceRecords(gRing);
    gCapacity = segment.header().traceEvents;
    gRing->threadName[0].store(intern("main"), std::memory_order_relaxed);
  }
}

bool tracing() { return gRing != nullptr; }

void nameThread(std::string_view name) {
  if (!gRing) return;
  const int t = threadIndex();
  gRing->threadName[t].store(intern(name), std::memory_order_relaxed);
}

Span::Span(Category category, std::string_view name) : category_(category), name_(name) {
  if (!gTele) return;
  const bool main = isMain();
  if (!main && !gRing) return;
  active_ = true;
  startNs_ = nowNs();
  if (!main) return;
  outerSpan_ = gTele->spanCategory.load(std::memory_order_relaxed);
  gTele->spanCategory.store(static_cast<std::uint32_t>(category) + 1, std::memory_order_relaxed);
}

Span::~Span() {
  if (!active_) return;
  const std::uint64_t endNs = nowNs();
  if (isMain()) {
    if (static_cast<std::size_t>(category_) < kCountedCategories) count(category_, startNs_, endNs - startNs_);
    gTele->spanCategory.store(outerSpan_, std::memory_order_relaxed);
    if (category_ == Category::kEval || category_ == Category::kCheckpoint) resetStepClock();
  }
  traceSpan(category_, name_, startNs_, endNs);
}

void traceSpan(Category category, std::string_view name, std::uint64_t startNs, std::uint64_t endNs) {
  if (gRing) write(category, name, startNs, endNs, 0, 0, OpKind::kRendezvous, 0);
}

void collective(OpKind kind, std::string_view tag, std::uint64_t startNs, std::uint64_t syncNs, std::uint64_t endNs,
                std::uint64_t bytes, int algorithm) {
  if (!gTele) return;
  const std::uint64_t waitNs = kind == OpKind::kRendezvous ? endNs - startNs : (syncNs > startNs ? syncNs - startNs : 0);
  if (isMain()) {
    if (kind == OpKind::kRendezvous) {
      count(Category::kRendezvous, startNs, endNs - startNs);
    } else {
      count(Category::kCollectiveWait, startNs, waitNs);
      count(Category::kCollectiveMove, startNs + waitNs, endNs - startNs - waitNs);
    }
  }
  if (gRing) {
    write(kind == OpKind::kRendezvous ? Category::kRendezvous : Category::kCollective, tag, startNs, endNs, bytes, waitNs,
          kind, algorithm);
  }
}

void stepDone() {
  if (!gTele) return;
  const std::uint64_t now = nowNs();
  gTele->steps.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t last = gTele->lastStepNs.load(std::memory_order_relaxed);
  gTele->lastStepNs.store(now, std::memory_order_relaxed);
  if (last == 0) return;
  const std::uint64_t d = now - last;
  gTele->stepHistogram[stepBucket(d)].fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t timed = gTele->stepsTimed.load(std::memory_order_relaxed);
  if (timed == 0 || d < gTele->stepMinNs.load(std::memory_order_relaxed)) gTele->stepMinNs.store(d, std::memory_order_relaxed);
  if (d > gTele->stepMaxNs.load(std::memory_order_relaxed)) gTele->stepMaxNs.store(d, std::memory_order_relaxed);
  gTele->stepsTimed.store(timed + 1, std::memory_order_relaxed);
}

void resetStepClock() {
  if (gTele && gTele->lastStepNs.load(std::memory_order_relaxed) != 0)
    gTele->lastStepNs.store(nowNs(), std::memory_order_relaxed);
}

void addSamples(std::uint64_t count) {
  if (gTele) gTele->samples.fetch_add(count, std::memory_order_relaxed);
}

void setStepTarget(std::uint64_t steps) {
  if (gTele) gTele->stepTarget.store(steps, std::memory_order_relaxed);
}

void deviceMemory(std::uint64_t inUse, std::uint64_t peak, std::uint64_t capacity) {
  if (!gTele) return;
  gTele->deviceInUse.store(inUse, std::memory_order_relaxed);
  gTele->devicePeak.store(peak, std::memory_order_relaxed);
  gTele->deviceCapacity.store(capacity, std::memory_order_relaxed);
}

std::size_t stepBucket(std::uint64_t ns) {
  const double us = static_cast<double>(ns) * 1e-3;
  if (us <= 1) return 0;
  const auto b = static_cast<std::size_t>(std::floor(std::log2(us) * kStepBucketsPerOctave));
  return std::min(b, kStepBuckets - 1);
}

double bucketSeconds(std::size_t bucket) {
  return 1e-6 * std::exp2((static_cast<double>(bucket) + 0.5) / kStepBucketsPerOctave);
}

}  // namespace xs::detail::telemetry
