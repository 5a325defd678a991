// cpus.hpp: the CPUs a job may use: the launcher's affinity mask and a cgroup's CPU quota
// (usableCores, spawn.hpp, is their public sum-up).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xs::detail {

// The CPUs in this process's affinity mask (taskset, a cpuset, mpirun's binding), in order;
// {0} if it cannot be read.
std::vector<int> allowedCpus();

// A file's text, or nullopt when it cannot be read.
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

// The CPUs a cgroup quota grants this process (quota / period, the smallest along its cgroup
// and the cgroup's ancestors, in cgroup v2's cpu.max and v1's cpu.cfs_quota_us /
// cpu.cfs_period_us), or 0 when no quota applies. selfCgroup and mountinfo are the texts of
// /proc/self/cgroup and /proc/self/mountinfo; read gives the cgroup files' texts.
double cgroupCpuQuota(std::string_view selfCgroup, std::string_view mountinfo, const FileReader& read);

}  // namespace xs::detail
