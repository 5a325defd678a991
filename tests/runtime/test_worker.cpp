// test_worker.cpp: a worker program for the tests, run by `xspawn run -- test_worker MODE
// [RANK]`. Each mode acts out one behaviour (a divergence, a rank killed at a known moment...)
// on the chosen rank while the others do the ordinary thing; crashes, hangs and the like
// come from the launcher's own fault injection (--inject-fault) on the 'chain' mode.
#include <signal.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

namespace {

long long nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Waits in a rendezvous expecting it to be aborted; prints when the abort arrived.
int awaitAbort(const char* tag) {
  try {
    xs::rendezvous(tag);
  } catch (const xs::AbortedError& e) {
    std::printf("aborted-at %lld\n", nowNs());
    std::printf("error: %s\n", e.what());
    std::fflush(stdout);
    throw;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xs::init();
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const int target = argc > 2 ? std::atoi(argv[2]) : 0;
  const int rank = xs::get_ordinal();
  const int world = xs::world_size();
  const bool me = rank == target;

  if (mode == "ok") {
    auto all = xs::rendezvous("init", "from rank " + std::to_string(rank));
    for (int r = 0; r < world; ++r) {
      if (all[r] != "from rank " + std::to_string(r)) {
        std::printf("bad payload from rank %d: '%s'\n", r, all[r].c_str());
        return 4;
      }
    }
    std::printf("ok rank %d of %d, job %s, device %s\n", rank, world, xs::job_id().c_str(),
                xs::device().name.c_str());
    return 0;
  }
  if (mode == "env") {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    int cpus = 0, first = -1;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) {
        if (first < 0) first = c;
        ++cpus;
      }
    std::printf("rank=%s local=%s world=%s job=%s cpu=%d allowed=%d first=%d omp=%s\n",
                std::getenv("XSPAWN_RANK"), std::getenv("XSPAWN_LOCAL_RANK"),
                std::getenv("XSPAWN_WORLD_SIZE"), std::getenv("XSPAWN_JOB_ID"), xs::device().cpu,
                cpus, first, std::getenv("OMP_NUM_THREADS"));
    return 0;
  }
  if (mode == "mismatch") {
    // Eleven common rendezvous, then rank `target` goes to 'save' while the others go to
    // 'epoch_end': the twelfth is where they diverge.
    for (int i = 0; i < 11; ++i) xs::rendezvous("step");
    xs::rendezvous(me ? "save" : "epoch_end");
    return 0;
  }
  if (mode == "chain") {
    // 'init', then 'next': the place for faults injected by --inject-fault (at=next, ...).
    std::printf("restart %d\n", xs::restart_count());
    std::fflush(stdout);
    xs::rendezvous("init");
    return awaitAbort("next");
  }
  if (mode == "collectives") {
    // 'init', `target` all-reduces tagged 'grads' (collective=K faults), then 'done'.
    xs::rendezvous("init");
    std::vector<float> grads(1000, static_cast<float>(rank));
    for (int i = 0; i < target; ++i) xs::all_reduce(std::span<float>(grads), xs::ReduceOp::kSum, {.tag = "grads"});
    return awaitAbort("done");
  }
  if (mode == "kill-self") {
    xs::rendezvous("init");
    if (me) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the others sleep
      std::printf("victim-at %lld\n", nowNs());
      std::fflush(stdout);
      raise(SIGKILL);
    }
    return awaitAbort("next");
  }
  if (mode == "sleep" || mode == "ignore-int") {
    if (mode == "ignore-int") signal(SIGINT, SIG_IGN);
    xs::rendezvous("ready");
    if (rank == 0) std::printf("ready\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "payload") {
    // Rank r sends r * target + 1 bytes (several rendezvous chunks when target is large).
    std::string mine(static_cast<std::size_t>(rank) * target + 1, '\0');
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>((i * 31 + rank) & 0xff);
    auto all = xs::rendezvous("payload", mine);
    for (int r = 0; r < world; ++r) {
      std::size_t n = static_cast<std::size_t>(r) * target + 1;
      if (all[r].size() != n) return 5;
      for (std::size_t i = 0; i < n; ++i)
        if (all[r][i] != static_cast<char>((i * 31 + r) & 0xff)) return 6;
    }
    std::printf("payload ok\n");
    return 0;
  }
  if (mode == "shared") {
    // Gradients in the shared heap: all-reduced in place with no copy in or out.
    auto grads = xs::shared_alloc<float>(100000);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(rank + i % 7);
    xs::CollectiveOptions zc;
    zc.zeroCopyMinBytes = 0;
    xs::all_reduce(grads, xs::ReduceOp::kSum, zc);
    for (std::size_t i = 0; i < grads.size(); ++i) {
      float want = static_cast<float>(world * (world - 1) / 2 + world * static_cast<int>(i % 7));
      if (grads[i] != want) return 7;
    }
    std::printf("shared ok\n");
    return 0;
  }
  std::fprintf(stderr, "test_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
