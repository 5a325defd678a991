// checkpoint_test.cpp: checkpoints are committed atomically and --resume continues to the very
// weights of an uninterrupted run, bit for bit (mid-epoch and at an epoch boundary).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../engine/file_size_limit.hpp"
#include "train_checkpoint.hpp"
#include "train_test_util.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/models.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/error.hpp"
#include "xspawn/optim.hpp"

namespace xs::train::test {
namespace {
namespace fs = std::filesystem;

const std::string kRun = "--nprocs 2 -q train --model mlp --dataset synthetic --train-size 1024 --test-size 256 "
                         "--optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 32 --epochs 2 --eval-every 0 ";

std::vector<std::string> filesIn(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TrainCheckpoint, ResumeGivesTheUninterruptedWeights) {
  fs::path dir = freshDir("resume");
  CommandResult full = runXspawn(kRun + "--metrics " + (dir / "full.jsonl").string());
  ASSERT_EQ(full.status, 0) << full.err;
  for (int stopAt : {5, 16, 21}) {  // 16 steps per epoch: mid-epoch, the boundary, epoch 2
    SCOPED_TRACE(stopAt);
    fs::path ck = dir / ("ck" + std::to_string(stopAt));
    CommandResult part = runXspawn(kRun + "--max-steps " + std::to_string(stopAt) + " --checkpoint-dir " + ck.string());
    ASSERT_EQ(part.status, 0) << part.err;
    EXPECT_EQ(readTrainState(ck.string()).step, stopAt);
    fs::path m = dir / ("resumed" + std::to_string(stopAt) + ".jsonl");
    CommandResult rest = runXspawn(kRun + "--resume " + ck.string() + " --checkpoint-dir " + ck.string() + " --metrics " + m.string());
    ASSERT_EQ(rest.status, 0) << rest.err;
    EXPECT_NE(rest.out.find("resumed from"), std::string::npos);
    EXPECT_EQ(summaryHash(m), summaryHash(dir / "full.jsonl"));
    EXPECT_EQ(readTrainState(ck.string()).step, 32);
  }
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, ResumeOfADropoutModelContinuesTheMaskSequence) {
  // AlexNet's dropout masks come from (seed, step): a resumed run must draw the masks the
  // uninterrupted run drew at the same steps, or the weights differ.
  const std::string run = "--nprocs 2 -q train --model alexnet --image-size 63 --dataset synthetic --train-size 64 "
                          "--test-size 16 --optimizer sgd --lr 0.01 --batch-size 4 --epochs 1 --eval-every 0 ";
  fs::path dir = freshDir("resume-dropout");
  CommandResult full = runXspawn(run + "--metrics " + (dir / "full.jsonl").string());
  ASSERT_EQ(full.status, 0) << full.err;
  fs::path ck = dir / "ck";
  CommandResult part = runXspawn(run + "--max-steps 3 --checkpoint-dir " + ck.string());
  ASSERT_EQ(part.status, 0) << part.err;
  CommandResult rest = runXspawn(run + "--resume " + ck.string() + " --metrics " + (dir / "resumed.jsonl").string());
  ASSERT_EQ(rest.status, 0) << rest.err;
  EXPECT_EQ(summaryHash(dir / "resumed.jsonl"), summaryHash(dir / "full.jsonl"));
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, ResumeWithOtherWorldSizeIsAClearError) {
  fs::path dir = freshDir("resume-world");
  ASSERT_EQ(runXspawn(kRun + "--max-steps 3 --checkpoint-dir " + dir.string()).status, 0);
  std::string args = kRun + "--resume " + dir.string();
  args.replace(args.find("--nprocs 2"), 10, "--nprocs 3");
  CommandResult r = runXspawn(args);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("resume with --nprocs 2"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, DirectoryHoldsOneCommittedCheckpoint) {
  fs::path dir = freshDir("layout");
  ASSERT_EQ(runXspawn(kRun + "--checkpoint-dir " + dir.string()).status, 0);
  // After two epochs (two commits) only the last weights file is left, and no temporary file.
  EXPECT_EQ(filesIn(dir), (std::vector<std::string>{"latest.json", "step-00000032.xsckpt"}));
  TrainState s = readTrainState(dir.string());
  EXPECT_EQ(s.step, 32);
  EXPECT_EQ(s.sampler.epoch, 2);
  EXPECT_EQ(s.sampler.position, 0);
  EXPECT_EQ(s.worldSize, 2);
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, InterruptedWriteKeepsThePreviousCheckpoint) {
  fs::path dir = freshDir("atomic");
  engine::Device dev;
  models::ModelConfig cfg;
  cfg.name = "mlp";
  engine::Model model(dev, models::network(cfg), (cfg).seed);
  auto opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.1f, 0.9f});
  TrainState st;
  st.step = 7;
  st.model = "mlp";
  saveTrainCheckpoint(dir.string(), model, *opt, st);
  // A writer that died before its commit leaves a temporary state file and a weights file
  // that latest.json does not name: the committed checkpoint is still the one read.
  std::ofstream(dir / "latest.json.tmp") << "{\"format\": \"xspawn-train-checkp";
  std::ofstream(dir / "step-00000009.xsckpt") << "partial";
  EXPECT_EQ(readTrainState(dir.string()).step, 7);
  const float first = model.params().values()[0];
  model.params().values()[0] = 42.f;
  loadTrainCheckpoint(dir.string(), model, *opt);
  EXPECT_EQ(model.params().values()[0], first);
  // The next commit replaces the state and removes the weights it superseded.
  st.step = 8;
  saveTrainCheckpoint(dir.string(), model, *opt, st);
  EXPECT_EQ(readTrainState(dir.string()).step, 8);
  EXPECT_FALSE(fs::exists(dir / "step-00000007.xsckpt"));
  EXPECT_FALSE(fs::exists(dir / "latest.json.tmp"));
  fs::remove_all(dir);
}

// A small model and its optimizer, with a committed checkpoint at step 7 in dir.
struct SavedModel {
  explicit SavedModel(const fs::path& where) : dir(where), model(dev, models::network(config()), config().seed) {
    state.step = 7;
    state.model = "mlp";
    saveTrainCheckpoint(dir.string(), model, *opt, state);
    weights.assign(model.params().values(), model.params().values() + model.params().size());
    model.params().values()[0] += 1.f;  // the next save writes other weights
  }
  static models::ModelConfig config() {
    models::ModelConfig cfg;
    cfg.name = "mlp";
    return cfg;
  }
  // The committed checkpoint is still step 7's, and it loads.
  void expectStep7Intact() {
    EXPECT_EQ(readTrainState(dir.string()).step, 7);
    loadTrainCheckpoint(dir.string(), model, *opt);
    EXPECT_EQ(std::vector<float>(model.params().values(), model.params().values() + model.params().size()), weights);
  }
  fs::path dir;
  engine::Device dev;
  engine::Model model;
  std::unique_ptr<optim::Optimizer> opt = optim::SGD(model.params(), dev, optim::SgdOptions{0.1f, 0.9f});
  TrainState state;
  std::vector<float> weights;
};

TEST(TrainCheckpoint, FailedWeightsWriteLeavesNoPartialFileAndKeepsThePrevious) {
  fs::path dir = freshDir("disk-full-weights");
  SavedModel saved(dir);
  // A full disk, as a child process sees it: writes past 64 KiB fail with EFBIG.
  saved.state.step = 9;
  const fsize::LimitedRun run =
      fsize::underFileSizeLimit(64 << 10, [&] { saveTrainCheckpoint(dir.string(), saved.model, *saved.opt, saved.state); });
  EXPECT_EQ(run.kind, "CheckpointError") << run.message;
  EXPECT_NE(run.message.find("writing checkpoint '" + (dir / "step-00000009.xsckpt.tmp").string() +
                             "' failed (File too large): check free disk space and the file size limit (ulimit -f); "
                             "the previous checkpoint is intact"),
            std::string::npos) << run.message;
  EXPECT_EQ(filesIn(dir), (std::vector<std::string>{"latest.json", "step-00000007.xsckpt"}));
  saved.expectStep7Intact();
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, FailedStateWriteLeavesNoPartialFileAndKeepsThePrevious) {
  fs::path dir = freshDir("disk-full-state");
  SavedModel saved(dir);
  // The weights fit under the limit, latest.json (made long by a long dataset name) does not.
  const std::uintmax_t limit = fs::file_size(dir / "step-00000007.xsckpt") + 4096;
  saved.state.step = 9;
  saved.state.dataset = std::string(limit, 'd');
  const fsize::LimitedRun run =
      fsize::underFileSizeLimit(limit, [&] { saveTrainCheckpoint(dir.string(), saved.model, *saved.opt, saved.state); });
  EXPECT_EQ(run.kind, "CheckpointError") << run.message;
  EXPECT_NE(run.message.find("writing checkpoint state '" + (dir / "latest.json.tmp").string() + "' failed (File too large): "
                             "check free disk space and the file size limit (ulimit -f); the previous checkpoint state is intact"),
            std::string::npos) << run.message;
  EXPECT_EQ(filesIn(dir), (std::vector<std::string>{"latest.json", "step-00000007.xsckpt"}));
  saved.expectStep7Intact();
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, ASaveRemovesExactlyThePartialFilesOfAKilledSave) {
  fs::path dir = freshDir("partial-files");
  SavedModel saved(dir);
  // What a save killed mid-write leaves: removed by the next save.
  std::ofstream(dir / "step-00000010.xsckpt.tmp") << "partial";
  std::ofstream(dir / "latest.json.tmp") << "{";
  // Anything else stays: other names, and a directory of a partial file's name.
  const std::vector<std::string> others = {"latest.json.tmp.bak", "my-latest.json.tmp", "notes-step-1.xsckpt.tmp",
                                           "step-00000010.xsckpt.tmp.keep", "step-00000012.xsckpt"};
  for (const std::string& name : others) std::ofstream(dir / name) << "keep";
  fs::create_directory(dir / "step-00000013.xsckpt.tmp");
  saved.state.step = 11;
  saveTrainCheckpoint(dir.string(), saved.model, *saved.opt, saved.state);
  std::vector<std::string> want = others;
  want.insert(want.end(), {"latest.json", "step-00000011.xsckpt", "step-00000013.xsckpt.tmp"});
  std::sort(want.begin(), want.end());
  EXPECT_EQ(filesIn(dir), want);
  EXPECT_EQ(readTrainState(dir.string()).step, 11);
  fs::remove_all(dir);
}

TEST(TrainCheckpoint, CorruptStateIsAClearError) {
  fs::path dir = freshDir("corrupt-state");
  std::ofstream(dir / "latest.json") << "{not json";
  EXPECT_THROW(readTrainState(dir.string()), std::exception);
  CommandResult r = runXspawn(kRun + "--resume " + dir.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unreadable checkpoint state"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xs::train::test
