// file_replace.cpp: replacing a file whole through an unnamed file (file_replace.hpp).
#include "file_replace.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace xs::detail {
namespace {

// The file a replacement writes, opened for writing: unnamed in path's directory until
// complete (a process killed while writing leaves nothing), or, where the filesystem has no
// O_TMPFILE, named replaceTempName(path) from the start (*named). -1 and errno on failure.
int openReplacement(const std::string& path, bool* named) {
  int fd = ::open(directoryOf(path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  *named = fd < 0;
  if (*named) fd = ::open(replaceTempName(path).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  return fd;
}

int writeAll(int fd, std::initializer_list<std::string_view> pieces) {
  for (std::string_view piece : pieces) {
    for (std::size_t done = 0; done < piece.size();) {
      const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n > 0) done += static_cast<std::size_t>(n);
      else if (n < 0 && errno != EINTR) return errno;
    }
  }
  return 0;
}

}  // namespace

std::string directoryOf(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash + 1);
}

int probeReplaceable(const std::string& path) {
  bool named = false;
  const int fd = openReplacement(path, &named);
  if (fd < 0) return errno;
  ::close(fd);
  if (named) ::unlink(replaceTempName(path).c_str());
  return 0;
}

ReplaceResult replaceFile(const std::string& path, std::initializer_list<std::string_view> pieces, bool durable) {
  const std::string tmp = replaceTempName(path);
  bool named = false;
  const int fd = openReplacement(path, &named);
  if (fd < 0) return {ReplaceStep::kCreate, errno};
  int err = writeAll(fd, pieces);
  if (err == 0 && durable && ::fsync(fd) != 0) err = errno;
  bool ownTmp = named;  // tmp exists and is this replacement's
  if (err == 0 && !named) {
    ::unlink(tmp.c_str());  // one left by a process killed between the link and the rename
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) ownTmp = true;
    else err = errno;
  }
  // close reports what a delayed write could not store (a full disk on some filesystems).
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    if (ownTmp) ::unlink(tmp.c_str());  // a partial file helps nobody
    return {ReplaceStep::kWrite, err};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return {ReplaceStep::kRename, err};
  }
  if (!durable) return {};
  const int dirFd = ::open(directoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd < 0) return {ReplaceStep::kSyncDir, errno};
  err = ::fsync(dirFd) == 0 ? 0 : errno;
  ::close(dirFd);
  return err == 0 ? ReplaceResult{} : ReplaceResult{ReplaceStep::kSyncDir, err};
}

}  // namespace xs::detail
