// collectives_test.cpp: every collective, op, type, algorithm and world size against a serial
// reference; chunked and zero-copy paths; determinism across ranks and runs; a rank killed
// in the middle of a collective; many ranks on few cores.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "process_runner.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::test {
namespace {

constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBFloat16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin};
constexpr std::size_t kCounts[] = {0, 1, 37, 5003};

// Inputs are multiples of 1/8 between -6.25 and 6.25: exact in every type, and their sums
// exact in float32, so every reduction order gives the reference bit for bit.
double valueOf(int rank, std::size_t i) {
  return static_cast<double>(static_cast<long>((rank * 7 + i * 13 + (i >> 3)) % 101) - 50) / 8.0;
}
double intValueOf(int rank, std::size_t i) { return valueOf(rank, i) * 8; }

bool isInt(DType t) { return t == DType::kInt32 || t == DType::kInt64; }

void store(DType t, void* base, std::size_t i, double v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DType::kInt32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); break;
    case DType::kInt64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v); break;
    case DType::kBFloat16: static_cast<bfloat16*>(base)[i] = toBFloat16(static_cast<float>(v)); break;
  }
}

std::vector<std::byte> input(DType t, int rank, std::size_t count) {
  std::vector<std::byte> buf(count * dtypeSize(t) + 1);
  for (std::size_t i = 0; i < count; ++i) store(t, buf.data(), i, isInt(t) ? intValueOf(rank, i) : valueOf(rank, i));
  return buf;
}

// The reduction of element i over `world` ranks, computed serially, stored as type t.
std::vector<std::byte> reference(DType t, ReduceOp op, int world, std::size_t first, std::size_t count) {
  std::vector<std::byte> buf(count * dtypeSize(t) + 1);
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t i = first + j;
    double acc = isInt(t) ? intValueOf(0, i) : valueOf(0, i);
    for (int k = 1; k < world; ++k) {
      double v = isInt(t) ? intValueOf(k, i) : valueOf(k, i);
      if (op == ReduceOp::kMax) acc = std::max(acc, v);
      else if (op == ReduceOp::kMin) acc = std::min(acc, v);
      else acc += v;
    }
    if (op == ReduceOp::kMean) acc = isInt(t) ? static_cast<double>(static_cast<long>(acc) / world) : acc / world;
    // float32 first, as the kernels accumulate bfloat16 in float32.
    store(t, buf.data(), j, t == DType::kBFloat16 ? static_cast<float>(acc) : acc);
  }
  return buf;
}

int fail(const char* what, DType t, ReduceOp op, std::size_t count, const char* algo) {
  std::printf("rank %d: %s wrong for %s %s[%zu] %s\n", get_ordinal(), what, reduceOpName(op), dtypeName(t),
              count, algo);
  return 1;
}

// Every collective and combination, checked on every rank.
int checkEverything(int rank, const Flags&) {
  const int world = world_size();
  struct Algo {
    Algorithm a;
    int servers;
    const char* name;
  };
  const Algo algos[] = {{Algorithm::kOneShot, 1, "one-shot"}, {Algorithm::kTwoShot, 1, "two-shot"},
                        {Algorithm::kRing, 1, "ring"},        {Algorithm::kParameterServer, 1, "ps"},
                        {Algorithm::kParameterServer, world > 1 ? 2 : 1, "ps2"}, {Algorithm::kAuto, 1, "auto"}};
  for (DType t : kTypes) {
    const std::size_t es = dtypeSize(t);
    for (std::size_t count : kCounts) {
      for (ReduceOp op : kOps) {
        const auto in = input(t, rank, count);
        const auto want = reference(t, op, world, 0, count);
        for (const Algo& algo : algos) {
          CollectiveOptions o;
          o.algorithm = algo.a;
          o.psServers = algo.servers;
          std::vector<std::byte> out(count * es + 1);
          all_reduce(in.data(), out.data(), count, t, op, o);  // out of place
          if (std::memcmp(out.data(), want.data(), count * es) != 0) return fail("all_reduce", t, op, count, algo.name);
          std::vector<std::byte> inplace = in;
          all_reduce(inplace.data(), inplace.data(), count, t, op, o);  // in place
          if (std::memcmp(inplace.data(), want.data(), count * es) != 0) return fail("in-place all_reduce", t, op, count, algo.name);
        }
        // Zero-copy: the buffer lives in the shared heap.
        auto* shared = static_cast<std::byte*>(shared_alloc(count * es + 1));
        std::memcpy(shared, in.data(), count * es);
        CollectiveOptions zc;
        zc.zeroCopyMinBytes = 0;  // however small
        all_reduce(shared, shared, count, t, op, zc);
        if (std::memcmp(shared, want.data(), count * es) != 0) return fail("zero-copy all_reduce", t, op, count, "");
        shared_reset();
        // reduce_scatter: my slice of the reduction.
        const Slice mine = slice_of(count, rank, world);
        std::vector<std::byte> part(mine.size * es + 1);
        reduce_scatter(in.data(), part.data(), count, t, op);
        const auto wantPart = reference(t, op, world, mine.first, mine.size);
        if (std::memcmp(part.data(), wantPart.data(), mine.size * es) != 0) return fail("reduce_scatter", t, op, count, "");
        // In place: the output is this rank's slice of the input.
        std::vector<std::byte> whole = in;
        reduce_scatter(whole.data(), whole.data() + mine.first * es, count, t, op);
        if (std::memcmp(whole.data() + mine.first * es, wantPart.data(), mine.size * es) != 0) {
          return fail("in-place reduce_scatter", t, op, count, "");
        }
      }
      // all_gather of every rank's slice of its own input = the concatenation.
      const Slice mine = slice_of(count, rank, world);
      const auto in = input(t, rank, count);
      std::vector<std::byte> gathered(count * es + 1), expect(count * es + 1);
      for (int k = 0; k < world; ++k) {
        const Slice s = slice_of(count, k, world);
        const auto theirs = input(t, k, count);
        std::memcpy(expect.data() + s.first * es, theirs.data() + s.first * es, s.size * es);
      }
      all_gather(in.data() + mine.first * es, gathered.data(), count, t);
      if (std::memcmp(gathered.data(), expect.data(), count * es) != 0) return fail("all_gather", t, ReduceOp::kSum, count, "");
      // In place: the input is this rank's slice of the output.
      std::vector<std::byte> whole = in;
      all_gather(whole.data() + mine.first * es, whole.data(), count, t);
      if (std::memcmp(whole.data(), expect.data(), count * es) != 0) return fail("in-place all_gather", t, ReduceOp::kSum, count, "");
      // broadcast from the last rank.
      auto data = input(t, rank, count);
      broadcast(data.data(), count, t, world - 1);
      const auto root = input(t, world - 1, count);
      if (std::memcmp(data.data(), root.data(), count * es) != 0) return fail("broadcast", t, ReduceOp::kSum, count, "");
    }
  }
  return 0;
}

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
  // Two ranks take the pair's streamed two-shot; four the staged one.
  const std::pair<int, Algorithm> cases[] = {
      {2, Algorithm::kTwoShot}, {4, Algorithm::kTwoShot}, {4, Algorithm::kRing}};
  for (auto [world, algo] : cases) {
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
          std::vector<float> grads(1 << 21, 1.0f);
          CollectiveOptions opt;
          opt.algorithm = algo;
          opt.tag = "grads";
          try {
            for (;;) all_reduce(std::span<float>(grads), ReduceOp::kSum, opt);
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
      EXPECT_LT(stamps[1 + rank] - stamps[0], 100'000'000) << "rank " << rank << ", " << algorithmName(algo) << ", world " << world;
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

}  // namespace
}  // namespace xs::test
