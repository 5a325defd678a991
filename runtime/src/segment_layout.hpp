// segment_layout.hpp: the fixed layout of a job's shared-memory segment.
//
//   offset 0            SegmentHeader        identity, geometry, job-wide control words
//   rankSlotsOffset     RankSlot x N         one per rank, written mostly by that rank
//   payloadOffset       N x payloadStride    rendezvous payload chunks, 2 parities per rank
//   arenaOffset         arenaBytes           collectives' buffers (ring slots, zero-copy tensors),
//                                            in a job spanning machines the machine channel, and
//                                            with --trace one trace ring per rank
//
// Every cross-process word is a lock-free std::atomic living inside the mapping; nothing in
// the segment is a pointer (only offsets from its base), so any process may map it anywhere.
// No mutex or condition lives here: a process that dies must never leave a lock held.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xs::detail {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint64_t kSegmentMagic = 0x314e574150535858ULL;  // "XXSPAWN1"
inline constexpr std::uint32_t kLayoutVersion = 6;
inline constexpr std::size_t kTagBytes = 64;      // a tag holds at most 63 characters
inline constexpr std::size_t kErrorBytes = 2048;  // a worker's recorded error message
inline constexpr std::size_t kAbortTextBytes = 4096;
inline constexpr std::size_t kJobIdBytes = 64;
// RankSlot::opSeq while the rank rewrites its op fields (seqlock "odd" state).
inline constexpr std::uint64_t kSeqWriting = ~0ULL;
// SegmentHeader::abortWord while the first aborter writes the abort text.
inline constexpr std::uint64_t kAbortPending = ~0ULL;

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == 4, "futex words must be plain 32-bit");

// Text stored as relaxed atomic words, so a reader racing a writer reads garbage at worst,
// never undefined behaviour; the seqlock around it (see RankSlot::opSeq) detects the garbage.
template <std::size_t Bytes>
struct AtomicText {
  static_assert(Bytes % 8 == 0);
  std::atomic<std::uint64_t> words[Bytes / 8];

  void store(std::string_view text) {
    char buf[Bytes] = {};
    std::size_t n = text.size() < Bytes - 1 ? text.size() : Bytes - 1;
    for (std::size_t i = 0; i < n; ++i) buf[i] = text[i];
    for (std::size_t w = 0; w < Bytes / 8; ++w) {
      std::uint64_t v = 0;
      for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(buf[w * 8 + b]);
      words[w].store(v, std::memory_order_relaxed);
    }
  }
  std::string load() const {
    std::string out;
    for (std::size_t w = 0; w < Bytes / 8; ++w) {
      std::uint64_t v = words[w].load(std::memory_order_relaxed);
      for (int b = 0; b < 8; ++b) {
        char c = static_cast<char>(v & 0xff);
        if (c == 0) return out;
        out.push_back(c);
        v >>= 8;
      }
    }
    return out;
  }
};

// Why the job is aborting; packed with the rank that caused it into SegmentHeader::abortWord.
enum class AbortReason : std::uint32_t {
  kNone = 0,
  kRankFailed = 1,   // a worker exited non-zero, was killed by a signal or threw
  kDivergence = 2,   // ranks reached different rendezvous points / collectives
  kTimeout = 3,      // a rendezvous or collective passed its deadline
  kInterrupted = 4,  // the launcher was asked to stop (Ctrl-C, SIGTERM)
  kMachineFailed = 5,  // another machine of the job failed (rank field: none)
};

// What a rank is doing, as the launcher sees it.
enum class RankState : std::uint32_t {
  kNotStarted = 0,
  kRunning = 1,  // forked (pid known)
  kExited = 2,   // exited with status 0
  kFailed = 3,   // exited non-zero or killed by a signal
};

// The kind of the error a worker recorded before it ended.
enum class ErrorKind : std::uint32_t {
  kNone = 0,
  kPrimary = 1,    // the worker's own failure (an exception from user code, exec failure)
  kSecondary = 2,  // the worker failed because the job aborted (a peer died, divergence...)
};

// Is the rank inside a rendezvous/collective or between them?
enum class OpState : std::uint32_t { kIdle = 0, kWaiting = 1 };

// What kind of op a rank entered; a rendezvous 'x' and an all_reduce 'x' are different ops.
enum class OpKind : std::uint32_t {
  kRendezvous = 0,
  kAllReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kReduceScatter = 4,
};
inline const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kRendezvous: return "rendezvous";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
  }
  return "op";
}

struct alignas(kCacheLine) SegmentHeader {
  // Line 0: identity and geometry, written once by the creator before any worker starts.
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t worldSize;
  std::uint64_t totalBytes;
  std::uint64_t rankSlotsOffset;
  std::uint64_t payloadOffset;
  std::uint64_t payloadStride;  // bytes per rank = 2 parities x chunk
  std::uint64_t arenaOffset;
  std::uint64_t arenaBytes;
  // Line 1: who owns the job (for stale-segment detection) and its settings.
  alignas(kCacheLine) std::int32_t launcherPid;
  std::uint32_t waitMode;
  std::uint64_t launcherStartTicks;  // /proc/<pid>/stat field 22: tells pid reuse apart
  std::uint64_t createdUnixNs;
  std::int64_t timeoutMs;
  std::uint64_t payloadChunk;
  std::uint32_t usableCpus;   // usableCores() of the launcher: more ranks than this are oversubscribed
  std::uint32_t traceEvents;   // trace records per rank (0: the job is not traced)
  std::uint64_t traceOffset;   // the first rank's TraceRing, relative to arenaOffset
  // Line 2: the job's id.
  alignas(kCacheLine) char jobId[kJobIdBytes];
  // Line 3: the abort word: 0 while healthy, else (reason << 32) | (rank + 1). The first
  // compare-exchange from 0 wins, so the recorded cause is always the first one.
  alignas(kCacheLine) std::atomic<std::uint64_t> abortWord;
  std::atomic<std::uint64_t> abortTimeNs;
  // Line 4: the central barrier. `arrived` counts ranks inside the current generation;
  // the last one resets it and bumps `generation`, the futex word every waiter sleeps on.
  alignas(kCacheLine) std::atomic<std::uint32_t> arrived;
  // Line 5: separate from `arrived` so the ranks arriving do not bounce the line the
  // sleepers read.
  alignas(kCacheLine) std::atomic<std::uint32_t> generation;
  std::atomic<std::uint32_t> generationSleepers;
  // Line 6: the collectives' arena (offsets relative to arenaOffset; see coll/arena.hpp).
  alignas(kCacheLine) std::uint64_t stageBytes;  // per rank and parity
  std::uint64_t ringSlots;
  std::uint64_t ringSlotBytes;
  std::uint64_t heapBytes;  // per rank
  std::uint64_t stageOffset;
  std::uint64_t fifoOffset;
  std::uint64_t heapOffset;
  std::uint64_t machineOffset;  // the MachineChannel, 0 when the job runs on one machine
  // Lines 7..: the first abort's explanation (written once, by the abort winner, before
  // it wakes anyone; read after the abort word is seen).
  alignas(kCacheLine) AtomicText<kAbortTextBytes> abortText;
};
static_assert(offsetof(SegmentHeader, launcherPid) == 1 * kCacheLine);
static_assert(offsetof(SegmentHeader, jobId) == 2 * kCacheLine);
static_assert(offsetof(SegmentHeader, abortWord) == 3 * kCacheLine);
static_assert(offsetof(SegmentHeader, arrived) == 4 * kCacheLine);
static_assert(offsetof(SegmentHeader, generation) == 5 * kCacheLine);
static_assert(offsetof(SegmentHeader, stageBytes) == 6 * kCacheLine);
static_assert(offsetof(SegmentHeader, abortText) == 7 * kCacheLine);
static_assert(sizeof(SegmentHeader) % kCacheLine == 0);
static_assert(sizeof(SegmentHeader) == 7 * kCacheLine + kAbortTextBytes, "layout version 4");

// What a rank's time goes to. The first kCountedCategories are counted in the rank's telemetry
// (main thread only; they never nest in one another); the others only appear in a trace.
enum class Category : std::uint8_t {
  kForward = 0,         // the engine's forward pass (training and evaluation)
  kBackward = 1,        // the engine's backward pass
  kUpdate = 2,          // the optimizer's update of the weights
  kData = 3,            // waiting for the data loader's next batch
  kCollectiveWait = 4,  // inside a collective, until the last rank arrived
  kCollectiveMove = 5,  // inside a collective, after that: moving and reducing bytes
  kRendezvous = 6,      // inside a rendezvous or barrier
  kFault = 7,           // an injected delay (--inject-fault kind=slow)
  kCollective = 8,      // trace only: a whole collective (wait + move)
  kStep = 9,            // trace only: optimizer_step (its all-reduce and update)
  kEval = 10,           // trace only: an evaluation (its forwards and all-reduce are counted)
  kCheckpoint = 11,     // trace only: a checkpoint save or load
  kUser = 12,           // trace only: a span of the program's own (xs::Trace)
};
inline constexpr std::size_t kCountedCategories = static_cast<std::size_t>(Category::kFault) + 1;
inline constexpr std::size_t kCategories = static_cast<std::size_t>(Category::kUser) + 1;
const char* categoryName(Category category);

// Step times are counted in a histogram of kStepBucketsPerOctave buckets per doubling from
// 1 us (bucket b holds [2^(b/16), 2^((b+1)/16)) us): percentiles within 4.4%, up to 16.7 s.
inline constexpr std::size_t kStepBucketsPerOctave = 16;
inline constexpr std::size_t kStepBuckets = 24 * kStepBucketsPerOctave;

// A rank's running account of its time, steps and device memory.
struct alignas(kCacheLine) RankTelemetry {
  // Line 0: progress.
  std::atomic<std::uint64_t> steps;          // optimizer_step calls completed
  std::atomic<std::uint64_t> samples;        // training samples through Model::trainStep
  std::atomic<std::uint64_t> stepTarget;     // steps the run will take (xs::expect_steps; 0: unknown)
  std::atomic<std::uint64_t> lastStepNs;     // CLOCK_MONOTONIC end of the last step (or evaluation)
  std::atomic<std::uint64_t> windowStartNs;  // start of the first counted span
  std::atomic<std::uint64_t> windowEndNs;    // end of the last counted span
  std::atomic<std::uint32_t> spanCategory;   // Category + 1 of the span the main thread is in now; 0: none
  // Line 1: device memory and single steps.
  alignas(kCacheLine) std::atomic<std::uint64_t> deviceInUse;
  std::atomic<std::uint64_t> devicePeak;
  std::atomic<std::uint64_t> deviceCapacity;
  std::atomic<std::uint64_t> stepMinNs;
  std::atomic<std::uint64_t> stepMaxNs;
  std::atomic<std::uint64_t> stepsTimed;     // steps in the histogram (the first is not timed)
  // Line 2: nanoseconds in each counted category.
  alignas(kCacheLine) std::atomic<std::uint64_t> categoryNs[kCountedCategories];
  // Lines 3..: the step-time histogram.
  alignas(kCacheLine) std::atomic<std::uint32_t> stepHistogram[kStepBuckets];
};
static_assert(offsetof(RankTelemetry, deviceInUse) == kCacheLine);
static_assert(offsetof(RankTelemetry, categoryNs) == 2 * kCacheLine);
static_assert(offsetof(RankTelemetry, stepHistogram) == 3 * kCacheLine);
static_assert(sizeof(RankTelemetry) == 3 * kCacheLine + kStepBuckets * 4);

struct alignas(kCacheLine) RankSlot {
  // Line 0, written by the rank, read by peers checking divergence: the op (rendezvous or
  // collective) the rank last entered. opSeq is a seqlock over opHash/opTag/opState: the
  // rank stores 0 (odd-free "busy" marker), then the fields, then the new seq (release).
  std::atomic<std::uint64_t> opSeq;
  std::atomic<std::uint64_t> opHash;
  std::atomic<std::uint32_t> opState;
  std::atomic<std::uint32_t> opKind;  // OpKind
  // offset + 1 of the futex word the rank sleeps on (0: not sleeping), so whoever aborts
  // the job can wake it at once instead of waiting for its timed futex to expire.
  std::atomic<std::uint64_t> sleepingOn;
  std::atomic<std::uint64_t> payloadBytes[2];  // this rank's rendezvous payload size, per parity
  // CLOCK_MONOTONIC ns when the rank entered its last op: its last progress, as the launcher
  // reports it for a rank the others waited for in vain.
  std::atomic<std::uint64_t> opEnterNs;
  // Line 1: the op's tag text.
  alignas(kCacheLine) AtomicText<kTagBytes> opTag;
  // Line 2: process state, written by the launcher (pid, state, exit) and the rank (cpu).
  alignas(kCacheLine) std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> state;  // RankState
  std::atomic<std::int32_t> exitCode;
  std::atomic<std::int32_t> termSignal;
  std::atomic<std::int32_t> boundCpu;
  std::atomic<std::uint32_t> errorKind;  // ErrorKind; set (release) after errorText
  std::atomic<std::uint64_t> errorTimeNs;
  std::atomic<std::uint64_t> exitTimeNs;
  // CLOCK_MONOTONIC ns when the rank entered its first op (written once, by the rank): when
  // every rank has one, the gang is up (a restart's time to training again).
  std::atomic<std::uint64_t> firstOpNs;
  // Line 3: how many collective syncs the rank has arrived at (see ControlPlane::syncFlags);
  // written by the rank only, polled by its peers: alone on its line.
  alignas(kCacheLine) std::atomic<std::uint64_t> syncCount;
  std::atomic<std::uint32_t> syncSleepers;
  // Lines 4..: telemetry, written by the rank's main thread only (relaxed stores; telemetry.hpp),
  // read by the launcher's utilisation report and by `xspawn top` while the job runs.
  alignas(kCacheLine) RankTelemetry telemetry;
  // Then: the worker's own error message (an uncaught exception, exec failure).
  alignas(kCacheLine) AtomicText<kErrorBytes> errorText;
};
static_assert(offsetof(RankSlot, opTag) == 1 * kCacheLine);
static_assert(offsetof(RankSlot, pid) == 2 * kCacheLine);
static_assert(offsetof(RankSlot, syncCount) == 3 * kCacheLine);
static_assert(offsetof(RankSlot, telemetry) == 4 * kCacheLine);
static_assert(offsetof(RankSlot, errorText) == 4 * kCacheLine + sizeof(RankTelemetry));
static_assert(sizeof(RankSlot) % kCacheLine == 0);
static_assert(sizeof(RankSlot) == 4 * kCacheLine + sizeof(RankTelemetry) + kErrorBytes, "layout version 4");

// One ring FIFO's control words (the FIFO carrying data from rank r-1 to rank r), followed
// in the arena by its slots. head: slots the producer has filled; tail: slots the consumer
// has emptied; both only grow (64-bit: they never wrap).
inline constexpr std::size_t kMaxRingSlots = 16;
struct alignas(kCacheLine) FifoControl {
  std::atomic<std::uint64_t> head;  // written by the producer only
  std::atomic<std::uint32_t> headSleepers;
  alignas(kCacheLine) std::atomic<std::uint64_t> tail;  // written by the consumer only
  std::atomic<std::uint32_t> tailSleepers;
  alignas(kCacheLine) std::atomic<std::uint64_t> slotBytes[kMaxRingSlots];  // producer
};
static_assert(offsetof(FifoControl, tail) == kCacheLine);
static_assert(offsetof(FifoControl, slotBytes) == 2 * kCacheLine);
static_assert(sizeof(FifoControl) == 4 * kCacheLine);

// What local rank 0 asks of the launcher's machine proxy (machine_proxy.hpp).
enum class MachineOpKind : std::uint32_t {
  kRendezvous = 1,  // gather every machine's payload blob (the channel buffer) and tag
  kAllReduce = 2,   // all-reduce, in place, each local rank's slice of a staged chunk or heap tensor
  kBroadcast = 3,   // broadcast a local rank's staging chunk from one machine to all
};

// One request to the machine proxy: a line of fields and a line for the op's tag.
struct alignas(kCacheLine) MachineRequest {
  std::uint32_t kind;  // MachineOpKind
  std::uint32_t dtype;
  std::uint32_t op;
  std::uint32_t parity;      // kAllReduce from staging / kBroadcast: which staging buffers
  std::int32_t root;         // kBroadcast: the machine that has the data
  std::int32_t rootRank;     // kBroadcast: whose staging buffer holds it (local rank)
  std::uint64_t count;       // elements (kAllReduce), bytes (kBroadcast, kRendezvous)
  std::uint64_t heapOffset;  // kAllReduce: ~0 for staging, else the tensor's heap offset
  std::uint64_t opSeq;       // the op this request belongs to, checked across machines
  std::uint64_t opHash;
  alignas(kCacheLine) char opTag[kTagBytes];  // the op's tag, for a divergence report
};
static_assert(offsetof(MachineRequest, opTag) == kCacheLine);
static_assert(sizeof(MachineRequest) == 2 * kCacheLine);

// The cross-machine channel, present when a job spans machines. Local rank 0 posts requests
// (all local ranks have synchronised before each), at most two outstanding: request s lives
// in requests[s % 2], so rank 0 fills the next while the proxy serves the last (a pipelined
// all-reduce). The launcher's proxy thread serves them in order over the machines'
// transport (MPI) and publishes the last one served in doneSeq; local ranks wait on that.
// The buffer after the channel carries rendezvous payloads both ways.
struct alignas(kCacheLine) MachineChannel {
  // Line 0: written by the launcher before any worker starts.
  std::uint32_t machine;
  std::uint32_t machines;
  std::uint64_t bufferBytes;  // the payload buffer right after this struct
  // Line 1: requests posted so far. Local rank 0 fills requests[seq % 2], then stores seq
  // (release); the proxy loads it (acquire), then reads the request.
  alignas(kCacheLine) std::atomic<std::uint64_t> requestSeq;
  // Lines 2-5.
  MachineRequest requests[2];
  // Line 6: written by the proxy: the last request served (release: its results are in place).
  alignas(kCacheLine) std::atomic<std::uint64_t> doneSeq;
  std::atomic<std::uint32_t> doneSleepers;
  std::uint32_t reserved;
  std::uint64_t resultBytes;  // kRendezvous: bytes of the gathered result in the buffer
  // Lines 7-8: written by the proxy: it has joined the machines (1) and their handshake passed
  // (release: machine 0's host and held port, torch's MASTER_ADDR and MASTER_PORT, are in
  // place; a worker of `run` waits for them before it execs).
  alignas(kCacheLine) std::atomic<std::uint32_t> joined;
  std::int32_t masterPort;
  alignas(kCacheLine) char masterAddr[kCacheLine];
};
static_assert(offsetof(MachineChannel, requestSeq) == 1 * kCacheLine);
static_assert(offsetof(MachineChannel, requests) == 2 * kCacheLine);
static_assert(offsetof(MachineChannel, doneSeq) == 6 * kCacheLine);
static_assert(offsetof(MachineChannel, joined) == 7 * kCacheLine);
static_assert(offsetof(MachineChannel, masterAddr) == 8 * kCacheLine);
static_assert(sizeof(MachineChannel) == 9 * kCacheLine);


// With --trace, each rank has a TraceRing after the machine channel: a header line, a table of
// the names its records use, and a ring of records (the newest `capacity` spans are kept). Any
// thread of the rank claims a record with a fetch_add on `head`, fills it and publishes it by
// storing its index + 1 in `seq` (release), so the launcher reading the ring after the rank
// ended, or killed mid-write, skips a record that was never completed.
inline constexpr std::size_t kTraceNameBytes = 64 * 1024;  // names of one rank's records
inline constexpr std::size_t kTraceThreads = 8;            // named threads per rank
struct alignas(kCacheLine) TraceRingHeader {
  std::atomic<std::uint64_t> head;       // records claimed so far; only grows
  std::atomic<std::uint32_t> namesUsed;  // bytes of the name table written (release)
  std::atomic<std::uint32_t> threadName[kTraceThreads];  // name of thread t (offset + 1; 0: none)
};
static_assert(sizeof(TraceRingHeader) == kCacheLine);

struct alignas(kCacheLine) TraceRecord {
  std::atomic<std::uint64_t> seq;  // index + 1 once complete
  std::uint64_t startNs;           // CLOCK_MONOTONIC
  std::uint64_t durNs;
  std::uint64_t bytes;             // a collective's payload bytes
  std::uint64_t waitNs;            // a collective's or rendezvous' wait for the last rank
  std::uint32_t name;              // offset + 1 in the name table (0: none)
  std::uint8_t category;           // Category
  std::uint8_t thread;             // the recording thread's index (0: the main thread)
  std::uint8_t opKind;             // OpKind of a collective or rendezvous
  std::uint8_t algorithm;          // a collective's xs::Algorithm
  std::uint64_t reserved[2];
};
static_assert(sizeof(TraceRecord) == kCacheLine);

inline constexpr std::uint64_t alignUp(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
// One rank's trace ring (header, name table, `events` records); 0 when the job is not traced.
inline constexpr std::uint64_t traceRingBytes(std::uint64_t events) {
  return events ? alignUp(sizeof(TraceRingHeader) + kTraceNameBytes + events * sizeof(TraceRecord), 4096) : 0;
}

// Sizes of the collectives' arena: staging buffers (two parities per rank), one ring FIFO per
// rank, and the shared heap (each rank's region of zero-copy tensors).
struct CollectiveGeometry {
  std::uint64_t stageBytes = 0;
  std::uint64_t ringSlots = 0;
  std::uint64_t ringSlotBytes = 0;
  std::uint64_t heapBytes = 0;
  std::uint64_t machineBufferBytes = 0;  // > 0: the job spans machines (MachineChannel + buffer)
  std::uint64_t traceEvents = 0;         // > 0: records per rank's trace ring (--trace)
};

// Geometry of a segment, computed identically by creator and attacher.
struct SegmentGeometry {
  std::uint32_t worldSize = 0;
  std::uint64_t payloadChunk = 0;
  CollectiveGeometry coll;

  std::uint64_t rankSlotsOffset() const { return sizeof(SegmentHeader); }
  std::uint64_t payloadOffset() const { return rankSlotsOffset() + worldSize * sizeof(RankSlot); }
  std::uint64_t payloadStride() const { return 2 * payloadChunk; }
  std::uint64_t arenaOffset() const {
    return alignUp(payloadOffset() + worldSize * payloadStride(), 4096);
  }
  // Arena-relative offsets.
  std::uint64_t stageOffset() const { return 0; }
  std::uint64_t stageStride() const { return alignUp(2 * coll.stageBytes, 4096); }
  std::uint64_t fifoOffset() const { return stageOffset() + worldSize * stageStride(); }
  std::uint64_t fifoStride() const {
    return alignUp(sizeof(FifoControl) + coll.ringSlots * coll.ringSlotBytes, 4096);
  }
  std::uint64_t heapOffset() const { return fifoOffset() + worldSize * fifoStride(); }
  std::uint64_t heapStride() const { return alignUp(coll.heapBytes, 4096); }
  std::uint64_t machineOffset() const { return heapOffset() + worldSize * heapStride(); }
  std::uint64_t machineBytes() const {
    return coll.machineBufferBytes ? alignUp(sizeof(MachineChannel) + coll.machineBufferBytes, 4096) : 0;
  }
  std::uint64_t traceOffset() const { return machineOffset() + machineBytes(); }
  std::uint64_t traceStride() const { return traceRingBytes(coll.traceEvents); }
  std::uint64_t arenaBytes() const { return traceOffset() + worldSize * traceStride(); }
  std::uint64_t totalBytes() const { return arenaOffset() + arenaBytes(); }
};

inline std::uint64_t packAbort(AbortReason reason, int rank) {
  return (static_cast<std::uint64_t>(reason) << 32) | static_cast<std::uint32_t>(rank + 1);
}
inline AbortReason abortReasonOf(std::uint64_t word) { return static_cast<AbortReason>(word >> 32); }
inline int abortRankOf(std::uint64_t word) { return static_cast<int>(word & 0xffffffffu) - 1; }

}  // namespace xs::detail
