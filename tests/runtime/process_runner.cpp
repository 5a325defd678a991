// process_runner.cpp: child processes for tests.
#include "process_runner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace xs::test {

RunResult runProcess(const std::vector<std::string>& argv, const RunOptions& options) {
  RunResult result;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return result;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devNull = open("/dev/null", O_RDONLY);
    dup2(devNull, 0);
    // A new process group: a test that kills the launcher must not hit the test itself.
    setpgid(0, 0);
    for (const std::string& kv : options.env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  result.pid = pid;
  close(out[1]);
  close(err[1]);
  bool outOpen = true, errOpen = true;
  int signalsSent = 0;
  auto nextSignalAt = std::chrono::steady_clock::time_point::max();
  bool triggered = options.signalWhen.empty() && options.signal != 0;
  if (triggered) nextSignalAt = start + std::chrono::milliseconds(options.signalDelayMs);
  auto deadline = start + std::chrono::milliseconds(static_cast<long>(options.timeoutSeconds * 1000));
  while (outOpen || errOpen) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      result.timedOut = true;
      kill(pid, SIGKILL);
      break;
    }
    if (!triggered && !options.signalWhen.empty() && result.out.find(options.signalWhen) != std::string::npos) {
      triggered = true;
      nextSignalAt = now + std::chrono::milliseconds(options.signalDelayMs);
    }
    if (triggered && signalsSent < options.signalCount && now >= nextSignalAt) {
      kill(pid, options.signal);
      ++signalsSent;
      nextSignalAt = now + std::chrono::milliseconds(std::max(options.signalDelayMs, 100));
    }
    pollfd fds[2] = {{outOpen ? out[0] : -1, POLLIN, 0}, {errOpen ? err[0] : -1, POLLIN, 0}};
    poll(fds, 2, 20);
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? outOpen : errOpen) = false;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exitCode = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

bool processGroupAlive(int pgid) {
  if (pgid <= 0) return false;
  DIR* d = opendir("/proc");
  bool alive = false;
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string stat = readFile(std::string("/proc/") + e->d_name + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream in(stat.substr(close + 2));
    std::string state;
    int ppid = 0, pgrp = 0;
    in >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != "Z") alive = true;
  }
  closedir(d);
  return alive;
}

std::vector<int> processesOfJob(const std::string& jobId) {
  std::vector<int> pids;
  const std::string needle = "XSPAWN_JOB_ID=" + jobId;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string env = readFile(std::string("/proc/") + e->d_name + "/environ");
    std::string stat = readFile(std::string("/proc/") + e->d_name + "/stat");
    auto close = stat.rfind(')');
    bool zombie = close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z';
    std::size_t at = 0;
    while (!zombie && (at = env.find(needle, at)) != std::string::npos) {
      bool start = at == 0 || env[at - 1] == '\0';
      std::size_t end = at + needle.size();
      if (start && (end == env.size() || env[end] == '\0')) {
        pids.push_back(std::atoi(e->d_name));
        break;
      }
      at = end;
    }
  }
  closedir(d);
  return pids;
}

bool segmentExists(const std::string& jobId) {
  return std::filesystem::exists("/dev/shm/xspawn-" + std::to_string(getuid()) + "-" + jobId);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("xspawn-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  path = dir.string();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string uniqueJobId(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "t" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

}  // namespace xs::test
