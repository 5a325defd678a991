// mca_params.cpp: the user's Open MPI parameters, in the environment and in parameter files
// (mca_params.hpp).
#include "mca_params.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace xs::detail {
namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// Open MPI's configuration directory: relocated by OPAL_SYSCONFDIR or OPAL_PREFIX as Open MPI
// itself is, else the one of the Open MPI this was built against.
std::string sysconfDir() {
  if (const char* d = std::getenv("OPAL_SYSCONFDIR"); d && *d) return d;
  if (const char* p = std::getenv("OPAL_PREFIX"); p && *p) return std::string(p) + "/etc";
  return XSPAWN_OMPI_SYSCONFDIR;
}

}  // namespace

std::vector<std::string> mcaParamFiles() {
  std::vector<std::string> files;
  const char* named = std::getenv("OMPI_MCA_mca_base_param_files");
  if (!named) named = std::getenv("OMPI_MCA_mca_param_files");  // its synonym
  if (named) {
    // Open MPI separates them with commas (and, in older releases, colons).
    std::string list = named;
    for (char& c : list)
      if (c == ':') c = ',';
    std::istringstream in(list);
    for (std::string f; std::getline(in, f, ',');)
      if (!trim(f).empty()) files.push_back(trim(f));
    return files;
  }
  if (const char* home = std::getenv("HOME"); home && *home)
    files.push_back(std::string(home) + "/.openmpi/mca-params.conf");
  files.push_back(sysconfDir() + "/openmpi-mca-params.conf");
  return files;
}

std::optional<McaFileSetting> mcaParamFileSetting(const std::string& name) {
  for (const std::string& file : mcaParamFiles()) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      line = trim(line.substr(0, line.find('#')));
      const auto eq = line.find('=');
      if (eq != std::string::npos && trim(line.substr(0, eq)) == name)
        return McaFileSetting{file, trim(line.substr(eq + 1))};
    }
  }
  return std::nullopt;
}

bool preferMcaParam(const std::string& name, const std::string& value) {
  const std::string var = "OMPI_MCA_" + name;
  if (std::getenv(var.c_str()) || mcaParamFileSetting(name)) return false;
  return ::setenv(var.c_str(), value.c_str(), 0) == 0;
}

}  // namespace xs::detail
