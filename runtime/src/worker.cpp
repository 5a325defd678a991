// worker.cpp: the worker side: attaching to the job, the xs:: API (ordinal, rendezvous, ...),
// and recording a worker's error in its status slot.
#include <cxxabi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "collectives_impl.hpp"
#include "context.hpp"
#include "fault.hpp"
#include "machine_client.hpp"
#include "telemetry.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::detail {
namespace {

Context* gContext = nullptr;

std::uint64_t nowNs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && out ? out : name;
  std::free(out);
  return s;
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0') XS_THROW(UsageError, fmt::format("{}='{}' is not an integer", name, v));
  return static_cast<int>(x);
}

void onTerminate() {
  // An exception nobody caught in an exec'd worker: record it, then die as terminate would.
  if (std::exception_ptr e = std::current_exception()) recordWorkerError(e);
  std::fflush(stdout);
  std::abort();
}

void install(std::unique_ptr<Context> ctx) {
  Context* c = ctx.release();
  RankSlot& slot = c->segment->slot(c->localRank);
  slot.boundCpu.store(c->device.cpu, std::memory_order_relaxed);
  slot.pid.store(getpid(), std::memory_order_relaxed);
  gContext = c;
  telemetry::bind(*c->segment, c->localRank);
  if (const char* spec = std::getenv(kEnvInjectFault); spec && *spec) fault::arm(spec, c->rank, c->restartCount);
  // Output goes to the launcher through a pipe: line-buffer it so lines arrive as written
  // and are not lost in a buffer when the process dies.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
}

std::unique_ptr<Context> makeContext(Segment& segment, const WorkerPlace& p) {
  auto ctx = std::make_unique<Context>();
  ctx->segment = &segment;
  ctx->rank = p.rank;
  ctx->localRank = p.localRank;
  ctx->worldSize = p.worldSize;
  ctx->localWorldSize = p.localWorldSize;
  ctx->jobId = p.jobId;
  ctx->restartCount = p.restartCount;
  ctx->device = DeviceInfo{fmt::format("xcore:{}", p.rank), p.rank, p.localRank, p.cpu};
  ctx->control = std::make_unique<ControlPlane>(segment, p.localRank, p.waitMode, p.timeout);
  return ctx;
}

}  // namespace

Context::~Context() = default;

Context* currentContext() { return gContext; }

Context& requireContext(const char* api) {
  if (!gContext) {
    XS_THROW(NotInitializedError,
             fmt::format("xs::{}() called before xs::init(): call xs::init() first in a program "
                         "started by `xspawn run`, or call it from a function run by xs::spawn",
                         api));
  }
  return *gContext;
}

bool startedByXspawn() { return std::getenv(kEnvShm) != nullptr && std::getenv(kEnvRank) != nullptr; }

void attachInherited(Segment& segment, const WorkerPlace& place) {
  install(makeContext(segment, place));
}

bool attachFromEnvironment() {
  if (!startedByXspawn()) return false;
  WorkerPlace p;
  p.rank = envInt(kEnvRank, 0);
  p.localRank = envInt(kEnvLocalRank, p.rank);
  p.worldSize = envInt(kEnvWorldSize, 1);
  p.localWorldSize = envInt(kEnvLocalWorldSize, p.worldSize);
  p.cpu = envInt(kEnvCpu, -1);
  p.timeout = std::chrono::milliseconds(envInt(kEnvTimeoutMs, 300000));
  p.waitMode = static_cast<WaitMode>(envInt(kEnvWait, 0));
  p.restartCount = envInt(kEnvRestartCount, 0);
  const char* job = std::getenv(kEnvJobId);
  p.jobId = job ? job : "";
  auto segment = Segment::open(std::getenv(kEnvShm));
  if (segment->worldSize() != p.localWorldSize || p.localRank < 0 ||
      p.localRank >= p.localWorldSize) {
    XS_THROW(SegmentError,
             fmt::format("this worker's environment says local rank {} of {}, but the job's "
                         "segment {} holds {} ranks",
                         p.localRank, p.localWorldSize, segment->name(), segment->worldSize()));
  }
  if (segment->header().jobId != p.jobId) {
    XS_THROW(SegmentError, fmt::format("segment {} belongs to job '{}', not '{}'",
                                       segment->name(), segment->header().jobId, p.jobId));
  }
  auto ctx = makeContext(*segment, p);
  ctx->ownedSegment = std::move(segment);
  install(std::move(ctx));
  std::set_terminate(onTerminate);
  return true;
}

std::string describeException(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const xs::Error& e) {
    return fmt::format("{}: {} [{}]", demangle(typeid(e).name()), e.what(), e.where());
  } catch (const std::exception& e) {
    return fmt::format("{}: {}", demangle(typeid(e).name()), e.what());
  } catch (...) {
    const std::type_info* t = abi::__cxa_current_exception_type();
    return fmt::format("exception of type {}", t ? demangle(t->name()) : "unknown");
  }
}

namespace {
void record(const std::string& message, ErrorKind kind) {
  Context* c = gContext;
  if (!c) return;
  RankSlot& slot = c->segment->slot(c->localRank);
  slot.errorText.store(message);
  slot.errorTimeNs.store(nowNs(), std::memory_order_relaxed);
  // Release: the launcher that sees the kind sees the text.
  slot.errorKind.store(static_cast<std::uint32_t>(kind), std::memory_order_release);
  if (kind == ErrorKind::kPrimary) {
    // Stop peers from waiting for this rank now, before the launcher even sees it exit.
    ControlPlane::raiseAbort(*c->segment, AbortReason::kRankFailed, c->localRank,
                             fmt::format("rank {} (pid {}) failed: {}", c->rank, getpid(), message));
  }
}
}  // namespace

void recordWorkerError(std::exception_ptr error) {
  Context* c = gContext;
  if (!c) return;
  ErrorKind kind = ErrorKind::kPrimary;
  try {
    std::rethrow_exception(error);
  } catch (const AbortedError&) {
    // Failing because of the job's abort is secondary unless this rank raised it itself
    // (the one that saw the divergence or the deadline first).
    std::uint64_t word = c->segment->header().abortWord.load(std::memory_order_acquire);
    if (word != 0 && abortRankOf(word) != c->localRank) kind = ErrorKind::kSecondary;
  } catch (...) {
  }
  record(describeException(error), kind);
}

void recordWorkerMessage(const std::string& message) { record(message, ErrorKind::kPrimary); }

int runWorkerFunction(const WorkerFn& fn, int index, const Flags& flags) {
  try {
    fault::atStart();
    return fn(index, flags);
  } catch (...) {
    std::exception_ptr e = std::current_exception();
    std::fflush(stdout);
    std::fprintf(stderr, "rank %d: %s\n", index, describeException(e).c_str());
    recordWorkerError(e);
    return 1;
  }
}

}  // namespace xs::detail

namespace xs {

using detail::requireContext;

void init() {
  if (detail::gContext) return;
  if (detail::attachFromEnvironment()) {
    detail::fault::atStart();
    return;
  }
  // Not started by xspawn: a world of one in private memory, so the same program runs alone.
  detail::SegmentConfig config;
  config.jobId = "standalone";
  config.geometry.worldSize = 1;
  config.geometry.payloadChunk = 4096;
  auto segment = detail::Segment::createPrivate(config);
  detail::WorkerPlace place;
  place.jobId = config.jobId;
  auto ctx = detail::makeContext(*segment, place);
  ctx->ownedSegment = std::move(segment);
  detail::install(std::move(ctx));
}

bool initialized() { return detail::gContext != nullptr; }
int get_ordinal() { return requireContext("get_ordinal").rank; }
int get_local_ordinal() { return requireContext("get_local_ordinal").localRank; }
int world_size() { return requireContext("world_size").worldSize; }
int local_world_size() { return requireContext("local_world_size").localWorldSize; }
bool is_master_ordinal(bool local) {
  auto& c = requireContext("is_master_ordinal");
  return (local ? c.localRank : c.rank) == 0;
}
const DeviceInfo& device() { return requireContext("device").device; }
const std::string& job_id() { return requireContext("job_id").jobId; }
int restart_count() { return detail::gContext ? detail::gContext->restartCount : 0; }
void record_error(std::exception_ptr error) { detail::recordWorkerError(error); }

void master_print(std::string_view line) {
  if (!is_master_ordinal(false)) return;
  std::fwrite(line.data(), 1, line.size(), stdout);
  if (line.empty() || line.back() != '\n') std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::vector<std::string> rendezvous(std::string_view tag, std::string_view payload) {
  auto& c = requireContext("rendezvous");
  auto bytes = std::as_bytes(std::span<const char>(payload.data(), payload.size()));
  auto& machines = detail::machineClient();
  const std::uint64_t startNs = detail::telemetry::nowNs();
  auto all = machines.active() ? machines.rendezvous(tag, bytes) : c.control->rendezvous(tag, bytes);
  detail::telemetry::collective(detail::OpKind::kRendezvous, tag, startNs, 0, detail::telemetry::nowNs(),
                                payload.size(), 0);
  std::vector<std::string> out;
  out.reserve(all.size());
  for (auto& b : all) out.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  return out;
}

void barrier(std::string_view tag) {
  auto& c = requireContext("barrier");
  if (detail::machineClient().active()) {
    rendezvous(tag);
    return;
  }
  const std::uint64_t startNs = detail::telemetry::nowNs();
  c.control->barrier(tag);
  detail::telemetry::collective(detail::OpKind::kRendezvous, tag, startNs, 0, detail::telemetry::nowNs(), 0, 0);
}

}  // namespace xs
