// utilisation.hpp: the utilisation report (xspawn/report.hpp's UtilisationReport) from every
// rank's raw figures: read from the ranks' telemetry in the segment at the end of a job, or
// summed from the spans of a trace file afterwards (`xspawn report trace.json`). One
// computation for both: per rank shares and step-time percentiles, the straggler, the
// collectives' split between waiting for the last rank and moving bytes, images/s over time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "segment_layout.hpp"
#include "xspawn/report.hpp"

namespace xs::detail {

// One rank's raw figures.
struct RankFigures {
  int rank = 0;
  int pid = 0;
  std::uint64_t windowNs = 0;
  std::array<std::uint64_t, kCountedCategories> categoryNs{};
  std::uint64_t steps = 0, samples = 0;
  std::uint64_t stepsTimed = 0, stepMinNs = 0, stepMaxNs = 0;
  std::array<std::uint32_t, kStepBuckets> stepHistogram{};
  std::uint64_t devicePeak = 0, deviceCapacity = 0;
  double cpuSeconds = -1, runqueueSeconds = -1;
  double cpuTurnsPerStep = -1;  // times given a CPU per step, between two scheduler samples

  // Counts one step time (a trace's steps; the telemetry counts its own).
  void addStep(std::uint64_t ns);
};

// The figures a rank's telemetry holds now.
RankFigures readFigures(const RankTelemetry& t, int rank, int pid);

// (seconds since the job started, training samples of all ranks so far), sampled as the job
// runs, into images/s over time (at most kThroughputPoints points, each over >= 1 s).
inline constexpr std::size_t kThroughputPoints = 240;
std::vector<std::pair<double, double>> throughputSeries(const std::vector<std::pair<double, std::uint64_t>>& samples);

UtilisationReport buildUtilisation(const std::vector<RankFigures>& ranks, int cores,
                                   std::vector<std::pair<double, double>> throughput, std::string source);

// The report of a Chrome trace file written by --trace. UsageError when it is not one.
UtilisationReport utilisationFromTrace(const std::string& path);

}  // namespace xs::detail
