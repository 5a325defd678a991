// job_fixture.hpp: runs `xspawn` jobs for the launcher tests and checks what every job must
// leave behind: nothing (no process of the job, no shared memory).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process_runner.hpp"

namespace xs::test {

struct Job {
  RunResult run;
  std::string jobId;
  nlohmann::json report;  // report.json, empty if none
  std::string logDir;
};

class LauncherTest : public ::testing::Test {
 protected:
  // Runs `xspawn --job-id J --log-dir D <launcherArgs> <command...>`.
  Job runJob(const std::vector<std::string>& launcherArgs, const std::vector<std::string>& command,
             RunOptions options = {});
  // The job left no process and no segment behind.
  void expectClean(const Job& job);
  static std::string xspawn() { return XSPAWN_BIN; }
  static std::string worker() { return TEST_WORKER_BIN; }
  std::vector<std::unique_ptr<TempDir>> dirs_;
};

// Lines of `text` containing `needle`.
std::vector<std::string> linesWith(const std::string& text, const std::string& needle);
// Is `text` exactly one line?
bool oneLine(const std::string& text);

}  // namespace xs::test
