// bench_switch.cpp: `xspawn bench switch`: what handing a core from one rank to the next costs on
// this machine, the price of every rank that shares a core (`--nprocs` above the core count).
// N workers pinned to one core take turns: each sleeps on its own futex word until the worker
// before it sets the word and wakes it, as ranks sharing a core take turns at a barrier. Once
// as processes (each with its own page tables, as ranks are) and once as threads of one process
// (one set of page tables); with --touch-kb each turn first reads and writes one byte of every
// cache line of that much of the worker's own memory, as a rank's step finds its data again
// after the others ran. The figure is a turn: one hand-over plus that touch.
#include "bench_switch.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command_args.hpp"
#include "cpus.hpp"
#include "wait.hpp"
#include "xspawn/error.hpp"

namespace po = boost::program_options;

namespace xs::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxWorkers = 64;
constexpr int kWarmTurns = 20;                // untimed turns before worker 0's clock starts
constexpr long kMaxTouchKb = 16 << 10;  // 16 MiB a worker
constexpr std::chrono::seconds kDeadline{120};

// The turn words and the result, in memory shared with forked workers (threads share it too).
// One cache line a word: a worker's wake does not pull its neighbours' lines.
struct alignas(64) TurnWord {
  std::atomic<std::uint32_t> go{0};
};
static_assert(sizeof(TurnWord) == 64);

struct Board {
  TurnWord turn[kMaxWorkers];
  std::atomic<std::uint32_t> failed{0};  // a worker gave up (deadline): the others stop too
  double seconds = 0;                    // worker 0's timed rounds
};

struct Run {
  int workers, turns, cpu;
  std::size_t touchBytes;
  Clock::time_point deadline;
};

void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof set, &set);  // best effort: unpinned, the turns still alternate
}

// Worker i's turns: kWarmTurns + run.turns, each after worker i - 1's (worker 0 starts). Worker 0
// times its last run.turns rounds, each one turn of every worker. False when it gave up.
bool takeTurns(Board& board, int i, const Run& run, char* own) {
  pinTo(run.cpu);
  for (std::size_t at = 0; at < run.touchBytes; at += 64) own[at] = 1;  // first touch, untimed
  std::atomic<std::uint32_t>& mine = board.turn[i].go;
  std::atomic<std::uint32_t>& next = board.turn[(i + 1) % run.workers].go;
  Clock::time_point start{};
  for (int t = 0; t < kWarmTurns + run.turns; ++t) {
    // Acquire: the previous worker's turn happened before ours.
    while (mine.load(std::memory_order_acquire) == 0) {
      if (board.failed.load(std::memory_order_relaxed) != 0 || Clock::now() > run.deadline) {
        board.failed.store(1);
        for (int w = 0; w < run.workers; ++w) detail::futexWakeAll(&board.turn[w].go);
        return false;
      }
      detail::futexWait(&mine, 0, std::chrono::milliseconds(100));
    }
    mine.store(0, std::memory_order_relaxed);
    for (std::size_t at = 0; at < run.touchBytes; at += 64) own[at] = static_cast<char>(own[at] + 1);
    if (i == 0 && t == kWarmTurns - 1) start = Clock::now();
    if (i == 0 && t == kWarmTurns + run.turns - 1)
      board.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // seq_cst store before the wake: a worker about to sleep sees the word set, or is woken.
    next.store(1, std::memory_order_seq_cst);
    detail::futexWakeAll(&next);
  }
  return true;
}

// Microseconds a turn for one set of workers, as processes or threads.
double measure(Board& board, const Run& run, bool processes, std::vector<std::vector<char>>& memory) {
  for (int w = 0; w < run.workers; ++w) board.turn[w].go.store(w == 0 ? 1 : 0);
  board.failed.store(0);
  board.seconds = 0;
  bool ok = true;
  if (processes) {
    std::vector<pid_t> pids;
    for (int w = 0; w < run.workers; ++w) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the bench
        ::_exit(takeTurns(board, w, run, memory[w].data()) ? 0 : 1);
      }
      if (pid < 0) {
        board.failed.store(1);
        for (int k = 0; k < w; ++k) detail::futexWakeAll(&board.turn[k].go);
        ok = false;
        break;
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      pid_t got = -1;
      while ((got = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
      }
      ok = got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
    }
  } else {
    std::vector<std::thread> threads;
    std::vector<char> done(run.workers, 0);
    for (int w = 0; w < run.workers; ++w)
      threads.emplace_back([&, w] { done[w] = takeTurns(board, w, run, memory[w].data()) ? 1 : 0; });
    for (std::thread& t : threads) t.join();
    ok = std::all_of(done.begin(), done.end(), [](char d) { return d != 0; });
  }
  if (!ok || board.seconds <= 0)
    XS_THROW(SystemError, fmt::format("bench switch: the {} workers as {} did not finish their turns within {} s",
                                      run.workers, processes ? "processes" : "threads", kDeadline.count()));
  return board.seconds * 1e6 / (static_cast<double>(run.turns) * run.workers);
}

std::vector<long> parseList(const std::string& text, const char* option, long lo, long hi) {
  std::vector<long> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < lo || v > hi)
      XS_THROW(UsageError, fmt::format("bench switch: {} takes numbers from {} to {}, comma-separated (got '{}')",
                                       option, lo, hi, item));
    out.push_back(v);
  }
  if (out.empty()) XS_THROW(UsageError, fmt::format("bench switch: {} needs at least one number", option));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int benchSwitch(const std::vector<std::string>& args) {
  po::options_description desc("bench switch options");
  desc.add_options()
    ("workers", po::value<std::string>()->default_value("2,4,8"), "workers sharing the core, comma-separated")
    ("touch-kb", po::value<std::string>()->default_value("0,1024"),
     "KiB of its own memory each worker reads and writes a turn, comma-separated")
    ("turns", po::value<int>()->default_value(2000), "timed turns of each worker")
    ("repeats", po::value<int>()->default_value(3), "timed repeats (the median is reported)")
    ("json", po::value<std::string>(), "also write the rows as JSON to FILE");
  po::variables_map vm;
  if (!parseCommandArgs("bench switch",
                        "usage: xspawn bench switch [--workers LIST] [--touch-kb LIST] [--turns N] [--repeats R]\n"
                        "                           [--json FILE]\n\n"
                        "What handing one core from worker to worker costs on this machine: workers pinned\n"
                        "to one core take turns, each woken by the one before (a futex), as ranks that\n"
                        "share a core take turns at a barrier. As processes (each its own page tables, as\n"
                        "ranks are) and as threads of one process; microseconds a turn.",
                        desc, args, vm)) {
    return 0;
  }
  const std::vector<long> workers = parseList(vm["workers"].as<std::string>(), "--workers", 2, kMaxWorkers);
  const std::vector<long> touches = parseList(vm["touch-kb"].as<std::string>(), "--touch-kb", 0, kMaxTouchKb);
  const int turns = vm["turns"].as<int>(), repeats = vm["repeats"].as<int>();
  if (turns < 1) XS_THROW(UsageError, "bench switch: --turns must be at least 1");
  if (repeats < 1 || repeats > 64) XS_THROW(UsageError, "bench switch: --repeats must be from 1 to 64");

  JsonOption json("bench switch", vm);
  void* shared = ::mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) XS_THROW(SystemError, "bench switch: mmap of the turn words failed");
  Board* board = new (shared) Board();
  const int cpu = detail::allowedCpus().front();
  std::printf("# xspawn bench switch: workers pinned to CPU %d take turns (futex), %d turns each, median of %d\n",
              cpu, turns, repeats);
  std::printf("# %8s %8s %16s %14s %18s\n", "touch KiB", "workers", "processes (us)", "threads (us)",
              "processes/threads");
  nlohmann::json doc{{"bench", "switch"}, {"cpu", cpu}, {"turns", turns}, {"repeats", repeats},
                     {"rows", nlohmann::json::array()}};
  try {
    for (long kb : touches) {
      // Allocated here, before any fork: a forked worker writes its own copy of its buffer.
      const auto bytes = static_cast<std::size_t>(kb) * 1024;
      const long most = *std::max_element(workers.begin(), workers.end());
      std::vector<std::vector<char>> memory(static_cast<std::size_t>(most), std::vector<char>(bytes));
      for (long n : workers) {
        auto run = [&] { return Run{static_cast<int>(n), turns, cpu, bytes, Clock::now() + kDeadline}; };
        std::vector<double> procs, threads;
        for (int r = 0; r < repeats; ++r) {  // alternated: the machine's phases hit both alike
          procs.push_back(measure(*board, run(), true, memory));
          threads.push_back(measure(*board, run(), false, memory));
        }
        const double p = median(procs), t = median(threads);
        std::printf("  %8ld %8ld %16.2f %14.2f %17.2fx\n", kb, n, p, t, p / t);
        doc["rows"].push_back({{"touch_kb", kb}, {"workers", n}, {"processes_us", p}, {"threads_us", t}});
        std::fflush(stdout);
      }
    }
  } catch (...) {
    ::munmap(shared, sizeof(Board));
    throw;
  }
  ::munmap(shared, sizeof(Board));
  json.write(doc);
  return 0;
}

}  // namespace xs::cli
