// machine_transport.hpp: what a job spanning machines needs from the network between them,
// as one launcher per machine sees it: nonblocking collectives among the launchers and a
// notice channel for failures. The implementation is Open MPI's (mpi_transport.cpp, built as
// the module libxspawn_mpi.so and loaded only when a launcher runs under mpirun or srun), so
// neither the launcher nor any worker links MPI otherwise. The proxy (machine_proxy.hpp) is
// written against this interface only: algorithm separate from transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "xspawn/collectives.hpp"

namespace xs::detail {

// Where this launcher stands among the machines of the job, from the environment that
// mpirun / srun give the processes they start.
struct MachinePlace {
  int machine = 0;   // this launcher's index (its MPI rank)
  int machines = 1;  // launchers in the job (1: not under mpirun, or a job of one machine)
  std::string via;   // "mpirun" or "srun", empty when not started by either
};
MachinePlace detectMachines();

// A notice one machine sends the others: its first failure (exit code + one-line text).
struct MachineNotice {
  int from = -1;
  int exitCode = 0;
  std::string text;
};

class MachineTransport {
 public:
  using Handle = std::uint64_t;
  virtual ~MachineTransport() = default;

  // On the launcher's main thread, before the proxy starts: sets what MPI_Init reads from the
  // environment. fileDir: a directory of this launcher's own for the files the transport's
  // library keeps on this machine (Open MPI's shared-memory segments), removed after the
  // transport ends or, if the launcher is killed, by the next sweep
  // (Segment::createTransportDir); empty: where the library keeps them by default.
  virtual void prepare(const std::string& fileDir) = 0;
  // Joins the other machines (MPI_Init_thread). Blocks until every machine has started.
  virtual void join() = 0;
  virtual int machine() const = 0;
  virtual int machines() const = 0;
  // This machine's name ("node07"), for reports.
  virtual std::string hostName() const = 0;

  // Nonblocking collectives among the launchers; the memory must stay valid until test()
  // says the handle is done. `op` is never kMean (the proxy sums; ranks scale).
  virtual Handle allReduce(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  virtual Handle broadcast(void* data, std::size_t bytes, int root) = 0;
  // out = every machine's `bytes` from in, in machine order.
  virtual Handle allGather(const void* in, std::size_t bytes, void* out) = 0;
  // Point-to-point, for the launchers' clock alignment and the trace's gather at the end:
  // `bytes` (below 2 GiB) to or from one machine, matched in the order they were posted.
  virtual Handle send(const void* data, std::size_t bytes, int to) = 0;
  virtual Handle receive(void* data, std::size_t bytes, int from) = 0;
  // Progresses the transport; true once the handle's operation is done (the handle is then
  // released).
  virtual bool test(Handle handle) = 0;

  // Sends `notice` to every other machine without waiting for them.
  virtual void sendNotice(const MachineNotice& notice) = 0;
  // True once every notice sent has left this machine (progresses them).
  virtual bool noticesSent() = 0;
  // A notice another machine sent, if one has arrived.
  virtual std::optional<MachineNotice> pollNotice() = 0;

  // Leaves the job in order (MPI_Finalize): only when no operation is pending anywhere.
  virtual void finalize() = 0;
};

// Loads libxspawn_mpi.so (from $XSPAWN_MPI_MODULE, else next to this executable, else the
// library path) and makes its transport. Throws UsageError saying how to get it when it is
// missing.
std::unique_ptr<MachineTransport> loadMpiTransport();

}  // namespace xs::detail

// The module's entry point.
extern "C" xs::detail::MachineTransport* xspawnCreateMpiTransport();
