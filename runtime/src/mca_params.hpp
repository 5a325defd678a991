// mca_params.hpp: whether the user set an Open MPI (MCA) parameter, wherever Open MPI would
// read it from: the environment (OMPI_MCA_<name>, which is also what `mpirun --mca` sets) or a
// parameter file ($HOME/.openmpi/mca-params.conf and <sysconfdir>/openmpi-mca-params.conf, or
// the files OMPI_MCA_mca_base_param_files names instead). The launcher sets the parameters it
// prefers (mpi_transport.cpp) only where the user set none: an environment variable would
// override a file's value, and the user's choice must win wherever it was made.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace xs::detail {

// The parameter files Open MPI reads, in its order (existing or not).
std::vector<std::string> mcaParamFiles();
// The first of those files that sets `name`, and the value it gives, if any does.
struct McaFileSetting {
  std::string file, value;
};
std::optional<McaFileSetting> mcaParamFileSetting(const std::string& name);
// Sets OMPI_MCA_<name>=value for MPI_Init to read, unless the environment or a parameter file
// sets `name` already; returns whether it did.
bool preferMcaParam(const std::string& name, const std::string& value);

}  // namespace xs::detail
