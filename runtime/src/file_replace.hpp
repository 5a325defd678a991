// file_replace.hpp: replacing a launcher output file (the trace, report.json) whole, through a
// temporary name in the same directory renamed over it: a reader finds the old file or the
// new one, never half of one, and a failed write leaves no temporary file behind.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace xs::detail {

// Writes the pieces one after the other into `path`. Returns 0, or the errno of the first
// step that failed (creating, writing, closing or renaming); `path` is then untouched.
int replaceFile(const std::string& path, std::initializer_list<std::string_view> pieces);

}  // namespace xs::detail
