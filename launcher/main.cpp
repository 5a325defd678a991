// main.cpp: the `xspawn` executable: parse, run the command, decide the exit status.
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "commands.hpp"
#include "xspawn/error.hpp"

int main(int argc, char** argv) {
  try {
    xs::cli::Invocation inv = xs::cli::parseLauncher(argc, argv);
    if (inv.version) {
      std::printf("xspawn %s\n", XSPAWN_VERSION);
      return 0;
    }
    if (inv.help) {
      std::cout << xs::cli::launcherHelp();
      return 0;
    }
    if (inv.command.empty()) {
      std::fprintf(stderr, "xspawn: no command given; try 'xspawn --help'\n");
      return 2;
    }
    return xs::cli::runCommand(inv);
  } catch (const xs::UsageError& e) {
    std::fprintf(stderr, "xspawn: %s\n", e.what());
    return 2;
  } catch (const xs::Error& e) {
    std::fprintf(stderr, "xspawn: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xspawn: error: %s\n", e.what());
    return 1;
  }
}
