// command_args.hpp: parsing of one command's own options with Boost.Program_options, with
// `--help` and one-line errors; a benchmark's `--json FILE`, checked before it runs.
#pragma once

#include <boost/program_options.hpp>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

// A benchmark's `--json FILE`, opened before the benchmark runs: a path it cannot write is a
// UsageError at once, not rows measured for minutes and then lost. Not open without --json.
inline std::ofstream openJsonOption(const std::string& command, const boost::program_options::variables_map& vm) {
  std::ofstream out;
  if (!vm.count("json")) return out;
  const std::string& path = vm["json"].as<std::string>();
  out.open(path);
  if (!out)
    XS_THROW(UsageError, fmt::format("{}: cannot write --json {}: give a path in a writable directory", command, path));
  return out;
}

// Writes the rows into the stream openJsonOption opened (nothing when it is not open).
inline void writeJsonOption(std::ofstream& out, const nlohmann::json& doc, const std::string& command) {
  if (!out.is_open()) return;
  out << doc.dump(2) << "\n";
  if (!out.flush()) XS_THROW(SystemError, fmt::format("{}: writing the --json file failed", command));
}

}  // namespace xs::cli
