// commands.hpp: the launcher's commands (hello, run, train, bench, clean).
#pragma once

#include "cli.hpp"

namespace xs::cli {

// Runs the command; returns the process exit status. Throws UsageError for bad arguments.
int runCommand(const Invocation& inv);

int helloCommand(const Invocation& inv);
int runProgramCommand(const Invocation& inv);
int trainCommand(const Invocation& inv);
int benchCommand(const Invocation& inv);
int cleanCommand(const Invocation& inv);
// Observability (top.cpp, report_command.cpp): the live view of running jobs, and the
// utilisation report of a finished one from its --log-dir or --trace file.
int topCommand(const Invocation& inv);
int reportCommand(const Invocation& inv);

// The path of a program installed next to this executable (xspawn-train, ...), or "" if absent.
std::string siblingProgram(const std::string& name);

}  // namespace xs::cli
