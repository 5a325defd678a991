// mpi_bench.cpp: the Open MPI peer of `xspawn bench`: the same sizes, rotation and timing
// through MPI_Allreduce, MPI_Bcast, MPI_Allgather and MPI_Reduce_scatter_block (float, sum).
// Run by the bench as `mpirun -np N xspawn-bench-mpi OP MIN MAX FACTOR ITERS WARMUP`; rank 0
// prints one JSON line per size.
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "sweep.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  xs::bench::SweepConfig c;
  if (argc >= 7) c = xs::bench::sweepFromArgs(argv, 1);
  for (std::size_t bytes : xs::bench::sweepSizes(c)) {
    const std::size_t count = bytes / sizeof(float);
    const int rot = xs::bench::rotation(c, bytes);
    // allgather/reducescatter: `bytes` is the whole (gathered / scattered) buffer.
    const bool split = c.op == "allgather" || c.op == "reducescatter";
    const std::size_t part = split ? count / world : count;
    std::vector<std::vector<float>> in(rot, std::vector<float>(split && c.op == "allgather" ? part : count, 1.0f));
    std::vector<std::vector<float>> out(rot, std::vector<float>(split && c.op == "reducescatter" ? part : count));
    auto call = [&](int i) {
      float* src = in[i % rot].data();
      float* dst = out[i % rot].data();
      if (c.op == "allreduce") MPI_Allreduce(src, dst, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (c.op == "broadcast") MPI_Bcast(src, static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
      else if (c.op == "allgather") MPI_Allgather(src, static_cast<int>(part), MPI_FLOAT, dst, static_cast<int>(part), MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Reduce_scatter_block(src, dst, static_cast<int>(part), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    auto t = xs::bench::timeCalls(c.warmup, xs::bench::itersFor(c, bytes), call, [] { MPI_Barrier(MPI_COMM_WORLD); });
    if (rank == 0) xs::bench::printJsonLine("mpi", c.op, bytes, t);
  }
  MPI_Finalize();
  return 0;
}
