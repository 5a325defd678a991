// command_args.hpp: parsing of one command's own options with Boost.Program_options, with
// `--help` and one-line errors; a benchmark's `--json FILE`, checked before it runs.
#pragma once

#include <boost/program_options.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "file_replace.hpp"
#include "xspawn/error.hpp"

namespace xs::cli {

// Parses `args` against `desc` into `vm`. Returns false after printing the help when asked.
inline bool parseCommandArgs(const std::string& command, const std::string& usage,
                             boost::program_options::options_description desc,
                             const std::vector<std::string>& args,
                             boost::program_options::variables_map& vm,
                             const boost::program_options::positional_options_description* pos = nullptr) {
  namespace po = boost::program_options;
  desc.add_options()("help,h", "show this help");
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (pos) parser.positional(*pos);
    po::store(parser.run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    XS_THROW(UsageError, fmt::format("{}: {}; try 'xspawn {} --help'", command, e.what(), command));
  }
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << desc;
    return false;
  }
  return true;
}

// A benchmark's `--json FILE`, tried before the benchmark runs: a path it cannot write is a
// UsageError at once, not rows measured for minutes and then lost. The try appends nothing to a
// file that exists (its rows stay until write() replaces them); a file it had to create is
// removed again if the benchmark ends without writing (a failed job, an exception).
class JsonOption {
 public:
  JsonOption(const std::string& command, const boost::program_options::variables_map& vm) : command_(command) {
    if (!vm.count("json")) return;
    path_ = vm["json"].as<std::string>();
    created_ = !std::filesystem::exists(path_);
    if (!std::ofstream(path_, std::ios::app))
      XS_THROW(UsageError,
               fmt::format("{}: cannot write --json {}: give a path in a writable directory", command_, path_));
  }
  ~JsonOption() {
    if (!path_.empty() && created_ && !written_) std::remove(path_.c_str());
  }
  JsonOption(const JsonOption&) = delete;
  JsonOption& operator=(const JsonOption&) = delete;

  bool wanted() const { return !path_.empty(); }
  // Replaces the file's text with the rows (nothing without --json), whole: a failed write
  // leaves the file as it was.
  void write(const nlohmann::json& doc) {
    if (!wanted()) return;
    const std::string text = doc.dump(2);
    const detail::ReplaceResult r = detail::replaceFile(path_, {text, "\n"});
    XS_CHECK(r, SystemError,
             fmt::format("{}: writing --json {} failed ({}); check its directory's free space and permissions",
                         command_, path_, std::strerror(r.err)));
    written_ = true;
  }

 private:
  std::string command_, path_;
  bool created_ = false, written_ = false;
};

}  // namespace xs::cli
