// bench_switch.hpp: the `xspawn bench switch` command (bench_switch.cpp).
#pragma once

#include <string>
#include <vector>

namespace xs::cli {

// What handing one core from worker to worker costs here, as processes and as threads.
int benchSwitch(const std::vector<std::string>& args);

}  // namespace xs::cli
