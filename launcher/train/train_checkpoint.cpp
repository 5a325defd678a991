// train_checkpoint.cpp: atomic checkpoint directories (weights file + latest.json commit).
#include "train_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "xspawn/error.hpp"
#include "xspawn/engine/checkpoint.hpp"

namespace xs::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "latest.json";
constexpr const char* kLatestTmp = "latest.json.tmp";
constexpr const char* kFormat = "xspawn-train-checkpoint";

void syncPath(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  XS_CHECK(fd >= 0, CheckpointError,
           fmt::format("{}: cannot open it to fsync it ({}); check the checkpoint directory", p.string(), std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  XS_CHECK(rc == 0, CheckpointError, fmt::format("{}: fsync failed ({}); check the disk", p.string(), std::strerror(err)));
}

// A save's files before its commit: step-*.xsckpt.tmp (the engine's) and latest.json.tmp.
bool isPartialFile(const std::string& name) {
  constexpr std::string_view kPrefix = "step-", kSuffix = ".xsckpt.tmp";
  const bool weights = name.size() >= kPrefix.size() + kSuffix.size() && name.starts_with(kPrefix) && name.ends_with(kSuffix);
  return weights || name == kLatestTmp;
}

void removeRegularFile(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(fs::symlink_status(p, ec))) fs::remove(p, ec);
}

// Files of a save that a killed process left half written (the committed checkpoint never
// refers to them): regular files of exactly those names, nothing else.
void removePartialFiles(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> partial;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (isPartialFile(e.path().filename().string())) partial.push_back(e.path());
  for (const fs::path& p : partial) removeRegularFile(p);
}

fs::path latestPath(const std::string& dirOrFile) {
  fs::path p(dirOrFile);
  std::error_code ec;
  return fs::is_directory(p, ec) ? p / kLatest : p;
}

std::string stateText(const TrainState& s) {
  nlohmann::json j = {{"format", kFormat},          {"version", 1},
                      {"weights", s.weights},       {"epoch", s.epoch},
                      {"step", s.step},             {"sampler", {{"epoch", s.sampler.epoch}, {"position", s.sampler.position}}},
                      {"world_size", s.worldSize},  {"batch_size", s.batchSize},
                      {"model", s.model},           {"dataset", s.dataset},
                      {"seed", s.seed}};
  return j.dump(2) + "\n";
}

// Everything up to the commit point: the weights, then latest.json (the commit), each written
// atomically and durably by the engine (engine::writeFileAtomically).
void commit(const fs::path& d, const TrainState& s, engine::Model& model, optim::Optimizer& opt) {
  engine::saveCheckpoint((d / s.weights).string(), model, &opt);
  engine::writeFileAtomically((d / kLatest).string(), stateText(s), "checkpoint state");
}

}  // namespace

void saveTrainCheckpoint(const std::string& dir, engine::Model& model, optim::Optimizer& opt,
                         const TrainState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  XS_CHECK(!ec, UsageError, fmt::format("--checkpoint-dir {}: cannot create it: {}; give a directory that can be created "
                                        "and written", dir, ec.message()));
  const fs::path d(dir);
  removePartialFiles(d);
  TrainState s = state;
  s.weights = fmt::format("step-{:08d}.xsckpt", state.step);
  std::string previous;
  try {
    previous = readTrainState(dir).weights;
  } catch (const std::exception&) {
  }
  try {
    commit(d, s, model, opt);
  } catch (...) {
    // Nothing of a failed save stays behind; latest.json still names the previous checkpoint.
    if (s.weights != previous) removeRegularFile(d / s.weights);
    removeRegularFile(d / kLatestTmp);
    throw;
  }
  // Committed: latest.json names the new weights. Should the directory's fsync fail, the
  // previous weights stay too (a crash could bring the old latest.json back).
  syncPath(d, true);
  if (!previous.empty() && previous != s.weights) fs::remove(d / previous, ec);
}

TrainState readTrainState(const std::string& dirOrFile) {
  const fs::path p = latestPath(dirOrFile);
  std::ifstream f(p);
  XS_CHECK(f, UsageError, fmt::format("--resume {}: no checkpoint there ({} not found); give a --checkpoint-dir of an earlier run",
                                dirOrFile, p.string()));
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    XS_THROW(UsageError, fmt::format("{}: unreadable checkpoint state ({}); resume from another checkpoint", p.string(), e.what()));
  }
  XS_CHECK(j.value("format", "") == kFormat, UsageError,
                 fmt::format("{}: not an xspawn training checkpoint; give the directory written by --checkpoint-dir", p.string()));
  TrainState s;
  try {
    s.epoch = j.at("epoch").get<std::int64_t>();
    s.step = j.at("step").get<std::int64_t>();
    s.sampler.epoch = j.at("sampler").at("epoch").get<std::int64_t>();
    s.sampler.position = j.at("sampler").at("position").get<std::int64_t>();
    s.worldSize = j.at("world_size").get<int>();
    s.batchSize = j.at("batch_size").get<int>();
    s.model = j.at("model").get<std::string>();
    s.dataset = j.at("dataset").get<std::string>();
    s.seed = j.at("seed").get<std::uint64_t>();
    s.weights = j.at("weights").get<std::string>();
  } catch (const std::exception& e) {
    XS_THROW(UsageError, fmt::format("{}: incomplete checkpoint state ({}); resume from another checkpoint", p.string(), e.what()));
  }
  std::error_code ec;
  XS_CHECK(fs::is_regular_file(p.parent_path() / s.weights, ec), UsageError,
                 fmt::format("{}: its weights file {} is missing; resume from another checkpoint", p.string(), s.weights));
  return s;
}

TrainState loadTrainCheckpoint(const std::string& dirOrFile, engine::Model& model, optim::Optimizer& opt) {
  TrainState s = readTrainState(dirOrFile);
  engine::loadCheckpoint((latestPath(dirOrFile).parent_path() / s.weights).string(), model, &opt);
  return s;
}

}  // namespace xs::train
