// golden_util.hpp: reading the PyTorch fixtures in fixtures/ (written by
// scripts/make_engine_fixtures.py) and comparing engine results with them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xspawn/engine/device.hpp"

namespace xs::engine::golden {
using nlohmann::json;
using Vec = std::vector<float>;

inline const json& fixture(const std::string& file) {
  static std::map<std::string, json> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream f(std::string(XS_ENGINE_FIXTURES) + "/" + file);
    EXPECT_TRUE(f.good()) << "missing fixture " << file << ": run scripts/make_engine_fixtures.py";
    it = cache.emplace(file, json::parse(f)).first;
  }
  return it->second;
}

inline Vec vec(const json& j) { return j.get<Vec>(); }

// |got - want| <= rtol * |want| + atol * max(1, max |want|), element by element.
inline void expectClose(const std::string& what, const float* got, const Vec& want, double rtol = 1e-4,
                 double atol = 1e-5) {
  double scale = 1;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  int bad = 0;
  for (std::size_t i = 0; i < want.size() && bad < 5; ++i)
    if (!(std::fabs(got[i] - want[i]) <= rtol * std::fabs(want[i]) + atol * scale)) {
      ADD_FAILURE() << what << "[" << i << "]: engine " << got[i] << ", PyTorch " << want[i];
      ++bad;
    }
}

inline std::vector<int> dims(const json& j) { return j.get<std::vector<int>>(); }

inline DeviceOptions bf16Options() {
  DeviceOptions o;
  o.precision = Precision::kBf16;
  return o;
}

}  // namespace xs::engine::golden
