/* mpi_init_probe.c: the MPI side of the launch-time benchmark: every rank initialises MPI,
 * passes a barrier and prints when it did (Unix ns), like `xspawn hello --stamp`. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Barrier(MPI_COMM_WORLD);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  printf("rank %d past init at %lld\n", rank, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
