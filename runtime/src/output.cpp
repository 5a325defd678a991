// output.cpp: line forwarding from worker pipes to console, log files and tails.
#include "output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

void writeAll(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console gone (EPIPE): keep supervising, drop the text
    off += static_cast<std::size_t>(n);
  }
}

constexpr std::size_t kMaxLine = 64 * 1024;

}  // namespace

OutputForwarder::OutputForwarder(int worldSize, bool tagOutput, const std::string& logDir,
                                 std::size_t tailLines, int firstRank)
    : tagOutput_(tagOutput), firstRank_(firstRank), tailLines_(tailLines), logs_(worldSize, nullptr), tails_(worldSize), tracebacks_(worldSize) {
  if (logDir.empty()) return;
  for (int r = 0; r < worldSize; ++r) {
    std::string path = fmt::format("{}/rank-{}.log", logDir, firstRank + r);
    logs_[r] = std::fopen(path.c_str(), "we");
    if (!logs_[r]) {
      XS_THROW(UsageError, fmt::format("cannot write the log file {}: {}", path, std::strerror(errno)));
    }
  }
}

OutputForwarder::~OutputForwarder() {
  for (Stream& s : streams_) closeStream(s);
  for (std::FILE* f : logs_)
    if (f) std::fclose(f);
}

void OutputForwarder::newAttempt(int attempt) {
  for (auto& t : tails_) t.clear();
  for (auto& t : tracebacks_) t.clear();
  for (std::FILE* f : logs_) {
    if (!f) continue;
    std::fprintf(f, "---- xspawn: restart %d: a new gang starts ----\n", attempt);
    std::fflush(f);
  }
}

void OutputForwarder::addRank(int rank, int outFd, int errFd) {
  for (int fd : {outFd, errFd}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  streams_.push_back(Stream{outFd, rank, false, {}});
  streams_.push_back(Stream{errFd, rank, true, {}});
}

void OutputForwarder::appendPollFds(std::vector<pollfd>& fds) const {
  for (const Stream& s : streams_)
    if (s.fd >= 0) fds.push_back(pollfd{s.fd, POLLIN, 0});
}

bool OutputForwarder::anyOpen() const {
  for (const Stream& s : streams_)
    if (s.fd >= 0) return true;
  return false;
}

void OutputForwarder::emit(Stream& s, const std::string& line, bool newline) {
  std::string text = tagOutput_ ? fmt::format("[rank {}] {}", firstRank_ + s.rank, line) : line;
  if (newline) text += '\n';
  writeAll(s.isErr ? STDERR_FILENO : STDOUT_FILENO, text);
  if (std::FILE* log = logs_[s.rank]) {
    std::fwrite(line.data(), 1, line.size(), log);
    std::fputc('\n', log);
    std::fflush(log);
  }
  std::string t = line;
  while (!t.empty() && (t.back() == '\r' || t.back() == '\n')) t.pop_back();
  if (s.isErr) tracebacks_[s.rank].line(t);
  if (t.empty()) return;
  auto& tail = tails_[s.rank];
  tail.push_back(std::move(t));
  while (tail.size() > tailLines_) tail.pop_front();
}

void OutputForwarder::closeStream(Stream& s) {
  if (s.fd < 0) return;
  if (!s.partial.empty()) {
    emit(s, s.partial, true);
    s.partial.clear();
  }
  ::close(s.fd);
  s.fd = -1;
}

void OutputForwarder::onReadable(int fd) {
  for (Stream& s : streams_) {
    if (s.fd != fd) continue;
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        closeStream(s);
        return;
      }
      s.partial.append(buf, static_cast<std::size_t>(n));
      // Complete lines go out now; a '\r' (a progress line redrawn in place) goes out as is.
      std::size_t start = 0;
      for (std::size_t i = 0; i < s.partial.size(); ++i) {
        char c = s.partial[i];
        if (c == '\n') {
          emit(s, s.partial.substr(start, i - start), true);
          start = i + 1;
        } else if (c == '\r' && i + 1 < s.partial.size() && s.partial[i + 1] != '\n') {
          emit(s, s.partial.substr(start, i - start + 1), false);
          start = i + 1;
        }
      }
      s.partial.erase(0, start);
      if (s.partial.size() > kMaxLine) {
        emit(s, s.partial, true);
        s.partial.clear();
      }
    }
  }
}

void OutputForwarder::drain(int budgetMs) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(budgetMs);
  while (anyOpen()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> fds;
    appendPollFds(fds);
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (const pollfd& p : fds)
      if (p.revents) onReadable(p.fd);
  }
  for (Stream& s : streams_) closeStream(s);
}

std::vector<std::string> OutputForwarder::tail(int rank) const {
  return {tails_[rank].begin(), tails_[rank].end()};
}

}  // namespace xs::detail
