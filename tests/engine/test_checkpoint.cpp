// test_checkpoint.cpp: save/load round trips and the clear errors of bad checkpoint files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "file_size_limit.hpp"
#include "test_util.hpp"
#include "xspawn/engine/checkpoint.hpp"
#include "xspawn/models.hpp"
#include "xspawn/error.hpp"

namespace xs::engine {
namespace {

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("xs_engine_ckpt_" + std::to_string(::getpid()) + ".bin")).string();
  }
  void TearDown() override { std::remove(path_.c_str()); }
  models::ModelConfig cfg(const std::string& name, std::uint64_t seed) {
    models::ModelConfig c;
    c.name = name;
    c.imageSize = name == "resnet18" ? 8 : 0;
    c.seed = seed;
    return c;
  }
  // One training step so parameters, running statistics and optimizer state are non-trivial.
  void train(Model& m, optim::Optimizer& opt) {
    Shape in = m.inputShape();
    auto x = test::pattern(4 * in.numel(), 3);
    std::vector<std::int32_t> y{0, 1, 2, 3};
    m.trainStep(x.data(), y.data(), 4);
    opt.step();
  }
  std::string path_;
  Device dev_;
};

TEST_F(Checkpoint, RoundTripIsBitExact) {
  Model a = test::build(dev_, cfg("resnet18", 1)), b = test::build(dev_, cfg("resnet18", 2));
  auto oa = optim::Adam(a.params(), dev_, optim::AdamOptions{});
  auto ob = optim::Adam(b.params(), dev_, optim::AdamOptions{});
  train(a, *oa);
  saveCheckpoint(path_, a, oa.get());
  loadCheckpoint(path_, b, ob.get());
  EXPECT_EQ(0, std::memcmp(a.params().values(), b.params().values(), a.params().size() * 4));
  EXPECT_EQ(0, std::memcmp(a.buffers().values(), b.buffers().values(), a.buffers().size() * 4));
  EXPECT_EQ(0, std::memcmp(oa->state()[1].second->data(), ob->state()[1].second->data(), a.params().size() * 4));
  EXPECT_EQ(ob->steps(), 1u);
}

TEST_F(Checkpoint, CorruptTruncatedAndForeignFilesAreClearErrors) {
  Model a = test::build(dev_, cfg("mlp", 1));
  auto opt = optim::SGD(a.params(), dev_, optim::SgdOptions{0.1f, 0.9f});
  train(a, *opt);
  saveCheckpoint(path_, a, opt.get());
  auto bytes = std::filesystem::file_size(path_);
  auto expectError = [&](const std::string& fragment) {
    try {
      loadCheckpoint(path_, a, opt.get());
      FAIL() << "expected CheckpointError containing '" << fragment << "'";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  {  // flip one byte in the data
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bytes / 2));
    f.put('\x5a');
  }
  expectError("CRC-32");
  std::filesystem::resize_file(path_, bytes / 3);
  expectError("CRC-32");
  {
    std::ofstream f(path_, std::ios::binary | std::ios::trunc);
    f << "not a checkpoint at all, just text";
  }
  expectError("bad magic");
  std::remove(path_.c_str());
  expectError("cannot open");
  // A different model, or a different optimizer.
  Model conv = test::build(dev_, cfg("convnet", 1));
  saveCheckpoint(path_, conv, nullptr);
  expectError("layout differs");
  saveCheckpoint(path_, a, nullptr);
  auto adam = optim::Adam(a.params(), dev_, optim::AdamOptions{});
  EXPECT_THROW(loadCheckpoint(path_, a, adam.get()), CheckpointError);
  EXPECT_NO_THROW(loadCheckpoint(path_, a, nullptr));
}

TEST_F(Checkpoint, SaveLeavesNoTemporaryAndMissingDirectoryIsAClearError) {
  Model a = test::build(dev_, cfg("mlp", 1));
  saveCheckpoint(path_, a, nullptr);  // written, fsynced, renamed, directory fsynced
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
  EXPECT_NO_THROW(loadCheckpoint(path_, a, nullptr));
  std::string missing = path_ + ".no-such-dir/ckpt.bin";
  try {
    saveCheckpoint(missing, a, nullptr);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("check the directory exists"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoint, FailedWriteRemovesItsTemporaryAndKeepsThePrevious) {
  Model a = test::build(dev_, cfg("mlp", 1));
  auto opt = optim::SGD(a.params(), dev_, optim::SgdOptions{0.1f, 0.9f});
  train(a, *opt);
  saveCheckpoint(path_, a, opt.get());
  const std::vector<float> saved(a.params().values(), a.params().values() + a.params().size());
  const auto bytes = std::filesystem::file_size(path_);
  train(a, *opt);
  // A disk that fills up half way through the next save.
  const fsize::LimitedRun run = fsize::underFileSizeLimit(bytes / 2, [&] { saveCheckpoint(path_, a, opt.get()); });
  EXPECT_EQ(run.kind, "CheckpointError") << run.message;
  EXPECT_NE(run.message.find("writing checkpoint '" + path_ + ".tmp' failed (File too large): check free disk space "
                             "and the file size limit (ulimit -f); the previous checkpoint is intact"),
            std::string::npos) << run.message;
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
  EXPECT_EQ(std::filesystem::file_size(path_), bytes);
  loadCheckpoint(path_, a, opt.get());
  EXPECT_EQ(0, std::memcmp(a.params().values(), saved.data(), saved.size() * sizeof(float)));
}

TEST_F(Checkpoint, OtherVersionIsRejected) {
  Model a = test::build(dev_, cfg("mlp", 1));
  saveCheckpoint(path_, a, nullptr);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    std::uint32_t v = 99;
    f.write(reinterpret_cast<const char*>(&v), 4);
  }
  try {
    loadCheckpoint(path_, a, nullptr);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("version 99"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xs::engine
