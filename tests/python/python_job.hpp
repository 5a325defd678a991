// python_job.hpp: the fixture of the tests of Python programs: runs tests/python/<script> with
// the tests' Python under `xspawn run`, and checks that nothing of the job is left.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "process_runner.hpp"

namespace xs::test {

inline bool pythonHas(const std::string& module) {
  RunOptions o;
  o.timeoutSeconds = 60;
  return runProcess({PYTHON_BIN, "-c", "import " + module}, o).exitCode == 0;
}

class PythonJobTest : public ::testing::Test {
 protected:
  // xspawn [extra...] --nprocs N run -- python <script> [args...]
  RunResult run(int nprocs, const std::string& script, std::vector<std::string> extra = {},
                std::vector<std::string> args = {}, double timeout = 120) {
    jobId_ = uniqueJobId("py");
    std::vector<std::string> argv{XSPAWN_BIN, "--job-id", jobId_, "--nprocs", std::to_string(nprocs)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const char* a : {"run", "--", PYTHON_BIN}) argv.emplace_back(a);
    argv.push_back(std::string(SCRIPTS_DIR) + "/" + script);
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions o;
    o.timeoutSeconds = timeout;
    return runProcess(argv, o);
  }
  void expectClean() {
    for (int i = 0; i < 100 && !processesOfJob(jobId_).empty(); ++i) usleep(20000);
    EXPECT_TRUE(processesOfJob(jobId_).empty()) << "a worker is still running";
    EXPECT_FALSE(segmentExists(jobId_)) << "the segment is still in /dev/shm";
  }
  void requireTorch() {
    if (!pythonHas("torch")) GTEST_SKIP() << PYTHON_BIN << " has no torch: apt-get install python3-torch";
  }
  std::string jobId_;
};

}  // namespace xs::test
