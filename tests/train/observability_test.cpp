// observability_test.cpp: what a user sees of a job's time, through real jobs: the --trace file's
// structure (valid JSON, every rank's track, spans nested and ordered, collectives' bytes), the
// times each rank was given a CPU a step, the utilisation report naming a rank slowed by an
// injected delay, `xspawn report` from a trace and from a --log-dir agreeing, `xspawn top --once
// --json` on a running job, and bad input.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "process_runner.hpp"
#include "train_test_util.hpp"

namespace xs::train::test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSmall = "train --model mlp --dataset synthetic --train-size 2048 --test-size 256 --epochs 1 ";

json readJson(const fs::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

bool noTemporaries(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".tmp") return false;
  return true;
}

// The spans of each (pid, tid) must nest: a span starting inside another ends inside it.
void expectNested(const std::vector<json>& spans) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const json& e : spans) tracks[{e["pid"], e["tid"]}].emplace_back(e["ts"], e["ts"].get<double>() + e["dur"].get<double>());
  for (auto& [track, list] : tracks) {
    std::sort(list.begin(), list.end(), [](auto a, auto b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<double> open;  // end times of the spans around the current one
    for (const auto& [start, end] : list) {
      while (!open.empty() && open.back() <= start + 0.002) open.pop_back();
      if (!open.empty()) {
        ASSERT_LE(end, open.back() + 0.002) << "pid " << track.first << " tid " << track.second << " at " << start;
      }
      open.push_back(end);
    }
  }
}

TEST(Observability, TraceHasEveryRankWithNestedSpansAndTheBytesOfEachCollective) {
  const fs::path dir = freshDir("trace");
  CommandResult r = runXspawn("--nprocs 3 -q --trace " + (dir / "trace.json").string() + " --log-dir " + (dir / "logs").string() +
                              " " + kSmall + "--bucket-mb 0.05");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json doc = readJson(dir / "trace.json");  // parses: valid JSON
  std::map<int, std::string> process;            // pid -> name
  std::map<std::pair<int, int>, std::string> thread;
  std::vector<json> spans;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") process[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") thread[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "X") spans.push_back(e);
  }
  std::map<std::string, int> pidOf;
  for (const auto& [pid, name] : process) pidOf[name] = pid;
  ASSERT_TRUE(pidOf.count("launcher"));
  std::map<int, std::map<std::string, int>> categories;  // pid -> cat -> spans
  for (const json& e : spans) categories[e["pid"]][e["cat"]] += 1;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string name = "rank " + std::to_string(rank);
    ASSERT_TRUE(pidOf.count(name)) << name;
    for (const char* cat : {"data", "forward", "backward", "update", "step", "eval", "rendezvous"})
      EXPECT_GT(categories[pidOf[name]][cat], 0) << name << " has no " << cat << " span";
    EXPECT_EQ(thread[std::make_pair(pidOf[name], 0)], "main");
  }
  EXPECT_GT(categories[pidOf["launcher"]]["launcher"], 0);
  expectNested(spans);
  // Every all-reduce span carries its bytes (N elements of its "float[N]"), and its algorithm;
  // the buckets run on the bucket thread's track.
  int allReduces = 0, onBucketThread = 0;
  const std::regex count(R"((float|double|int32|int64|bfloat16)\[(\d+)\])");
  const std::map<std::string, std::uint64_t> size = {{"float", 4}, {"double", 8}, {"int32", 4}, {"int64", 8}, {"bfloat16", 2}};
  for (const json& e : spans) {
    if (e["cat"] != "collective" || e["args"]["op"] != "all_reduce") continue;
    std::smatch m;
    const std::string name = e["name"];
    ASSERT_TRUE(std::regex_search(name, m, count)) << name;
    EXPECT_EQ(e["args"]["bytes"].get<std::uint64_t>(), size.at(m[1]) * std::stoull(m[2])) << name;
    EXPECT_TRUE(e["args"].contains("algorithm")) << e.dump();
    EXPECT_LE(e["args"]["wait_us"].get<double>(), e["dur"].get<double>() + 0.002);
    ++allReduces;
    if (e["tid"] != 0) {
      ++onBucketThread;
      EXPECT_EQ(thread[std::make_pair(e["pid"].get<int>(), e["tid"].get<int>())], "bucket thread");
    }
  }
  EXPECT_GE(allReduces, 3 * 10);  // at least one per step (2048 images, batch 64, 3 ranks) and rank
  EXPECT_GT(onBucketThread, 0);
  EXPECT_TRUE(noTemporaries(dir));
  // The report from the trace and the launcher's own (report.json) tell the same story.
  CommandResult fromTrace = runXspawn("report --json " + (dir / "trace.json").string());
  ASSERT_EQ(fromTrace.status, 0) << fromTrace.err;
  const json t = json::parse(fromTrace.out), l = readJson(dir / "logs" / "report.json")["utilisation"];
  ASSERT_EQ(t["ranks"].size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(t["ranks"][rank]["steps"], l["ranks"][rank]["steps"]);
    EXPECT_NEAR(t["ranks"][rank]["shares"]["compute"].get<double>(), l["ranks"][rank]["shares"]["compute"].get<double>(), 1.0);
    EXPECT_NEAR(t["ranks"][rank]["window_seconds"].get<double>(), l["ranks"][rank]["window_seconds"].get<double>(), 0.01);
    // The times each rank was given a CPU a step (null in a job too short for a scheduler sample).
    EXPECT_EQ(t["ranks"][rank]["cpu_turns_per_step"], l["ranks"][rank]["cpu_turns_per_step"]);
  }
  fs::remove_all(dir);
}

// More ranks than cores: the report counts the times each rank was given a CPU a step, from
// the kernel's schedstat (what each of those switches costs: `xspawn bench switch`).
TEST(Observability, ReportCountsTheTimesEachRankWasGivenACpuAStep) {
  const fs::path dir = freshDir("turns");
  CommandResult r = runXspawn("--nprocs 4 --log-dir " + dir.string() +
                              " train --model convnet --dataset synthetic --train-size 16000 --test-size 256 --epochs 1 "
                              "--eval-every 0 --batch-size 16");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const json u = readJson(dir / "report.json")["utilisation"];
  ASSERT_EQ(u["ranks"].size(), 4u);
  for (const json& rank : u["ranks"]) {
    ASSERT_TRUE(rank["cpu_turns_per_step"].is_number()) << rank.dump();
    EXPECT_GT(rank["cpu_turns_per_step"].get<double>(), 0.0) << rank.dump();
    EXPECT_LT(rank["cpu_turns_per_step"].get<double>(), 100.0) << rank.dump();
  }
  EXPECT_GT(u["collectives"]["cpu_turns_per_step"].get<double>(), 0.0) << u["collectives"].dump();
  EXPECT_NE(r.err.find(" times a step"), std::string::npos) << r.err;  // the console summary
  fs::remove_all(dir);
}

TEST(Observability, ReportNamesTheRankSlowedByAnInjectedDelay) {
  const fs::path dir = freshDir("straggler");
  CommandResult r = runXspawn("--nprocs 3 --log-dir " + dir.string() + " --inject-fault rank=1,step=3,kind=slow:25ms " +
                              kSmall + "--batch-size 16");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("straggler: rank 1"), std::string::npos) << r.err;  // the console summary
  const json u = readJson(dir / "report.json")["utilisation"];
  EXPECT_EQ(u["straggler"]["rank"], 1) << u.dump(2);
  EXPECT_EQ(u["straggler"]["phase"], "injected delay");
  // 25 ms on 40 of its 42 steps (2048 images, batch 16, 3 ranks): about 24 ms per step more.
  EXPECT_GT(u["straggler"]["extra_ms_per_step"].get<double>(), 15.0);
  EXPECT_LT(u["straggler"]["extra_ms_per_step"].get<double>(), 45.0);
  for (int rank : {0, 2}) {
    const json& s = u["ranks"][rank]["seconds"];
    EXPECT_GT(s["collective_wait"].get<double>(), 0.6) << "rank " << rank << " waited for rank 1: " << s.dump();
    EXPECT_EQ(u["ranks"][rank]["seconds"]["injected"].get<double>(), 0.0);
  }
  EXPECT_GT(u["ranks"][1]["seconds"]["injected"].get<double>(), 0.9);
  EXPECT_GT(u["ranks"][1]["step_ms"]["median"].get<double>(), 20.0);
  EXPECT_GT(u["ranks"][0]["device_memory"]["peak_bytes"].get<std::uint64_t>(), 0u);
  fs::remove_all(dir);
}

TEST(Observability, TopShowsARunningJob) {
  const fs::path dir = freshDir("top");
  const std::string job = "top-" + std::to_string(::getpid());
  // In the background: each step of rank 0 takes >= 100 ms, so the job runs for a few seconds.
  const std::string start = std::string(XSPAWN_BIN) + " --nprocs 2 -q --job-id " + job +
                            " --inject-fault 'rank=0,step=1,kind=slow:100ms' train --model mlp --dataset synthetic --train-size 8192 "
                            "--test-size 256 --epochs 1 > " +
                            (dir / "out.txt").string() + " 2>&1 &";
  ASSERT_EQ(std::system(start.c_str()), 0);
  json seen;
  for (int i = 0; i < 100 && seen.is_null(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CommandResult top = runXspawn("top " + job + " --once --json --interval 0.2");
    if (top.status != 0) continue;
    const json doc = json::parse(top.out);
    if (!doc["jobs"].empty() && doc["jobs"][0]["ranks"][0]["step"].get<int>() > 2) seen = doc["jobs"][0];
  }
  ASSERT_FALSE(seen.is_null()) << "top never showed the job training";
  EXPECT_EQ(seen["job_id"], job);
  EXPECT_EQ(seen["world_size"], 2);
  EXPECT_GT(seen["step_target"].get<int>(), 0);
  EXPECT_FALSE(seen["eta_seconds"].is_null());
  ASSERT_EQ(seen["ranks"].size(), 2u);
  for (const json& rank : seen["ranks"]) {
    EXPECT_GT(rank["pid"].get<int>(), 0);
    EXPECT_FALSE(rank["doing"].get<std::string>().empty());
    EXPECT_GT(rank["device_capacity_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_LT(rank["since_progress_seconds"].get<double>(), 5.0);
  }
  // The job ends by itself; then top shows nothing of it and nothing is left in /dev/shm.
  for (int i = 0; i < 300 && xs::test::segmentExists(job); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(xs::test::segmentExists(job));
  CommandResult after = runXspawn("top " + job + " --once --json --interval 0.05");
  EXPECT_EQ(json::parse(after.out)["jobs"].size(), 0u) << after.out;
  fs::remove_all(dir);
}

TEST(Observability, BadTraceAndReportInputSayWhatToFix) {
  const fs::path dir = freshDir("bad");
  CommandResult r = runXspawn("--nprocs 2 --trace " + (dir / "missing" / "t.json").string() + " hello");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--trace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("existing, writable directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("is using"), std::string::npos) << "no worker starts: " << r.out;
  r = runXspawn("--trace-events 10 hello");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--trace-events must be"), std::string::npos) << r.err;
  r = runXspawn("report " + (dir / "nothing").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  std::ofstream(dir / "other.json") << R"({"traceEvents": 3})";
  r = runXspawn("report " + (dir / "other.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not a Chrome trace event file"), std::string::npos) << r.err;
  r = runXspawn("top --interval 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--interval must be"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xs::train::test
