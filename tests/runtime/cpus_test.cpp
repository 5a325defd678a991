// cpus_test.cpp: the CPUs a job may use: cgroup quotas read from made-up /proc and cgroup
// files (v1, v2, nested, inside a container), and the affinity mask of this process.
#include <gtest/gtest.h>
#include <sched.h>

#include <map>

#include "cpus.hpp"
#include "xspawn/spawn.hpp"

namespace xs::test {
namespace {

using detail::cgroupCpuQuota;

// A file system of a few files.
struct Files {
  std::map<std::string, std::string> files;
  detail::FileReader reader() const {
    return [this](const std::string& path) -> std::optional<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return std::nullopt;
      return it->second;
    };
  }
};

constexpr const char* kV2Mounts =
    "25 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    "30 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw\n";

constexpr const char* kV1Mounts =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n";

TEST(Cpus, NoQuotaIsZero) {
  Files fs{{{"/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n"}}};
  EXPECT_EQ(cgroupCpuQuota("0::/user.slice\n", kV2Mounts, fs.reader()), 0.0);
  // Nothing to read at all (no cgroup mounted, or /proc hidden).
  EXPECT_EQ(cgroupCpuQuota("", "", fs.reader()), 0.0);
}

TEST(Cpus, CgroupV2QuotaOnTheProcessOrAnAncestor) {
  Files fs{{{"/sys/fs/cgroup/ci/cpu.max", "200000 100000\n"},
            {"/sys/fs/cgroup/ci/job-7/cpu.max", "max 100000\n"},
            {"/sys/fs/cgroup/cpu.max", "max 100000\n"}}};
  EXPECT_DOUBLE_EQ(cgroupCpuQuota("0::/ci/job-7\n", kV2Mounts, fs.reader()), 2.0);
  // The smallest along the path wins.
  fs.files["/sys/fs/cgroup/ci/job-7/cpu.max"] = "150000 100000\n";
  EXPECT_DOUBLE_EQ(cgroupCpuQuota("0::/ci/job-7\n", kV2Mounts, fs.reader()), 1.5);
}

TEST(Cpus, CgroupV1CfsQuota) {
  Files fs{{{"/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000\n"},
            {"/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n"},
            {"/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "-1\n"},
            {"/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n"}}};
  const char* self = "4:cpuset:/docker/abc\n2:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n";
  EXPECT_DOUBLE_EQ(cgroupCpuQuota(self, kV1Mounts, fs.reader()), 0.5);
  // -1: no quota.
  fs.files["/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us"] = "-1\n";
  EXPECT_EQ(cgroupCpuQuota(self, kV1Mounts, fs.reader()), 0.0);
}

TEST(Cpus, InsideAContainerTheMountShowsItsOwnCgroup) {
  // The container's cgroup is mounted as the hierarchy's root: /proc/self/cgroup names the
  // full path (no cgroup namespace) or "/" (a namespace); both mean the mount point itself.
  const char* mounts = "40 31 0:29 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
  Files fs{{{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "400000\n"}, {"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"}}};
  EXPECT_DOUBLE_EQ(cgroupCpuQuota("3:cpu:/docker/abc\n", mounts, fs.reader()), 4.0);
  EXPECT_DOUBLE_EQ(cgroupCpuQuota("3:cpu:/\n", mounts, fs.reader()), 4.0);
}

TEST(Cpus, BothHierarchiesTakeTheSmaller) {
  std::string mounts = std::string(kV1Mounts) + "41 31 0:40 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
  Files fs{{{"/sys/fs/cgroup/unified/a/cpu.max", "300000 100000"},
            {"/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us", "100000"},
            {"/sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", "100000"}}};
  EXPECT_DOUBLE_EQ(cgroupCpuQuota("2:cpu,cpuacct:/a\n0::/a\n", mounts, fs.reader()), 1.0);
}

TEST(Cpus, EscapedMountPoints) {
  const char* mounts = "25 30 0:22 / /tmp/cg\\040root rw - cgroup2 cgroup2 rw\n";
  Files fs{{{"/tmp/cg root/x/cpu.max", "100000 100000"}}};
  EXPECT_DOUBLE_EQ(cgroupCpuQuota("0::/x\n", mounts, fs.reader()), 1.0);
}

TEST(Cpus, UsableCoresFollowTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  const int before = usableCores();
  EXPECT_GE(before, 1);
  EXPECT_LE(before, onlineCores());
  EXPECT_LE(before, CPU_COUNT(&saved));
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(detail::allowedCpus().front(), &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(usableCores(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(usableCores(), before);
}

}  // namespace
}  // namespace xs::test
