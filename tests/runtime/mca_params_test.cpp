// mca_params_test.cpp: the launcher's own Open MPI parameters yield to the user's, whether
// set in the environment (or with mpirun --mca) or in a parameter file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "mca_params.hpp"
#include "process_runner.hpp"

namespace xs::test {
namespace {

namespace fs = std::filesystem;
using detail::mcaParamFileSetting;
using detail::mcaParamFiles;
using detail::preferMcaParam;

constexpr const char* kParam = "coll_libnbc_iallreduce_algorithm";
constexpr const char* kVar = "OMPI_MCA_coll_libnbc_iallreduce_algorithm";

// Sets (or unsets) environment variables for one test and puts them back after it.
class Env {
 public:
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ~Env() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

TEST(McaParams, TheLauncherSetsItsValueOnlyWhereTheUserSetNone) {
  TempDir home("mca-home");
  Env env;
  env.set("HOME", home.path);
  env.set("OMPI_MCA_mca_base_param_files", std::nullopt);
  env.set("OMPI_MCA_mca_param_files", std::nullopt);
  env.set("OPAL_SYSCONFDIR", home.path + "/etc");  // no system-wide file of this machine's
  env.set(kVar, std::nullopt);
  EXPECT_EQ(mcaParamFiles(), (std::vector<std::string>{home.path + "/.openmpi/mca-params.conf",
                                                       home.path + "/etc/openmpi-mca-params.conf"}));

  // Nobody set it: the launcher's value.
  EXPECT_TRUE(preferMcaParam(kParam, "1"));
  EXPECT_STREQ(std::getenv(kVar), "1");

  // Set in the environment (mpirun --mca does that): kept.
  env.set(kVar, "2");
  EXPECT_FALSE(preferMcaParam(kParam, "1"));
  EXPECT_STREQ(std::getenv(kVar), "2");

  // Commented out, or another parameter whose name starts the same: not a setting.
  env.set(kVar, std::nullopt);
  write(home.path + "/.openmpi/mca-params.conf",
        std::string("# ") + kParam + " = 3\n" + kParam + "_segsize = 4\nbtl = self,vader\n");
  EXPECT_FALSE(mcaParamFileSetting(kParam));
  EXPECT_TRUE(preferMcaParam(kParam, "1"));

  // In the user's file, with spaces and a comment after it: kept (no variable to override it).
  env.set(kVar, std::nullopt);
  write(home.path + "/.openmpi/mca-params.conf", std::string("  ") + kParam + "=2   # mine\n");
  ASSERT_TRUE(mcaParamFileSetting(kParam));
  EXPECT_EQ(mcaParamFileSetting(kParam)->file, home.path + "/.openmpi/mca-params.conf");
  EXPECT_EQ(mcaParamFileSetting(kParam)->value, "2");
  EXPECT_FALSE(preferMcaParam(kParam, "1"));
  EXPECT_EQ(std::getenv(kVar), nullptr);

  // In the system-wide file (Open MPI's sysconfdir, as relocated).
  fs::remove(home.path + "/.openmpi/mca-params.conf");
  write(home.path + "/etc/openmpi-mca-params.conf", std::string(kParam) + " = 0\n");
  ASSERT_TRUE(mcaParamFileSetting(kParam));
  EXPECT_EQ(mcaParamFileSetting(kParam)->file, home.path + "/etc/openmpi-mca-params.conf");
  EXPECT_EQ(mcaParamFileSetting(kParam)->value, "0");
  EXPECT_FALSE(preferMcaParam(kParam, "1"));
}

TEST(McaParams, FilesNamedByMcaBaseParamFilesReplaceTheDefaultOnes) {
  TempDir dir("mca-files");
  Env env;
  env.set("HOME", dir.path);
  env.set(kVar, std::nullopt);
  write(dir.path + "/.openmpi/mca-params.conf", std::string(kParam) + " = 2\n");  // not read now
  write(dir.path + "/b.conf", std::string(kParam) + " = 5\n");
  env.set("OMPI_MCA_mca_base_param_files", dir.path + "/a.conf," + dir.path + "/b.conf");
  EXPECT_EQ(mcaParamFiles(), (std::vector<std::string>{dir.path + "/a.conf", dir.path + "/b.conf"}));
  ASSERT_TRUE(mcaParamFileSetting(kParam));
  EXPECT_EQ(mcaParamFileSetting(kParam)->file, dir.path + "/b.conf");
  EXPECT_FALSE(preferMcaParam(kParam, "1"));
  fs::remove(dir.path + "/b.conf");
  EXPECT_FALSE(mcaParamFileSetting(kParam));
  EXPECT_TRUE(preferMcaParam(kParam, "1"));
  EXPECT_STREQ(std::getenv(kVar), "1");
}

}  // namespace
}  // namespace xs::test
