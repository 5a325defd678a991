// torch_env.hpp: the environment torchrun gives its workers, given by `xspawn run` too, so that
// an unchanged PyTorch program (init_process_group with the env:// rendezvous, as torchrun
// runs it) finds its rank, its world and its master under xspawn.
//
//   RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE    global / on this machine
//   GROUP_RANK GROUP_WORLD_SIZE                    this machine among the job's machines
//   ROLE_NAME ROLE_RANK ROLE_WORLD_SIZE            one role, "default", as torchrun's
//   MASTER_ADDR MASTER_PORT                        rank 0's store (one machine: 127.0.0.1 and
//                                                  a port the launcher holds for the job; under
//                                                  mpirun machine 0's host and held port, from
//                                                  the launchers' handshake)
//   TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS / _RUN_ID / _USE_AGENT_STORE
//   PYTHONPATH                                     this xspawn's Python package first, so that
//                                                  `import xspawn` finds the one that matches
//                                                  the launcher (and its segment layout)
#pragma once

#include <string>

namespace xs::detail {

// A free TCP port on one address, held for the job without a race: the launcher keeps a socket
// bound to it (SO_REUSEADDR, never listening), so no other program's bind or connect takes it,
// while rank 0's store, which binds with SO_REUSEADDR too, can listen on it.
class MasterPort {
 public:
  MasterPort() = default;
  ~MasterPort();
  MasterPort(const MasterPort&) = delete;
  MasterPort& operator=(const MasterPort&) = delete;
  // Binds a fresh port on addr; SystemError when none can be had.
  void reserve(const std::string& addr);
  int port() const { return port_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

struct TorchPlace {
  int rank = 0, localRank = 0, world = 1, localWorld = 1;
  int machine = 0, machines = 1;
  int restartCount = 0, maxRestarts = 0;
  std::string runId;
  std::string masterAddr;  // empty: leave MASTER_ADDR / MASTER_PORT as the environment has them
  int masterPort = 0;
  std::string pythonDir;   // empty: PYTHONPATH left as it is
};

// The directory holding this xspawn's Python package (xspawn/__init__.py), found relative to
// the runtime library: in the build tree or in the install; empty when it was not built.
std::string pythonPackageDir();

// Sets the variables in this process (a worker between fork and exec).
void setTorchEnv(const TorchPlace& place);

}  // namespace xs::detail
