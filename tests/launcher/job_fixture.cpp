// job_fixture.cpp: the launcher tests' job runner and leak checks.
#include "job_fixture.hpp"

#include <chrono>
#include <sstream>
#include <thread>

namespace xs::test {

Job LauncherTest::runJob(const std::vector<std::string>& launcherArgs,
                         const std::vector<std::string>& command, RunOptions options) {
  Job job;
  job.jobId = uniqueJobId("job");
  dirs_.push_back(std::make_unique<TempDir>("logs"));
  job.logDir = dirs_.back()->path;
  std::vector<std::string> argv{xspawn(), "--job-id", job.jobId, "--log-dir", job.logDir};
  argv.insert(argv.end(), launcherArgs.begin(), launcherArgs.end());
  argv.insert(argv.end(), command.begin(), command.end());
  job.run = runProcess(argv, options);
  std::string text = readFile(job.logDir + "/report.json");
  if (!text.empty()) job.report = nlohmann::json::parse(text);
  return job;
}

void LauncherTest::expectClean(const Job& job) {
  // Workers may take a moment to be reaped by init after a SIGKILLed launcher.
  int pgid = job.report.is_object() ? job.report.value("process_group", 0) : 0;
  for (int i = 0; i < 100; ++i) {
    if (!processGroupAlive(pgid) && processesOfJob(job.jobId).empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(processGroupAlive(pgid)) << "a process of job " << job.jobId << " is still running";
  EXPECT_TRUE(processesOfJob(job.jobId).empty()) << "a process of job " << job.jobId << " is still running";
  EXPECT_FALSE(segmentExists(job.jobId)) << "job " << job.jobId << " left its segment in /dev/shm";
}

std::vector<std::string> linesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

bool oneLine(const std::string& text) {
  return !text.empty() && text.back() == '\n' && text.find('\n') == text.size() - 1;
}

}  // namespace xs::test
