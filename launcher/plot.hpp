// plot.hpp: `xspawn plot`: one picture of a training run (metrics file, report.json, trace.json)
// drawn by gnuplot, and the data the picture is drawn from (read by plot_data.cpp).
#pragma once

#include <utility>
#include <string>
#include <vector>

namespace xs::cli {

// `xspawn plot INPUT... -o FILE.png|FILE.svg ...`; `args` are the words after `plot`.
// Returns 0 (also after --help); throws UsageError for bad input, SystemError when a
// system call or gnuplot fails.
int plotCommand(const std::vector<std::string>& args);

namespace plot {

constexpr double kMissing = -1e300;  // a value a line did not give

// A progress (or, without progress lines, epoch) line of a metrics file.
struct TrainPoint {
  double step = 0, wallSeconds = 0;
  double loss = kMissing, accuracy = kMissing, imagesPerSecond = kMissing;  // accuracy 0-1
};

// An eval line of a metrics file.
struct EvalPoint {
  double step = 0, wallSeconds = 0;
  double loss = kMissing, accuracy = kMissing;  // accuracy 0-1
};

// One rank's step times in milliseconds.
struct StepSpread {
  int rank = 0;
  double min = 0, median = 0, p99 = 0, max = 0;
};

// Where one rank's time went, in percent of its window. `collectives` is the part of the
// collectives not split into waiting and moving.
struct RankUsage {
  int rank = 0;
  double compute = 0, waiting = 0, moving = 0, collectives = 0, data = 0, other = 0;
};

// Everything the picture can show; an empty vector means its panel is left out.
struct PlotData {
  std::vector<TrainPoint> train;
  std::vector<EvalPoint> eval;
  std::vector<std::pair<double, double>> jobThroughput;  // seconds since the job started, images/s
  std::vector<StepSpread> stepTimes;
  std::vector<RankUsage> usage;
  std::string summary;    // a line from the metrics summary, or ""
  std::string straggler;  // the report's straggler, or ""
  std::vector<std::string> inputs;  // the files read
};

// Reads every input (files, or directories holding metrics.jsonl, report.json, trace.json).
// Throws UsageError naming the input for missing, unreadable or unknown files and when
// nothing can be drawn.
PlotData loadInputs(const std::vector<std::string>& inputs);

}  // namespace plot
}  // namespace xs::cli
