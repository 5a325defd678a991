// train_checkpoint.cpp: atomic checkpoint directories (weights file + latest.json commit).
#include "train_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "xspawn/error.hpp"
#include "xspawn/engine/checkpoint.hpp"

namespace xs::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "latest.json";
constexpr const char* kFormat = "xspawn-train-checkpoint";

void syncPath(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  XS_CHECK(fd >= 0, UsageError, fmt::format("{}: cannot open to sync it: {}", p.string(), std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  XS_CHECK(rc == 0, UsageError, fmt::format("{}: fsync failed: {}; check the disk", p.string(), std::strerror(err)));
}

// Files of a save that a killed process left half written (a later save or a restart removes
// them; the committed checkpoint never refers to them).
void removePartialFiles(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool partialWeights = name.rfind("step-", 0) == 0 && name.size() > 11 && name.ends_with(".xsckpt.tmp");
    if (partialWeights || name == std::string(kLatest) + ".tmp") fs::remove(e.path(), ec);
  }
}

fs::path latestPath(const std::string& dirOrFile) {
  fs::path p(dirOrFile);
  std::error_code ec;
  return fs::is_directory(p, ec) ? p / kLatest : p;
}

// Writes the weights, then latest.json through a temporary file renamed over the old one.
void commit(const fs::path& d, const TrainState& s, engine::Model& model, optim::Optimizer& opt) {
  engine::saveCheckpoint((d / s.weights).string(), model, &opt);
  syncPath(d / s.weights, false);

  nlohmann::json j = {{"format", kFormat},          {"version", 1},
                      {"weights", s.weights},       {"epoch", s.epoch},
                      {"step", s.step},             {"sampler", {{"epoch", s.sampler.epoch}, {"position", s.sampler.position}}},
                      {"world_size", s.worldSize},  {"batch_size", s.batchSize},
                      {"model", s.model},           {"dataset", s.dataset},
                      {"seed", s.seed}};
  const fs::path tmp = d / (std::string(kLatest) + ".tmp");
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(2) << "\n";
    f.flush();
    XS_CHECK(f.good(), CheckpointError,
             fmt::format("{}: write failed; check free disk space (the previous checkpoint is intact)", tmp.string()));
  }
  syncPath(tmp, false);
  XS_CHECK(::rename(tmp.c_str(), (d / kLatest).c_str()) == 0, UsageError,
                 fmt::format("{}: cannot rename to {}: {}", tmp.string(), kLatest, std::strerror(errno)));
  syncPath(d, true);
}

}  // namespace

void saveTrainCheckpoint(const std::string& dir, engine::Model& model, optim::Optimizer& opt,
                         const TrainState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  XS_CHECK(!ec, UsageError, fmt::format("--checkpoint-dir {}: cannot create it: {}", dir, ec.message()));
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
    if (s.weights != previous) fs::remove(d / s.weights, ec);
    fs::remove(d / (std::string(kLatest) + ".tmp"), ec);
    throw;
  }
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
