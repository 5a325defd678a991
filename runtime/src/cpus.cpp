// cpus.cpp: how many CPUs this process may use. The affinity mask counts the CPUs it may run
// on; a cgroup quota (docker --cpus, a Kubernetes CPU limit) caps the time it may run on them,
// which a job with more ranks than that feels as oversubscription all the same.
#include "cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "xspawn/spawn.hpp"

namespace xs::detail {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t from = 0;;) {
    const std::size_t to = s.find(sep, from);
    parts.push_back(s.substr(from, to == std::string_view::npos ? std::string_view::npos : to - from));
    if (to == std::string_view::npos) return parts;
    from = to + 1;
  }
}

bool hasToken(std::string_view list, std::string_view token) {
  const auto tokens = split(list, ',');
  return std::find(tokens.begin(), tokens.end(), token) != tokens.end();
}

// mountinfo escapes a space, tab, newline and backslash in paths as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto digit = [&](std::size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
    const bool octal = s[i] == '\\' && digit(i + 1) && digit(i + 2) && digit(i + 3);
    if (octal) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A cgroup hierarchy as mounted: the cgroup its mount point shows, and where.
struct Mount {
  std::string root, point;
};

// cgroup2's mount (v2) or the cgroup v1 mount holding the cpu controller.
std::optional<Mount> findMount(std::string_view mountinfo, bool v2) {
  for (std::string_view line : split(mountinfo, '\n')) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const auto fields = split(line.substr(0, dash), ' ');
    const auto tail = split(line.substr(dash + 3), ' ');
    if (fields.size() < 5 || tail.size() < 3) continue;
    const bool match = v2 ? tail[0] == "cgroup2" : tail[0] == "cgroup" && hasToken(tail[2], "cpu");
    if (match) return Mount{unescape(fields[3]), unescape(fields[4])};
  }
  return std::nullopt;
}

// This process's cgroup in that hierarchy (/proc/self/cgroup: "id:controllers:path").
std::optional<std::string> findCgroup(std::string_view selfCgroup, bool v2) {
  for (std::string_view line : split(selfCgroup, '\n')) {
    const std::size_t a = line.find(':'), b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    if (v2 ? id == "0" && controllers.empty() : hasToken(controllers, "cpu")) return std::string(line.substr(b + 1));
  }
  return std::nullopt;
}

std::optional<double> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  double v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

// The quota set on one cgroup directory, in CPUs; 0 for none.
double quotaAt(const std::string& dir, bool v2, const FileReader& read) {
  if (v2) {
    const auto text = read(dir + "/cpu.max");  // "max 100000" or "<quota> <period>"
    if (!text) return 0;
    std::istringstream in(*text);
    std::string quota;
    double period = 0;
    if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
    const auto q = number(quota);
    return q && *q > 0 ? *q / period : 0;
  }
  const auto quota = number(read(dir + "/cpu.cfs_quota_us"));  // -1: none
  const auto period = number(read(dir + "/cpu.cfs_period_us"));
  return quota && period && *quota > 0 && *period > 0 ? *quota / *period : 0;
}

// The smallest quota from the process's cgroup up to the hierarchy's mounted root.
double hierarchyQuota(std::string_view selfCgroup, std::string_view mountinfo, bool v2, const FileReader& read) {
  const auto mount = findMount(mountinfo, v2);
  const auto cgroup = findCgroup(selfCgroup, v2);
  if (!mount || !cgroup) return 0;
  // Below the mount's root (a container sees its own cgroup as "/" or by its full path).
  std::string rel = *cgroup;
  if (mount->root != "/" && rel.rfind(mount->root, 0) == 0) rel = rel.substr(mount->root.size());
  else if (mount->root != "/") rel = "/";
  std::string dir = mount->point + (rel == "/" ? "" : rel);
  double best = 0;
  for (;;) {
    const double q = quotaAt(dir, v2, read);
    if (q > 0 && (best == 0 || q < best)) best = q;
    if (dir.size() <= mount->point.size()) return best;
    dir = dir.substr(0, dir.rfind('/'));
  }
}

std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

double cgroupCpuQuota(std::string_view selfCgroup, std::string_view mountinfo, const FileReader& read) {
  const double v2 = hierarchyQuota(selfCgroup, mountinfo, true, read);
  const double v1 = hierarchyQuota(selfCgroup, mountinfo, false, read);
  if (v2 > 0 && v1 > 0) return std::min(v2, v1);
  return std::max(v2, v1);
}

}  // namespace xs::detail

namespace xs {

int onlineCores() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int usableCores() {
  int n = static_cast<int>(detail::allowedCpus().size());
  const auto cgroup = detail::readFile("/proc/self/cgroup");
  const auto mountinfo = detail::readFile("/proc/self/mountinfo");
  if (cgroup && mountinfo) {
    const double quota = detail::cgroupCpuQuota(*cgroup, *mountinfo, detail::readFile);
    if (quota > 0) n = std::min(n, std::max(1, static_cast<int>(std::ceil(quota - 1e-9))));
  }
  return n;
}

}  // namespace xs
