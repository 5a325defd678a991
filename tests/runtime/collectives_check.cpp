// collectives_check.cpp: the serial reference and the all-collectives check.
#include "collectives_check.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "xspawn/collectives.hpp"

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

}  // namespace

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
                        {Algorithm::kParameterServer, local_world_size() > 1 ? 2 : 1, "ps2"},
                        {Algorithm::kAuto, 1, "auto"}};  // parameter servers are among a machine's ranks
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

}  // namespace xs::test
