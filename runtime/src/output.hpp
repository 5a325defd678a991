// output.hpp: the supervisor's output plumbing: every worker's stdout and stderr arrive on
// pipes, are cut into lines, and go to the console (optionally tagged "[rank i] "), to the
// rank's log file, and into a short tail kept for the failure report (and a Python
// traceback, when a rank prints one on stderr).
#pragma once

#include <poll.h>

#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "traceback.hpp"

namespace xs::detail {

class OutputForwarder {
 public:
  // `firstRank`: the global rank of local rank 0 (tags and log names show global ranks).
  OutputForwarder(int worldSize, bool tagOutput, const std::string& logDir,
                  std::size_t tailLines = 20, int firstRank = 0);
  ~OutputForwarder();
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  // Takes ownership of the read ends of rank r's stdout and stderr pipes.
  void addRank(int rank, int outFd, int errFd);
  // The open read ends, to poll.
  void appendPollFds(std::vector<pollfd>& fds) const;
  // Reads what `fd` has and forwards complete lines. Closes it at end of file.
  void onReadable(int fd);
  // Reads every pipe until end of file or until `budgetMs` passes (a worker's child may keep
  // a pipe open forever), then flushes partial lines.
  void drain(int budgetMs);
  std::vector<std::string> tail(int rank) const;
  // The Python traceback rank r printed on stderr last, if any (traceback.hpp).
  const TracebackCatcher& traceback(int rank) const { return tracebacks_[rank]; }
  // A restarted gang: the tails start afresh and every rank's log file gets a marker line.
  void newAttempt(int attempt);
  bool anyOpen() const;

 private:
  struct Stream {
    int fd = -1;
    int rank = 0;
    bool isErr = false;
    std::string partial;
  };
  void emit(Stream& s, const std::string& line, bool newline);
  void closeStream(Stream& s);

  bool tagOutput_;
  int firstRank_ = 0;
  std::size_t tailLines_;
  std::vector<Stream> streams_;
  std::vector<std::FILE*> logs_;
  std::vector<std::deque<std::string>> tails_;
  std::vector<TracebackCatcher> tracebacks_;
};

}  // namespace xs::detail
