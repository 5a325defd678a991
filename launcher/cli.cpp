// cli.cpp: launcher option parsing.
#include "cli.hpp"

#include <boost/program_options.hpp>

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "xspawn/error.hpp"

namespace po = boost::program_options;

namespace xs::cli {
namespace {

constexpr int kMaxProcs = 1024;

po::options_description launcherOptions() {
  po::options_description d("Launcher options");
  d.add_options()
    ("nprocs,n", po::value<std::string>(),
     "number of worker processes, one per emulated core (default: the cores this process may use: "
     "its CPU affinity, capped by a cgroup CPU quota)")
    ("start-method", po::value<std::string>()->default_value("fork"), "fork: workers are forked copies of the launcher; exec: each worker execs the program anew")
    ("bind-to", po::value<std::string>()->default_value("none"), "none, or core: worker i is pinned to core i mod cores")
    ("timeout", po::value<std::string>()->default_value("300"), "deadline in seconds of every rendezvous and collective")
    ("log-dir", po::value<std::string>(), "write rank-<i>.log per rank, launcher.log and report.json into DIR")
    ("tag-output", "prefix every console line with [rank i]")
    ("quiet,q", "no informational lines from the launcher (warnings, errors and the failure report remain)")
    ("job-id", po::value<std::string>(), "name of the job (default: generated); names its shared memory")
    ("kill-grace", po::value<std::string>()->default_value("10"), "seconds between SIGTERM and SIGKILL when stopping workers")
    ("wait", po::value<std::string>()->default_value("hybrid"), "how waits wait: hybrid (spin, then sleep), spin, futex")
    ("shared-heap", po::value<std::string>()->default_value("1G"), "shared memory per rank for zero-copy tensors (xs::shared_alloc): reserved, taken only as allocated")
    ("stage-size", po::value<std::string>()->default_value("2M"), "collectives' staging buffer per rank (two of them)")
    ("machine-buffer", po::value<std::string>()->default_value("4M"), "under mpirun: rendezvous payloads between machines")
    ("max-restarts", po::value<std::string>()->default_value("0"), "after a failure, stop the gang and start a new one, up to N times (workers see XSPAWN_RESTART_COUNT)")
    ("inject-fault", po::value<std::string>(), "act out a failure for CI: SPEC such as rank=2,step=100,kind=crash (kinds: crash, segv, abort, exit:N, throw, hang, spin, stop, slow:200ms, oom; triggers: step=N, at=TAG, collective=K; attempt=N)")
    ("trace", po::value<std::string>(), "write the job's trace timeline to FILE: a Chrome trace event file for Perfetto or chrome://tracing, a track per rank (see 'xspawn report FILE')")
    ("trace-events", po::value<std::string>()->default_value("131072"), "with --trace: spans kept per rank, the newest (64 bytes each in shared memory)")
    ("help,h", "show this help")
    ("version", "show the version");
  return d;
}

[[noreturn]] void bad(const std::string& what) {
  XS_THROW(UsageError, what + "; try 'xspawn --help'");
}

// `--option v`, a whole number from lo to hi.
long long parseWholeNumber(const std::string& option, const std::string& v, long long lo, long long hi) {
  std::size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v.size() || v.empty() || n < lo || n > hi) {
    bad(fmt::format("{} must be a whole number from {} to {} (got '{}')", option, lo, hi, v));
  }
  return n;
}

int parseNprocs(const std::string& v) { return static_cast<int>(parseWholeNumber("--nprocs", v, 1, kMaxProcs)); }

std::chrono::milliseconds parseSeconds(const std::string& name, const std::string& v) {
  std::size_t used = 0;
  double s = -1;
  try {
    s = std::stod(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !(s > 0) || !std::isfinite(s) || s > 1e7) {
    bad(fmt::format("--{} must be a positive number of seconds (got '{}')", name, v));
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
}

}  // namespace

std::size_t parseBytes(const std::string& text, const std::string& option) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = used ? text.substr(used) : "";
  double mult = -1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1048576.0;
  else if (unit == "G" || unit == "GiB") mult = 1073741824.0;
  if (!used || mult < 0 || !(v >= 0) || v * mult > 1e15) {
    bad(fmt::format("{} must be a size such as 4096, 64K, 256M or 1G (got '{}')", option, text));
  }
  return static_cast<std::size_t>(v * mult);
}

std::string launcherHelp() {
  std::ostringstream out;
  out << "usage: xspawn [launcher options] COMMAND [command options]\n\n"
         "Starts N worker processes, one per emulated accelerator core, joined by shared-memory\n"
         "rendezvous points, and supervises them: one failure stops the job with a root-cause report.\n\n"
         "Commands:\n"
         "  hello              each process prints the core it uses, they meet at rendezvous 'init'\n"
         "  run -- PROGRAM ... run any program as the N workers (XSPAWN_RANK, XSPAWN_WORLD_SIZE, ...)\n"
         "  train              data-parallel training (see 'xspawn train --help')\n"
         "  bench OP           benchmarks: barrier, switch, engine, allreduce... (see 'xspawn bench --help')\n"
         "  clean              remove shared memory left by jobs whose launcher was killed\n"
         "  top [JOB]          live view of this user's running jobs (--once, --json)\n"
         "  report PATH        where a job's time went, from its --log-dir or --trace file\n"
         "  plot INPUT -o F    loss, accuracy, images/s, step times, utilisation as .png/.svg\n\n"
      << launcherOptions()
      << "\nExit status: 0 when every rank exited 0; otherwise the first failing rank's exit code,\n"
         "or 128+signal; 124 when ranks stalled (the others timed out waiting for them); 2 for a\n"
         "usage error. With --max-restarts, the last attempt's.\n";
  return out.str();
}

Invocation parseLauncher(int argc, char** argv) {
  po::options_description desc = launcherOptions();
  // Split: launcher options up to the first word that is not an option (the command).
  // Options with a value take the next word whatever it looks like ("--nprocs -1").
  std::vector<std::string> mine;
  Invocation inv;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;
    const bool isLong = a.rfind("--", 0) == 0;
    // "--name", "--name=value", "-n", "-n8", "-n=8".
    std::string name = isLong ? a.substr(2) : a.substr(0, 2);
    std::string value;
    bool inlineValue = false;
    if (isLong && name.find('=') != std::string::npos) {
      value = name.substr(name.find('=') + 1);
      name = name.substr(0, name.find('='));
      inlineValue = true;
    } else if (!isLong && a.size() > 2) {
      value = a.substr(a[2] == '=' ? 3 : 2);
      inlineValue = true;
    }
    const po::option_description* opt = desc.find_nothrow(name, false, false, false);
    if (!opt) bad(fmt::format("unknown launcher option '{}'", a));
    std::string longName = "--" + opt->long_name();
    const bool takesValue = opt->semantic()->max_tokens() > 0;
    if (takesValue && !inlineValue) {
      if (i + 1 >= argc) bad(fmt::format("option '{}' needs a value", a));
      mine.push_back(longName + "=" + argv[++i]);
    } else if (takesValue) {
      mine.push_back(longName + "=" + value);
    } else if (inlineValue) {
      bad(fmt::format("option '{}' takes no value", longName));
    } else {
      mine.push_back(longName);
    }
  }
  if (i < argc) inv.command = argv[i++];
  for (; i < argc; ++i) inv.args.emplace_back(argv[i]);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(mine).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    bad(e.what());
  }
  inv.help = vm.count("help") > 0;
  inv.version = vm.count("version") > 0;
  SpawnOptions& o = inv.spawn;
  if (vm.count("nprocs")) {
    o.nprocs = parseNprocs(vm["nprocs"].as<std::string>());
    inv.nprocsGiven = true;
  }
  std::string sm = vm["start-method"].as<std::string>();
  if (sm == "fork") o.startMethod = StartMethod::kFork;
  else if (sm == "exec") o.startMethod = StartMethod::kExec;
  else bad(fmt::format("--start-method must be fork or exec (got '{}')", sm));
  std::string bind = vm["bind-to"].as<std::string>();
  if (bind == "none") o.bindTo = BindTo::kNone;
  else if (bind == "core") o.bindTo = BindTo::kCore;
  else bad(fmt::format("--bind-to must be none or core (got '{}')", bind));
  std::string wait = vm["wait"].as<std::string>();
  if (wait == "hybrid") o.waitPolicy = WaitPolicy::kHybrid;
  else if (wait == "spin") o.waitPolicy = WaitPolicy::kSpin;
  else if (wait == "futex") o.waitPolicy = WaitPolicy::kFutex;
  else bad(fmt::format("--wait must be hybrid, spin or futex (got '{}')", wait));
  o.timeout = parseSeconds("timeout", vm["timeout"].as<std::string>());
  o.killGrace = parseSeconds("kill-grace", vm["kill-grace"].as<std::string>());
  if (vm.count("log-dir")) o.logDir = vm["log-dir"].as<std::string>();
  if (vm.count("job-id")) o.jobId = vm["job-id"].as<std::string>();
  o.sharedHeapBytes = parseBytes(vm["shared-heap"].as<std::string>(), "--shared-heap");
  o.stageBytes = parseBytes(vm["stage-size"].as<std::string>(), "--stage-size");
  if (o.stageBytes < 4096) bad("--stage-size must be at least 4K");
  o.machineBufferBytes = parseBytes(vm["machine-buffer"].as<std::string>(), "--machine-buffer");
  if (o.machineBufferBytes < 4096) bad("--machine-buffer must be at least 4K");
  o.maxRestarts = static_cast<int>(parseWholeNumber("--max-restarts", vm["max-restarts"].as<std::string>(), 0, 1000));
  if (vm.count("inject-fault")) o.injectFault = vm["inject-fault"].as<std::string>();
  if (vm.count("trace")) {
    o.traceFile = vm["trace"].as<std::string>();
    if (o.traceFile.empty()) bad("--trace needs a file name, e.g. --trace trace.json");
  }
  o.traceEvents =
      static_cast<std::size_t>(parseWholeNumber("--trace-events", vm["trace-events"].as<std::string>(), 1024, 1LL << 26));
  o.tagOutput = vm.count("tag-output") > 0;
  o.quiet = vm.count("quiet") > 0;
  return inv;
}

}  // namespace xs::cli
