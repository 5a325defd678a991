// main.cpp: xspawn-train, the program `xspawn train` runs: `--plan` (one process, before the
// job: validate and print the shared-heap plan), `--help`, or one worker of the job.
#include <cstdio>
#include <string>
#include <vector>

#include "options.hpp"
#include "plan.hpp"
#include "xspawn/error.hpp"
#include "trainer.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::train {

namespace {

int fail(const std::exception& e, int status) {
  std::fprintf(stderr, "xspawn train: %s\n", e.what());
  return status;
}

int plan(TrainOptions& o) {
  try {
    resolveDefaults(o);
    std::printf("%s\n", makePlan(o).c_str());
    return 0;
  } catch (const std::exception& e) {
    return fail(e, 2);
  }
}

int worker(TrainOptions& o) {
  try {
    resolveDefaults(o);
  } catch (const std::exception& e) {
    return fail(e, 2);
  }
  // Every fatal error is this rank's recorded error in the launcher's report (an abort caused
  // by another rank is recorded as secondary: the launcher reports that rank first).
  try {
    xs::init();
    Trainer trainer(o);
    return trainer.run();
  } catch (const UsageError& e) {
    xs::record_error(std::current_exception());
    return fail(e, 2);
  } catch (const std::exception& e) {
    xs::record_error(std::current_exception());
    return fail(e, 1);
  }
}

}  // namespace
}  // namespace xs::train

int main(int argc, char** argv) {
  using namespace xs::train;
  std::vector<std::string> args(argv + 1, argv + argc);
  TrainOptions o;
  try {
    o = parseOptions(args);
  } catch (const std::exception& e) {
    for (const std::string& a : args)
      if (a == "--help" || a == "-h") return std::printf("%s", usage().c_str()) < 0 ? 1 : 0;
    std::fprintf(stderr, "xspawn train: %s\n", e.what());
    return 2;
  }
  if (o.help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  return o.plan ? plan(o) : worker(o);
}
