// report_command.cpp: `xspawn report PATH`: where a finished job's time went, from its
// --log-dir (report.json's utilisation, written by the launcher from the ranks' counters) or
// from a --trace file (its spans summed again).
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command_args.hpp"
#include "commands.hpp"
#include "utilisation.hpp"
#include "xspawn/error.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace xs::cli {
namespace {

// Prints report.json's job line and utilisation; false when it has no utilisation.
bool printLogReport(const fs::path& file, bool asJson) {
  std::ifstream in(file);
  XS_CHECK(in.good(), UsageError, fmt::format("report: cannot read {}", file.string()));
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  XS_CHECK(!doc.is_discarded() && doc.is_object(), UsageError,
           fmt::format("report: {} is not JSON; give a --log-dir, its report.json or a --trace file", file.string()));
  const nlohmann::json& u = doc.value("utilisation", nlohmann::json());
  if (!u.is_object()) return false;
  if (asJson) {
    std::cout << u.dump(2) << "\n";
  } else {
    std::cout << fmt::format("job '{}': {} in {:.1f} s\n", doc.value("job_id", "?"), doc.value("status", "?"),
                             doc.value("seconds", 0.0))
              << u.value("text", "");
  }
  return true;
}

void printTraceReport(const fs::path& file, bool asJson) {
  const UtilisationReport r = detail::utilisationFromTrace(file.string());
  std::cout << (asJson ? r.json() + "\n" : r.text());
}

}  // namespace

int reportCommand(const Invocation& inv) {
  po::options_description desc("report options");
  desc.add_options()("json", "print the report as JSON")("path", po::value<std::string>(), "a --log-dir or --trace file");
  po::positional_options_description pos;
  pos.add("path", 1);
  po::variables_map vm;
  if (!parseCommandArgs("report", "usage: xspawn report LOGDIR|TRACE [--json]\n\n"
                        "Where a finished training job's time went, per emulated core: compute, collectives\n"
                        "(waiting for the last rank, moving bytes), data, other; step times; device memory; the\n"
                        "straggler; images/s over time. From a --log-dir (its report.json) or a --trace file.",
                        desc, inv.args, vm, &pos)) {
    return 0;
  }
  XS_CHECK(vm.count("path"), UsageError, "report: give a --log-dir or a --trace file, e.g. xspawn report logs/");
  const fs::path path = vm["path"].as<std::string>();
  const bool asJson = vm.count("json") > 0;
  XS_CHECK(fs::exists(path), UsageError, fmt::format("report: {} does not exist", path.string()));
  if (fs::is_directory(path)) {
    if (fs::exists(path / "report.json") && printLogReport(path / "report.json", asJson)) return 0;
    if (fs::exists(path / "trace.json")) {
      printTraceReport(path / "trace.json", asJson);
      return 0;
    }
    XS_THROW(UsageError, fmt::format("report: {} holds no report.json with a utilisation report (was it a training "
                                     "run, started with --log-dir {}?) and no trace.json",
                                     path.string(), path.string()));
  }
  std::ifstream in(path);
  std::string head(64, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.find("traceEvents") != std::string::npos || head.find("displayTimeUnit") != std::string::npos) {
    printTraceReport(path, asJson);
    return 0;
  }
  XS_CHECK(printLogReport(path, asJson), UsageError,
           fmt::format("report: {} has no utilisation report (the job took no optimizer step)", path.string()));
  return 0;
}

}  // namespace xs::cli
