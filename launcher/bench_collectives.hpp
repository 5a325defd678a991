// bench_collectives.hpp: the collectives benchmark command.
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"

namespace xs::cli {

int benchCollective(const Invocation& inv, const std::string& op, const std::vector<std::string>& args);

}  // namespace xs::cli
