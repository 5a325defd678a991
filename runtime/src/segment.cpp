// segment.cpp: creation, attachment, removal and stale sweep of job segments.
#include "segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "xspawn/error.hpp"
#include "xspawn/spawn.hpp"

namespace bip = boost::interprocess;

namespace xs::detail {
namespace {

constexpr const char* kShmDir = "/dev/shm";
// '@' is outside the job ids' alphabet (validateJobId): no job's segment ends like this.
constexpr std::string_view kTransportSuffix = "@transport";
constexpr const char* kTransportNote = "/launcher";

std::string humanBytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string namePrefix() { return fmt::format("xspawn-{}-", getuid()); }

void writeHeader(SegmentHeader& h, const SegmentConfig& c) {
  const SegmentGeometry& g = c.geometry;
  h.version = kLayoutVersion;
  h.worldSize = g.worldSize;
  h.totalBytes = g.totalBytes();
  h.rankSlotsOffset = g.rankSlotsOffset();
  h.payloadOffset = g.payloadOffset();
  h.payloadStride = g.payloadStride();
  h.payloadChunk = g.payloadChunk;
  h.arenaOffset = g.arenaOffset();
  h.arenaBytes = g.arenaBytes();
  h.stageBytes = g.coll.stageBytes;
  h.ringSlots = g.coll.ringSlots;
  h.ringSlotBytes = g.coll.ringSlotBytes;
  h.heapBytes = g.coll.heapBytes;
  h.stageOffset = g.stageOffset();
  h.fifoOffset = g.fifoOffset();
  h.heapOffset = g.heapOffset();
  h.machineOffset = g.machineBytes() ? g.machineOffset() : 0;
  h.traceEvents = static_cast<std::uint32_t>(g.coll.traceEvents);
  h.traceOffset = g.traceOffset();
  h.launcherPid = getpid();
  h.launcherStartTicks = processStartTicks(getpid());
  h.createdUnixNs = nowUnixNs();
  h.timeoutMs = c.timeoutMs;
  h.waitMode = c.waitMode;
  h.usableCpus = static_cast<std::uint32_t>(usableCores());
  std::snprintf(h.jobId, sizeof h.jobId, "%s", c.jobId.c_str());
  // The magic goes last: a sweeper that sees it knows the rest is written.
  std::atomic_thread_fence(std::memory_order_release);
  h.magic = kSegmentMagic;
}

}  // namespace

std::string Segment::nameFor(const std::string& jobId) { return namePrefix() + jobId; }

std::string Segment::transportDirFor(const std::string& segmentName) {
  return std::string(kShmDir) + "/" + segmentName + std::string(kTransportSuffix);
}

std::string Segment::createTransportDir(const std::string& segmentName) {
  // Only a directory this call made: an entry already there may be another job's with the
  // same id (leaving MPI) or someone else's, and is neither used nor followed.
  const std::string dir = transportDirFor(segmentName);
  if (::mkdir(dir.c_str(), 0700) != 0) return {};
  const std::string note = fmt::format("{} {}\n", getpid(), processStartTicks(getpid()));
  const int fd = ::open((dir + kTransportNote).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && ::write(fd, note.data(), note.size()) == static_cast<ssize_t>(note.size());
  if (fd >= 0) ::close(fd);
  if (written) return dir;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return {};
}

void requireFreeSpace(const std::string& dir, std::uint64_t bytes) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) {
    XS_THROW(ShmSpaceError, fmt::format("cannot read the free space of {}: {}; xspawn needs a "
                                        "tmpfs mounted there for its shared memory",
                                        dir, std::strerror(errno)));
  }
  std::uint64_t freeBytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  std::uint64_t totalBytes = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
  if (freeBytes < bytes) {
    XS_THROW(ShmSpaceError,
             fmt::format("not enough shared memory: the job needs {} in {} but only {} of {} is "
                         "free; free space there (see `xspawn clean`), give the container more "
                         "(e.g. docker run --shm-size=1g) or use fewer processes",
                         humanBytes(bytes), dir, humanBytes(freeBytes), humanBytes(totalBytes)));
  }
}

std::uint64_t processStartTicks(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  // Fields after "pid (comm)" start at field 3 (state); starttime is field 22.
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

std::unique_ptr<Segment> Segment::create(const SegmentConfig& config) {
  const SegmentGeometry& g = config.geometry;
  const std::uint64_t bytes = g.totalBytes();
  // The shared heap is only reserved (a sparse range of the file): its pages are taken from
  // /dev/shm as shared_alloc hands them out (reserveHeap), so a large default costs nothing.
  const std::uint64_t heapFirst = g.arenaOffset() + g.heapOffset(), heapEnd = g.arenaOffset() + g.machineOffset();
  requireFreeSpace(kShmDir, bytes - (heapEnd - heapFirst));
  std::unique_ptr<Segment> seg(new Segment());
  seg->name_ = nameFor(config.jobId);
  bip::permissions perm(0600);
  try {
    bip::shared_memory_object shm(bip::create_only, seg->name_.c_str(), bip::read_write, perm);
    seg->owner_ = true;  // from here on, a failure must remove the name again
    try {
      shm.truncate(static_cast<bip::offset_t>(bytes));
      int fd = shm.get_mapping_handle().handle;
      ::fchmod(fd, 0600);  // whatever the umask was
      int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(heapFirst));
      if (rc == 0 && bytes > heapEnd) rc = ::posix_fallocate(fd, static_cast<off_t>(heapEnd), static_cast<off_t>(bytes - heapEnd));
      if (rc != 0) {
        XS_THROW(ShmSpaceError,
                 fmt::format("cannot reserve {} for the job's shared memory in {}: {}; free "
                             "space there or give the container more (docker run --shm-size=1g)",
                             humanBytes(bytes), kShmDir, std::strerror(rc)));
      }
      seg->region_ = bip::mapped_region(shm, bip::read_write);
    } catch (...) {
      bip::shared_memory_object::remove(seg->name_.c_str());
      seg->owner_ = false;
      throw;
    }
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error) {
      XS_THROW(SegmentError,
               fmt::format("job id '{}' is already in use by a running job (segment {}/{}); "
                           "choose another --job-id",
                           config.jobId, kShmDir, seg->name_));
    }
    XS_THROW(SegmentError, fmt::format("cannot create shared memory {}/{}: {}", kShmDir,
                                       seg->name_, e.what()));
  }
  seg->base_ = static_cast<std::byte*>(seg->region_.get_address());
  seg->size_ = seg->region_.get_size();
  // The fresh pages are zero (every atomic starts at 0); only the header needs values.
  writeHeader(seg->header(), config);
  return seg;
}

std::shared_ptr<const std::byte> Segment::viewReadOnly(const std::byte* at, std::size_t bytes) const {
  if (name_.empty() || bytes == 0) return nullptr;
  try {
    bip::shared_memory_object shm(bip::open_only, name_.c_str(), bip::read_only);
    auto view = std::make_shared<bip::mapped_region>(shm, bip::read_only, at - base_, bytes);
    return {view, static_cast<const std::byte*>(view->get_address())};
  } catch (const bip::interprocess_exception&) {
    return nullptr;
  }
}

void reserveHeap(const std::string& name, std::uint64_t offset, std::uint64_t bytes) {
  if (name.empty() || bytes == 0) return;  // private memory: nothing to reserve
  int fd = ::shm_open(("/" + name).c_str(), O_RDWR, 0);
  if (fd < 0) XS_THROW(SystemError, fmt::format("cannot open the job's shared memory {}/{}: {}", kShmDir, name, std::strerror(errno)));
  int rc = ::posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes));
  ::close(fd);
  if (rc != 0) {
    XS_THROW(ShmSpaceError,
             fmt::format("shared_alloc: cannot take {} more of {} for the shared heap: {}; free space there "
                         "(see `xspawn clean`), give the container more (docker run --shm-size=1g) or use "
                         "fewer processes",
                         humanBytes(bytes), kShmDir, std::strerror(rc)));
  }
}

std::unique_ptr<Segment> Segment::createPrivate(const SegmentConfig& config) {
  std::unique_ptr<Segment> seg(new Segment());
  seg->size_ = config.geometry.totalBytes();
  void* memory = std::aligned_alloc(4096, seg->size_);
  if (!memory) XS_THROW(SegmentError, fmt::format("cannot allocate {}", humanBytes(seg->size_)));
  std::memset(memory, 0, seg->size_);
  seg->privateMemory_ = std::unique_ptr<void, void (*)(void*)>(memory, std::free);
  seg->base_ = static_cast<std::byte*>(memory);
  seg->unlinked_ = true;
  writeHeader(seg->header(), config);
  return seg;
}

std::unique_ptr<Segment> Segment::open(const std::string& name) {
  std::unique_ptr<Segment> seg(new Segment());
  seg->name_ = name;
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    seg->region_ = bip::mapped_region(shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    XS_THROW(SegmentError,
             fmt::format("cannot open the job's shared memory {}/{}: {} (is the launcher still "
                         "running? workers must be started by xspawn)",
                         kShmDir, name, e.what()));
  }
  seg->base_ = static_cast<std::byte*>(seg->region_.get_address());
  seg->size_ = seg->region_.get_size();
  const SegmentHeader& h = seg->header();
  if (seg->size_ < sizeof(SegmentHeader) || h.magic != kSegmentMagic) {
    XS_THROW(SegmentError, fmt::format("{}/{} is not an xspawn job segment (bad magic)",
                                       kShmDir, name));
  }
  if (h.version != kLayoutVersion) {
    XS_THROW(SegmentError,
             fmt::format("{}/{} has layout version {} but this runtime speaks version {}: "
                         "launcher and worker come from different xspawn builds",
                         kShmDir, name, h.version, kLayoutVersion));
  }
  if (h.totalBytes != seg->size_) {
    XS_THROW(SegmentError, fmt::format("{}/{} is {} bytes but its header says {}", kShmDir, name,
                                       seg->size_, h.totalBytes));
  }
  return seg;
}

void Segment::unlink() {
  if (unlinked_ || name_.empty()) return;
  bip::shared_memory_object::remove(name_.c_str());
  unlinked_ = true;
}

Segment::~Segment() {
  if (owner_) unlink();
}

std::uint64_t nowUnixNs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

namespace {

// This user's entries in /dev/shm: the job segments, or (transportDirs) the transport
// directories, by name, sorted.
std::vector<std::string> userEntries(bool transportDirs) {
  std::vector<std::string> names;
  const std::string prefix = namePrefix();
  DIR* dir = ::opendir(kShmDir);
  if (!dir) return names;
  while (dirent* e = ::readdir(dir)) {
    std::string n = e->d_name;
    const bool transport = n.size() > kTransportSuffix.size() && n.ends_with(kTransportSuffix);
    if (n.rfind(prefix, 0) == 0 && transport == transportDirs) names.push_back(n);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// Whether a launcher (pid, and its start time from processStartTicks) is no longer running:
// its /proc entry is gone, or the pid now names another process.
bool launcherGone(int pid, std::uint64_t startTicks) {
  const std::uint64_t now = processStartTicks(pid);
  return now == 0 || now != startTicks;
}
std::string launcherGoneText(int pid) { return fmt::format("its launcher (pid {}) is no longer running", pid); }

// Something half-made (its maker died before finishing it) is left to a live maker for a
// minute.
bool overAMinuteOld(const struct stat& st) {
  return nowUnixNs() - static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL > 60ULL * 1000000000ULL;
}
constexpr const char* kHalfMadeText = "it was never completed and is over a minute old";

// A transport directory of this user's whose launcher is no longer running, by the note it
// wrote (pid and start time, as a segment's header); without a readable note (its launcher
// died making it), once it is over a minute old. 0 when it is not, else the note's pid or -1.
int staleTransportDir(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) return 0;
  char text[64] = {};
  const int fd = ::open((path + kTransportNote).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  const ssize_t got = fd >= 0 ? ::read(fd, text, sizeof text - 1) : -1;
  if (fd >= 0) ::close(fd);
  int pid = 0;
  unsigned long long noted = 0;
  if (got > 0 && std::sscanf(text, "%d %llu", &pid, &noted) == 2 && pid > 0) return launcherGone(pid, noted) ? pid : 0;
  return overAMinuteOld(st) ? -1 : 0;
}

// Removes a stale transport directory (unless dryRun); whether it was stale and is gone.
bool removeStaleTransportDir(const std::string& path, bool dryRun, int* pid) {
  *pid = staleTransportDir(path);
  if (*pid == 0) return false;
  if (dryRun) return true;
  std::error_code ec;
  return std::filesystem::remove_all(path, ec) > 0 && !ec;
}

// The transport directories whose segment is gone and whose launcher is no longer running
// (it removes the segment's name first, and the directory once MPI is done with it).
void sweepOrphanTransportDirs(bool dryRun, std::vector<StaleSegment>& removed) {
  const std::string prefix = namePrefix();
  for (const std::string& n : userEntries(true)) {
    const std::string segment = n.substr(0, n.size() - kTransportSuffix.size());
    struct stat st {};
    if (::lstat((std::string(kShmDir) + "/" + segment).c_str(), &st) == 0) continue;  // the sweep's other half
    StaleSegment s;
    s.jobId = segment.substr(prefix.size());
    s.transportDir = std::string(kShmDir) + "/" + n;
    if (!removeStaleTransportDir(s.transportDir, dryRun, &s.launcherPid)) continue;
    s.why = s.launcherPid > 0 ? launcherGoneText(s.launcherPid) : kHalfMadeText;
    removed.push_back(s);
  }
}

}  // namespace

std::vector<std::string> userSegmentNames() { return userEntries(false); }

std::vector<StaleSegment> sweepStaleSegments(bool dryRun) {
  std::vector<StaleSegment> removed;
  const std::string prefix = namePrefix();
  for (const std::string& n : userSegmentNames()) {
    StaleSegment s;
    s.name = n;
    s.jobId = n.substr(prefix.size());
    int fd = ::open((std::string(kShmDir) + "/" + n).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    bool stale = false;
    if (::fstat(fd, &st) == 0 && st.st_uid == getuid()) {
      SegmentHeader h{};
      ssize_t got = ::pread(fd, &h, sizeof h, 0);
      if (got != static_cast<ssize_t>(sizeof h) || h.magic != kSegmentMagic) {
        // Half-created: its creator died between shm_open and writing the header. Leave young
        // ones alone (the creator may be at work right now).
        if (overAMinuteOld(st)) {
          stale = true;
          s.why = kHalfMadeText;
        }
      } else {
        s.launcherPid = h.launcherPid;
        if (launcherGone(h.launcherPid, h.launcherStartTicks)) {
          stale = true;
          s.why = launcherGoneText(h.launcherPid);
        }
      }
    }
    ::close(fd);
    if (!stale) continue;
    if (!dryRun) bip::shared_memory_object::remove(n.c_str());
    // Its transport directory, when the launcher its note names is gone too (a job started
    // again with the same id may have made a new one).
    int pid = 0;
    if (const std::string dir = Segment::transportDirFor(n); removeStaleTransportDir(dir, dryRun, &pid)) {
      s.transportDir = dir;
    }
    removed.push_back(s);
  }
  sweepOrphanTransportDirs(dryRun, removed);
  return removed;
}

}  // namespace xs::detail
