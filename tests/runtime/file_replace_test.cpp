// file_replace_test.cpp: replacing a file whole (report.json, the trace, checkpoints): the
// old or the new contents and never a temporary file left, whether the write fails or the
// writer is killed in the middle of it.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "file_replace.hpp"
#include "process_runner.hpp"

namespace xs::test {
namespace {

namespace fs = std::filesystem;
using detail::ReplaceResult;
using detail::ReplaceStep;
using detail::replaceFile;

class FileReplace : public ::testing::Test {
 protected:
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }

  TempDir temp_{"file-replace"};
  fs::path dir_ = temp_.path;
  std::string path_ = (dir_ / "report.json").string();
};

TEST_F(FileReplace, NewContentsReplaceTheOldAndAStaleTemporaryIsRemoved) {
  ASSERT_TRUE(replaceFile(path_, {"old"}));
  // What a writer killed between naming its file and the rename leaves.
  std::ofstream(detail::replaceTempName(path_)) << "half of a repo";
  const ReplaceResult r = replaceFile(path_, {"{\"a\":", "1}", "\n"}, true);
  EXPECT_TRUE(r) << r.err;
  EXPECT_EQ(readFile(path_), "{\"a\":1}\n");
  EXPECT_EQ(names(), std::vector<std::string>{"report.json"});
}

TEST_F(FileReplace, EachFailingStepIsNamedAndLeavesTheOldFileAndNoTemporary) {
  ReplaceResult r = replaceFile((dir_ / "missing" / "report.json").string(), {"x"});
  EXPECT_EQ(r.step, ReplaceStep::kCreate);
  EXPECT_EQ(r.err, ENOENT);

  fs::create_directory(dir_ / "taken.json");  // a directory where the file should go
  r = replaceFile((dir_ / "taken.json").string(), {"x"});
  EXPECT_EQ(r.step, ReplaceStep::kRename);
  EXPECT_EQ(r.err, EISDIR);
  EXPECT_TRUE(fs::is_directory(dir_ / "taken.json"));
  fs::remove(dir_ / "taken.json");

  ASSERT_TRUE(replaceFile(path_, {"old"}));
  const pid_t child = ::fork();
  if (child == 0) {  // a file size limit, as a full disk: the write fails with EFBIG
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{1000, 1000};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    r = replaceFile(path_, {std::string(5000, 'x')});
    ::_exit(r.step == ReplaceStep::kWrite && r.err == EFBIG ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(readFile(path_), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"report.json"});
}

TEST_F(FileReplace, AProbeSaysWhetherTheFileCanBeWrittenAndLeavesNothing) {
  EXPECT_EQ(detail::probeReplaceable(path_), 0);
  EXPECT_TRUE(names().empty());
  EXPECT_EQ(detail::probeReplaceable((dir_ / "missing" / "trace.json").string()), ENOENT);
}

TEST_F(FileReplace, AWriterKilledInTheMiddleLeavesTheOldFileAndNothingElse) {
  ASSERT_TRUE(replaceFile(path_, {"old"}));
  const pid_t child = ::fork();
  if (child == 0) {  // SIGXFSZ's default action kills the writer at the limit, mid-write
    rlimit limit{1 << 16, 1 << 16}, noCore{0, 0};
    ::setrlimit(RLIMIT_CORE, &noCore);
    ::setrlimit(RLIMIT_FSIZE, &limit);
    replaceFile(path_, {std::string(1 << 20, 'x')});
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << status;
  EXPECT_EQ(readFile(path_), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"report.json"});
}

}  // namespace
}  // namespace xs::test
