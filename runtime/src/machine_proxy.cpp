// machine_proxy.cpp: the launcher's proxy thread for jobs spanning machines.
#include "machine_proxy.hpp"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "arena.hpp"
#include "control.hpp"
#include "reduce_kernels.hpp"
#include "wait.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

// What every launcher tells the others when it joins: the job's shape must match. One fixed
// size, the version first, so that launchers of other versions still exchange it and are told
// so by the version check (not by an MPI size error).
struct Hello {
  std::int32_t version;
  std::int32_t nprocs;
  std::uint64_t stageBytes;
  std::uint64_t heapBytes;
  std::uint64_t bufferBytes;
  std::uint64_t originNs;  // the job's start on this launcher's clock
  std::int32_t heldPort;   // the MASTER_PORT this launcher holds (machine 0), or 0
  std::int32_t reserved;
  char host[256];          // MPI's processor name (MPI_MAX_PROCESSOR_NAME is 256 in Open MPI)
  char spare[208];
};
static_assert(sizeof(Hello) == 512);

MachineProxy::OpCheck opCheckOf(const MachineRequest& request) {
  MachineProxy::OpCheck c{};
  c.seq = request.opSeq;
  c.hash = request.opHash;
  std::memcpy(c.tag, request.opTag, sizeof c.tag);
  c.tag[sizeof c.tag - 1] = '\0';
  return c;
}

std::size_t pad8(std::size_t n) { return (n + 7) / 8 * 8; }

// How long the proxy polls for the next request after serving one.
constexpr std::chrono::microseconds kProxySpin{30};

}  // namespace

MachineProxy::MachineProxy(Segment& segment, std::unique_ptr<MachineTransport> transport, std::string transportDir,
                           std::uint64_t originNs, std::int64_t skewNs, int heldPort)
    : segment_(segment),
      transport_(std::move(transport)),
      transportDir_(std::move(transportDir)),
      channel_(*segment.machineChannel()),
      originNs_(originNs),
      skewNs_(skewNs),
      heldPort_(heldPort) {
  eventFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (eventFd_ < 0) XS_THROW(SystemError, fmt::format("eventfd: {}", std::strerror(errno)));
}

MachineProxy::~MachineProxy() {
  stop(false);
  removeTransportFiles();
  if (eventFd_ >= 0) ::close(eventFd_);
}

void MachineProxy::removeTransportFiles(bool forget) {
  if (transportDir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(transportDir_, ec);
  if (forget) transportDir_.clear();
}

void MachineProxy::start() { thread_ = std::thread([this] { threadMain(); }); }

std::vector<MachineProxy::Event> MachineProxy::takeEvents() {
  std::uint64_t drained;
  while (::read(eventFd_, &drained, sizeof drained) == sizeof drained) {
  }
  std::lock_guard lock(mutex_);
  return std::exchange(events_, {});
}

void MachineProxy::reportFailure(int exitCode, const std::string& text) {
  std::lock_guard lock(mutex_);
  if (reported_) return;
  reported_ = true;
  toSend_ = MachineNotice{static_cast<int>(channel_.machine), exitCode, text};
}

std::vector<std::string> MachineProxy::hosts() const {
  std::lock_guard lock(mutex_);
  return hosts_;
}

std::vector<int> MachineProxy::finishedMachines() const {
  std::lock_guard lock(mutex_);
  return finishedMachines_;
}

void MachineProxy::stop(bool clean, const std::function<void()>& whileWaiting) {
  if (!thread_.joinable()) return;
  clean_.store(clean);
  stop_.store(true);
  futexWakeAll(&channel_.requestSeq);
  if (clean) {
    // MPI_Finalize returns when every machine has finished: the job ends with the slowest.
    while (!finished_.load()) {
      if (whileWaiting) whileWaiting();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    thread_.join();
    return;
  }
  // A thread still inside MPI_Init (a machine that never started) or a blocking MPI call
  // cannot be interrupted: give it a moment, then leave it to the process's end.
  for (int i = 0; i < 50 && !finished_.load(); ++i) {
    if (whileWaiting) whileWaiting();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (finished_.load()) thread_.join();
  else thread_.detach();
}

void MachineProxy::post(Event event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  std::uint64_t one = 1;
  ssize_t ignored = ::write(eventFd_, &one, sizeof one);
  (void)ignored;
}

void MachineProxy::postLocal(const std::string& text) {
  Event e;
  e.text = text;
  post(std::move(e));
}

void MachineProxy::fail(AbortReason reason, const std::string& text) {
  broken_ = true;
  ControlPlane::raiseAbort(segment_, reason, -1, text);
  postLocal(text);
}

void MachineProxy::pump() {
  std::optional<MachineNotice> send;
  {
    std::lock_guard lock(mutex_);
    send = std::exchange(toSend_, std::nullopt);
  }
  if (send) transport_->sendNotice(*send);
  while (auto notice = transport_->pollNotice()) {
    if (notice->exitCode == kFinishedNotice) {
      std::lock_guard lock(mutex_);
      finishedMachines_.push_back(notice->from);
      continue;
    }
    std::string host;
    {
      std::lock_guard lock(mutex_);
      if (notice->from >= 0 && notice->from < static_cast<int>(hosts_.size())) host = hosts_[notice->from];
    }
    std::string text = fmt::format("machine {}{} failed: {}", notice->from,
                                   host.empty() ? "" : fmt::format(" ({})", host), notice->text);
    ControlPlane::raiseAbort(segment_, AbortReason::kMachineFailed, -1, text);
    Event e;
    e.remote = true;
    e.notice = *notice;
    e.text = text;
    post(std::move(e));
  }
}

void MachineProxy::complete(const std::vector<MachineTransport::Handle>& handles, bool stoppable) {
  std::vector<bool> done(handles.size(), false);
  for (std::size_t left = handles.size(); left > 0;) {
    for (std::size_t i = 0; i < handles.size(); ++i) {
      if (!done[i] && transport_->test(handles[i])) {
        done[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (stoppable) {
      pump();
      if (stop_.load(std::memory_order_relaxed)) throw Stopped{};
    }
    // The transport progresses only when tested; yield the core to a worker between tests.
    sched_yield();
  }
}

void MachineProxy::flushNotices() {
  // A failed job's launcher exits right after this: its notice must be on its way first.
  pump();
  for (int i = 0; i < 300 && !transport_->noticesSent(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void MachineProxy::handshake() {
  const SegmentHeader& h = segment_.header();
  Hello mine{};
  mine.nprocs = static_cast<std::int32_t>(h.worldSize);
  mine.version = static_cast<std::int32_t>(kLayoutVersion);
  mine.stageBytes = h.stageBytes;
  mine.heapBytes = h.heapBytes;
  mine.bufferBytes = channel_.bufferBytes;
  mine.originNs = originNs_ + static_cast<std::uint64_t>(skewNs_);
  mine.heldPort = heldPort_;
  std::snprintf(mine.host, sizeof mine.host, "%s", transport_->hostName().c_str());
  std::vector<Hello> all(transport_->machines());
  complete({transport_->allGather(&mine, sizeof mine, all.data())});
  {
    std::lock_guard lock(mutex_);
    for (const Hello& x : all) hosts_.emplace_back(x.host);
  }
  for (int m = 1; m < static_cast<int>(all.size()); ++m) {
    const Hello& a = all[0];
    const Hello& b = all[m];
    if (a.nprocs != b.nprocs || a.version != b.version || a.stageBytes != b.stageBytes ||
        a.heapBytes != b.heapBytes || a.bufferBytes != b.bufferBytes) {
      fail(AbortReason::kDivergence,
           fmt::format("the machines run different jobs: machine 0 ({}) has --nprocs {}, --stage-size {}, "
                       "--shared-heap {} (layout {}); machine {} ({}) has --nprocs {}, --stage-size {}, "
                       "--shared-heap {} (layout {}): start every machine with the same options and "
                       "the same xspawn",
                       a.host, a.nprocs, a.stageBytes, a.heapBytes, a.version, m, b.host, b.nprocs,
                       b.stageBytes, b.heapBytes, b.version));
      return;
    }
  }
  std::vector<std::uint64_t> origins;
  for (const Hello& x : all) origins.push_back(x.originNs);
  alignClocks(origins);
  // Machine 0's store address for PyTorch workers (torch_env.hpp), published with `joined`; a
  // host name too long for the channel gives none (the user passes MASTER_ADDR, docs/pytorch.md).
  const bool fits = std::strlen(all[0].host) < sizeof channel_.masterAddr;
  channel_.masterPort = fits ? all[0].heldPort : 0;
  std::snprintf(channel_.masterAddr, sizeof channel_.masterAddr, "%s", fits ? all[0].host : "");
  channel_.joined.store(1, std::memory_order_release);
}

bool MachineProxy::verifyOps(const std::vector<OpCheck>& all, const OpCheck& mine) {
  for (const OpCheck& c : all) {
    if (c.seq == mine.seq && c.hash == mine.hash) continue;
    std::string where;
    for (std::size_t m = 0; m < all.size(); ++m) {
      where += fmt::format("{}machine {} at '{}'#{}", m ? "; " : "", m, all[m].tag, all[m].seq);
    }
    fail(AbortReason::kDivergence,
         fmt::format("the machines reached different ops (or the same op with other arguments): {}", where));
    return false;
  }
  checkedOp_ = mine.seq;
  return true;
}

bool MachineProxy::checkOp(const MachineRequest& request) {
  if (request.opSeq == checkedOp_) return true;
  // The same size as a small all-reduce's exchange: machines at different ops must still
  // exchange equal sizes (a transport writes what the sender sent), so that the check can
  // tell them apart instead of overrunning a buffer.
  const OpCheck mine = opCheckOf(request);
  std::vector<std::byte> send(kCheckExchangeBytes), recv(kCheckExchangeBytes * transport_->machines());
  std::memcpy(send.data(), &mine, sizeof mine);
  complete({transport_->allGather(send.data(), send.size(), recv.data())});
  std::vector<OpCheck> all(transport_->machines());
  for (std::size_t m = 0; m < all.size(); ++m) std::memcpy(&all[m], recv.data() + m * kCheckExchangeBytes, sizeof(OpCheck));
  return verifyOps(all, mine);
}

bool MachineProxy::serveSmallAllReduce(const MachineRequest& request, std::byte* const* slices) {
  // One allgather of [the op's identity | this machine's reduced chunk] instead of an op
  // check and then an all-reduce (two network latencies): every machine then reduces the
  // machines' copies itself, in machine order, so all get the same bits.
  const auto type = static_cast<DType>(request.dtype);
  const std::size_t es = dtypeSize(type);
  const int world = segment_.worldSize(), machines = transport_->machines();
  const std::size_t stride = kCheckExchangeBytes;
  std::vector<std::byte> send(stride), recv(stride * machines);
  const OpCheck mine = opCheckOf(request);
  std::memcpy(send.data(), &mine, sizeof mine);
  for (int k = 0; k < world; ++k) {
    const Slice s = slice_of(request.count, k, world);
    std::memcpy(send.data() + sizeof(OpCheck) + s.first * es, slices[k], s.size * es);
  }
  complete({transport_->allGather(send.data(), stride, recv.data())});
  std::vector<OpCheck> all(machines);
  for (int m = 0; m < machines; ++m) std::memcpy(&all[m], recv.data() + m * stride, sizeof(OpCheck));
  if (!verifyOps(all, mine)) return false;
  std::vector<const void*> srcs(machines);
  for (int k = 0; k < world; ++k) {
    const Slice s = slice_of(request.count, k, world);
    for (int m = 0; m < machines; ++m) srcs[m] = recv.data() + m * stride + sizeof(OpCheck) + s.first * es;
    void* dst[1] = {slices[k]};
    reduceInto(type, static_cast<ReduceOp>(request.op), srcs.data(), machines, dst, 1, s.size, 1);
  }
  return true;
}

void MachineProxy::serveRendezvous(const MachineRequest& ch) {
  // Every machine's blob, padded to the largest, gathered in machine order.
  const int machines = transport_->machines();
  std::uint64_t mine = ch.count;
  std::vector<std::uint64_t> sizes(machines);
  complete({transport_->allGather(&mine, sizeof mine, sizes.data())});
  std::uint64_t largest = 0, total = 0;
  for (std::uint64_t s : sizes) {
    largest = std::max(largest, pad8(s));
    total += 8 + pad8(s);
  }
  if (total > channel_.bufferBytes) {
    fail(AbortReason::kRankFailed,
         fmt::format("rendezvous '{}': the payloads of all machines take {} bytes, more than the {} bytes "
                     "of the machine channel; send bulk data with broadcast or all_gather",
                     ch.opTag, total, channel_.bufferBytes));
    return;
  }
  std::vector<std::byte> send(largest), recv(largest * machines);
  std::memcpy(send.data(), segment_.machineBuffer(), mine);
  complete({transport_->allGather(send.data(), largest, recv.data())});
  std::byte* at = segment_.machineBuffer();
  for (int m = 0; m < machines; ++m) {
    std::memcpy(at, &sizes[m], 8);
    std::memcpy(at + 8, recv.data() + m * largest, sizes[m]);
    at += 8 + pad8(sizes[m]);
  }
  channel_.resultBytes = total;
}

void MachineProxy::serve(std::uint64_t seq) {
  const MachineRequest& request = channel_.requests[seq % 2];
  const auto kind = static_cast<MachineOpKind>(request.kind);
  Arena arena(segment_);
  const int world = segment_.worldSize();
  if (kind == MachineOpKind::kAllReduce) {
    // Every local rank's slice where it lies (its staging buffer or its heap tensor).
    const auto type = static_cast<DType>(request.dtype);
    const std::size_t es = dtypeSize(type);
    std::vector<std::byte*> slices(world);
    for (int k = 0; k < world; ++k) {
      std::byte* base = request.heapOffset == ~0ULL ? arena.stage(k, static_cast<int>(request.parity))
                                                    : arena.heap(k) + request.heapOffset;
      slices[k] = base + slice_of(request.count, k, world).first * es;
    }
    if (request.count * es <= kSmallAllReduceBytes) {
      if (!serveSmallAllReduce(request, slices.data())) return;
    } else {
      if (!checkOp(request)) return;
      std::vector<MachineTransport::Handle> handles;
      for (int k = 0; k < world; ++k) {
        const Slice s = slice_of(request.count, k, world);
        if (s.size > 0) handles.push_back(transport_->allReduce(slices[k], s.size, type, static_cast<ReduceOp>(request.op)));
      }
      complete(handles);
    }
  } else if (!checkOp(request)) {
    return;
  } else if (kind == MachineOpKind::kRendezvous) {
    serveRendezvous(request);
  } else if (kind == MachineOpKind::kBroadcast) {
    complete({transport_->broadcast(arena.stage(request.rootRank, static_cast<int>(request.parity)), request.count,
                                    request.root)});
  } else {
    fail(AbortReason::kRankFailed, fmt::format("machine channel: unknown request kind {}", request.kind));
    return;
  }
  if (broken_) return;
  // Release: a rank that acquires doneSeq sees what the transport wrote into its buffers.
  channel_.doneSeq.store(seq, std::memory_order_seq_cst);
  Waiter::wake(&channel_.doneSeq, channel_.doneSleepers);
}

void MachineProxy::threadMain() {
  try {
    transport_->join();
    pump();
    handshake();
    const bool spin = segment_.header().worldSize < segment_.header().usableCpus;
    Clock::time_point lastServed{};
    while (!stop_.load()) {
      pump();
      // Acquire: pairs with local rank 0's release of requestSeq (the request's fields).
      const std::uint64_t seq = channel_.requestSeq.load(std::memory_order_acquire);
      if (seq > served_ && !broken_) {
        serve(++served_);  // in order: at most two are posted
        lastServed = Clock::now();
        continue;
      }
      // Right after a request the next one often follows (the next chunk, the next small
      // all-reduce): poll for a moment before sleeping, unless the workers need every core.
      if (spin && Clock::now() - lastServed < kProxySpin) {
        for (int i = 0; i < 64; ++i) __builtin_ia32_pause();
        continue;
      }
      futexWait(&channel_.requestSeq, static_cast<std::uint32_t>(seq), std::chrono::milliseconds(2));
    }
    pump();
    if (clean_.load() && !broken_) {
      // The others hear that this machine is done: a failure of theirs from now on cannot
      // reach it (it waits in MPI_Finalize), and their reports say so.
      {
        std::lock_guard lock(mutex_);
        toSend_ = MachineNotice{static_cast<int>(channel_.machine), kFinishedNotice, "finished"};
      }
      flushNotices();
      gatherTraceParts();
      transport_->finalize();
    } else {
      flushNotices();
    }
  } catch (const Stopped&) {
    flushNotices();
  } catch (const std::exception& e) {
    broken_ = true;
    std::string text = fmt::format("machine {}: the transport between machines failed: {}", channel_.machine, e.what());
    ControlPlane::raiseAbort(segment_, AbortReason::kRankFailed, -1, text);
    postLocal(text);
  }
  finished_.store(true);
}

}  // namespace xs::detail
