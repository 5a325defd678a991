// file_size_limit.hpp: runs a piece of code as if the disk filled up, without touching the
// test process: in a forked child whose file size limit (RLIMIT_FSIZE) is `bytes`, with SIGXFSZ
// ignored, so a write past the limit fails with EFBIG instead of killing the process. The child
// must only do file work (no threads of its own): it reports the error it caught and exits.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>

#include "xspawn/error.hpp"

namespace xs::fsize {

struct LimitedRun {
  std::string kind;     // "CheckpointError", "other error", "no error" or "child failed"
  std::string message;  // the error's what(), or how the child ended
};

namespace detail {

inline std::string runLimited(std::uint64_t bytes, const std::function<void()>& fn) {
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0) return "child failed\ngetrlimit failed";
  limit.rlim_cur = bytes;
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "child failed\nsetrlimit failed";
  try {
    fn();
    return "no error\n";
  } catch (const CheckpointError& e) {
    return std::string("CheckpointError\n") + e.what();
  } catch (const std::exception& e) {
    return std::string("other error\n") + e.what();
  }
}

}  // namespace detail

// Runs fn in a child limited to files of `bytes` bytes; returns what it threw.
inline LimitedRun underFileSizeLimit(std::uint64_t bytes, const std::function<void()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return {"child failed", "pipe failed"};
  const pid_t pid = ::fork();
  if (pid < 0) return {"child failed", "fork failed"};
  if (pid == 0) {
    ::close(fds[0]);
    const std::string report = detail::runLimited(bytes, fn);
    std::size_t done = 0;
    while (done < report.size()) {
      const ssize_t n = ::write(fds[1], report.data() + done, report.size() - done);
      if (n <= 0) ::_exit(3);
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || report.find('\n') == std::string::npos)
    return {"child failed", "wait status " + std::to_string(status) + ", report '" + report + "'"};
  const std::size_t eol = report.find('\n');
  return {report.substr(0, eol), report.substr(eol + 1)};
}

}  // namespace xs::fsize
