// machine_transport.cpp: where this launcher stands among the machines of an mpirun/srun
// job, and loading the MPI transport module.
#include "machine_transport.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return *end == '\0' && x >= 0 && x < INT_MAX ? static_cast<int>(x) : fallback;
}

}  // namespace

MachinePlace detectMachines() {
  MachinePlace p;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    // Open MPI's mpirun (and srun with Open MPI's PMIx) set these before MPI_Init.
    p.machine = envInt("OMPI_COMM_WORLD_RANK", 0);
    p.machines = envInt("OMPI_COMM_WORLD_SIZE", 1);
    p.via = "mpirun";
  } else if (std::getenv("PMIX_RANK") && std::getenv("SLURM_NTASKS")) {
    p.machine = envInt("PMIX_RANK", 0);
    p.machines = envInt("SLURM_NTASKS", 1);
    p.via = "srun";
  }
  if (p.machines < 1 || p.machine >= p.machines) {
    XS_THROW(UsageError, fmt::format("the {} environment says process {} of {}: not a valid place in a job",
                                     p.via, p.machine, p.machines));
  }
  return p;
}

std::unique_ptr<MachineTransport> loadMpiTransport() {
  constexpr const char* kModule = "libxspawn_mpi.so";
  std::vector<std::string> tried;
  if (const char* env = std::getenv("XSPAWN_MPI_MODULE")) tried.emplace_back(env);
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    tried.push_back((exe.parent_path() / kModule).string());  // a build tree
    tried.push_back((exe.parent_path() / XSPAWN_BIN_TO_MODULES / kModule).lexically_normal().string());  // installed
  }
  tried.emplace_back(kModule);
  std::string errors;
  for (const std::string& path : tried) {
    // RTLD_GLOBAL: Open MPI loads its own plugins, which need libmpi's symbols.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      errors += fmt::format("{}{}", errors.empty() ? " " : "; ", ::dlerror());
      continue;
    }
    auto create = reinterpret_cast<MachineTransport* (*)()>(::dlsym(handle, "xspawnCreateMpiTransport"));
    if (!create) XS_THROW(UsageError, fmt::format("{} has no xspawnCreateMpiTransport: not an xspawn MPI module", path));
    // The module stays loaded for the life of the process (MPI cannot be unloaded).
    return std::unique_ptr<MachineTransport>(create());
  }
  XS_THROW(UsageError,
           fmt::format("this launcher runs under mpirun with other machines but cannot load its MPI module "
                       "{} (built when Open MPI's libopenmpi-dev is installed: install it and rebuild, or "
                       "set XSPAWN_MPI_MODULE to its path):{}",
                       kModule, errors));
}

}  // namespace xs::detail
