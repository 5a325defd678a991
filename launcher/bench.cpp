// bench.cpp: `xspawn bench`: benchmarks users run on their machine. `barrier` times the
// checked barrier with each wait policy (spin-then-futex, spin only, futex only); `engine`
// runs the engine benchmark program; `switch` is bench_switch.cpp's.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_collectives.hpp"
#include "bench_switch.hpp"
#include "command_args.hpp"
#include "commands.hpp"
#include "xspawn/xspawn.hpp"

namespace po = boost::program_options;

namespace xs::cli {
namespace {

constexpr int kMaxRepeats = 64;

// Rank 0 writes its timings here; the mapping is shared with the forked workers.
struct BarrierResults {
  int repeats = 0;
  double usPerBarrier[kMaxRepeats] = {};
};

struct WaitRow {
  std::string name;
  double median = 0, min = 0, max = 0;
  int exitCode = 0;
};

const char* policyName(WaitPolicy p) {
  switch (p) {
    case WaitPolicy::kHybrid: return "hybrid";
    case WaitPolicy::kSpin: return "spin";
    case WaitPolicy::kFutex: return "futex";
  }
  return "?";
}

WaitPolicy parsePolicy(const std::string& s) {
  if (s == "hybrid") return WaitPolicy::kHybrid;
  if (s == "spin") return WaitPolicy::kSpin;
  if (s == "futex") return WaitPolicy::kFutex;
  XS_THROW(UsageError, fmt::format("bench barrier: --waits takes hybrid, spin and futex (got '{}')", s));
}

int benchBarrier(const Invocation& inv, const std::vector<std::string>& args) {
  po::options_description desc("bench barrier options");
  desc.add_options()
    ("iters", po::value<int>()->default_value(2000), "barriers per repeat")
    ("repeats", po::value<int>()->default_value(7), "timed repeats (the median is reported)")
    ("waits", po::value<std::string>()->default_value("hybrid,spin,futex"), "wait policies to compare, comma-separated")
    ("json", po::value<std::string>(), "also write the rows as JSON to FILE");
  po::variables_map vm;
  if (!parseCommandArgs("bench barrier",
                        "usage: xspawn [--nprocs N] bench barrier [--iters N] [--repeats R] [--waits LIST] [--json FILE]\n\n"
                        "Times the checked barrier among N processes with each wait policy: hybrid\n"
                        "(spin briefly, then sleep on a futex), spin only, futex only.",
                        desc, args, vm)) {
    return 0;
  }
  const int iters = vm["iters"].as<int>();
  const int repeats = vm["repeats"].as<int>();
  if (iters < 1) XS_THROW(UsageError, "bench barrier: --iters must be at least 1");
  if (repeats < 1 || repeats > kMaxRepeats) {
    XS_THROW(UsageError, fmt::format("bench barrier: --repeats must be from 1 to {}", kMaxRepeats));
  }
  std::vector<WaitPolicy> policies;
  std::stringstream list(vm["waits"].as<std::string>());
  for (std::string item; std::getline(list, item, ',');) policies.push_back(parsePolicy(item));
  JsonOption json("bench barrier", vm);

  void* mem = ::mmap(nullptr, sizeof(BarrierResults), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) XS_THROW(SystemError, "mmap of the results page failed");
  auto* results = static_cast<BarrierResults*>(mem);

  SpawnOptions base = inv.spawn;
  const int cores = usableCores();  // read once: it parses /proc and the cgroup files
  const int world = base.nprocs == 0 ? cores : base.nprocs;
  base.quiet = true;
  std::vector<WaitRow> rows;
  for (WaitPolicy policy : policies) {
    *results = BarrierResults{};
    SpawnOptions o = base;
    o.waitPolicy = policy;
    o.jobId.clear();
    auto worker = [&](int rank, const Flags&) {
      using Clock = std::chrono::steady_clock;
      for (int i = 0; i < std::min(iters, 200); ++i) barrier("warmup");
      for (int r = 0; r < repeats; ++r) {
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) barrier("bench");
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
        if (rank == 0) results->usPerBarrier[r] = us;
      }
      if (rank == 0) results->repeats = repeats;
    };
    JobResult res = spawn(worker, world, o);
    WaitRow row;
    row.name = policyName(policy);
    row.exitCode = res.exitCode;
    std::vector<double> v(results->usPerBarrier, results->usPerBarrier + results->repeats);
    if (!v.empty()) {
      std::sort(v.begin(), v.end());
      row.median = v[v.size() / 2];
      row.min = v.front();
      row.max = v.back();
    }
    rows.push_back(row);
  }
  ::munmap(mem, sizeof(BarrierResults));

  std::printf("# xspawn bench barrier: N=%d processes on %d usable cores, %d barriers x %d repeats\n",
              world, cores, iters, repeats);
  std::printf("# %-8s %12s %12s %12s %12s\n", "wait", "median(us)", "min(us)", "max(us)",
              "vs first");
  int status = 0;
  for (const WaitRow& r : rows) {
    if (r.exitCode != 0) {
      std::printf("  %-8s failed (exit %d)\n", r.name.c_str(), r.exitCode);
      status = r.exitCode;
      continue;
    }
    std::printf("  %-8s %12.2f %12.2f %12.2f %11.2fx\n", r.name.c_str(), r.median, r.min, r.max,
                rows[0].median > 0 ? r.median / rows[0].median : 0.0);
  }
  if (json.wanted()) {
    nlohmann::json doc;
    doc["bench"] = "barrier";
    doc["nprocs"] = world;
    doc["online_cores"] = onlineCores();
    doc["usable_cores"] = cores;
    doc["iters"] = iters;
    doc["repeats"] = repeats;
    for (const WaitRow& r : rows) {
      doc["rows"].push_back({{"wait", r.name}, {"median_us", r.median}, {"min_us", r.min},
                             {"max_us", r.max}, {"exit_code", r.exitCode}});
    }
    json.write(doc);
  }
  return status;
}

int benchEngine(const std::vector<std::string>& args) {
  std::string program = siblingProgram("xspawn-bench-engine");
  if (program.empty()) {
    std::fprintf(stderr, "xspawn: the engine benchmark is not built yet: 'xspawn bench engine' "
                         "needs the xspawn-bench-engine program next to xspawn\n");
    return 1;
  }
  std::vector<char*> argv{program.data()};
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv(program.c_str(), argv.data());
  XS_THROW(SystemError, fmt::format("cannot run {}", program));
}

}  // namespace

int benchCommand(const Invocation& inv) {
  const std::string usage =
      "usage: xspawn [launcher options] bench OP [options]\n\n"
      "OP: allreduce, broadcast, allgather, reducescatter\n"
      "              collectives over shared memory beside Open MPI and Gloo\n"
      "    barrier   latency of the checked barrier, per wait policy\n"
      "    switch    what handing a core from rank to rank costs here, as processes and as threads\n"
      "    engine    one emulated core's training step against PyTorch (--all: every model, fp32 and bf16, % of peak;\n"
      "              --rounds N: medians of N rounds of the whole table)\n";
  if (inv.args.empty() || inv.args[0] == "--help" || inv.args[0] == "-h") {
    if (inv.args.empty()) XS_THROW(UsageError, "bench: which benchmark? try 'xspawn bench --help'");
    std::cout << usage;
    return 0;
  }
  std::string op = inv.args[0];
  std::vector<std::string> rest(inv.args.begin() + 1, inv.args.end());
  if (op == "barrier") return benchBarrier(inv, rest);
  if (op == "engine") return benchEngine(rest);
  if (op == "switch") return benchSwitch(rest);
  if (op == "allreduce" || op == "broadcast" || op == "allgather" || op == "reducescatter") {
    return benchCollective(inv, op, rest);
  }
  XS_THROW(UsageError, fmt::format("bench: unknown benchmark '{}'; try 'xspawn bench --help'", op));
}

}  // namespace xs::cli
