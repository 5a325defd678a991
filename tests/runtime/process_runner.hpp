// process_runner.hpp: runs a command for a test as a real child process, with its output
// captured, a deadline, and optional signals sent when a line appears or after a delay.
#pragma once

#include <string>
#include <vector>

namespace xs::test {

struct RunResult {
  int exitCode = -1;  // exit status, or 128+signal
  std::string out;
  std::string err;
  double seconds = 0;
  bool timedOut = false;
  int pid = 0;
};

struct RunOptions {
  double timeoutSeconds = 60;
  // When `signalWhen` appears in stdout, send `signal` (after `signalDelayMs`); repeat
  // `signalCount` times with the delay between.
  std::string signalWhen;
  int signal = 0;
  int signalCount = 1;
  int signalDelayMs = 0;
  std::vector<std::string> env;  // extra NAME=value
};

RunResult runProcess(const std::vector<std::string>& argv, const RunOptions& options = {});

// Is any process of this process group still alive (zombies count as gone)?
bool processGroupAlive(int pgid);
// Pids of processes whose environment says XSPAWN_JOB_ID=jobId.
std::vector<int> processesOfJob(const std::string& jobId);
// Does /dev/shm hold this user's segment of the job?
bool segmentExists(const std::string& jobId);
// Reads a whole file ("" if missing).
std::string readFile(const std::string& path);
// A fresh empty directory in the temp directory, removed with the object.
struct TempDir {
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};
std::string uniqueJobId(const std::string& tag);

}  // namespace xs::test
