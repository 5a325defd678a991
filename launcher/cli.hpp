// cli.hpp: the launcher's command line: `xspawn [launcher options] COMMAND [command options]`.
// Launcher options are parsed here (Boost.Program_options); the command and its own arguments
// are handed on untouched.
#pragma once

#include <string>
#include <vector>

#include "xspawn/spawn.hpp"

namespace xs::cli {

struct Invocation {
  SpawnOptions spawn;
  bool nprocsGiven = false;
  std::string command;               // empty with --help / --version
  std::vector<std::string> args;     // the command's own arguments
  bool help = false;
  bool version = false;
};

// Parses argv; throws UsageError (one line: what, where, how to fix) on bad input.
Invocation parseLauncher(int argc, char** argv);
// "4096", "64K", "256M", "1G" -> bytes; UsageError naming `option` otherwise.
std::size_t parseBytes(const std::string& text, const std::string& option);
// The launcher's --help text.
std::string launcherHelp();

}  // namespace xs::cli
