// segment.hpp: a job's shared-memory segment: creation (with the /dev/shm space check and
// reservation), attachment by name, typed access to its parts, removal, and the sweep that
// removes segments whose launcher is gone.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "segment_layout.hpp"

namespace xs::detail {

struct SegmentConfig {
  std::string jobId;
  SegmentGeometry geometry;
  std::int64_t timeoutMs = 300000;
  std::uint32_t waitMode = 0;
};

class Segment {
 public:
  // "xspawn-<uid>-<jobId>": per user, so two users never collide and a user only ever
  // sweeps their own leftovers.
  static std::string nameFor(const std::string& jobId);
  // "/dev/shm/<segment name>@transport": under mpirun, the directory where the launcher's
  // transport keeps its files (MachineTransport::prepare), removed after the transport ends.
  static std::string transportDirFor(const std::string& segmentName);
  // Makes that directory (mode 0700) with a note of this launcher (pid and start time) for the
  // sweep; its path, or empty when it cannot be made or something is already there.
  static std::string createTransportDir(const std::string& segmentName);
  // Creates the segment exclusively (mode 0600) after checking that /dev/shm has room,
  // reserves its pages (posix_fallocate: a full /dev/shm is an error now, not a SIGBUS
  // later) and writes the header. Throws ShmSpaceError / SegmentError.
  static std::unique_ptr<Segment> create(const SegmentConfig& config);
  // Opens an existing job segment by name and checks magic, version and size.
  static std::unique_ptr<Segment> open(const std::string& name);
  // A private, unnamed segment (plain memory) for a world of one outside any launcher.
  static std::unique_ptr<Segment> createPrivate(const SegmentConfig& config);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name from /dev/shm (the mapping stays valid until destruction). Idempotent.
  void unlink();
  // Unlink the name when this object is destroyed (the creator's job).
  void setOwner(bool owner) { owner_ = owner; }

  const std::string& name() const { return name_; }
  // A second mapping of `bytes` from `at` (a pointer into this segment), read-only: the same
  // pages, unmapped when the last copy of the pointer goes. Null for a private segment or when
  // the system refuses it (the name already gone at the end of a failed job, say).
  std::shared_ptr<const std::byte> viewReadOnly(const std::byte* at, std::size_t bytes) const;
  std::byte* base() const { return base_; }
  std::size_t size() const { return size_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  int worldSize() const { return static_cast<int>(header().worldSize); }
  RankSlot& slot(int rank) const {
    return reinterpret_cast<RankSlot*>(base_ + header().rankSlotsOffset)[rank];
  }
  std::byte* payload(int rank, int parity) const {
    return base_ + header().payloadOffset + rank * header().payloadStride +
           parity * header().payloadChunk;
  }
  std::byte* arena() const { return base_ + header().arenaOffset; }
  // The machine channel of a job spanning machines, nullptr on one machine.
  MachineChannel* machineChannel() const {
    const std::uint64_t at = header().machineOffset;
    return at ? reinterpret_cast<MachineChannel*>(arena() + at) : nullptr;
  }
  std::byte* machineBuffer() const {
    return reinterpret_cast<std::byte*>(machineChannel()) + sizeof(MachineChannel);
  }
  // Rank r's trace ring (header, name table, records), nullptr when the job is not traced.
  TraceRingHeader* traceRing(int rank) const {
    const SegmentHeader& h = header();
    if (h.traceEvents == 0) return nullptr;
    return reinterpret_cast<TraceRingHeader*>(arena() + h.traceOffset +
                                              static_cast<std::uint64_t>(rank) * traceRingBytes(h.traceEvents));
  }
  static char* traceNames(TraceRingHeader* ring) { return reinterpret_cast<char*>(ring + 1); }
  static TraceRecord* traceRecords(TraceRingHeader* ring) {
    return reinterpret_cast<TraceRecord*>(traceNames(ring) + kTraceNameBytes);
  }
  std::uint64_t offsetOf(const void* p) const {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_);
  }

 private:
  Segment() = default;
  std::string name_;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;
  bool unlinked_ = false;
  std::unique_ptr<void, void (*)(void*)> privateMemory_{nullptr, nullptr};
  boost::interprocess::mapped_region region_;
};

// Fails with ShmSpaceError (size needed, size free, the fix) when `dir` has less than
// `bytes` free.
void requireFreeSpace(const std::string& dir, std::uint64_t bytes);
// Takes the pages of [offset, offset + bytes) of the named segment from /dev/shm (the shared
// heap is created sparse); ShmSpaceError when there is no room. Nothing for private memory.
void reserveHeap(const std::string& name, std::uint64_t offset, std::uint64_t bytes);

// The kernel's start time of a process (clock ticks since boot), 0 when it does not exist.
std::uint64_t processStartTicks(int pid);
// The wall clock (CLOCK_REALTIME) in nanoseconds since 1970, as SegmentHeader::createdUnixNs.
std::uint64_t nowUnixNs();
// This user's job segments in /dev/shm, by name, sorted.
std::vector<std::string> userSegmentNames();

struct StaleSegment {
  std::string name;  // the segment in /dev/shm; empty: a transport directory left without one
  std::string jobId;
  int launcherPid = 0;
  std::string why;
  std::string transportDir;  // the transport directory removed (with the segment, or alone)
};
// Removes this user's job segments whose launcher is no longer running (or that were left
// half-created long ago), with their transport directories, and the transport directories
// whose segment is gone; returns what it removed. `dryRun` only lists them.
std::vector<StaleSegment> sweepStaleSegments(bool dryRun = false);

}  // namespace xs::detail
