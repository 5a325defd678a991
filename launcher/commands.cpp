// commands.cpp: hello, run, train, clean, and the dispatch of every command.
#include "commands.hpp"
#include "plot.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command_args.hpp"
#include "xspawn/xspawn.hpp"

// The launcher uses the runtime's internal sweep for `clean`.
#include "segment.hpp"
#include "subprocess.hpp"

namespace po = boost::program_options;

namespace xs::cli {
namespace {

// seed 000's simple_map_fn: a tensor from the common seed, the core this process uses, and a
// rendezvous so the master does not finish before the others have joined.
int helloWorker(int index, const Flags& flags) {
  const auto seed = flags.get<unsigned>("seed", 1234u);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float t[4];
  for (float& v : t) v = normal(gen);

  const DeviceInfo& dev = device();
  if (dev.cpu >= 0) {
    std::printf("Process %d is using %s (cpu %d)\n", index, dev.name.c_str(), dev.cpu);
  } else {
    std::printf("Process %d is using %s\n", index, dev.name.c_str());
  }
  std::fflush(stdout);

  std::vector<std::string> all = rendezvous("init", std::string_view(reinterpret_cast<const char*>(t), sizeof t));
  if (flags.get<int>("stamp", 0)) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("rank %d past init at %lld\n", index, static_cast<long long>(ns));
  }
  if (is_master_ordinal()) {
    bool same = true;
    for (const std::string& p : all) same = same && p == all[0];
    std::printf("Printing on the master process\n");
    std::printf("tensor([[%7.4f, %7.4f],\n        [%7.4f, %7.4f]])\n", t[0], t[1], t[2], t[3]);
    std::printf("%s on all %d ranks (seed %u)\n", same ? "identical" : "NOT identical",
                world_size(), seed);
    if (!same) return 1;
  }
  return 0;
}

}  // namespace

std::string siblingProgram(const std::string& name) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  // In a build tree the helpers sit beside the command; installed, in libexec/xspawn.
  for (const auto& dir : {self.parent_path(), self.parent_path() / XSPAWN_BIN_TO_HELPERS}) {
    auto path = (dir / name).lexically_normal();
    if (::access(path.c_str(), X_OK) == 0) return path.string();
  }
  return "";
}

int helloCommand(const Invocation& inv) {
  po::options_description desc("hello options");
  desc.add_options()
    ("seed", po::value<unsigned>()->default_value(1234), "the common seed of the tensor every rank makes")
    ("stamp", "print the time (Unix ns) each rank passed 'init' (for launch-time benchmarks)");
  po::variables_map vm;
  if (!parseCommandArgs("hello", "usage: xspawn [launcher options] hello [--seed N]\n\n"
                        "Every process prints 'Process i is using xcore:i', they meet at rendezvous\n"
                        "'init', and the master prints a tensor made from the common seed.",
                        desc, inv.args, vm)) {
    return 0;
  }
  SpawnOptions o = inv.spawn;
  o.flags.set("seed", vm["seed"].as<unsigned>());
  o.flags.set("stamp", vm.count("stamp") ? 1 : 0);
  return spawn(helloWorker, o.nprocs, o).exitCode;
}

int runProgramCommand(const Invocation& inv) {
  std::vector<std::string> program = inv.args;
  if (!program.empty() && (program[0] == "--help" || program[0] == "-h")) {
    std::cout << "usage: xspawn [launcher options] run [--] PROGRAM [ARGS...]\n\n"
                 "Runs PROGRAM as the N workers. Each gets XSPAWN_RANK, XSPAWN_LOCAL_RANK,\n"
                 "XSPAWN_WORLD_SIZE, XSPAWN_LOCAL_WORLD_SIZE, XSPAWN_JOB_ID and XSPAWN_SHM; a program\n"
                 "linked with the xspawn runtime calls xs::init() and gets the whole API.\n";
    return 0;
  }
  if (!program.empty() && program[0] == "--") program.erase(program.begin());
  if (program.empty()) {
    XS_THROW(UsageError, "run: no program given; usage: xspawn run -- PROGRAM [ARGS...]");
  }
  SpawnOptions o = inv.spawn;
  o.program = program;
  return run(o).exitCode;
}

namespace {

// Runs argv in a child, its stderr passed through, its stdout returned; sets *status.
std::string captureOutput(const std::vector<std::string>& argv, int* status) {
  detail::Captured c = detail::runCaptured(argv, false);
  *status = c.status;
  return c.out;
}

}  // namespace

int trainCommand(const Invocation& inv) {
  std::string trainer = siblingProgram("xspawn-train");
  if (trainer.empty()) {
    std::fprintf(stderr,
                 "xspawn: training is not built yet: 'xspawn train' needs the xspawn-train "
                 "program next to xspawn, and this build does not include it\n");
    return 1;
  }
  std::vector<std::string> argv{trainer};
  argv.insert(argv.end(), inv.args.begin(), inv.args.end());
  for (const std::string& a : inv.args) {
    if (a == "--help" || a == "-h") {
      int status = 0;
      std::fputs(captureOutput(argv, &status).c_str(), stdout);
      return status;
    }
  }
  // Plan once, in one process, before any worker starts: a bad option or a missing dataset is
  // one error line and exit status 2, not N copies of it; and the plan says how much shared
  // heap the gradients need for the zero-copy all-reduce.
  std::vector<std::string> plan{trainer, "--plan"};
  plan.insert(plan.end(), inv.args.begin(), inv.args.end());
  int status = 0;
  std::string out = captureOutput(plan, &status);
  if (status != 0) return status;
  SpawnOptions o = inv.spawn;
  try {
    auto j = nlohmann::json::parse(out);
    o.sharedHeapBytes = std::max<std::size_t>(o.sharedHeapBytes, j.value("shared_heap_bytes", std::size_t{0}));
  } catch (const std::exception& e) {
    XS_THROW(SystemError, fmt::format("xspawn-train --plan printed no plan ({}): '{}'", e.what(), out));
  }
  o.program = argv;
  if (::isatty(STDOUT_FILENO)) o.extraEnv.push_back("XSPAWN_TTY=1");
  return run(o).exitCode;
}

int cleanCommand(const Invocation& inv) {
  po::options_description desc("clean options");
  desc.add_options()("dry-run", "only list what would be removed");
  po::variables_map vm;
  if (!parseCommandArgs("clean", "usage: xspawn clean [--dry-run]\n\n"
                        "Removes this user's xspawn shared memory in /dev/shm whose launcher is no\n"
                        "longer running, with the Open MPI files of a launcher under mpirun (a\n"
                        "launcher killed by SIGKILL cannot clean up after itself; every xspawn run\n"
                        "also does this sweep first).",
                        desc, inv.args, vm)) {
    return 0;
  }
  bool dry = vm.count("dry-run") > 0;
  auto stale = detail::sweepStaleSegments(dry);
  for (const auto& s : stale) {
    const char* verb = dry ? "would remove" : "removed";
    if (s.name.empty()) {
      std::printf("%s the MPI files of job '%s' in %s: %s\n", verb, s.jobId.c_str(), s.transportDir.c_str(),
                  s.why.c_str());
      continue;
    }
    const std::string files = s.transportDir.empty() ? "" : " and its MPI files in " + s.transportDir;
    std::printf("%s /dev/shm/%s (job '%s')%s: %s\n", verb, s.name.c_str(), s.jobId.c_str(), files.c_str(),
                s.why.c_str());
  }
  if (stale.empty()) std::printf("no stale xspawn shared memory\n");
  return 0;
}

int runCommand(const Invocation& inv) {
  const std::string& c = inv.command;
  if (c == "hello") return helloCommand(inv);
  if (c == "run") return runProgramCommand(inv);
  if (c == "train") return trainCommand(inv);
  if (c == "bench") return benchCommand(inv);
  if (c == "clean") return cleanCommand(inv);
  if (c == "top") return topCommand(inv);
  if (c == "report") return reportCommand(inv);
  if (c == "plot") return plotCommand(inv.args);
  XS_THROW(UsageError, fmt::format("unknown command '{}' (commands: hello, run, train, bench, "
                                   "clean, top, report, plot); try 'xspawn --help'",
                                   c));
}

}  // namespace xs::cli
