// collectives_test.cpp: every collective, op, type, algorithm and world size against a serial
// reference; chunked and zero-copy paths; determinism across ranks and runs; a rank killed
// in the middle of a collective; many ranks on few cores; one buffer for the machine
// (shared_alloc_common) and read-only views of shared memory (shared_view).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives_check.hpp"
#include "process_runner.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::test {
namespace {

SpawnOptions smallBuffers(const std::string& tag) {
  SpawnOptions o;
  o.quiet = true;
  o.jobId = uniqueJobId(tag);
  // Small staging and ring slots so that 5003 elements take many chunks and pieces.
  o.stageBytes = 4096;
  o.ringSlots = 4;
  o.ringSlotBytes = 4096;
  o.sharedHeapBytes = 1 << 20;
  return o;
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, EveryOpTypeAlgorithmAndCountMatchesTheSerialReference) {
  auto o = smallBuffers("coll");
  JobResult r = spawn(checkEverything, GetParam(), o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(segmentExists(o.jobId));
}

INSTANTIATE_TEST_SUITE_P(Worlds, CollectivesTest, ::testing::Values(1, 2, 3, 5, 8));

// Two ranks stream the all-reduce through their pair of FIFOs; with the fewest slots a FIFO
// may have, a protocol that needed more would deadlock here (and time out).
TEST(CollectivesPair, EveryOpTypeAndCountWithTwoRingSlots) {
  auto o = smallBuffers("pair");
  o.ringSlots = 2;
  o.timeout = std::chrono::seconds(20);
  JobResult r = spawn(checkEverything, 2, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
}

// Two ranks, a message of many pieces, out of place, also into an output that does not start on
// a cache line.
TEST(CollectivesPair, LargeOutOfPlaceMatchesTheReference) {
  SpawnOptions o;
  o.quiet = true;
  o.jobId = uniqueJobId("large");
  JobResult r = spawn(
      [](int rank, const Flags&) {
        for (DType t : {DType::kFloat32, DType::kBFloat16}) {
          const std::size_t es = dtypeSize(t), count = (3u << 20) / es + 7;
          const auto in = input(t, rank, count);
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
            const auto want = reference(t, op, 2, 0, count);
            std::vector<std::byte> out(count * es + 64);
            for (std::size_t shift : {std::size_t{0}, es}) {
              all_reduce(in.data(), out.data() + shift, count, t, op);
              if (std::memcmp(out.data() + shift, want.data(), count * es) != 0) return fail("large", t, op, count, "auto");
            }
          }
        }
        return 0;
      },
      2, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
}

// The result's bytes hashed (FNV-1a).
std::uint64_t hashBytes(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ULL;
  return h;
}

// Rank 0 writes each algorithm's result hash here; every rank checks it matches its own.
struct Hashes {
  std::uint64_t h[8];
};

std::vector<std::uint64_t> randomSumHashes(int world) {
  auto* shared = static_cast<Hashes*>(mmap(nullptr, sizeof(Hashes), PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto o = smallBuffers("det");
  JobResult r = spawn(
      [shared](int rank, const Flags&) {
        std::mt19937 gen(1000 + rank);
        std::normal_distribution<float> normal;
        std::vector<float> in(20011);
        for (float& v : in) v = normal(gen) * 1e3f;
        const Algorithm algos[] = {Algorithm::kOneShot, Algorithm::kTwoShot, Algorithm::kRing,
                                   Algorithm::kParameterServer};
        for (int a = 0; a < 4; ++a) {
          CollectiveOptions opt;
          opt.algorithm = algos[a];
          std::vector<float> out(in.size());
          all_reduce(in.data(), out.data(), in.size(), DType::kFloat32, ReduceOp::kSum, opt);
          std::uint64_t h = hashBytes(out.data(), out.size() * sizeof(float));
          auto all = mesh_reduce("hash", h, [](const std::vector<std::uint64_t>& v) { return v; });
          for (std::uint64_t x : all)
            if (x != h) return 40 + a;  // ranks disagree
          if (rank == 0) shared->h[a] = h;
        }
        return 0;
      },
      world, o);
  std::vector<std::uint64_t> out(shared->h, shared->h + 4);
  munmap(shared, sizeof(Hashes));
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  return out;
}

TEST(CollectivesDeterminism, BitIdenticalAcrossRanksAndRuns) {
  for (int world : {2, 3, 8}) {
    auto first = randomSumHashes(world);
    auto second = randomSumHashes(world);
    EXPECT_EQ(first, second) << "world " << world;
    // Rank-order algorithms agree with each other bit for bit.
    EXPECT_EQ(first[0], first[1]);
    EXPECT_EQ(first[1], first[3]);
  }
}

TEST(CollectivesFailure, RankKilledMidCollectiveStopsThePeersWithin100ms) {
  auto* stamps = static_cast<long long*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
  };
  SpawnOptions o;
  o.quiet = true;
  o.printReport = false;
  o.jobId = uniqueJobId("kill");
  // Two ranks take the pair's streamed two-shot; four the staged one; a tensor in the shared
  // heap the zero-copy one (in place: its ranks read and write each other's buffers).
  struct Case {
    int world;
    Algorithm algo;
    bool heap;
  };
  const Case cases[] = {{2, Algorithm::kTwoShot, false}, {4, Algorithm::kTwoShot, false}, {4, Algorithm::kRing, false},
                        {4, Algorithm::kTwoShot, true}};
  for (auto [world, algo, heap] : cases) {
    std::memset(stamps, 0, 4096);
    JobResult r = spawn(
        [&](int rank, const Flags&) {
          if (rank == 1) {
            std::thread([&] {
              std::this_thread::sleep_for(std::chrono::milliseconds(150));
              stamps[0] = now();
              raise(SIGKILL);
            }).detach();
          }
          std::vector<float> own;
          std::span<float> grads = heap ? shared_alloc<float>(1 << 21) : std::span<float>(own = std::vector<float>(1 << 21));
          std::fill(grads.begin(), grads.end(), 1.0f);
          CollectiveOptions opt;
          opt.algorithm = algo;
          opt.tag = "grads";
          try {
            for (;;) all_reduce(grads, ReduceOp::kSum, opt);
          } catch (const AbortedError& e) {
            stamps[1 + rank] = now();
            if (std::string(e.what()).find("rank 1 (pid") == std::string::npos) stamps[1 + rank] = -1;
            throw;
          }
        },
        world, o);
    EXPECT_EQ(r.exitCode, 128 + SIGKILL);
    EXPECT_EQ(r.report.ranks[r.report.rootCause].rank, 1);
    ASSERT_GT(stamps[0], 0);
    for (int rank = 0; rank < world; ++rank) {
      if (rank == 1) continue;
      ASSERT_GT(stamps[1 + rank], 0) << "rank " << rank << " did not name the dead rank";
      EXPECT_LT(stamps[1 + rank] - stamps[0], 100'000'000)
          << "rank " << rank << ", " << algorithmName(algo) << (heap ? " in the heap" : "") << ", world " << world;
    }
    EXPECT_FALSE(segmentExists(o.jobId));
  }
  munmap(stamps, 4096);
}

TEST(CollectivesFailure, MismatchedArgumentsAreADivergence) {
  SpawnOptions o;
  o.quiet = true;
  o.printReport = false;
  o.jobId = uniqueJobId("mis");
  JobResult r = spawn(
      [](int rank, const Flags&) {
        std::vector<float> g(rank == 2 ? 100 : 101, 1.0f);
        CollectiveOptions opt;
        opt.tag = "grads";
        all_reduce(std::span<float>(g), ReduceOp::kSum, opt);
      },
      3, o);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_EQ(r.report.abortReason, "divergence");
  EXPECT_NE(r.report.abortText.find("rank 2 at all_reduce 'grads: sum float[100] one-shot'#1; ranks 0-1 at "
                                    "all_reduce 'grads: sum float[101] one-shot'#1"),
            std::string::npos)
      << r.report.abortText;
}

TEST(CollectivesOversubscribed, EightRanksOnTwoCoresWithoutSpinStorms) {
  SpawnOptions o;
  o.quiet = true;
  o.jobId = uniqueJobId("over");
  auto t0 = std::chrono::steady_clock::now();
  JobResult r = spawn(
      [](int, const Flags&) {
        std::vector<float> g(4096, 1.0f);
        for (int i = 0; i < 500; ++i) all_reduce(std::span<float>(g), ReduceOp::kMean);
        for (float v : g)
          if (v != 1.0f) return 1;
        return 0;
      },
      8, o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_LT(s, 10.0);
}

SpawnOptions withHeap(const std::string& tag, std::size_t heapBytes) {
  SpawnOptions o;
  o.quiet = true;
  o.jobId = uniqueJobId(tag);
  o.sharedHeapBytes = heapBytes;
  return o;
}

// A zero-copy all-reduce of `count` floats newly allocated in the shared heap, `mine` on this
// rank: whether every element comes out as `want` (the ranks' heap cursors in step).
bool heapSumIs(std::size_t count, float mine, float want) {
  auto g = shared_alloc<float>(count);
  std::fill(g.begin(), g.end(), mine);
  CollectiveOptions zc;
  zc.zeroCopyMinBytes = 0;
  all_reduce(g, ReduceOp::kSum, zc);
  return std::all_of(g.begin(), g.end(), [want](float v) { return v == want; });
}

// shared_alloc_common: one buffer for the machine, written by its owner, read by every rank; the
// ranks' later shared_alloc calls stay in step (a zero-copy all-reduce after it).
TEST(SharedAllocCommon, EveryRankSeesTheOwnersBytesAndLaterAllocationsStayInStep) {
  SpawnOptions o = withHeap("common", 8 << 20);
  JobResult r = spawn(
      [](int rank, const Flags&) {
        constexpr std::size_t kBytes = 3 * 1024 * 1024 + 5;
        if (rank == 3) shared_alloc(1000);  // a rank's own allocation: the cursors out of step
        auto* p = static_cast<unsigned char*>(shared_alloc_common(kBytes, 2));
        if (reinterpret_cast<std::uintptr_t>(p) % 64 != 0) return 9;
        if (!p) return 10;
        if (rank == 2)
          for (std::size_t i = 0; i < kBytes; ++i) p[i] = static_cast<unsigned char>(i * 131 + 7);
        barrier("written");
        for (std::size_t i = 0; i < kBytes; ++i)
          if (p[i] != static_cast<unsigned char>(i * 131 + 7)) return 11;
        if (rank != 3) shared_alloc(1000);  // in step again for the zero-copy all-reduce
        return heapSumIs(50000, static_cast<float>(rank + 1), 10.f) ? 0 : 12;
      },
      4, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SharedAllocCommon, NoRoomIsNullOnEveryRankAndTheHeapStaysUsable) {
  SpawnOptions o = withHeap("noroom", 1 << 20);
  JobResult r = spawn(
      [](int rank, const Flags&) {
        if (shared_alloc_common(2 << 20, 1) != nullptr) return 10;  // more than a rank's heap
        if (shared_alloc_common(0, 1) != nullptr) return 14;
        if (!heapSumIs(1000, static_cast<float>(rank), 3.f)) return 11;
        auto* p = static_cast<int*>(shared_alloc_common(64 * 1024, 0));  // what is left still fits
        if (!p) return 12;
        if (rank == 0) *p = 42;
        barrier("written");
        if (*p != 42) return 13;
        // The heap now holds 64 KiB from the top and 4000 bytes from the bottom: a rank's own
        // allocation that would reach the shared buffer says so.
        try {
          shared_alloc((1 << 20) - 32 * 1024);
        } catch (const UsageError& e) {
          return std::string(e.what()).find("65536 more held by shared_alloc_common") != std::string::npos ? 0 : 15;
        }
        return 16;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(segmentExists(o.jobId));
}

TEST(SharedAllocCommon, AnotherSizeOrAnOwnerOutsideTheJobIsAUsageError) {
  for (const auto& [fn, says] : std::vector<std::pair<std::function<int(int, const Flags&)>, std::string>>{
           {[](int rank, const Flags&) { return shared_alloc_common(rank == 1 ? 100 : 200, 0) ? 0 : 1; },
            "the ranks asked for 100 to 200 bytes from owners 0 to 0: every rank must pass the same size and owner"},
           {[](int rank, const Flags&) { return shared_alloc_common(100, rank == 2 ? 1 : 0) ? 0 : 1; },
            "the ranks asked for 100 to 100 bytes from owners 0 to 1"},
           {[](int, const Flags&) { return shared_alloc_common(100, 5) ? 0 : 1; },
            "owner 5 is not a rank of this machine (0-2)"}}) {
    SpawnOptions o;
    o.quiet = true;
    o.printReport = false;
    o.jobId = uniqueJobId("commonbad");
    JobResult r = spawn(fn, 3, o);
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.report.text().find(says), std::string::npos) << r.report.text();
    EXPECT_FALSE(segmentExists(o.jobId));
  }
}

// The permissions of the mapping of this process that holds p ("r--s"), empty when none does.
std::string mappingOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  while (std::getline(maps, line)) {
    std::uintptr_t first = 0, last = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &first, &last, perms) == 3 && at >= first && at < last) return perms;
  }
  return "";
}

// shared_view: a second, read-only mapping of shared-heap memory that reads the same bytes (and
// what the owner writes later), from any offset; gone with its last pointer; memory outside the
// shared heap refused.
TEST(SharedView, ReadsTheSameBytesReadOnlyUntilItsLastPointerGoes) {
  SpawnOptions o = withHeap("view", 8 << 20);
  JobResult r = spawn(
      [](int rank, const Flags&) {
        constexpr std::size_t kBytes = (1 << 20) + 5;
        auto* p = static_cast<unsigned char*>(shared_alloc_common(kBytes, 1));
        if (!p) return 10;
        if (rank == 1)
          for (std::size_t i = 0; i < kBytes; ++i) p[i] = static_cast<unsigned char>(i * 131 + 7);
        barrier("written");
        std::shared_ptr<const std::byte> view = shared_view(p + 3, kBytes - 3);
        if (!view || reinterpret_cast<const unsigned char*>(view.get()) == p + 3) return 11;
        const auto* v = reinterpret_cast<const unsigned char*>(view.get());
        if (std::memcmp(v, p + 3, kBytes - 3) != 0) return 12;
        if (mappingOf(v) != "r--s" || mappingOf(p) != "rw-s") return 13;
        if (rank == 1) p[kBytes - 1] ^= 0xff;
        barrier("changed");
        if (v[kBytes - 4] != p[kBytes - 1]) return 14;
        std::shared_ptr<const std::byte> copy = view;
        view.reset();
        if (mappingOf(v) != "r--s") return 15;  // the copy keeps it
        copy.reset();
        if (!mappingOf(v).empty()) return 16;
        // A rank's own stack, and a range that runs past the heap's end.
        int local = 0;
        for (const auto& [at, bytes] : std::vector<std::pair<const void*, std::size_t>>{
                 {&local, sizeof local}, {p, std::size_t{64} << 30}}) {
          try {
            shared_view(at, bytes);
            return 17;
          } catch (const UsageError& e) {
            if (std::string(e.what()).find("is not in this machine's shared heap") == std::string::npos) return 18;
          }
        }
        return 0;
      },
      3, o);
  EXPECT_EQ(r.exitCode, 0) << r.report.text();
  EXPECT_FALSE(segmentExists(o.jobId));
}

}  // namespace
}  // namespace xs::test
