// plot_test.cpp: `xspawn plot` called in-process: metrics files, report.json and trace.json
// drawn to PNG (of the asked size) and SVG by the installed gnuplot, the series read from each
// input, one-line UsageErrors for bad inputs, and no temporary directory or partial picture left.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "plot.hpp"
#include "process_runner.hpp"
#include "xspawn/error.hpp"

namespace fs = std::filesystem;

namespace xs::test {
namespace {

constexpr const char* kMetrics =
    R"({"event":"progress","epoch":1,"step":10,"train_loss":1.9,"train_accuracy":0.38,"images_per_second":12000,"seconds":0.5}
{"event":"progress","epoch":1,"step":20,"train_loss":1.4,"train_accuracy":0.52,"images_per_second":15000,"seconds":1.0}
{"event":"epoch","epoch":1,"step":25,"train_loss":1.3,"train_accuracy":0.55,"images_per_second":15500,"seconds":1.25}
{"event":"eval","epoch":1,"step":25,"test_accuracy":0.71,"test_loss":0.9}
{"event":"progress","epoch":2,"step":35,"train_loss":0.8,"train_accuracy":0.70,"images_per_second":16000,"seconds":0.5}
{"event":"epoch","epoch":2,"step":50,"train_loss":0.7,"train_accuracy":0.74,"images_per_second":16100,"seconds":1.5}
{"event":"eval","epoch":2,"step":50,"test_accuracy":0.80,"test_loss":0.6,"wall_seconds":2.9}
{"event":"summary","steps":50,"images":1600,"wall_seconds":3.0,"images_per_second":16000,"test_accuracy":0.80}
)";

std::string rankJson(int rank) {
  return fmt::format(
      R"({{"rank":{0},"pid":{1},"window_seconds":10,"steps":100,"samples":1600,
  "seconds":{{"forward":1,"backward":2,"update":0.3,"data":0.1,"collective_wait":3,"collective_move":1,"other":0.5}},
  "shares":{{"compute":50,"collectives":40,"data":2,"other":8}},"cpu_seconds":5,"runqueue_seconds":1,
  "step_ms":{{"min":5,"median":{2},"p99":20,"max":80}},"device_memory":{{"peak_bytes":1,"capacity_bytes":2}}}})",
      rank, 100 + rank, 10 + rank);
}

std::string reportJson(bool withUtilisation) {
  std::string u;
  if (withUtilisation) {
    u = fmt::format(R"(,"utilisation":{{"cores":2,"world_size":2,"ranks":[{},{}],
  "straggler":{{"rank":1,"phase":"other","extra_ms_per_step":3.5,"slower_percent":12,"text":"rank 1 is slow"}},
  "collectives":{{"share":40,"waiting_for_last_rank":30,"moving_bytes":10,"runqueue":5}},
  "throughput":[[1.0,5000.0],[2.0,6100.5],[3.0,6000]]}})",
                    rankJson(0), rankJson(1));
  }
  return R"({"job_id":"j1","status":"succeeded","exit_code":0,"world_size":2)" + u + "}\n";
}

// Rank 0 (pid 7): a 1000 µs window of forward 200, backward 300, a collective of 200 of which
// 150 waiting, data 100; optimizer_step ends at 10, 20 and 35 ms.
constexpr const char* kTrace = R"({"traceEvents":[
 {"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"launcher"}},
 {"ph":"M","name":"process_name","pid":7,"tid":0,"args":{"name":"rank 0"}},
 {"ph":"X","name":"forward","cat":"forward","ts":1000,"dur":200,"pid":7,"tid":0,"args":{}},
 {"ph":"X","name":"backward","cat":"backward","ts":1200,"dur":300,"pid":7,"tid":0,"args":{}},
 {"ph":"X","name":"allreduce","cat":"collective","ts":1500,"dur":200,"pid":7,"tid":0,"args":{"wait_us":150}},
 {"ph":"X","name":"load","cat":"data","ts":1700,"dur":100,"pid":7,"tid":0,"args":{}},
 {"ph":"X","name":"idle","cat":"misc","ts":1800,"dur":200,"pid":7,"tid":0,"args":{}},
 {"ph":"X","name":"optimizer_step","cat":"step","ts":9000,"dur":1000,"pid":7,"tid":0},
 {"ph":"X","name":"optimizer_step","cat":"step","ts":19000,"dur":1000,"pid":7,"tid":0},
 {"ph":"X","name":"optimizer_step","cat":"step","ts":34000,"dur":1000,"pid":7,"tid":0},
 {"ph":"C","name":"images/s","ts":1000,"pid":1,"tid":0,"args":{"images/s":4000}},
 {"ph":"C","name":"images/s","ts":2001000,"pid":1,"tid":0,"args":{"images/s":4500}}
],"displayTimeUnit":"ms"})";

// The width and height in a PNG's IHDR, or nothing when it is no PNG.
std::optional<std::pair<std::uint32_t, std::uint32_t>> pngSize(const std::string& path) {
  const std::string d = xs::test::readFile(path);
  if (d.size() < 24 || d.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || d.compare(12, 4, "IHDR") != 0) return {};
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(d[at + i]);
    return v;
  };
  return std::make_pair(be32(16), be32(20));
}

class Plot : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "xspawn-plot-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    fs::create_directory(tmp());
    if (const char* t = std::getenv("TMPDIR")) oldTmp_ = t;
    if (const char* p = std::getenv("PATH")) oldPath_ = p;
    setenv("TMPDIR", tmp().c_str(), 1);  // plot's private directories land here, where we can see them
  }
  void TearDown() override {
    if (oldTmp_) setenv("TMPDIR", oldTmp_->c_str(), 1);
    else unsetenv("TMPDIR");
    if (oldPath_) setenv("PATH", oldPath_->c_str(), 1);
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string tmp() const { return root_ + "/tmp"; }
  std::string path(const std::string& name) const { return root_ + "/" + name; }
  std::string write(const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  int plot(std::vector<std::string> args) { return xs::cli::plotCommand(args); }

  // plotCommand(args) throws E; returns its message.
  template <class E>
  std::string errorOf(const std::vector<std::string>& args) {
    try {
      plot(args);
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "another error than expected: " << e.what();
      return "";
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  // No private directory nor a half-written picture remains; only `keep` beside the inputs.
  void expectNothingLeft(const std::vector<std::string>& keep = {}) {
    EXPECT_TRUE(fs::is_empty(tmp())) << "a temporary directory was left in " << tmp();
    for (const auto& e : fs::directory_iterator(path("out"))) {
      const std::string name = e.path().filename().string();
      EXPECT_NE(std::find(keep.begin(), keep.end(), name), keep.end()) << "left behind: " << e.path();
    }
  }

  std::string root_;
  std::optional<std::string> oldTmp_, oldPath_;
};

TEST_F(Plot, MetricsFileGivesAPngOfTheAskedSize) {
  const std::string metrics = write("run/metrics.jsonl", kMetrics);
  fs::create_directory(path("out"));
  ASSERT_EQ(plot({metrics, "-o", path("out/run.png"), "--width", "800", "--height", "500", "--title", "it's {_a^b}"}), 0);
  const auto size = pngSize(path("out/run.png"));
  ASSERT_TRUE(size) << "not a PNG: " << path("out/run.png");
  EXPECT_EQ(size->first, 800u);
  EXPECT_EQ(size->second, 500u);
  expectNothingLeft({"run.png"});
}

TEST_F(Plot, DirectoryWithAllThreeGivesAnSvg) {
  write("logs/metrics.jsonl", kMetrics);
  write("logs/report.json", reportJson(true));
  write("logs/trace.json", kTrace);
  fs::create_directory(path("out"));
  ASSERT_EQ(plot({path("logs"), "-o", path("out/run.SVG")}), 0);
  const std::string svg = xs::test::readFile(path("out/run.SVG"));
  EXPECT_TRUE(svg.starts_with("<?xml") || svg.starts_with("<svg")) << svg.substr(0, 100);
  EXPECT_NE(svg.find("width=\"1600\""), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  expectNothingLeft({"run.SVG"});
}

TEST_F(Plot, ReportOrTraceAloneGiveTheDefaultSize) {
  const std::string report = write("report.json", reportJson(true));
  const std::string trace = write("trace.json", kTrace);
  fs::create_directory(path("out"));
  for (const std::string& in : {report, trace}) {
    const std::string out = path("out/" + fs::path(in).stem().string() + ".png");
    ASSERT_EQ(plot({in, "-o", out}), 0);
    EXPECT_EQ(pngSize(out), std::make_pair(1600u, 1000u)) << in;
  }
  expectNothingLeft({"report.png", "trace.png"});
}

TEST_F(Plot, AnExistingPictureIsReplacedWhole) {
  const std::string metrics = write("metrics.jsonl", kMetrics);
  fs::create_directory(path("out"));
  write("out/run.png", "old");
  ASSERT_EQ(plot({metrics, "-o", path("out/run.png"), "--width", "300", "--height", "200"}), 0);
  EXPECT_EQ(pngSize(path("out/run.png")), std::make_pair(300u, 200u));
  expectNothingLeft({"run.png"});
}

TEST_F(Plot, MetricsWithoutWallSecondsAddUpTheEpochs) {
  const auto d = xs::cli::plot::loadInputs({write("metrics.jsonl", kMetrics)});
  ASSERT_EQ(d.train.size(), 3u);  // the progress lines
  EXPECT_DOUBLE_EQ(d.train[0].wallSeconds, 0.5);
  EXPECT_DOUBLE_EQ(d.train[2].wallSeconds, 1.25 + 0.5);  // epoch 1's seconds, then its own
  ASSERT_EQ(d.eval.size(), 2u);
  EXPECT_DOUBLE_EQ(d.eval[0].wallSeconds, 1.25);
  EXPECT_DOUBLE_EQ(d.eval[1].wallSeconds, 2.9);  // given
  EXPECT_DOUBLE_EQ(d.eval[1].accuracy, 0.80);
  EXPECT_NE(d.summary.find("50 steps"), std::string::npos) << d.summary;
}

TEST_F(Plot, ATruncatedLastMetricsLineIsLeftOut) {
  const auto d = xs::cli::plot::loadInputs({write("metrics.jsonl", std::string(kMetrics) + R"({"event":"prog)")});
  EXPECT_EQ(d.train.size(), 3u);
}

TEST_F(Plot, ReportGivesSharesSplitAndStepSpread) {
  const auto d = xs::cli::plot::loadInputs({write("report.json", reportJson(true))});
  ASSERT_EQ(d.usage.size(), 2u);
  EXPECT_DOUBLE_EQ(d.usage[0].compute, 50);
  EXPECT_DOUBLE_EQ(d.usage[0].waiting, 30);  // 40% split 3:1 by the seconds waiting and moving
  EXPECT_DOUBLE_EQ(d.usage[0].moving, 10);
  EXPECT_DOUBLE_EQ(d.usage[0].collectives, 0);
  ASSERT_EQ(d.stepTimes.size(), 2u);
  EXPECT_DOUBLE_EQ(d.stepTimes[1].median, 11);
  EXPECT_DOUBLE_EQ(d.stepTimes[1].p99, 20);
  EXPECT_EQ(d.jobThroughput.size(), 3u);
  EXPECT_NE(d.straggler.find("rank 1"), std::string::npos) << d.straggler;
}

TEST_F(Plot, TraceGivesStepTimesBarsAndThroughput) {
  const auto d = xs::cli::plot::loadInputs({write("trace.json", kTrace)});
  ASSERT_EQ(d.stepTimes.size(), 1u);
  EXPECT_EQ(d.stepTimes[0].rank, 0);
  EXPECT_DOUBLE_EQ(d.stepTimes[0].min, 10);
  EXPECT_DOUBLE_EQ(d.stepTimes[0].median, 12.5);
  EXPECT_DOUBLE_EQ(d.stepTimes[0].max, 15);
  ASSERT_EQ(d.usage.size(), 1u);
  const auto& u = d.usage[0];  // window: 1000 µs to 35000 µs (the last optimizer_step's end)
  const double window = 34000;
  EXPECT_NEAR(u.compute, 100 * 500 / window, 1e-9);
  EXPECT_NEAR(u.waiting, 100 * 150 / window, 1e-9);
  EXPECT_NEAR(u.moving, 100 * 50 / window, 1e-9);
  EXPECT_NEAR(u.data, 100 * 100 / window, 1e-9);
  EXPECT_NEAR(u.compute + u.waiting + u.moving + u.data + u.collectives + u.other, 100, 1e-9);
  ASSERT_EQ(d.jobThroughput.size(), 2u);
  EXPECT_DOUBLE_EQ(d.jobThroughput[1].first, 2.0);  // seconds since the trace's first event
}

TEST_F(Plot, BadInputsAreUsageErrorsSayingWhatAndHow) {
  fs::create_directory(path("out"));
  const std::string png = path("out/x.png");
  const std::string metrics = write("metrics.jsonl", kMetrics);
  auto expectIn = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  expectIn(errorOf<UsageError>({"-o", png}), "no input");
  expectIn(errorOf<UsageError>({path("nope.json"), "-o", png}), "nope.json");
  expectIn(errorOf<UsageError>({write("notes.txt", "hello\n"), "-o", png}), "metrics file");
  expectIn(errorOf<UsageError>({write("other.json", R"({"a":1})"), "-o", png}), "trace.json");
  expectIn(errorOf<UsageError>({write("empty.json", ""), "-o", png}), "is empty");
  expectIn(errorOf<UsageError>({write("report.json", reportJson(false)), "-o", png}), "nothing to draw");
  expectIn(errorOf<UsageError>({write("summary.jsonl", R"({"event":"summary","steps":0})" "\n"), "-o", png}),
           "no progress, epoch or eval lines");
  expectIn(errorOf<UsageError>({write("bad.jsonl", R"({"event":"progress","step":1})" "\nnot json\n{}\n"), "-o", png}),
           "bad.jsonl line 2");
  expectIn(errorOf<UsageError>({write("badstep.jsonl", R"({"event":"eval","step":"x"})" "\n"), "-o", png}),
           "\"step\"");
  expectIn(errorOf<UsageError>({metrics, "-o", path("out/x.jpg")}), ".png or .svg");
  expectIn(errorOf<UsageError>({metrics}), "-o FILE.png");
  expectIn(errorOf<UsageError>({metrics, "-o", path("no/such/dir/x.png")}), "no directory");
  expectIn(errorOf<UsageError>({metrics, "-o", png, "--width", "0"}), "--width");
  expectIn(errorOf<UsageError>({metrics, "-o", png, "--colour", "red"}), "--colour");
  expectIn(errorOf<UsageError>({path("out"), "-o", png}), "holds none of metrics.jsonl");
  expectIn(errorOf<UsageError>({metrics, write("again/metrics.jsonl", kMetrics), "-o", png}), "two metrics files");
  expectNothingLeft();
}

TEST_F(Plot, WithoutGnuplotItSaysHowToInstallIt) {
  fs::create_directory(path("out"));
  fs::create_directory(path("empty-bin"));
  setenv("PATH", path("empty-bin").c_str(), 1);
  const std::string message = errorOf<UsageError>({write("metrics.jsonl", kMetrics), "-o", path("out/x.png")});
  EXPECT_NE(message.find("apt-get install gnuplot-nox"), std::string::npos) << message;
  EXPECT_NE(message.find("scripts/setup.sh"), std::string::npos) << message;
  expectNothingLeft();
}

TEST_F(Plot, AFailingGnuplotShowsItsMessagesAndLeavesNothing) {
  fs::create_directory(path("out"));
  const std::string fake = write("bin/gnuplot", "#!/bin/sh\necho '\"plot.gp\" line 3: undefined variable: nonsense' >&2\n"
                                                "echo 'second line' >&2\nexit 1\n");
  fs::permissions(fake, fs::perms::owner_all);
  setenv("PATH", path("bin").c_str(), 1);
  const std::string message = errorOf<SystemError>({write("metrics.jsonl", kMetrics), "-o", path("out/x.png")});
  EXPECT_NE(message.find("undefined variable: nonsense"), std::string::npos) << message;
  EXPECT_NE(message.find("second line"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  expectNothingLeft();
}

TEST_F(Plot, HelpPrintsTheUsage) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(plot({"--help"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("usage: xspawn plot INPUT..."), std::string::npos);
}

}  // namespace
}  // namespace xs::test
