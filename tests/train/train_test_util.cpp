// train_test_util.cpp: see train_test_util.hpp.
#include "train_test_util.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

namespace xs::train::test {
namespace fs = std::filesystem;
namespace {

std::string readAll(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void put32(std::ofstream& f, std::uint32_t v) {
  unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                        static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  f.write(reinterpret_cast<char*>(b), 4);
}

void writeSplit(const fs::path& dir, const std::string& prefix, int count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream images(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  std::ofstream labels(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  put32(images, 0x803), put32(images, count), put32(images, 28), put32(images, 28);
  put32(labels, 0x801), put32(labels, count);
  std::vector<unsigned char> img(28 * 28);
  for (int i = 0; i < count; ++i) {
    int label = static_cast<int>(rng() % 10);
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        bool bar = label < 5 ? (y >= 2 + 5 * label && y < 5 + 5 * label) : (x >= 2 + 5 * (label - 5) && x < 5 + 5 * (label - 5));
        int v = (bar ? 200 : 30) + static_cast<int>(rng() % 40);
        img[y * 28 + x] = static_cast<unsigned char>(v);
      }
    images.write(reinterpret_cast<char*>(img.data()), img.size());
    char l = static_cast<char>(label);
    labels.write(&l, 1);
  }
}

// Class k: stripes 2 pixels wide, horizontal for k < 5 and vertical otherwise, in colour k % 5,
// on a grey background, plus uniform noise of +-40: the class survives random crops and flips.
void writeCifarBatch(const fs::path& file, int count, std::uint32_t seed) {
  static const int kColours[5][3] = {{220, 40, 40}, {40, 220, 40}, {40, 40, 220}, {220, 220, 40}, {40, 220, 220}};
  std::mt19937 rng(seed);
  std::ofstream f(file, std::ios::binary);
  std::vector<unsigned char> rec(3073);
  for (int i = 0; i < count; ++i) {
    int label = static_cast<int>(rng() % 10);
    rec[0] = static_cast<unsigned char>(label);
    const int* colour = kColours[label % 5];
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) {
          bool stripe = ((label < 5 ? y : x) / 2) % 2 == 0;
          int v = (stripe ? colour[c] : 110) + static_cast<int>(rng() % 81) - 40;
          rec[1 + c * 1024 + y * 32 + x] = static_cast<unsigned char>(std::clamp(v, 0, 255));
        }
    f.write(reinterpret_cast<char*>(rec.data()), rec.size());
  }
}

}  // namespace

void writeCifarDataset(const fs::path& dir, int perBatch, int testCount) {
  fs::create_directories(dir);
  for (int b = 1; b <= 5; ++b) writeCifarBatch(dir / ("data_batch_" + std::to_string(b) + ".bin"), perBatch, 10 + b);
  writeCifarBatch(dir / "test_batch.bin", testCount, 99);
}

CommandResult runXspawn(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("xspawn-train-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = std::string(XSPAWN_BIN) + " " + args + " >" + out.string() + " 2>" + err.string() + " </dev/null";
  int rc = std::system(cmd.c_str());
  CommandResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.out = readAll(out);
  r.err = readAll(err);
  fs::remove_all(dir);
  return r;
}

namespace {

// The test program itself (set before main, so before any test forks a worker).
const pid_t kTestProgram = ::getpid();

// Every directory the test program's freshDir made, removed again when it ends, so that a
// test stopped by a failed ASSERT before its own clean-up leaves nothing under /tmp. Not by a
// worker a test forked: it ends with the same static objects.
struct MadeDirs {
  std::mutex mutex;
  std::vector<fs::path> paths;
  ~MadeDirs() {
    if (::getpid() != kTestProgram) return;
    std::error_code ec;
    for (const fs::path& p : paths) fs::remove_all(p, ec);
  }
};
MadeDirs& madeDirs() {
  static MadeDirs dirs;
  return dirs;
}

}  // namespace

fs::path freshDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("xspawn-train-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  if (::getpid() != kTestProgram) return p;
  MadeDirs& made = madeDirs();
  std::lock_guard lock(made.mutex);
  if (std::find(made.paths.begin(), made.paths.end(), p) == made.paths.end()) made.paths.push_back(p);
  return p;
}

void writeIdxDataset(const fs::path& dir, int trainCount, int testCount) {
  fs::create_directories(dir);
  writeSplit(dir, "train", trainCount, 1);
  writeSplit(dir, "t10k", testCount, 2);
}

std::vector<nlohmann::json> metricLines(const fs::path& file, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

std::string summaryHash(const fs::path& metrics) {
  auto s = metricLines(metrics, "summary");
  return s.empty() ? "" : s.back()["weights_hash"].get<std::string>();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);) out.push_back(l);
  return out;
}

}  // namespace xs::train::test
