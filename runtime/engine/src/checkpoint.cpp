// checkpoint.cpp: the versioned, checksummed checkpoint file.
#include "xspawn/engine/checkpoint.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "file_replace.hpp"
#include "xspawn/error.hpp"

namespace xs::engine {
namespace {

constexpr char kMagic[8] = {'X', 'S', 'P', 'W', 'C', 'K', 'P', 'T'};

struct Section {
  std::string name;
  float* data;
  std::size_t floats;
};

std::vector<Section> sections(Model& m, optim::Optimizer* opt) {
  std::vector<Section> s{{"params", m.params().values(), m.params().size()},
                         {"buffers", m.buffers().values(), m.buffers().size()}};
  if (opt)
    for (auto& [name, t] : opt->state()) s.push_back({"optimizer." + name, t->data(), m.params().size()});
  return s;
}

nlohmann::json layout(Model& m) {
  nlohmann::json views = nlohmann::json::array();
  for (auto* store : {&m.params(), &m.buffers()})
    for (auto& v : store->views()) {
      std::vector<int> shape(v.shape.d.begin(), v.shape.d.begin() + v.shape.rank);
      views.push_back({{"name", v.name}, {"shape", shape}, {"offset", v.offset}});
    }
  return views;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(const std::string& in, std::size_t& pos, const std::string& path) {
  XS_CHECK(pos + sizeof(T) <= in.size(), CheckpointError,
           "checkpoint '" + path + "' is truncated: write it again");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

}  // namespace

void saveCheckpoint(const std::string& path, Model& model, optim::Optimizer* opt, const std::string& extra) {
  auto secs = sections(model, opt);
  nlohmann::json h = {{"model", model.name()},
                      {"input", {model.inputShape()[0], model.inputShape()[1], model.inputShape()[2]}},
                      {"num_classes", model.numClasses()},
                      {"optimizer", opt ? opt->kind() : ""},
                      {"lr", opt ? opt->lr() : 0.f},
                      {"steps", opt ? opt->steps() : 0},
                      {"views", layout(model)}};
  if (!extra.empty()) h["extra"] = extra;
  for (auto& s : secs) h["sections"].push_back({{"name", s.name}, {"floats", s.floats}});
  std::string header = h.dump(), out(kMagic, 8);
  put<std::uint32_t>(out, kCheckpointVersion);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(header.size()));
  out += header;
  for (auto& s : secs) out.append(reinterpret_cast<const char*>(s.data), s.floats * sizeof(float));
  put<std::uint32_t>(out, static_cast<std::uint32_t>(
                              crc32(0, reinterpret_cast<const Bytef*>(out.data()), out.size())));
  writeFileAtomically(path, out, "checkpoint");
}

void writeFileAtomically(const std::string& path, const std::string& bytes, const std::string& what) {
  const std::string tmp = xs::detail::replaceTempName(path);
  const xs::detail::ReplaceResult r = xs::detail::replaceFile(path, {bytes}, true);
  const std::string error = std::strerror(r.err);
  switch (r.step) {
    case xs::detail::ReplaceStep::kNone: return;
    case xs::detail::ReplaceStep::kCreate:
      XS_THROW(CheckpointError, "cannot write " + what + " '" + tmp + "' (" + error +
                                    "): check the directory exists and is writable");
    case xs::detail::ReplaceStep::kWrite:
      XS_THROW(CheckpointError, "writing " + what + " '" + tmp + "' failed (" + error +
                                    "): check free disk space and the file size limit (ulimit -f); the previous " +
                                    what + " is intact");
    case xs::detail::ReplaceStep::kRename:
      XS_THROW(CheckpointError, "cannot rename '" + tmp + "' to '" + path + "': " + error +
                                    "; check that nothing else has that name and the directory is writable (the "
                                    "previous " + what + " is intact)");
    case xs::detail::ReplaceStep::kSyncDir:
      XS_THROW(CheckpointError, "syncing directory '" + xs::detail::directoryOf(path) + "' of " + what + " '" +
                                    path + "' failed: " + error);
  }
}

std::string loadCheckpoint(const std::string& path, Model& model, optim::Optimizer* opt) {
  std::ifstream f(path, std::ios::binary);
  XS_CHECK(f, CheckpointError, "cannot open checkpoint '" + path + "': check the path");
  std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  XS_CHECK(in.size() >= 20 && std::memcmp(in.data(), kMagic, 8) == 0, CheckpointError,
           "'" + path + "' is not an xspawn checkpoint (bad magic)");
  std::uint32_t stored;
  std::memcpy(&stored, in.data() + in.size() - 4, 4);
  std::uint32_t actual = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(in.data()), in.size() - 4));
  std::size_t pos = 8;
  auto version = get<std::uint32_t>(in, pos, path);
  XS_CHECK(version == kCheckpointVersion, CheckpointError,
           "checkpoint '" + path + "' has format version " + std::to_string(version) +
               ", this build reads version " + std::to_string(kCheckpointVersion));
  XS_CHECK(stored == actual, CheckpointError,
           "checkpoint '" + path + "' is corrupt (CRC-32 mismatch): restore it from a good copy");
  auto hlen = get<std::uint32_t>(in, pos, path);
  XS_CHECK(pos + hlen <= in.size() - 4, CheckpointError, "checkpoint '" + path + "' is truncated");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(in.substr(pos, hlen));
  } catch (const std::exception& e) {
    XS_THROW(CheckpointError, "checkpoint '" + path + "' has an unreadable header: " + e.what());
  }
  pos += hlen;
  XS_CHECK(h.value("model", "") == model.name() && h["views"] == layout(model), CheckpointError,
           "checkpoint '" + path + "' holds a " + h.value("model", "?") +
               " whose layout differs from this " + model.name() + ": build the same model");
  std::string kind = opt ? opt->kind() : "";
  XS_CHECK(!opt || h.value("optimizer", "") == kind, CheckpointError,
           "checkpoint '" + path + "' holds '" + h.value("optimizer", "") +
               "' optimizer state, not '" + kind + "': use the same optimizer");
  auto secs = sections(model, opt);
  std::size_t need = 0;
  for (auto& s : secs) need += s.floats * sizeof(float);
  std::size_t avail = in.size() - 4 - pos;
  std::size_t offset = 0;
  std::vector<std::pair<Section, std::size_t>> plan;
  for (auto& js : h["sections"]) {
    std::size_t n = js.value("floats", std::size_t{0});
    for (auto& s : secs)
      if (s.name == js.value("name", "")) {
        XS_CHECK(n == s.floats, CheckpointError, "checkpoint '" + path + "': section " + s.name + " has the wrong size");
        plan.emplace_back(s, offset);
      }
    offset += n * sizeof(float);
  }
  XS_CHECK(offset == avail && plan.size() == secs.size() && need <= avail, CheckpointError,
           "checkpoint '" + path + "' lacks sections this model or optimizer needs");
  for (auto& [s, off] : plan) std::memcpy(s.data, in.data() + pos + off, s.floats * sizeof(float));
  if (opt) {
    opt->setLr(h.value("lr", opt->lr()));
    opt->setSteps(h.value("steps", std::uint64_t{0}));
  }
  return h.value("extra", std::string());
}

}  // namespace xs::engine
