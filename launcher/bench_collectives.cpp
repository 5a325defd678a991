// bench_collectives.cpp: `xspawn bench allreduce|broadcast|allgather|reducescatter`, in the
// manner of nccl-tests: per size, time / algbw / busbw / #wrong out of place and in place;
// beside them, in the same run, Open MPI and Gloo on the same sizes; and each row's
// efficiency against the bytes-moved floor at this machine's memory bandwidth, which the
// bench measures itself.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench_collectives.hpp"
#include "machine_transport.hpp"
#include "mca_params.hpp"
#include "command_args.hpp"
#include "commands.hpp"
#include "peers/sweep.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

namespace po = boost::program_options;

namespace xs::cli {
namespace {

constexpr int kMaxRows = 64;

struct Row {
  std::size_t bytes = 0;
  bench::Timing oop, ip;
  long long wrongOop = 0, wrongIp = 0;
};

// What rank 0 of the job hands back to the launcher (a shared anonymous mapping).
struct Results {
  double memoryGBs = 0;
  int rows = 0;
  Row row[kMaxRows];
  char hosts[2048] = {};  // "host:ranks,..." of every machine (for the flat MPI peer)
};

struct BenchConfig {
  bench::SweepConfig sweep;
  DType type = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  CollectiveOptions coll;
  bool zeroCopy = false;
  bool check = false;
};

DType parseDType(const std::string& s) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBFloat16})
    if (s == dtypeName(t)) return t;
  XS_THROW(UsageError, fmt::format("bench: unknown --dtype '{}' (float, double, int32, int64, bfloat16)", s));
}

ReduceOp parseOp(const std::string& s) {
  for (ReduceOp o : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin})
    if (s == reduceOpName(o)) return o;
  XS_THROW(UsageError, fmt::format("bench: unknown --op '{}' (sum, mean, max, min)", s));
}

void fill(DType t, void* p, std::size_t count, double v) {
  for (std::size_t i = 0; i < count; ++i) {
    switch (t) {
      case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
      case DType::kInt32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
      case DType::kInt64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); break;
      case DType::kBFloat16: static_cast<bfloat16*>(p)[i] = toBFloat16(static_cast<float>(v)); break;
    }
  }
}

long long countWrong(DType t, const void* p, std::size_t count, const std::function<double(std::size_t)>& want) {
  long long wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double got = 0;
    switch (t) {
      case DType::kFloat32: got = static_cast<const float*>(p)[i]; break;
      case DType::kFloat64: got = static_cast<const double*>(p)[i]; break;
      case DType::kInt32: got = static_cast<const std::int32_t*>(p)[i]; break;
      case DType::kInt64: got = static_cast<const std::int64_t*>(p)[i]; break;
      case DType::kBFloat16: got = toFloat(static_cast<const bfloat16*>(p)[i]); break;
    }
    if (got != want(i)) ++wrong;
  }
  return wrong;
}

// Aggregate memory bandwidth (bytes read + written per second) of min(N, cores) ranks copying
// buffers far larger than the last-level cache at the same time.
double measureMemoryBandwidth(int rank, int world) {
  const int active = std::min(world, usableCores());
  const std::size_t bytes = 64u << 20;
  std::vector<char> a, b;
  if (rank < active) {
    a.assign(bytes, 1);
    b.assign(bytes, 2);
  }
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    barrier("membw");
    auto t0 = std::chrono::steady_clock::now();
    if (rank < active) {
      for (int i = 0; i < 4; ++i) std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
    }
    double mine = rank < active ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : 0;
    double slowest = mesh_reduce("membw-time", mine, [](double x, double y) { return std::max(x, y); });
    best = std::min(best, slowest);
  }
  return active * 4.0 * 2.0 * bytes / best / 1e9;
}

void runSweep(int rank, const BenchConfig& cfg, Results* results) {
  const int world = world_size();
  const std::string& op = cfg.sweep.op;
  const std::size_t es = dtypeSize(cfg.type);
  const double memory = measureMemoryBandwidth(rank, world);
  {
    // Where the ranks run, so the flat MPI peer can run on the same machines.
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::vector<std::string> all = rendezvous("hosts", host);
    std::vector<std::pair<std::string, int>> counts;
    for (const std::string& h : all) {
      if (counts.empty() || counts.back().first != h) counts.emplace_back(h, 0);
      ++counts.back().second;
    }
    std::string list;
    for (const auto& [h, n] : counts) list += fmt::format("{}{}:{}", list.empty() ? "" : ",", h, n);
    if (rank == 0) std::snprintf(results->hosts, sizeof results->hosts, "%s", list.c_str());
  }
  int rowIndex = 0;
  for (std::size_t bytes : bench::sweepSizes(cfg.sweep)) {
    if (rowIndex >= kMaxRows) break;
    const std::size_t count = bytes / es;
    const Slice mine = slice_of(count, rank, world);
    const int rot = bench::rotation(cfg.sweep, bytes);
    // Input and output sizes of this rank for the op.
    const std::size_t inCount = op == "allgather" ? mine.size : count;
    const std::size_t outCount = op == "reducescatter" ? mine.size : count;
    std::vector<std::vector<std::byte>> in(rot, std::vector<std::byte>(inCount * es + 64));
    std::vector<std::vector<std::byte>> out(rot, std::vector<std::byte>(outCount * es + 64));
    // In place: one buffer of the whole count; all_gather's input and reduce_scatter's output
    // are this rank's slice of it (as in NCCL).
    std::vector<std::vector<std::byte>> whole(cfg.zeroCopy && op == "allreduce" ? 0 : rot,
                                              std::vector<std::byte>(count * es + 64));
    std::vector<std::byte*> inPlace(rot);
    for (int i = 0; i < rot; ++i) {
      if (cfg.zeroCopy && op == "allreduce") {
        inPlace[i] = static_cast<std::byte*>(shared_alloc(count * es));
        std::memset(inPlace[i], 0, count * es);  // fault the pages in now, as the vectors are
      } else {
        inPlace[i] = whole[i].data();
      }
    }
    auto inPlaceSrc = [&](std::byte* b) { return op == "allgather" ? b + mine.first * es : b; };
    auto inPlaceDst = [&](std::byte* b) { return op == "reducescatter" ? b + mine.first * es : b; };
    auto call = [&](std::byte* src, std::byte* dst) {
      if (op == "allreduce") all_reduce(src, dst, count, cfg.type, cfg.op, cfg.coll);
      else if (op == "broadcast") broadcast(src, count, cfg.type, 0, cfg.coll);
      else if (op == "allgather") all_gather(src, dst, count, cfg.type, cfg.coll);
      else reduce_scatter(src, dst, count, cfg.type, cfg.op, cfg.coll);
    };
    const int iters = bench::itersFor(cfg.sweep, bytes);
    auto sync = [] { barrier("bench"); };
    Row row;
    row.bytes = bytes;
    row.oop = bench::timeCalls(cfg.sweep.warmup, iters, [&](int i) { call(in[i % rot].data(), out[i % rot].data()); }, sync);
    // Zero-copy: the warm-up goes once round the whole rotation, so that every rank has faulted
    // in its peers' buffers through its own mapping before the timing, as the memset above did
    // for its own (a training loop reuses one buffer: it pays those faults at its first step).
    const bool zeroCopy = cfg.zeroCopy && op == "allreduce" && bytes >= cfg.coll.zeroCopyMinBytes;
    const int ipWarmup = zeroCopy ? std::max(cfg.sweep.warmup, rot) : cfg.sweep.warmup;
    row.ip = bench::timeCalls(
        ipWarmup, iters, [&](int i) { call(inPlaceSrc(inPlace[i % rot]), inPlaceDst(inPlace[i % rot])); }, sync);
    if (cfg.check) {
      // Inputs every rank can predict: rank r contributes r + 1 everywhere.
      const int n = world;
      auto expect = [&](std::size_t) -> double {
        switch (cfg.op) {
          case ReduceOp::kSum: return n * (n + 1) / 2.0;
          case ReduceOp::kMax: return n;
          case ReduceOp::kMin: return 1;
          case ReduceOp::kMean:
            return cfg.type == DType::kInt32 || cfg.type == DType::kInt64 ? static_cast<double>((n * (n + 1) / 2) / n)
                                                                             : (n + 1) / 2.0;
        }
        return 0;
      };
      std::function<double(std::size_t)> want = expect;
      if (op == "broadcast") want = [](std::size_t) { return 1.0; };
      if (op == "allgather") {
        want = [&](std::size_t i) {
          for (int k = 0; k < n; ++k) {
            Slice s = slice_of(count, k, n);
            if (i >= s.first && i < s.first + s.size) return k + 1.0;
          }
          return -1.0;
        };
      }
      for (int pass = 0; pass < 2; ++pass) {
        std::byte* src = pass == 0 ? in[0].data() : inPlaceSrc(inPlace[0]);
        std::byte* dst = pass == 0 ? out[0].data() : inPlaceDst(inPlace[0]);
        fill(cfg.type, src, inCount, rank + 1.0);
        call(src, dst);
        const std::size_t checkCount = outCount;
        const void* result = op == "broadcast" ? src : dst;
        long long w = countWrong(cfg.type, result, checkCount, want);
        long long total = mesh_reduce("wrong", w, [](long long a, long long b) { return a + b; });
        (pass == 0 ? row.wrongOop : row.wrongIp) = total;
      }
    }
    if (cfg.zeroCopy) shared_reset();
    if (rank == 0) results->row[rowIndex] = row;
    ++rowIndex;
  }
  if (rank == 0) {
    results->rows = rowIndex;
    results->memoryGBs = memory;
  }
}

// Runs a peer benchmark command and collects {bytes -> time_us} from its JSON lines.
std::map<std::size_t, bench::Timing> runPeer(const std::string& command, std::string& note) {
  std::map<std::size_t, bench::Timing> out;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    note = "could not start";
    return out;
  }
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) {
    try {
      auto j = nlohmann::json::parse(line);
      out[j["bytes"].get<std::size_t>()] = {j["time_us"].get<double>(), j["max_us"].get<double>()};
    } catch (...) {
    }
  }
  int status = ::pclose(pipe);
  if (out.empty()) note = fmt::format("failed (status {})", status);
  return out;
}

std::string formatBytes(std::size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

// The single-copy mechanism the user chose for Open MPI's shared-memory transport (vader in
// Open MPI 4, sm in 5) in the environment or in an Open MPI parameter file, or empty. It goes on
// mpirun's command line, so it must be one of Open MPI's words.
std::string chosenSingleCopy() {
  auto checked = [](const std::string& where, const std::string& v) {
    XS_CHECK(v == "cma" || v == "xpmem" || v == "knem" || v == "emulated" || v == "none", UsageError,
             fmt::format("{}={}: use cma, xpmem, knem, emulated or none (or unset it)", where, v));
    return v;
  };
  for (const char* name : {"btl_vader_single_copy_mechanism", "btl_sm_single_copy_mechanism"}) {
    const std::string var = std::string("OMPI_MCA_") + name;
    const char* value = std::getenv(var.c_str());
    if (value && *value) return checked(var, value);
  }
  for (const char* name : {"btl_vader_single_copy_mechanism", "btl_sm_single_copy_mechanism"}) {
    if (auto set = detail::mcaParamFileSetting(name)) return checked(set->file + ": " + name, set->value);
  }
  return "";
}

// Flat Open MPI at its best. Its shared-memory transport copies a large message once, through
// the kernel (CMA, process_vm_readv), by default; where that is slow (an AMD EPYC VM: 4-7x
// slower from 64 KiB to 1 MiB than copying in and out through its shared FIFOs,
// docs/benchmarks.md) the peer would run below what Open MPI can do. Unless the user chose the
// mechanism, the peer runs both ways and each size keeps the faster; either way alone is used
// if the other fails.
struct MpiPeer {
  std::map<std::size_t, bench::Timing> timing;
  std::set<std::size_t> fifoSizes;     // where copying through the FIFOs won
  std::string singleCopy;              // the mechanism at the other sizes: "default" or the user's
  std::string note;
};
MpiPeer runMpiPeer(const std::string& flags, const std::string& rest, const std::string& chosen) {
  MpiPeer p;
  p.singleCopy = chosen;
  auto command = [&](const std::string& mechanism) {
    return fmt::format("mpirun {}{}{} 2>/dev/null", flags,
                       mechanism.empty() ? "" : fmt::format("--mca btl_vader_single_copy_mechanism {} ", mechanism),
                       rest);
  };
  if (!p.singleCopy.empty()) {
    p.timing = runPeer(command(p.singleCopy), p.note);
    return p;
  }
  p.singleCopy = "default";
  std::string cmaNote, fifoNote;
  p.timing = runPeer(command(""), cmaNote);
  for (const auto& [bytes, t] : runPeer(command("none"), fifoNote)) {
    auto at = p.timing.find(bytes);
    if (at != p.timing.end() && t.medianUs >= at->second.medianUs) continue;
    p.timing[bytes] = t;
    p.fifoSizes.insert(bytes);
  }
  if (p.timing.empty()) {
    p.note = fmt::format("failed with the single copy ({}) and through the FIFOs ({})", cmaNote, fifoNote);
    return p;
  }
  std::vector<std::string> sizes;
  for (std::size_t b : p.fifoSizes) sizes.push_back(formatBytes(b));
  p.note = fmt::format("the faster of Open MPI's single copy (CMA) and copy through its FIFOs "
                       "(btl_vader_single_copy_mechanism none) at each size; the FIFOs at {}{}{}",
                       sizes.empty() ? "none" : fmt::format("{}", fmt::join(sizes, ", ")),
                       cmaNote.empty() ? "" : "; the single copy " + cmaNote,
                       fifoNote.empty() ? "" : "; the FIFOs " + fifoNote);
  return p;
}

}  // namespace

int benchCollective(const Invocation& inv, const std::string& op, const std::vector<std::string>& args) {
  po::options_description desc("bench " + op + " options");
  desc.add_options()
    ("min-bytes", po::value<std::string>()->default_value("4K"), "smallest message")
    ("max-bytes", po::value<std::string>()->default_value("256M"), "largest message")
    ("factor", po::value<int>()->default_value(4), "size multiplier between rows")
    ("iters", po::value<int>()->default_value(20), "timed calls per size (fewer from 64M)")
    ("warmup", po::value<int>()->default_value(3), "untimed calls per size")
    ("algo", po::value<std::string>()->default_value("auto"), "auto, ring, two-shot, one-shot, ps")
    ("ps-servers", po::value<int>()->default_value(1), "parameter servers with --algo ps")
    ("dtype", po::value<std::string>()->default_value("float"), "float, double, int32, int64, bfloat16")
    ("op", po::value<std::string>()->default_value("sum"), "sum, mean, max, min")
    ("zero-copy", "in-place buffers live in the shared heap (allreduce)")
    ("zero-copy-min", po::value<std::string>()->default_value("64K"), "with --zero-copy: smallest message reduced in place in the heap")
    ("check", "verify every result; exit non-zero on any wrong value")
    ("peers", po::value<std::string>()->default_value("mpi,gloo"), "peers to run beside: mpi, gloo, none")
    ("json", po::value<std::string>(), "write every row, with the peers' figures, to FILE");
  po::variables_map vm;
  if (!parseCommandArgs("bench " + op,
                        "usage: xspawn [--nprocs N] bench " + op + " [options]\n\n"
                        "Times " + op + " over shared memory at each size, out of place and in place,\n"
                        "beside Open MPI and Gloo on the same sizes, as nccl-tests prints it.",
                        desc, args, vm)) {
    return 0;
  }
  BenchConfig cfg;
  cfg.sweep.op = op;
  cfg.sweep.minBytes = parseBytes(vm["min-bytes"].as<std::string>(), "--min-bytes");
  cfg.sweep.maxBytes = parseBytes(vm["max-bytes"].as<std::string>(), "--max-bytes");
  cfg.sweep.factor = vm["factor"].as<int>();
  cfg.sweep.iters = vm["iters"].as<int>();
  cfg.sweep.warmup = vm["warmup"].as<int>();
  cfg.sweep.rotateBytes = 128u << 20;
  cfg.type = parseDType(vm["dtype"].as<std::string>());
  cfg.op = parseOp(vm["op"].as<std::string>());
  cfg.coll.algorithm = parseAlgorithm(vm["algo"].as<std::string>());
  cfg.coll.psServers = vm["ps-servers"].as<int>();
  cfg.zeroCopy = vm.count("zero-copy") > 0;
  cfg.coll.zeroCopyMinBytes = parseBytes(vm["zero-copy-min"].as<std::string>(), "--zero-copy-min");
  cfg.check = vm.count("check") > 0;
  if (cfg.sweep.minBytes < dtypeSize(cfg.type) || cfg.sweep.minBytes > cfg.sweep.maxBytes) {
    XS_THROW(UsageError, "bench: need element size <= --min-bytes <= --max-bytes");
  }
  if (cfg.sweep.factor < 2) XS_THROW(UsageError, "bench: --factor must be at least 2");
  if (cfg.sweep.iters < 1 || cfg.sweep.warmup < 0) XS_THROW(UsageError, "bench: --iters must be >= 1, --warmup >= 0");

  // Read (and checked) before the job: across machines the peer starts without our OMPI_ variables.
  const std::string chosenCopy = chosenSingleCopy();
  SpawnOptions o = inv.spawn;
  // Under mpirun, each launcher is one machine of `machines`: the ranks are machines x N.
  const detail::MachinePlace place = detail::detectMachines();
  // Machine 0 writes the rows; the others, which return after their part of the job, take no --json.
  JsonOption json("bench " + op, place.machine == 0 ? vm : po::variables_map{});
  const int cores = usableCores();  // read once: it parses /proc and the cgroup files
  const int local = o.nprocs == 0 ? cores : o.nprocs;
  const int world = local * place.machines;
  o.quiet = true;
  if (cfg.zeroCopy) o.sharedHeapBytes = cfg.sweep.rotateBytes + (cfg.sweep.maxBytes > cfg.sweep.rotateBytes ? cfg.sweep.maxBytes : 0) + (64u << 10);
  void* mem = ::mmap(nullptr, sizeof(Results), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) XS_THROW(SystemError, "mmap of the results failed");
  auto* results = new (mem) Results();
  JobResult job = spawn([&](int rank, const Flags&) { runSweep(rank, cfg, results); }, local, o);
  if (job.exitCode != 0 || place.machine != 0) {
    ::munmap(mem, sizeof(Results));
    return job.exitCode;
  }

  // The peers, after our job (so nobody shares the machine with anybody).
  std::string mpiNote = "not run", glooNote = "not run";
  std::map<std::size_t, bench::Timing> gloo;
  MpiPeer mpiPeer;
  const auto& mpi = mpiPeer.timing;
  const std::string peers = vm["peers"].as<std::string>();
  const std::string sweepArgs = fmt::format("{} {} {} {} {} {}", op, cfg.sweep.minBytes, cfg.sweep.maxBytes,
                                            cfg.sweep.factor, cfg.sweep.iters, cfg.sweep.warmup);
  const bool comparable = cfg.type == DType::kFloat32 && cfg.op == ReduceOp::kSum;
  if (peers.find("mpi") != std::string::npos && comparable) {
    std::string prog = siblingProgram("xspawn-bench-mpi");
    if (prog.empty() || std::system("command -v mpirun >/dev/null 2>&1") != 0) {
      mpiNote = "left out: Open MPI or xspawn-bench-mpi not built";
    } else {
      std::string flags = getuid() == 0 ? "--allow-run-as-root " : "";
      // The most MPI processes any one machine will hold.
      int perHost = local;
      std::istringstream hosts(results->hosts);
      for (std::string h; std::getline(hosts, h, ',');) {
        if (h.find(':') != std::string::npos) perHost = std::max(perHost, std::atoi(h.c_str() + h.rfind(':') + 1));
      }
      if (perHost > cores) flags += "--oversubscribe --mca mpi_yield_when_idle 1 ";
      if (place.machines > 1) {
        // The flat peer: one MPI process per rank on the same machines, started afresh (this
        // launcher's own mpirun environment would make the new mpirun a part of it).
        flags += fmt::format("--host {} --bind-to none ", results->hosts);
        for (char** e = environ; *e;) {
          std::string kv = *e;
          if (kv.rfind("OMPI_", 0) == 0 || kv.rfind("PMIX_", 0) == 0) ::unsetenv(kv.substr(0, kv.find('=')).c_str());
          else ++e;
        }
      }
      mpiPeer = runMpiPeer(flags, fmt::format("-np {} {} {}", world, prog, sweepArgs), chosenCopy);
      mpiNote = mpiPeer.note;
    }
  }
  if (peers.find("gloo") != std::string::npos && comparable) {
    std::string prog = siblingProgram("xspawn-bench-gloo");
    if (place.machines > 1) {
      glooNote = "left out: the Gloo peer runs on one machine";
    } else if (prog.empty()) {
      glooNote = "left out: Gloo (libgloo-dev) not built";
    } else if (op == "reducescatter") {
      glooNote = "left out: Gloo has no comparable reduce-scatter";
    } else {
      glooNote = "";
      gloo = runPeer(fmt::format("{} {} {} 2>/dev/null", prog, world, sweepArgs), glooNote);
    }
  }
  if (!comparable) mpiNote = glooNote = "left out: peers run float sum only";

  // The table.
  const double busFactor = op == "allreduce" ? 2.0 * (world - 1) / world
                           : op == "broadcast" ? 1.0 : static_cast<double>(world - 1) / world;
  auto floorBytes = [&](double s) {
    if (op == "allreduce") return 2.0 * world * s;
    if (op == "broadcast") return 2.0 * (world - 1) * s;
    if (op == "allgather") return 2.0 * (world - 1) * s;
    return (world + 1.0) * s;
  };
  std::printf("# xspawn bench %s: N=%d ranks%s on %d usable cores, %s %s, algo %s%s\n", op.c_str(), world,
              place.machines > 1 ? fmt::format(" ({} machines x {}, hierarchical; mpi = flat MPI over all {})",
                                               place.machines, local, world).c_str() : "",
              cores, dtypeName(cfg.type), reduceOpName(cfg.op), algorithmName(cfg.coll.algorithm),
              cfg.zeroCopy ? fmt::format(", in-place buffers in the shared heap (zero-copy from {})",
                                         formatBytes(cfg.coll.zeroCopyMinBytes)).c_str() : "");
  std::printf("# memory bandwidth measured: %.1f GB/s (read + write, %d cores, 64 MiB buffers); times are medians in us\n",
              results->memoryGBs, std::min(world, cores));
  std::printf("#%9s %10s %6s | %9s %7s %7s %6s | %9s %7s %7s %6s %6s | %7s %6s | %7s %6s\n", "size", "count",
              "redop", "oop time", "algbw", "busbw", "#wrong", "ip time", "algbw", "busbw", "#wrong", "floor",
              "mpi bw", "x mpi", "gloo bw", "x gloo");
  nlohmann::json doc;
  doc["op"] = op;
  doc["nprocs"] = world;
  doc["machines"] = place.machines;
  doc["online_cores"] = onlineCores();
  doc["usable_cores"] = cores;
  doc["dtype"] = dtypeName(cfg.type);
  doc["redop"] = reduceOpName(cfg.op);
  doc["algo"] = algorithmName(cfg.coll.algorithm);
  doc["zero_copy"] = cfg.zeroCopy;
  doc["memory_gbs"] = results->memoryGBs;
  doc["peers"] = {{"mpi", mpiNote}, {"gloo", glooNote}};
  double sumBus = 0;
  long long wrong = 0;
  auto fmtPeer = [&](const std::map<std::size_t, bench::Timing>& m, std::size_t b, double ours, std::string& bw,
                     std::string& ratio) -> double {
    auto it = m.find(b);
    if (it == m.end()) {
      bw = ratio = "-";
      return 0;
    }
    double peerBus = b / it->second.medianUs / 1e3 * busFactor;
    bw = fmt::format("{:.3g}", peerBus);
    ratio = fmt::format("{:.2f}", ours / peerBus);
    return peerBus;
  };
  for (int i = 0; i < results->rows; ++i) {
    const Row& r = results->row[i];
    const double algOop = r.bytes / r.oop.medianUs / 1e3, algIp = r.bytes / r.ip.medianUs / 1e3;  // GB/s
    const double busOop = algOop * busFactor, busIp = algIp * busFactor;
    const double best = std::max(busOop, busIp);
    const double floorUs = floorBytes(static_cast<double>(r.bytes)) / (results->memoryGBs * 1e3);
    // The floor is one machine's memory traffic: not a bound across machines.
    const double eff = place.machines > 1 ? 0 : floorUs / std::min(r.oop.medianUs, r.ip.medianUs);
    std::string mpiBw, mpiRatio, glooBw, glooRatio;
    double mpiBus = fmtPeer(mpi, r.bytes, best, mpiBw, mpiRatio);
    double glooBus = fmtPeer(gloo, r.bytes, best, glooBw, glooRatio);
    std::printf(" %9s %10zu %6s | %9.1f %7.2f %7.2f %6lld | %9.1f %7.2f %7.2f %6lld %5.0f%% | %7s %6s | %7s %6s\n",
                formatBytes(r.bytes).c_str(), r.bytes / dtypeSize(cfg.type), reduceOpName(cfg.op), r.oop.medianUs,
                algOop, busOop, cfg.check ? r.wrongOop : 0LL, r.ip.medianUs, algIp, busIp,
                cfg.check ? r.wrongIp : 0LL, eff * 100, mpiBw.c_str(), mpiRatio.c_str(), glooBw.c_str(),
                glooRatio.c_str());
    sumBus += best;
    wrong += r.wrongOop + r.wrongIp;
    nlohmann::json row = {{"bytes", r.bytes}, {"count", r.bytes / dtypeSize(cfg.type)},
                          {"oop_us", r.oop.medianUs}, {"oop_max_us", r.oop.maxUs}, {"oop_busbw", busOop},
                          {"ip_us", r.ip.medianUs}, {"ip_max_us", r.ip.maxUs}, {"ip_busbw", busIp},
                          {"wrong", cfg.check ? r.wrongOop + r.wrongIp : 0}, {"floor_efficiency", eff}};
    if (mpiBus > 0) {
      const bench::Timing& t = mpi.at(r.bytes);
      row["mpi"] = {{"time_us", t.medianUs}, {"max_us", t.maxUs}, {"busbw", mpiBus},
                    {"single_copy", mpiPeer.fifoSizes.count(r.bytes) ? "none" : mpiPeer.singleCopy}};
    }
    if (glooBus > 0) row["gloo"] = {{"time_us", gloo[r.bytes].medianUs}, {"max_us", gloo[r.bytes].maxUs}, {"busbw", glooBus}};
    doc["rows"].push_back(row);
  }
  std::printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "ERROR" : "OK");
  std::printf("# Avg bus bandwidth    : %.3f GB/s\n", results->rows ? sumBus / results->rows : 0.0);
  if (!mpiNote.empty()) std::printf("# mpi: %s\n", mpiNote.c_str());
  if (!glooNote.empty()) std::printf("# gloo: %s\n", glooNote.c_str());
  json.write(doc);
  ::munmap(mem, sizeof(Results));
  return wrong ? 1 : 0;
}

}  // namespace xs::cli
