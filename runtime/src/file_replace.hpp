// file_replace.hpp: replacing a file whole (the trace, report.json, checkpoints): written to an
// unnamed file in the same directory (O_TMPFILE), named path + ".tmp" once complete and renamed
// over path. A reader finds the old file or the new one, never half of one; a failed write and
// a writer killed before the rename leave no temporary file behind.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace xs::detail {

// The step of a replacement that failed, for the caller's message.
enum class ReplaceStep {
  kNone,     // it succeeded
  kCreate,   // creating the file in the directory (missing, not writable)
  kWrite,    // writing, syncing or naming it (a full disk, ulimit -f)
  kRename,   // renaming it over path (a directory of that name, ...)
  kSyncDir,  // syncing the directory after the rename (durable only; path is replaced)
};

struct ReplaceResult {
  ReplaceStep step = ReplaceStep::kNone;
  int err = 0;  // errno of the failed step
  explicit operator bool() const { return step == ReplaceStep::kNone; }
};

// The name the file has between its completion and the rename.
inline std::string replaceTempName(const std::string& path) { return path + ".tmp"; }
// The directory the file is written in ("dir/" of "dir/name", "." of "name").
std::string directoryOf(const std::string& path);

// Writes the pieces one after the other into `path`; `durable` also syncs the file before the
// rename and the directory after it (a crash of the machine keeps one of the two versions).
// Before kSyncDir, a failure leaves `path` untouched.
ReplaceResult replaceFile(const std::string& path, std::initializer_list<std::string_view> pieces,
                          bool durable = false);

// Whether replaceFile could create `path`'s file in its directory, tried without leaving a
// name behind: 0, or the errno of the failure (a missing or read-only directory).
int probeReplaceable(const std::string& path);

}  // namespace xs::detail
