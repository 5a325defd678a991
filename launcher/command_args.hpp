// command_args.hpp: parsing of one command's own options with Boost.Program_options, with
// `--help` and one-line errors.
#pragma once

#include <boost/program_options.hpp>

#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

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

}  // namespace xs::cli
