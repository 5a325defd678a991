// gloo_bench.cpp: the Gloo peer of `xspawn bench`: forks N processes that meet through a file
// store and talk over Gloo's TCP transport on 127.0.0.1 (Gloo has no shared-memory transport),
// then time gloo::allreduce, broadcast and allgather (float, sum) with the same sizes, rotation
// and timing. Usage: xspawn-bench-gloo N OP MIN MAX FACTOR ITERS WARMUP; rank 0 prints one
// JSON line per size.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "sweep.hpp"

namespace {

int runRank(int rank, int world, const std::string& storeDir, const xs::bench::SweepConfig& c) {
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(storeDir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->connectFullMesh(store, device);
  uint32_t tag = 0;
  auto barrier = [&] {
    gloo::BarrierOptions b(context);
    b.setTag(tag++);
    gloo::barrier(b);
  };
  for (std::size_t bytes : xs::bench::sweepSizes(c)) {
    const std::size_t count = bytes / sizeof(float);
    const int rot = xs::bench::rotation(c, bytes);
    const std::size_t part = c.op == "allgather" ? count / world : count;
    std::vector<std::vector<float>> in(rot, std::vector<float>(part, 1.0f));
    std::vector<std::vector<float>> out(rot, std::vector<float>(count));
    auto call = [&](int i) {
      float* src = in[i % rot].data();
      float* dst = out[i % rot].data();
      if (c.op == "allreduce") {
        gloo::AllreduceOptions o(context);
        o.setInput(src, count);
        o.setOutput(dst, count);
        o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        o.setTag(tag++);
        gloo::allreduce(o);
      } else if (c.op == "broadcast") {
        gloo::BroadcastOptions o(context);
        o.setOutput(src, count);
        o.setRoot(0);
        o.setTag(tag++);
        gloo::broadcast(o);
      } else {
        gloo::AllgatherOptions o(context);
        o.setInput(src, part);
        o.setOutput(dst, part * world);
        o.setTag(tag++);
        gloo::allgather(o);
      }
    };
    auto t = xs::bench::timeCalls(c.warmup, xs::bench::itersFor(c, bytes), call, barrier);
    if (rank == 0) xs::bench::printJsonLine("gloo", c.op, bytes, t);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: xspawn-bench-gloo N OP MIN MAX FACTOR ITERS WARMUP\n");
    return 2;
  }
  const int world = std::atoi(argv[1]);
  const xs::bench::SweepConfig c = xs::bench::sweepFromArgs(argv, 2);
  if (c.op == "reducescatter") {
    std::fprintf(stderr, "xspawn-bench-gloo: Gloo has no reduce-scatter for this comparison\n");
    return 3;
  }
  char tmpl[] = "/tmp/xspawn-gloo-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const std::string dir = tmpl;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int rc = 1;
      try {
        rc = runRank(r, world, dir, c);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int status = 0, worst = 0;
  for (pid_t p : pids) {
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) worst = 1;
  }
  std::filesystem::remove_all(dir);
  return worst;
}
