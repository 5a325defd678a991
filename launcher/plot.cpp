// plot.cpp: `xspawn plot`: writes the series of a training run (plot_data.cpp reads them) and a
// gnuplot script into a private temporary directory, runs gnuplot on it without a shell, and
// renames its picture into place; the temporary directory goes on every exit path.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command_args.hpp"
#include "plot.hpp"
#include "xspawn/error.hpp"

extern char** environ;

namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace xs::cli {
namespace {

using plot::kMissing;
using plot::PlotData;

constexpr int kMinSize = 100, kMaxSize = 20000;
constexpr int kStderrLines = 3;  // of gnuplot's messages, in an error
constexpr const char* kUsage =
    "usage: xspawn plot INPUT... -o FILE.png|FILE.svg [--width PX] [--height PX] [--title TEXT]\n\n"
    "Draws one picture of a training run with gnuplot. Each INPUT is a metrics file\n"
    "(xspawn train --metrics FILE), a report.json or trace.json (xspawn --log-dir DIR), or a\n"
    "directory: its metrics.jsonl, report.json and trace.json. Panels, each when its data is\n"
    "there: loss and accuracy by step and by wall time, images/s, step time per rank, where\n"
    "each rank's time went.";

struct PlotOptions {
  std::vector<std::string> inputs;
  std::string output, title;
  int width = 1600, height = 1000;
  bool svg = false;
};

// ---- options -----------------------------------------------------------------------------

std::string lowerSuffix(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

void checkOutput(PlotOptions& o) {
  XS_CHECK(!o.output.empty(), UsageError, "plot: no output file; give -o FILE.png or -o FILE.svg");
  const std::string ext = lowerSuffix(o.output);
  XS_CHECK(ext == ".png" || ext == ".svg", UsageError,
           fmt::format("plot: cannot tell the format of '{}': the output must end in .png or .svg", o.output));
  o.svg = ext == ".svg";
  std::error_code ec;
  XS_CHECK(!fs::is_directory(o.output, ec), UsageError,
           fmt::format("plot: the output '{}' is a directory; give a file name ending in .png or .svg", o.output));
  const fs::path dir = fs::path(o.output).parent_path();
  XS_CHECK(dir.empty() || fs::is_directory(dir, ec), UsageError,
           fmt::format("plot: cannot write '{}': there is no directory '{}'; create it first", o.output, dir.string()));
  for (int size : {o.width, o.height}) {
    XS_CHECK(size >= kMinSize && size <= kMaxSize, UsageError,
             fmt::format("plot: --width and --height are pixels from {} to {} (got {})", kMinSize, kMaxSize, size));
  }
}

// The options, or nothing after --help.
std::optional<PlotOptions> parseOptions(const std::vector<std::string>& args) {
  po::options_description desc("plot options");
  desc.add_options()
    ("input", po::value<std::vector<std::string>>(), "metrics file, report.json, trace.json or a directory of them")
    ("output,o", po::value<std::string>(), "the picture: FILE.png or FILE.svg")
    ("width", po::value<int>()->default_value(1600), "width in pixels")
    ("height", po::value<int>()->default_value(1000), "height in pixels")
    ("title", po::value<std::string>(), "the title atop the picture (default: the inputs' names)");
  po::positional_options_description pos;
  pos.add("input", -1);
  po::variables_map vm;
  if (!parseCommandArgs("plot", kUsage, desc, args, vm, &pos)) return std::nullopt;
  PlotOptions o;
  if (vm.count("input")) o.inputs = vm["input"].as<std::vector<std::string>>();
  if (vm.count("output")) o.output = vm["output"].as<std::string>();
  if (vm.count("title")) o.title = vm["title"].as<std::string>();
  o.width = vm["width"].as<int>();
  o.height = vm["height"].as<int>();
  return o;
}

// ---- files -------------------------------------------------------------------------------

// A private directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/xspawn-plot-XXXXXX";
    XS_CHECK(mkdtemp(pattern.data()) != nullptr, SystemError,
             fmt::format("plot: cannot create a temporary directory {}: {}; set TMPDIR to a writable directory",
                         pattern, std::strerror(errno)));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A fresh file beside `target`, renamed onto it by commit() and removed otherwise.
class PendingFile {
 public:
  explicit PendingFile(const std::string& target) : target_(target) {
    const fs::path t(target);
    const std::string dir = t.parent_path().empty() ? "." : t.parent_path().string();
    path_ = dir + "/." + t.filename().string() + ".XXXXXX";
    const int fd = mkstemp(path_.data());
    XS_CHECK(fd >= 0, UsageError,
             fmt::format("plot: cannot write into directory '{}': {}; choose another -o", dir, std::strerror(errno)));
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);  // as a file gnuplot created itself
    close(fd);
  }
  ~PendingFile() {
    if (!committed_) unlink(path_.c_str());
  }
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  const std::string& path() const { return path_; }
  void commit() {
    XS_CHECK(rename(path_.c_str(), target_.c_str()) == 0, SystemError,
             fmt::format("plot: cannot rename {} to {}: {}", path_, target_, std::strerror(errno)));
    committed_ = true;
  }

 private:
  std::string target_, path_;
  bool committed_ = false;
};

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  XS_CHECK(out, SystemError, fmt::format("plot: cannot write {}: {}", path, std::strerror(errno)));
}

// ---- data files --------------------------------------------------------------------------

std::string num(double v) { return v == kMissing || !std::isfinite(v) ? "?" : fmt::format("{:.9g}", v); }
std::string percent(double v) { return v == kMissing ? "?" : num(100 * v); }

std::string trainRows(const PlotData& d) {
  std::string s = "# step wall_seconds train_loss train_accuracy_percent images_per_second\n";
  for (const auto& p : d.train) {
    s += fmt::format("{} {} {} {} {}\n", num(p.step), num(p.wallSeconds), num(p.loss), percent(p.accuracy),
                     num(p.imagesPerSecond));
  }
  return s;
}

std::string evalRows(const PlotData& d) {
  std::string s = "# step wall_seconds test_loss test_accuracy_percent\n";
  for (const auto& p : d.eval) {
    s += fmt::format("{} {} {} {}\n", num(p.step), num(p.wallSeconds), num(p.loss), percent(p.accuracy));
  }
  return s;
}

std::string throughputRows(const PlotData& d) {
  std::string s = "# seconds_since_job_start images_per_second\n";
  for (const auto& [t, v] : d.jobThroughput) s += fmt::format("{} {}\n", num(t), num(v));
  return s;
}

std::string stepRows(const PlotData& d) {
  std::string s = "# rank min_ms median_ms p99_ms max_ms\n";
  for (const auto& r : d.stepTimes) {
    s += fmt::format("{} {} {} {} {}\n", r.rank, num(r.min), num(r.median), num(r.p99), num(r.max));
  }
  return s;
}

std::string usageRows(const PlotData& d) {
  std::string s = "# rank compute waiting moving collectives data other (percent)\n";
  for (const auto& u : d.usage) {
    s += fmt::format("{} {} {} {} {} {} {}\n", u.rank, num(u.compute), num(u.waiting), num(u.moving),
                     num(u.collectives), num(u.data), num(u.other));
  }
  return s;
}

// ---- gnuplot script ----------------------------------------------------------------------

// A gnuplot string literal of any text ('' stands for ' inside single quotes).
std::string quote(const std::string& text) {
  std::string s = "'";
  for (char c : text) {
    if (c == '\'') s += "''";
    else if (c != '\n' && c != '\r') s += c;
  }
  return s + "'";
}

// A gnuplot string expression of a title and, when given, a second line under it.
std::string twoLines(const std::string& first, const std::string& second) {
  return second.empty() ? quote(first) : quote(first) + ".\"\\n\"." + quote(second);
}

// What every panel starts from (reset clears the one before; not the terminal nor the layout).
constexpr const char* kPanelStart = "reset\nset datafile missing '?'\nset key below samplen 2\nset grid\n";

// One curve, bar or box of a panel.
struct Series {
  std::string source, columns, style, title;
};

std::string plotLine(const std::vector<Series>& series) {
  std::string s = "plot ";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const Series& e = series[i];
    s += fmt::format("{}{} using {} {} title {}", i ? ", \\\n     " : "", quote(e.source), e.columns, e.style,
                     quote(e.title));
  }
  return s + "\n";
}

template <class Points, class Field>
bool any(const Points& points, Field field) {
  return std::any_of(points.begin(), points.end(), [&](const auto& p) { return field(p) != kMissing; });
}

// (a) and (b): losses on the left axis, accuracies on the right one; x is column 1 (step) or 2 (seconds).
std::string curvesPanel(const PlotData& d, const TempDir& dir, int x, const std::string& title,
                        const std::string& xlabel) {
  const std::string train = dir.file("train.dat"), eval = dir.file("eval.dat");
  const bool trainLoss = any(d.train, [](auto& p) { return p.loss; });
  const bool testLoss = any(d.eval, [](auto& p) { return p.loss; });
  const bool loss = trainLoss || testLoss;
  const std::string acc = loss ? "axes x1y2 " : "";
  std::vector<Series> s;
  if (trainLoss) s.push_back({train, fmt::format("{}:3", x), "with lines lw 2 lc rgb '#4477aa'", "training loss"});
  if (testLoss) s.push_back({eval, fmt::format("{}:3", x), "with points pt 7 ps 1.2 lc rgb '#4477aa'", "test loss"});
  if (any(d.train, [](auto& p) { return p.accuracy; })) {
    s.push_back({train, fmt::format("{}:4", x), acc + "with lines dt 2 lc rgb '#ee6677'", "training accuracy"});
  }
  if (any(d.eval, [](auto& p) { return p.accuracy; })) {
    s.push_back({eval, fmt::format("{}:4", x), acc + "with linespoints lw 2 pt 7 lc rgb '#ee6677'", "test accuracy"});
  }
  if (s.empty()) return "";
  std::string g = fmt::format("{}set title {}\nset xlabel {}\n", kPanelStart, quote(title), quote(xlabel));
  g += loss ? "set ylabel 'loss'\nset ytics nomirror\nset y2label 'accuracy (%)'\nset y2tics\n"
            : "set ylabel 'accuracy (%)'\n";
  return g + plotLine(s);
}

// (c): images per second against seconds.
std::string throughputPanel(const PlotData& d, const TempDir& dir) {
  std::vector<Series> s;
  if (any(d.train, [](auto& p) { return p.imagesPerSecond; })) {
    s.push_back({dir.file("train.dat"), "2:5", "with lines lw 2 lc rgb '#4477aa'",
                 "training (since it started)"});
  }
  if (!d.jobThroughput.empty()) {
    s.push_back({dir.file("throughput.dat"), "1:2", "with lines lw 1 lc rgb '#228833'",
                 "whole job (since it started)"});
  }
  if (s.empty()) return "";
  return fmt::format("{}set title 'Throughput'\nset xlabel 'wall time (seconds)'\nset ylabel 'images per second'\n"
                     "set yrange [0:*]\n",
                     kPanelStart) + plotLine(s);
}

// (d): per rank, a box from the median to the 99th percentile, whiskers from min to max.
std::string stepTimePanel(const PlotData& d, const TempDir& dir) {
  if (d.stepTimes.empty()) return "";
  const std::string f = dir.file("steps.dat");
  int lo = d.stepTimes.front().rank, hi = lo;
  double fastest = INFINITY, slowest = 0;
  for (const auto& r : d.stepTimes) {
    lo = std::min(lo, r.rank), hi = std::max(hi, r.rank);
    fastest = std::min(fastest, r.min), slowest = std::max(slowest, r.max);
  }
  const bool log = fastest > 0 && slowest / fastest > 50;
  std::string g = fmt::format(
      "{}unset grid\nset grid ytics\nunset key\nset title {}\nset xlabel 'rank'\nset ylabel {}\n"
      "set xrange [{}:{}]\nset boxwidth 0.5 absolute\nset style fill solid 0.4 border -1\n",
      kPanelStart,
      twoLines("Step time per rank", "box: median to 99th percentile, whiskers: fastest to slowest, line: median"),
      quote(log ? "milliseconds per step (log scale)" : "milliseconds per step"), lo - 0.7, hi + 0.7);
  g += log ? "set logscale y\n" : "set yrange [0:*]\n";
  if (hi - lo < 32) g += "set xtics 1\n";
  return g + plotLine({{f, "1:3:2:5:4", "with candlesticks whiskerbars 0.5 lc rgb '#4477aa'", "step time"},
                       {f, "1:3:3:3:3", "with candlesticks lw 2 lc rgb '#222222'", "median"}});
}

// (e): each rank's time stacked by what it did.
std::string usagePanel(const PlotData& d, const TempDir& dir) {
  if (d.usage.empty()) return "";
  struct Part {
    int column;
    double plot::RankUsage::*field;
    const char* title;
    const char* colour;
  };
  const Part parts[] = {{2, &plot::RankUsage::compute, "compute", "#4477aa"},
                        {3, &plot::RankUsage::waiting, "collectives: waiting for the last rank", "#ee6677"},
                        {4, &plot::RankUsage::moving, "collectives: moving data", "#ccbb44"},
                        {5, &plot::RankUsage::collectives, "collectives", "#aa3377"},
                        {6, &plot::RankUsage::data, "data loading", "#228833"},
                        {7, &plot::RankUsage::other, "other", "#bbbbbb"}};
  const int every = std::max<int>(1, static_cast<int>((d.usage.size() + 15) / 16));
  std::vector<Series> s;
  for (const Part& p : parts) {
    if (!std::any_of(d.usage.begin(), d.usage.end(), [&](auto& u) { return u.*p.field > 0; })) continue;
    const std::string tic = s.empty() ? fmt::format(":xtic(int($0) % {} == 0 ? stringcolumn(1) : '')", every) : "";
    s.push_back({dir.file("usage.dat"), fmt::format("{}{}", p.column, tic), fmt::format("lc rgb '{}'", p.colour),
                 p.title});
  }
  if (s.empty()) return "";
  const std::string title = twoLines("Where each rank's time went", d.straggler);
  return fmt::format("{}unset grid\nset grid ytics\nset title {}\nset xlabel 'rank'\nset ylabel 'share of the time (%)'\n"
                     "set yrange [0:*]\nset style data histograms\nset style histogram rowstacked\n"
                     "set style fill solid 0.85 border -1\nset boxwidth 0.7 relative\n",
                     kPanelStart, title) + plotLine(s);
}

std::vector<std::string> panels(const PlotData& d, const TempDir& dir) {
  std::vector<std::string> all = {
      curvesPanel(d, dir, 1, "Loss and accuracy by step", "step"),
      curvesPanel(d, dir, 2, "Loss and accuracy by wall time", "wall time (seconds since training started)"),
      throughputPanel(d, dir), stepTimePanel(d, dir), usagePanel(d, dir)};
  all.erase(std::remove(all.begin(), all.end(), ""), all.end());
  return all;
}

std::string pictureTitle(const PlotData& d, const PlotOptions& o) {
  const std::string title = o.title.empty() ? fmt::format("Training run: {}", fmt::join(d.inputs, ", ")) : o.title;
  return twoLines(title, d.summary);
}

std::string script(const PlotData& d, const PlotOptions& o, const TempDir& dir, const std::string& output) {
  const std::vector<std::string> drawn = panels(d, dir);
  XS_CHECK(!drawn.empty(), UsageError,
           fmt::format("plot: nothing to draw in {}: their lines hold no loss, accuracy, images/s or times",
                       fmt::join(d.inputs, ", ")));
  const int n = static_cast<int>(drawn.size());
  const int rows = n <= 2 ? 1 : 2, cols = n <= 2 ? n : n <= 4 ? 2 : 3;
  // Letters in proportion to the picture: 11 points at the default 1600x1000 (svg draws them smaller).
  const double scale = std::sqrt(static_cast<double>(o.width) * o.height / (1600.0 * 1000.0)) * (o.svg ? 1.25 : 1);
  const int font = std::clamp(static_cast<int>(std::lround(11 * scale)), 7, 40);
  std::string g = fmt::format("set terminal {} size {},{} noenhanced font 'sans,{}' background '#ffffff'\n",
                              o.svg ? "svg" : "pngcairo", o.width, o.height, font);
  g += fmt::format("set output {}\n", quote(output));
  g += fmt::format("set multiplot layout {},{} rowsfirst title {} font ',{}'\n", rows, cols, pictureTitle(d, o),
                   font + 3);
  for (const std::string& p : drawn) g += p;
  return g + "unset multiplot\nset output\n";
}

// ---- gnuplot -----------------------------------------------------------------------------

std::string findGnuplot() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/gnuplot";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  XS_THROW(UsageError, "plot: gnuplot is not installed (not found in PATH); install it with "
                       "'apt-get install gnuplot-nox' or 'bash scripts/setup.sh'");
}

// The first non-blank lines of gnuplot's messages, on one line.
std::string firstLines(const std::string& path) {
  std::ifstream in(path);
  std::string out;
  int taken = 0;
  for (std::string line; taken < kStderrLines && std::getline(in, line);) {
    const auto b = line.find_first_not_of(" \t\r^"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    out += (taken++ ? " | " : "") + line.substr(b, e - b + 1);
  }
  return out.empty() ? "(no message)" : out;
}

// Runs `gnuplot -d SCRIPT` with stdin and stdout on /dev/null and stderr into `errors`.
void runGnuplot(const std::string& gnuplot, const std::string& script, const std::string& errors) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> words = {gnuplot, "-d", script};  // -d: no ~/.gnuplot
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  XS_CHECK(rc == 0, SystemError, fmt::format("plot: cannot run {}: {}", gnuplot, std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    XS_CHECK(errno == EINTR, SystemError, fmt::format("plot: waitpid for gnuplot: {}", std::strerror(errno)));
  }
  XS_CHECK(!WIFSIGNALED(status), SystemError,
           fmt::format("plot: gnuplot was killed by signal {}: {}", WTERMSIG(status), firstLines(errors)));
  XS_CHECK(WEXITSTATUS(status) == 0, SystemError,
           fmt::format("plot: gnuplot failed (exit status {}): {}", WEXITSTATUS(status), firstLines(errors)));
}

void draw(const PlotData& d, const PlotOptions& o) {
  const std::string gnuplot = findGnuplot();
  TempDir dir;
  writeFile(dir.file("train.dat"), trainRows(d));
  writeFile(dir.file("eval.dat"), evalRows(d));
  writeFile(dir.file("throughput.dat"), throughputRows(d));
  writeFile(dir.file("steps.dat"), stepRows(d));
  writeFile(dir.file("usage.dat"), usageRows(d));
  PendingFile picture(o.output);
  writeFile(dir.file("plot.gp"), script(d, o, dir, picture.path()));
  runGnuplot(gnuplot, dir.file("plot.gp"), dir.file("gnuplot.err"));
  std::error_code ec;
  XS_CHECK(fs::file_size(picture.path(), ec) > 0 && !ec, SystemError,
           fmt::format("plot: gnuplot wrote nothing to {}: {}", picture.path(), firstLines(dir.file("gnuplot.err"))));
  picture.commit();
}

}  // namespace

int plotCommand(const std::vector<std::string>& args) {
  std::optional<PlotOptions> o = parseOptions(args);
  if (!o) return 0;
  const PlotData data = plot::loadInputs(o->inputs);
  checkOutput(*o);
  draw(data, *o);
  std::cout << fmt::format("xspawn plot: wrote {}\n", o->output);
  return 0;
}

}  // namespace xs::cli
