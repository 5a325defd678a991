// mpi_launch.hpp: how the tests start launchers as "machines" on this one machine: mpirun's
// path, its options (--oversubscribe, no binding), and whether MPI jobs can run at all.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace xs::test {

// The path of mpirun ("" when not installed): the test runner execs without a PATH search.
inline std::string mpirunPath() {
  std::string path;
  if (FILE* f = ::popen("command -v mpirun 2>/dev/null", "r")) {
    char line[4096];
    if (std::fgets(line, sizeof line, f)) path = line;
    ::pclose(f);
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  return path;
}

// mpiModuleFile: the built libxspawn_mpi.so ("" when xspawn was built without Open MPI).
inline bool haveMpi(const std::string& mpiModuleFile, std::string* why) {
  if (mpiModuleFile.empty()) {
    *why = "xspawn was built without Open MPI (libopenmpi-dev): no libxspawn_mpi.so";
    return false;
  }
  if (mpirunPath().empty()) {
    *why = "mpirun is not installed (openmpi-bin)";
    return false;
  }
  return true;
}

// mpirun's own options for launchers on this one machine: more processes than cores, no
// binding (each launcher's workers must be free to use every core).
inline std::vector<std::string> mpirunArgs(int machines) {
  std::vector<std::string> a{mpirunPath(), "--oversubscribe", "--bind-to", "none", "-np", std::to_string(machines)};
  if (::getuid() == 0) a.insert(a.begin() + 1, "--allow-run-as-root");
  return a;
}

}  // namespace xs::test
