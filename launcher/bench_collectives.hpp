// bench_collectives.hpp: the collectives benchmark command and the size parser it shares.
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"

namespace xs::cli {

int benchCollective(const Invocation& inv, const std::string& op, const std::vector<std::string>& args);
// "4096", "64K", "256M", "1G" -> bytes; UsageError naming `option` otherwise.
std::size_t parseBytes(const std::string& text, const std::string& option);

}  // namespace xs::cli
