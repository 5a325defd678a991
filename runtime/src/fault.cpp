// fault.cpp: parsing fault specs and acting the faults out (see fault.hpp).
#include "fault.hpp"
#include "telemetry.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

constexpr const char* kKinds = "crash, segv, abort, exit:CODE, throw, hang, spin, stop, slow:DURATION, oom";
constexpr const char* kExample = "e.g. 'rank=2,step=100,kind=crash' or 'rank=1,at=epoch_end,kind=hang'";

struct Parser {
  std::string_view source;
  std::string_view item;
  [[noreturn]] void bad(const std::string& what) const {
    XS_THROW(UsageError, fmt::format("{} '{}': {} ({})", source, item, what, kExample));
  }
  std::int64_t integer(std::string_view key, std::string_view v, std::int64_t min) const {
    std::int64_t x = 0;
    bool ok = !v.empty() && v.size() <= 12;
    for (char c : v) ok = ok && c >= '0' && c <= '9';
    if (ok) x = std::stoll(std::string(v));
    if (!ok || x < min) bad(fmt::format("{}={} is not a whole number of at least {}", key, v, min));
    return x;
  }
  std::chrono::milliseconds duration(std::string_view v) const {
    std::string text(v);
    std::size_t used = 0;
    double x = -1;
    try {
      x = std::stod(text, &used);
    } catch (...) {
      used = 0;
    }
    const std::string unit = used ? text.substr(used) : "";
    const double scale = unit == "ms" ? 1 : unit == "s" ? 1000 : -1;
    if (!used || scale < 0 || !(x >= 0) || !std::isfinite(x) || x * scale > 1e9) {
      bad(fmt::format("slow:{} needs a duration such as 200ms or 1.5s", v));
    }
    return std::chrono::milliseconds(std::llround(x * scale));
  }
  void kind(Fault& f, std::string_view v) const {
    const std::string_view name = v.substr(0, v.find(':'));
    const std::string_view arg = v.find(':') == std::string_view::npos ? "" : v.substr(v.find(':') + 1);
    static const std::pair<const char*, FaultKind> plain[] = {
        {"crash", FaultKind::kCrash}, {"segv", FaultKind::kSegv}, {"abort", FaultKind::kAbort},
        {"throw", FaultKind::kThrow}, {"hang", FaultKind::kHang}, {"spin", FaultKind::kSpin},
        {"stop", FaultKind::kStop},   {"oom", FaultKind::kOom}};
    for (const auto& [n, k] : plain) {
      if (v == n) {
        f.kind = k;
        return;
      }
    }
    if (name == "exit" && !arg.empty()) {
      f.kind = FaultKind::kExit;
      f.exitCode = static_cast<int>(integer("exit", arg, 0));
      if (f.exitCode > 255) bad(fmt::format("exit:{} is not an exit code from 0 to 255", arg));
      return;
    }
    if (name == "slow" && !arg.empty()) {
      f.kind = FaultKind::kSlow;
      f.delay = duration(arg);
      return;
    }
    bad(fmt::format("unknown kind '{}'; kinds: {}", v, kKinds));
  }
  void trigger(Fault& f, FaultTrigger t) const {
    if (f.trigger != FaultTrigger::kStart) bad("give at most one of step=, at= and collective=");
    f.trigger = t;
  }
  Fault fault() const {
    Fault f;
    bool haveRank = false, haveKind = false;
    std::size_t pos = 0;
    while (pos <= item.size()) {
      std::size_t end = item.find(',', pos);
      if (end == std::string_view::npos) end = item.size();
      const std::string_view part = item.substr(pos, end - pos);
      pos = end + 1;
      const std::size_t eq = part.find('=');
      if (eq == std::string_view::npos) bad(fmt::format("'{}' is not key=value", part));
      const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
      if (key == "rank") {
        f.rank = value == "*" || value == "all" ? -1 : static_cast<int>(integer(key, value, 0));
        haveRank = true;
      } else if (key == "kind") {
        kind(f, value);
        haveKind = true;
      } else if (key == "step") {
        trigger(f, FaultTrigger::kStep);
        f.count = integer(key, value, 1);
      } else if (key == "collective") {
        trigger(f, FaultTrigger::kCollective);
        f.count = integer(key, value, 1);
      } else if (key == "at") {
        trigger(f, FaultTrigger::kTag);
        if (value.empty() || value.size() >= kTagBytes) bad(fmt::format("at= needs a tag of 1 to {} characters", kTagBytes - 1));
        f.tag = std::string(value);
      } else if (key == "attempt") {
        f.attempt = value == "any" ? -1 : static_cast<int>(integer(key, value, 0));
      } else {
        bad(fmt::format("unknown key '{}'; keys: rank, kind, step, at, collective, attempt", key));
      }
    }
    if (!haveRank) bad("missing rank= (a rank, or * for every rank)");
    if (!haveKind) bad(fmt::format("missing kind= (one of {})", kKinds));
    return f;
  }
};

}  // namespace

std::string Fault::describe() const {
  std::string what = fmt::format("kind={}", [&]() -> std::string {
    switch (kind) {
      case FaultKind::kCrash: return "crash";
      case FaultKind::kSegv: return "segv";
      case FaultKind::kAbort: return "abort";
      case FaultKind::kExit: return fmt::format("exit:{}", exitCode);
      case FaultKind::kThrow: return "throw";
      case FaultKind::kHang: return "hang";
      case FaultKind::kSpin: return "spin";
      case FaultKind::kStop: return "stop";
      case FaultKind::kSlow: return fmt::format("slow:{}ms", delay.count());
      case FaultKind::kOom: return "oom";
    }
    return "?";
  }());
  what += rank < 0 ? " on every rank" : fmt::format(" on rank {}", rank);
  switch (trigger) {
    case FaultTrigger::kStart: return what + " at its start";
    case FaultTrigger::kStep: return what + fmt::format(" at step {}", count);
    case FaultTrigger::kTag: return what + fmt::format(" at '{}'", tag);
    case FaultTrigger::kCollective: return what + fmt::format(" at collective {}", count);
  }
  return what;
}

std::vector<Fault> parseFaults(std::string_view spec, std::string_view source) {
  std::vector<Fault> faults;
  std::size_t pos = 0;
  while (pos < spec.size()) {
    std::size_t end = spec.find(';', pos);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    faults.push_back(Parser{source, item}.fault());
  }
  if (faults.empty()) {
    XS_THROW(UsageError, fmt::format("{} is empty: give a fault such as {}", source, kExample));
  }
  return faults;
}

namespace fault {
namespace {

struct Armed {
  Fault fault;
  bool fired = false;  // slow faults keep firing at every later trigger of their kind
};
std::vector<Armed> gFaults;
std::int64_t gSteps = 0;
std::int64_t gCollectives = 0;

// Allocates until the allocator fails, within a limit raised 64 MiB above what the process
// maps now (so the machine itself never runs short), then fails as a program out of memory.
[[noreturn]] void outOfMemory() {
  rlimit old{};
  ::getrlimit(RLIMIT_AS, &old);
  std::size_t mapped = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long pages = 0;
    if (std::fscanf(f, "%lu", &pages) == 1) mapped = pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::fclose(f);
  }
  rlimit tight = old;
  tight.rlim_cur = mapped + (std::size_t{64} << 20);
  ::setrlimit(RLIMIT_AS, &tight);
  {
    std::vector<std::unique_ptr<char[]>> blocks;
    blocks.reserve(64);
    try {
      for (;;) {
        blocks.emplace_back(new char[std::size_t{4} << 20]);
        for (std::size_t i = 0; i < (std::size_t{4} << 20); i += 4096) blocks.back()[i] = 1;
      }
    } catch (const std::bad_alloc&) {
    }
  }
  ::setrlimit(RLIMIT_AS, &old);  // the error path that follows may allocate again
  throw std::bad_alloc();
}

void act(const Fault& f) {
  std::fflush(stdout);
  std::fprintf(stderr, "xspawn: injecting fault %s\n", f.describe().c_str());
  std::fflush(stderr);
  switch (f.kind) {
    case FaultKind::kCrash: ::kill(::getpid(), SIGKILL); break;
    case FaultKind::kSegv: ::signal(SIGSEGV, SIG_DFL); ::raise(SIGSEGV); break;
    case FaultKind::kAbort: ::signal(SIGABRT, SIG_DFL); std::abort();
    case FaultKind::kExit: ::_exit(f.exitCode);
    case FaultKind::kThrow: XS_THROW(FaultInjectedError, fmt::format("injected fault: {}", f.describe()));
    case FaultKind::kHang:
      for (;;) ::pause();  // asleep in a system call, using no CPU
    case FaultKind::kSpin:
      for (volatile std::uint64_t i = 0;; i = i + 1) {
      }
    case FaultKind::kStop: ::raise(SIGSTOP); break;
    case FaultKind::kSlow: {
      telemetry::Span span(Category::kFault, "injected delay");  // the report names it
      std::this_thread::sleep_for(f.delay);
      break;
    }
    case FaultKind::kOom: outOfMemory();
  }
}

template <class Match>
void fire(FaultTrigger trigger, Match match) {
  for (Armed& a : gFaults) {
    if (a.fault.trigger != trigger) continue;
    const bool sticky = a.fired && a.fault.kind == FaultKind::kSlow;
    if (a.fired && !sticky) continue;
    // A slow fault, once fired, delays every later step or collective; a tag's, every later
    // entry of that tag.
    if (trigger == FaultTrigger::kTag || !sticky ? !match(a.fault) : false) continue;
    a.fired = true;
    act(a.fault);
  }
}

}  // namespace

bool gArmed = false;

void arm(std::string_view spec, int rank, int attempt) {
  gFaults.clear();
  for (const Fault& f : parseFaults(spec, "XSPAWN_INJECT_FAULT")) {
    if ((f.rank < 0 || f.rank == rank) && (f.attempt < 0 || f.attempt == attempt)) gFaults.push_back({f});
  }
  gArmed = !gFaults.empty();
}

void atStart() {
  if (gArmed) fire(FaultTrigger::kStart, [](const Fault&) { return true; });
}

void atStep() {
  if (!gArmed) return;
  ++gSteps;
  fire(FaultTrigger::kStep, [](const Fault& f) { return f.count == gSteps; });
}

void atOp(OpKind kind, std::string_view tag) {
  if (!gArmed) return;
  if (kind != OpKind::kRendezvous) {
    ++gCollectives;
    fire(FaultTrigger::kCollective, [](const Fault& f) { return f.count == gCollectives; });
  }
  // A collective's tag is described ("grads: sum float[1000] one-shot"): its own tag leads.
  fire(FaultTrigger::kTag, [&](const Fault& f) {
    return tag == f.tag || (tag.size() > f.tag.size() + 1 && tag.substr(0, f.tag.size()) == f.tag &&
                            tag.substr(f.tag.size(), 2) == ": ");
  });
}

}  // namespace fault
}  // namespace xs::detail
