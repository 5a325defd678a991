// collectives.cpp: the public collective calls, op entry, algorithm choice, and the staged
// broadcast, all-gather and reduce-scatter.
#include "collectives_impl.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "arena.hpp"
#include "context.hpp"
#include "reduce_kernels.hpp"
#include "segment.hpp"
#include "xspawn/error.hpp"

namespace xs {

std::size_t dtypeSize(DType type) {
  switch (type) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kBFloat16: return 2;
  }
  return 1;
}

const char* dtypeName(DType type) {
  switch (type) {
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTwoShot: return "two-shot";
    case Algorithm::kOneShot: return "one-shot";
    case Algorithm::kParameterServer: return "ps";
  }
  return "?";
}

Algorithm parseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kOneShot,
                      Algorithm::kParameterServer}) {
    if (name == algorithmName(a)) return a;
  }
  XS_THROW(UsageError, fmt::format("unknown algorithm '{}' (auto, ring, two-shot, one-shot, ps)", name));
}

Slice slice_of(std::size_t count, int rank, int world) {
  const std::size_t base = count / world, extra = count % world;
  const std::size_t r = static_cast<std::size_t>(rank);
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

void all_reduce(const void* in, void* out, std::size_t count, DType type, ReduceOp op,
                const CollectiveOptions& options) {
  detail::collectives().allReduce(in, out, count, type, op, options);
}
void broadcast(void* data, std::size_t count, DType type, int root, const CollectiveOptions& options) {
  detail::collectives().broadcast(data, count, type, root, options);
}
void all_gather(const void* in, void* out, std::size_t count, DType type, const CollectiveOptions& options) {
  detail::collectives().allGather(in, out, count, type, options);
}
void reduce_scatter(const void* in, void* out, std::size_t count, DType type, ReduceOp op,
                    const CollectiveOptions& options) {
  detail::collectives().reduceScatter(in, out, count, type, op, options);
}
void* shared_alloc(std::size_t bytes) { return detail::collectives().sharedAlloc(bytes); }
void shared_reset() { detail::collectives().sharedReset(); }
void* shared_alloc_common(std::size_t bytes, int owner) {
  return detail::collectives().sharedAllocCommon(bytes, owner);
}

std::shared_ptr<const std::byte> shared_view(const void* p, std::size_t bytes) {
  const detail::Segment& seg = *detail::requireContext("shared_view").segment;
  const detail::Arena arena(seg);
  const auto* at = static_cast<const std::byte*>(p);
  const std::byte* heap = arena.heap(0);
  const std::byte* end = arena.heap(seg.worldSize() - 1) + arena.heapBytes();
  XS_CHECK(at != nullptr && at >= heap && at <= end && bytes <= static_cast<std::size_t>(end - at), UsageError,
           fmt::format("shared_view: [{}, +{} bytes) is not in this machine's shared heap: view memory that "
                       "shared_alloc or shared_alloc_common returned",
                       p, bytes));
  return seg.viewReadOnly(at, bytes);
}

}  // namespace xs

namespace xs::detail {

std::string_view Description::view() const { return {text, size}; }

Collectives& collectives() {
  Context& c = requireContext("collectives");
  if (!c.collectives) c.collectives = std::make_unique<Collectives>(c);
  return *c.collectives;
}

Collectives::Collectives(Context& context)
    : context_(context),
      control_(*context.control),
      arena_(*context.segment),
      ring_(*context.segment, *context.control),
      rank_(context.control->rank()),
      world_(context.control->worldSize()),
      srcs_(world_),
      dsts_(world_),
      commonTop_(arena_.heapBytes()) {
  if (machineClient().active()) {
    machine_ = &machineClient();
    machines_ = machine_->machines();
    globalRank_ = context.rank;
    globalWorld_ = context.worldSize;
  }
}

void Collectives::begin(OpKind kind, const CollectiveOptions& options, std::string_view description,
                        std::uint64_t detail, std::uint64_t bytes, Algorithm algorithm) {
  if (options.tag.empty()) {
    control_.enterOp(kind, description.substr(0, kTagBytes - 1), detail);
  } else {
    // The user's tag and the arguments both show, so that a mismatch of either is visible.
    control_.enterOp(kind, Description("{}: {}", options.tag, description).view(), detail);
  }
  opKind_ = kind;
  opSyncNs_ = 0;
  opBytes_ = bytes;
  opAlgorithm_ = static_cast<int>(algorithm);
  deadline_ = Clock::now() + (options.timeout.count() > 0 ? options.timeout : control_.timeout());
}

bool Collectives::inHeap(const void* p, std::size_t bytes, std::uint64_t* offset) const {
  const std::byte* b = static_cast<const std::byte*>(p);
  const std::byte* heap = arena_.heap(rank_);
  if (arena_.heapBytes() == 0 || b < heap || b + bytes > heap + arena_.heapBytes()) return false;
  *offset = static_cast<std::uint64_t>(b - heap);
  return true;
}

void* Collectives::sharedAlloc(std::size_t bytes) {
  // Bottom up, below the buffers shared_alloc_common carved from the top.
  const std::size_t start = (heapUsed_ + 63) / 64 * 64;
  if (start > commonTop_ || bytes > commonTop_ - start) {
    XS_THROW(UsageError,
             fmt::format("shared_alloc of {} bytes does not fit the shared heap ({} of {} bytes per rank in use{}); "
                         "start the job with a larger --shared-heap (default 1G, reserved, not used, until allocated)",
                         bytes, heapUsed_, arena_.heapBytes(),
                         commonTop_ < arena_.heapBytes()
                             ? fmt::format(", {} more held by shared_alloc_common, e.g. a dataset shared by "
                                           "data::shareDataset", arena_.heapBytes() - commonTop_)
                             : std::string()));
  }
  std::byte* p = arena_.heap(rank_) + start;
  reserveHeap(context_.segment->name(), static_cast<std::uint64_t>(p - context_.segment->base()), bytes);
  heapUsed_ = start + bytes;
  return p;
}

void* Collectives::sharedAllocCommon(std::size_t bytes, int owner) {
  XS_CHECK(owner >= 0 && owner < world_, UsageError,
           fmt::format("shared_alloc_common: owner {} is not a rank of this machine (0-{})", owner, world_ - 1));
  // Top down, from a cursor that only this collective call moves (and shared_reset): in step on
  // every rank whatever each rank's own shared_alloc calls took from the bottom.
  const std::size_t top = bytes > 0 && bytes <= commonTop_ ? (commonTop_ - bytes) / 64 * 64 : 0;
  const bool fits = bytes > 0 && bytes <= commonTop_ && top >= heapUsed_;
  std::byte* p = arena_.heap(owner) + top;
  bool room = fits;
  if (rank_ == owner && fits) {
    try {
      reserveHeap(context_.segment->name(), static_cast<std::uint64_t>(p - context_.segment->base()), bytes);
    } catch (const ShmSpaceError&) {
      room = false;  // /dev/shm is full: the pages stay unused
    }
  }
  // Every rank's size and owner, and whether it has room, in one all-reduce of maxima (the
  // maximum of -x is minus the minimum of x), over every machine of the job.
  std::array<std::int64_t, 5> v{static_cast<std::int64_t>(bytes), -static_cast<std::int64_t>(bytes), owner, -owner,
                                room ? 0 : 1};
  CollectiveOptions opt;
  opt.tag = "shared_alloc_common";
  allReduce(v.data(), v.data(), v.size(), DType::kInt64, ReduceOp::kMax, opt);
  XS_CHECK(v[0] == -v[1] && v[2] == -v[3], UsageError,
           fmt::format("shared_alloc_common: the ranks asked for {} to {} bytes from owners {} to {}: every rank "
                       "must pass the same size and owner",
                       -v[1], v[0], -v[3], v[2]));
  if (v[4]) return nullptr;
  commonTop_ = top;
  return p;
}

void Collectives::broadcast(void* data, std::size_t count, DType type, int root,
                            const CollectiveOptions& options) {
  const int world = acrossMachines() ? globalWorld_ : world_;
  if (root < 0 || root >= world) {
    XS_THROW(UsageError, fmt::format("broadcast: root {} is not a rank of this job (0-{})", root, world - 1));
  }
  const std::size_t es = dtypeSize(type), bytes = count * es;
  std::uint64_t offset = 0;
  // Across machines a heap buffer goes through staging too (its offset is no concern there).
  const bool zeroCopy = !acrossMachines() && bytes > 0 && inHeap(data, bytes, &offset);
  begin(OpKind::kBroadcast, options, Description("{}[{}] from {}", dtypeName(type), count, root).view(),
        (count << 8) ^ (static_cast<std::uint64_t>(type) << 4) ^ (static_cast<std::uint64_t>(root) << 40) ^
            (zeroCopy ? offset + 1 : 0) * 31,
        bytes);
  auto* d = static_cast<std::byte*>(data);
  if (acrossMachines()) {
    broadcastChunks(d, bytes, root / world_, root % world_);
  } else if (world_ > 1 && zeroCopy) {
    // Everyone reads the root's buffer straight out of the heap.
    sync();
    if (rank_ != root) std::memcpy(d, arena_.heap(root) + offset, bytes);
    sync();
  } else if (world_ > 1) {
    const std::size_t chunk = chunkElements(1);
    for (std::size_t at = 0; at < bytes; at += chunk) {
      const std::size_t n = std::min(chunk, bytes - at);
      const int par = nextParity();
      if (rank_ == root) std::memcpy(arena_.stage(root, par), d + at, n);
      sync();
      if (rank_ != root) std::memcpy(d + at, arena_.stage(root, par), n);
    }
  }
  end();
}

void Collectives::allGather(const void* in, void* out, std::size_t count, DType type,
                            const CollectiveOptions& options) {
  const std::size_t es = dtypeSize(type);
  begin(OpKind::kAllGather, options, Description("{}[{}]", dtypeName(type), count).view(),
        (count << 8) ^ static_cast<std::uint64_t>(type), count * es);
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  if (acrossMachines()) {
    allGatherMachines(src, dst, count, es);
  } else if (world_ == 1) {
    if (count) std::memmove(dst, src, count * es);
  } else {
    allGatherStaged(src, dst, count, es);
  }
  end();
}

void Collectives::allGatherStaged(const std::byte* src, std::byte* dst, std::size_t count, std::size_t es) {
  const Slice mine = slice_of(count, rank_, world_);
  // Rounds of at most one staging buffer per rank; the largest slice (rank 0's) decides
  // how many, the same on every rank.
  const std::size_t perRound = chunkElements(es);
  const std::size_t largest = slice_of(count, 0, world_).size;
  for (std::size_t at = 0; at < largest; at += perRound) {
    const int par = nextParity();
    if (at < mine.size) {
      std::memcpy(arena_.stage(rank_, par), src + at * es, std::min(perRound, mine.size - at) * es);
    }
    sync();
    for (int k = 0; k < world_; ++k) {
      const Slice s = slice_of(count, k, world_);
      if (at < s.size) {
        std::memcpy(dst + (s.first + at) * es, arena_.stage(k, par), std::min(perRound, s.size - at) * es);
      }
    }
  }
}

void Collectives::reduceScatter(const void* in, void* out, std::size_t count, DType type, ReduceOp op,
                                const CollectiveOptions& options) {
  const std::size_t es = dtypeSize(type);
  begin(OpKind::kReduceScatter, options,
        Description("{} {}[{}]", reduceOpName(op), dtypeName(type), count).view(),
        (count << 8) ^ (static_cast<std::uint64_t>(type) << 4) ^ static_cast<std::uint64_t>(op), count * es);
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  const Slice mine = slice_of(count, rank_, world_);
  if (acrossMachines()) {
    reduceScatterMachines(src, dst, count, type, op);
  } else if (world_ == 1) {
    if (count) scaleCopy(type, src, dst, count, 1);
  } else {
    stageChunks(src, count, es, [&](std::size_t at, std::size_t n, int par) {
      // The part of my slice inside this chunk's [at, at + n).
      const std::size_t lo = std::max(at, mine.first), hi = std::min(at + n, mine.first + mine.size);
      if (lo < hi) {
        for (int k = 0; k < world_; ++k) srcs_[k] = arena_.stage(k, par) + (lo - at) * es;
        void* d[1] = {dst + (lo - mine.first) * es};
        reduceInto(type, op, srcs_.data(), world_, d, 1, hi - lo, world_);
      }
    });
  }
  end();
}

}  // namespace xs::detail
