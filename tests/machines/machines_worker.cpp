// machines_worker.cpp: the worker program of the tests across machines, run as
// `mpirun -np M xspawn --nprocs N run -- machines_worker MODE [RANK]`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives_check.hpp"
#include "xspawn/data/dataset.hpp"
#include "xspawn/data/synthetic.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

int main(int argc, char** argv) {
  xs::init();
  const std::string mode = argc > 1 ? argv[1] : "identity";
  const int target = argc > 2 ? std::atoi(argv[2]) : 0;
  const int rank = xs::get_ordinal();
  if (mode == "identity") {
    // Every rank's place, gathered by a rendezvous across machines and printed by rank 0.
    std::string me = std::to_string(rank) + "/" + std::to_string(xs::get_local_ordinal()) + "/" +
                     std::to_string(xs::world_size()) + "/" + std::to_string(xs::local_world_size()) + "/" +
                     xs::device().name;
    auto all = xs::rendezvous("identity", me);
    if (xs::is_master_ordinal(false)) {
      for (const std::string& s : all) std::printf("place %s\n", s.c_str());
    }
    xs::barrier("done");
    return 0;
  }
  if (mode == "everything") return xs::test::checkEverything(rank, {});
  if (mode == "share") {
    // Each machine's local rank 1 loads the dataset once; every rank reads the machine's copy.
    namespace data = xs::data;
    data::SyntheticConfig c;
    c.trainCount = 500;
    int loads = 0;
    const data::Dataset d = data::shareDataset([&] { return ++loads, data::makeSynthetic(c, data::Split::kTrain); }, 1);
    const data::Dataset want = data::makeSynthetic(c, data::Split::kTrain);
    if (loads != (xs::get_local_ordinal() == 1 ? 1 : 0)) return 20;
    if (d.sharedPixels.empty() || !d.pixels.empty() || d.labels != want.labels || d.name != want.name) return 21;
    if (std::memcmp(d.pixelData(), want.pixels.data(), want.pixels.size()) != 0) return 22;
    xs::barrier("shared");
    if (xs::is_master_ordinal(false)) std::printf("one copy per machine\n");
    return 0;
  }
  if (mode == "loop") {
    // Every rank all-reduces in a loop (faults come from --inject-fault).
    std::vector<float> grads(1 << 16, 1.0f);
    for (int step = 0; step < 1000; ++step) {
      xs::all_reduce(std::span<float>(grads), xs::ReduceOp::kMean);
      if (step == 2 && rank == 0) std::printf("all-reducing\n"), std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return 0;
  }
  if (mode == "finish-early") {
    // Machine 0's ranks finish at once; the target rank (on another machine) fails later.
    xs::rendezvous("start");
    if (rank / xs::local_world_size() == 0) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (rank == target) throw std::runtime_error("late boom from rank " + std::to_string(rank));
    return 0;
  }
  if (mode == "big-payload") {
    xs::rendezvous("big", std::string(3 << 20, 'x'));
    return 0;
  }
  if (mode == "diverge-kind") {
    // The target machine's ranks enter a rendezvous where the others all-reduce a few KiB.
    const int machine = rank / xs::local_world_size();
    std::vector<float> v(1024, 1.0f);
    if (machine == target) xs::rendezvous("step");
    else xs::all_reduce(std::span<float>(v));
    return 0;
  }
  if (mode == "diverge") {
    // The ranks of the target machine reach another rendezvous than everyone else.
    const int machine = rank / xs::local_world_size();
    xs::rendezvous(machine == target ? "save" : "epoch_end");
    return 0;
  }
  std::fprintf(stderr, "machines_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
