// basic_test.cpp: the launcher's ordinary life: hello at several sizes, both start methods,
// `run` with its environment, core binding, output tagging, log files, bad arguments.
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "job_fixture.hpp"
#include "xspawn/spawn.hpp"

namespace xs::test {
namespace {

class HelloTest : public LauncherTest, public ::testing::WithParamInterface<int> {};

TEST_P(HelloTest, EveryProcessReportsItsCoreAndTheMasterPrintsTheCommonTensor) {
  const int n = GetParam();
  Job job = runJob({"--nprocs", std::to_string(n)}, {"hello"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(linesWith(job.run.out, fmt::format("Process {} is using xcore:{}", i, i)).size(), 1u)
        << job.run.out;
  }
  EXPECT_EQ(linesWith(job.run.out, "Printing on the master process").size(), 1u);
  EXPECT_EQ(linesWith(job.run.out, fmt::format("identical on all {} ranks (seed 1234)", n)).size(), 1u)
      << job.run.out;
  EXPECT_EQ(job.report["status"], "succeeded");
  expectClean(job);
}

INSTANTIATE_TEST_SUITE_P(Sizes, HelloTest, ::testing::Values(1, 2, 8, 16));

TEST_F(LauncherTest, HelloWithExecStartMethod) {
  Job job = runJob({"--nprocs", "4", "--start-method", "exec"}, {"hello", "--seed", "7"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err;
  EXPECT_EQ(linesWith(job.run.out, "is using xcore:").size(), 4u);
  EXPECT_EQ(linesWith(job.run.out, "identical on all 4 ranks (seed 7)").size(), 1u) << job.run.out;
  EXPECT_EQ(job.report["start_method"], "exec");
  expectClean(job);
}

TEST_F(LauncherTest, RunGivesEveryWorkerItsEnvironment) {
  Job job = runJob({"--nprocs", "3"}, {"run", "--", worker(), "env"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err;
  for (int i = 0; i < 3; ++i) {
    auto lines = linesWith(job.run.out, fmt::format("rank={} local={} world=3 job={} cpu=-1", i, i, job.jobId));
    EXPECT_EQ(lines.size(), 1u) << job.run.out;
  }
  EXPECT_EQ(linesWith(job.run.out, "omp=1").size(), 3u);
  expectClean(job);
}

TEST_F(LauncherTest, RunProgramThatUsesTheApi) {
  Job job = runJob({"--nprocs", "4"}, {"run", worker(), "ok"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err;
  EXPECT_EQ(linesWith(job.run.out, "ok rank").size(), 4u) << job.run.out;
  EXPECT_EQ(linesWith(job.run.out, "device xcore:3").size(), 1u);
  expectClean(job);
}

TEST_F(LauncherTest, RendezvousPayloadsOfManyChunksArriveIntact) {
  Job job = runJob({"--nprocs", "5"}, {"run", "--", worker(), "payload", "100000"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err << job.run.out;
  EXPECT_EQ(linesWith(job.run.out, "payload ok").size(), 5u);
  expectClean(job);
}

TEST_F(LauncherTest, SharedHeapGivesZeroCopyBuffers) {
  Job job = runJob({"--nprocs", "3", "--shared-heap", "1M"}, {"run", "--", worker(), "shared"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err << job.run.out;
  EXPECT_EQ(linesWith(job.run.out, "shared ok").size(), 3u);
  Job small = runJob({"--nprocs", "2", "--shared-heap", "64K"}, {"run", "--", worker(), "shared"});
  EXPECT_NE(small.run.exitCode, 0);
  EXPECT_NE(small.run.err.find("does not fit the shared heap"), std::string::npos) << small.run.err;
  expectClean(job);
  expectClean(small);
}

TEST_F(LauncherTest, BindToCorePinsWorkerIToCoreIModCores) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  Job job = runJob({"--nprocs", "4", "--bind-to", "core"}, {"run", "--", worker(), "env"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err;
  for (int i = 0; i < 4; ++i) {
    auto lines = linesWith(job.run.out, fmt::format("rank={} ", i));
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find(fmt::format("cpu={} allowed=1 first={}", i % cores, i % cores)),
              std::string::npos)
        << lines[0];
  }
  expectClean(job);
}

TEST_F(LauncherTest, TagOutputAndLogDirectory) {
  Job job = runJob({"--nprocs", "2", "--tag-output"}, {"run", "--", worker(), "ok"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.err;
  EXPECT_EQ(linesWith(job.run.out, "[rank 0] ok rank 0").size(), 1u) << job.run.out;
  EXPECT_EQ(linesWith(job.run.out, "[rank 1] ok rank 1").size(), 1u) << job.run.out;
  EXPECT_NE(readFile(job.logDir + "/rank-1.log").find("ok rank 1 of 2"), std::string::npos);
  EXPECT_NE(readFile(job.logDir + "/launcher.log").find("all 2 ranks exited 0"), std::string::npos);
  EXPECT_EQ(job.report["exit_code"], 0);
  EXPECT_EQ(job.report["ranks"].size(), 2u);
  expectClean(job);
}

TEST_F(LauncherTest, AReportThatCannotBeWrittenIsSaidAndPrintedInstead) {
  // report.json a directory with something in it: the report's rename onto it fails, as a
  // write to a full disk would. The job's exit code stays the job's; the report goes to stderr.
  for (const std::string outcome : {"ok", "fail"}) {
    TempDir logs("logs");
    std::filesystem::create_directories(logs.path + "/report.json/keep");
    const std::string jobId = uniqueJobId("report");
    std::vector<std::string> argv{xspawn(), "--job-id", jobId, "--log-dir", logs.path, "--nprocs", "2", "run", "--"};
    for (const std::string& a : outcome == "ok" ? std::vector<std::string>{worker(), "ok"}
                                                : std::vector<std::string>{"/bin/sh", "-c", "exit 3"})
      argv.push_back(a);
    RunResult run = runProcess(argv);
    EXPECT_EQ(run.exitCode, outcome == "ok" ? 0 : 3) << run.err;
    const auto said = linesWith(run.err, "cannot write the job report to " + logs.path + "/report.json");
    ASSERT_EQ(said.size(), 1u) << run.err;
    EXPECT_NE(said[0].find("Is a directory"), std::string::npos) << said[0];
    EXPECT_NE(said[0].find("the report follows on stderr"), std::string::npos) << said[0];
    // The report itself, whole, from the line after (indented JSON, its last line "}").
    const std::string after = run.err.substr(run.err.find('\n', run.err.find(said[0])) + 1);
    const auto report = nlohmann::json::parse(after.substr(0, after.find("\n}\n") + 2), nullptr, false);
    ASSERT_TRUE(report.is_object()) << run.err;
    EXPECT_EQ(report["job_id"], jobId);
    EXPECT_EQ(report["exit_code"], outcome == "ok" ? 0 : 3);
    // Nothing half-written stays beside it.
    for (const auto& entry : std::filesystem::directory_iterator(logs.path))
      EXPECT_EQ(entry.path().filename().string().find("report.json.tmp"), std::string::npos) << entry.path();
    Job job;
    job.jobId = jobId;
    expectClean(job);
  }
}

TEST_F(LauncherTest, QuietLeavesOnlyTheWorkersOutput) {
  Job job = runJob({"--nprocs", "2", "--quiet"}, {"hello"});
  ASSERT_EQ(job.run.exitCode, 0);
  EXPECT_EQ(job.run.err, "");
  Job loud = runJob({"--nprocs", "2"}, {"hello"});
  EXPECT_NE(loud.run.err.find("all 2 ranks exited 0"), std::string::npos);
}

TEST_F(LauncherTest, DefaultNprocsIsTheNumberOfUsableCores) {
  Job job = runJob({}, {"hello"});
  ASSERT_EQ(job.run.exitCode, 0);
  EXPECT_EQ(job.report["world_size"], xs::usableCores());
  EXPECT_EQ(job.report["usable_cores"], xs::usableCores());
  // Confined to one CPU (as by taskset or a container's cpuset), the launcher starts one
  // worker, and a job of two on it knows it is oversubscribed.
  cpu_set_t saved, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // inherited by the launcher
  Job confined = runJob({}, {"hello"});
  Job two = runJob({"--nprocs", "2"}, {"hello"});
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  ASSERT_EQ(confined.run.exitCode, 0) << confined.run.err;
  EXPECT_EQ(confined.report["world_size"], 1);
  ASSERT_EQ(two.run.exitCode, 0) << two.run.err;
  EXPECT_EQ(two.report["world_size"], 2);
  EXPECT_EQ(two.report["usable_cores"], 1);  // 2 ranks on 1 core: oversubscribed
  expectClean(confined);
  expectClean(two);
}

TEST_F(LauncherTest, ExitStatusIsTheFirstFailingRanksCode) {
  // Rank 1 fails first (code 2); rank 2 fails later (code 4); rank 0 succeeds.
  Job job = runJob({"--nprocs", "3"}, {"run", "--", "/bin/sh", "-c",
                                       "[ $XSPAWN_RANK = 2 ] && sleep 0.3; exit $((XSPAWN_RANK * 2))"});
  EXPECT_EQ(job.run.exitCode, 2);
  EXPECT_EQ(job.report["root_cause"]["rank"], 1);
  expectClean(job);
}

TEST_F(LauncherTest, AMissingProgramIsReported) {
  Job job = runJob({"--nprocs", "2"}, {"run", "--", "/nonexistent/program"});
  EXPECT_EQ(job.run.exitCode, 127);
  EXPECT_NE(job.run.err.find("cannot run '/nonexistent/program': No such file or directory"),
            std::string::npos)
      << job.run.err;
  expectClean(job);
}

struct BadArgs {
  std::string name;
  std::vector<std::string> argv;
  std::string message;
};

class BadArgsTest : public LauncherTest, public ::testing::WithParamInterface<BadArgs> {};

TEST_P(BadArgsTest, OneLineErrorAndExitStatus2) {
  std::vector<std::string> argv{xspawn()};
  argv.insert(argv.end(), GetParam().argv.begin(), GetParam().argv.end());
  RunResult r = runProcess(argv);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(oneLine(r.err)) << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    Launcher, BadArgsTest,
    ::testing::Values(
        BadArgs{"NprocsZero", {"--nprocs", "0", "hello"}, "--nprocs must be a whole number from 1 to 1024 (got '0')"},
        BadArgs{"NprocsNegative", {"--nprocs", "-1", "hello"}, "(got '-1')"},
        BadArgs{"NprocsNotANumber", {"--nprocs", "abc", "hello"}, "(got 'abc')"},
        BadArgs{"NprocsTrailingJunk", {"--nprocs=2x", "hello"}, "(got '2x')"},
        BadArgs{"UnknownCommand", {"frobnicate"}, "unknown command 'frobnicate'"},
        BadArgs{"UnknownOption", {"--frob", "hello"}, "unknown launcher option '--frob'"},
        BadArgs{"TimeoutNotANumber", {"--timeout", "soon", "hello"}, "--timeout must be a positive number of seconds"},
        BadArgs{"BadStartMethod", {"--start-method", "spawn", "hello"}, "--start-method must be fork or exec"},
        BadArgs{"BadBindTo", {"--bind-to", "socket", "hello"}, "--bind-to must be none or core"},
        BadArgs{"BadSharedHeap", {"--shared-heap", "lots", "hello"}, "--shared-heap must be a size"},
        BadArgs{"MachineBufferTooSmall", {"--machine-buffer", "1K", "hello"}, "--machine-buffer must be at least 4K"},
        BadArgs{"BadJobId", {"--job-id", "a/b", "hello"}, "--job-id 'a/b' is not valid"},
        BadArgs{"BadCommandOption", {"hello", "--seed", "x"}, "hello:"},
        BadArgs{"RunWithoutProgram", {"run"}, "run: no program given"},
        BadArgs{"NoCommand", {}, "no command given"}),
    [](const ::testing::TestParamInfo<BadArgs>& info) { return info.param.name; });

TEST_F(LauncherTest, HelpAndVersion) {
  RunResult help = runProcess({xspawn(), "--help"});
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_NE(help.out.find("usage: xspawn [launcher options] COMMAND"), std::string::npos);
  EXPECT_NE(help.out.find("--nprocs"), std::string::npos);
  RunResult hello = runProcess({xspawn(), "hello", "--help"});
  EXPECT_EQ(hello.exitCode, 0);
  EXPECT_NE(hello.out.find("--seed"), std::string::npos);
  RunResult version = runProcess({xspawn(), "--version"});
  EXPECT_EQ(version.exitCode, 0);
  EXPECT_EQ(version.out.rfind("xspawn ", 0), 0u);
}

TEST_F(LauncherTest, TrainRunsTheTrainerOrSaysPlainlyThatItIsNotBuilt) {
  if (std::filesystem::exists(std::filesystem::path(xspawn()).parent_path() / "xspawn-train")) {
    // Built: `train --help` reaches the trainer (the training tests cover the rest).
    RunResult help = runProcess({xspawn(), "train", "--help"});
    EXPECT_EQ(help.exitCode, 0) << help.err;
    EXPECT_NE(help.out.find("--model"), std::string::npos) << help.out;
    return;
  }
  RunResult r = runProcess({xspawn(), "--nprocs", "8", "train"});
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("training is not built yet"), std::string::npos) << r.err;
}

// The flat MPI peer of `bench allreduce` runs at its best: the faster of Open MPI's single copy
// and its FIFOs at each size, which the note and every JSON row name; a mechanism the user chose
// is the one it runs, alone.
std::vector<std::string> singleCopies(const std::string& jsonPath) {
  std::vector<std::string> out;
  const nlohmann::json doc = nlohmann::json::parse(readFile(jsonPath));
  for (const auto& row : doc.at("rows"))
    out.push_back(row.contains("mpi") ? row["mpi"].value("single_copy", "?") : "no mpi figure");
  return out;
}

// The MPI peer's tests need Open MPI and the peer program beside xspawn.
bool haveMpiPeer() {
  const auto peer = std::filesystem::path(XSPAWN_BIN).parent_path() / "xspawn-bench-mpi";
  return std::filesystem::exists(peer) && std::system("command -v mpirun >/dev/null 2>&1") == 0;
}

TEST_F(LauncherTest, BenchRunsFlatMpiAtTheFasterOfItsSharedMemoryPaths) {
  if (!haveMpiPeer()) GTEST_SKIP() << "Open MPI or xspawn-bench-mpi not built";
  TempDir dir("bench-mpi");
  const std::string json = dir.path + "/allreduce.json";
  Job job = runJob({"--nprocs", "2"}, {"bench", "allreduce", "--min-bytes", "4K", "--max-bytes", "256K", "--iters",
                                       "3", "--peers", "mpi", "--json", json});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.out << job.run.err;
  EXPECT_EQ(linesWith(job.run.out, "# mpi: the faster of Open MPI's single copy (CMA) and copy through its FIFOs "
                                   "(btl_vader_single_copy_mechanism none) at each size; the FIFOs at ")
                .size(),
            1u)
      << job.run.out;
  const auto copies = singleCopies(json);
  EXPECT_EQ(copies.size(), 4u);
  for (const std::string& c : copies) EXPECT_TRUE(c == "default" || c == "none") << c;
  expectClean(job);
}

TEST_F(LauncherTest, BenchKeepsTheSingleCopyMechanismTheUserChose) {
  if (!haveMpiPeer()) GTEST_SKIP() << "Open MPI or xspawn-bench-mpi not built";
  // Chosen in the environment, or in an Open MPI parameter file (which --mca on the peer's
  // command line would otherwise override).
  TempDir dir("bench-mpi-chosen");
  std::ofstream(dir.path + "/user.conf") << "# the user's\nbtl_vader_single_copy_mechanism = none\n";
  for (const std::string& way : {std::string("OMPI_MCA_btl_vader_single_copy_mechanism=none"),
                                 "OMPI_MCA_mca_base_param_files=" + dir.path + "/user.conf"}) {
    const std::string json = dir.path + "/allreduce.json";
    RunOptions o;
    o.env = {way};
    Job job = runJob({"--nprocs", "2"},
                     {"bench", "allreduce", "--min-bytes", "4K", "--max-bytes", "64K", "--iters", "3", "--peers",
                      "mpi", "--json", json},
                     o);
    ASSERT_EQ(job.run.exitCode, 0) << way << "\n" << job.run.out << job.run.err;
    EXPECT_TRUE(linesWith(job.run.out, "# mpi:").empty()) << way << "\n" << job.run.out;
    EXPECT_EQ(singleCopies(json), std::vector<std::string>(3, "none")) << way;
    expectClean(job);
  }
}

TEST_F(LauncherTest, BenchRefusesASingleCopyMechanismOpenMpiDoesNotKnow) {
  TempDir dir("bench-mpi-unknown");
  const std::string file = dir.path + "/user.conf";
  std::ofstream(file) << "btl_vader_single_copy_mechanism = fastest\n";
  const std::vector<std::pair<std::string, std::string>> ways{
      {"OMPI_MCA_btl_vader_single_copy_mechanism=fast; rm -rf x",
       "OMPI_MCA_btl_vader_single_copy_mechanism=fast; rm -rf x: use cma, xpmem, knem, emulated or none (or unset it)"},
      {"OMPI_MCA_mca_base_param_files=" + file,
       file + ": btl_vader_single_copy_mechanism=fastest: use cma, xpmem, knem, emulated or none (or unset it)"}};
  for (const auto& [way, said] : ways) {
    RunOptions o;
    o.env = {way};
    Job job = runJob({"--nprocs", "2"},
                     {"bench", "allreduce", "--min-bytes", "4K", "--max-bytes", "4K", "--peers", "mpi"}, o);
    EXPECT_EQ(job.run.exitCode, 2) << job.run.out << job.run.err;
    EXPECT_EQ(linesWith(job.run.err, said).size(), 1u) << job.run.err;
    EXPECT_TRUE(job.run.out.empty()) << "no sweep before the error: " << job.run.out;
    expectClean(job);
  }
}

// `bench switch` times the hand-over of one core among workers as processes and as threads: a
// row for every touch size and worker count (printed and in --json), its workers gone when it
// returns; a count it cannot run is refused before any row, with what it takes.
TEST_F(LauncherTest, BenchSwitchTimesProcessesAndThreadsAndRefusesABadCount) {
  TempDir dir("bench-switch");
  const std::string json = dir.path + "/switch.json";
  Job job = runJob({}, {"bench", "switch", "--workers", "2,3", "--touch-kb", "0,64", "--turns", "50", "--repeats", "1",
                        "--json", json});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.out << job.run.err;
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(doc["bench"], "switch");
  ASSERT_EQ(doc["rows"].size(), 4u) << doc.dump();
  for (const auto& row : doc["rows"]) {
    EXPECT_GT(row["processes_us"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["threads_us"].get<double>(), 0.0) << row.dump();
  }
  EXPECT_EQ(linesWith(job.run.out, "take turns (futex), 50 turns each, median of 1").size(), 1u) << job.run.out;
  int rows = 0;
  for (const std::string& line : linesWith(job.run.out, "x")) {
    int kb = 0, workers = 0;
    double procs = 0, threads = 0, ratio = 0;
    if (std::sscanf(line.c_str(), " %d %d %lf %lf %lfx", &kb, &workers, &procs, &threads, &ratio) != 5) continue;
    ++rows;
    EXPECT_TRUE((kb == 0 || kb == 64) && (workers == 2 || workers == 3)) << line;
    EXPECT_GT(procs, 0.0) << line;
    EXPECT_GT(threads, 0.0) << line;
  }
  EXPECT_EQ(rows, 4) << job.run.out;
  expectClean(job);

  Job bad = runJob({}, {"bench", "switch", "--workers", "2,1"});
  EXPECT_EQ(bad.run.exitCode, 2) << bad.run.out << bad.run.err;
  EXPECT_EQ(linesWith(bad.run.err, "bench switch: --workers takes numbers from 2 to 64, comma-separated (got '1')")
                .size(),
            1u)
      << bad.run.err;
  EXPECT_TRUE(bad.run.out.empty()) << bad.run.out;
}

// A benchmark's --json path it cannot write is refused before it measures anything (it used to
// run every row and then write nothing, exit 0). A run that fails leaves no file it created and
// keeps the rows of one that was there.
TEST_F(LauncherTest, BenchJsonToAPathItCannotWriteIsRefusedBeforeMeasuring) {
  TempDir dir("bench-json");
  const std::string path = dir.path + "/no/such/dir/rows.json";
  const std::vector<std::vector<std::string>> commands = {
      {"bench", "barrier", "--iters", "10", "--repeats", "1", "--json", path},
      {"bench", "allreduce", "--min-bytes", "4K", "--max-bytes", "4K", "--peers", "none", "--json", path},
      {"bench", "switch", "--turns", "10", "--json", path}};
  for (const auto& command : commands) {
    Job job = runJob({"--nprocs", "2"}, command);
    EXPECT_EQ(job.run.exitCode, 2) << command[1] << ": " << job.run.out << job.run.err;
    EXPECT_EQ(linesWith(job.run.err, fmt::format("bench {}: cannot write --json {}: give a path in a writable "
                                                 "directory", command[1], path))
                  .size(),
              1u)
        << job.run.err;
    EXPECT_TRUE(job.run.out.empty()) << command[1] << ": " << job.run.out;
    expectClean(job);
  }
  const std::string fresh = dir.path + "/fresh.json", kept = dir.path + "/kept.json";
  std::ofstream(kept) << "earlier rows\n";
  for (const std::string& path : {fresh, kept}) {
    Job failed = runJob({"--nprocs", "2", "--inject-fault", "rank=1,kind=crash,collective=3"},
                        {"bench", "allreduce", "--min-bytes", "4K", "--max-bytes", "4K", "--peers", "none", "--json", path});
    EXPECT_EQ(failed.run.exitCode, 137) << failed.run.out << failed.run.err;
    expectClean(failed);
  }
  EXPECT_FALSE(std::filesystem::exists(fresh));
  std::ifstream earlier(kept);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(earlier), {}), "earlier rows\n");
}

// The rows replace the file whole at the end: a write that fails then (here its temporary name
// is taken by a directory) says why, exits 1 and keeps the rows that were there.
TEST_F(LauncherTest, BenchJsonThatCannotBeReplacedKeepsTheEarlierRows) {
  TempDir dir("bench-json-kept");
  const std::string path = dir.path + "/rows.json";
  std::ofstream(path) << "earlier rows\n";
  std::filesystem::create_directory(path + ".tmp");
  Job job = runJob({"--nprocs", "2"}, {"bench", "barrier", "--iters", "10", "--repeats", "1", "--waits", "futex",
                                       "--json", path});
  EXPECT_EQ(job.run.exitCode, 1) << job.run.out << job.run.err;
  EXPECT_EQ(linesWith(job.run.err, fmt::format("bench barrier: writing --json {} failed (File exists); check its "
                                               "directory's free space and permissions",
                                               path))
                .size(),
            1u)
      << job.run.err;
  std::ifstream earlier(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(earlier), {}), "earlier rows\n");
  expectClean(job);
}

// In place in the shared heap, the warm-up goes round every rotated buffer (64 at 64 KiB) before
// the timing: the results stay right and the heap is released.
TEST_F(LauncherTest, BenchZeroCopyWarmsEveryRotatedBufferAndChecksOut) {
  Job job = runJob({"--nprocs", "2"}, {"bench", "allreduce", "--zero-copy", "--check", "--min-bytes", "64K",
                                       "--max-bytes", "256K", "--iters", "3", "--peers", "none"});
  ASSERT_EQ(job.run.exitCode, 0) << job.run.out << job.run.err;
  EXPECT_EQ(linesWith(job.run.out, "in-place buffers in the shared heap (zero-copy from 64K)").size(), 1u)
      << job.run.out;
  EXPECT_EQ(linesWith(job.run.out, "Out of bounds values : 0 OK").size(), 1u) << job.run.out;
  expectClean(job);
}

}  // namespace
}  // namespace xs::test
