// train_error.cpp: turning any exception into the one line the user sees.
#include "train_error.hpp"

#include <regex>

#include "xspawn/data/error.h"

namespace xs::train {

std::string userMessage(const std::exception& e) {
  if (auto* d = dynamic_cast<const data::DataError*>(&e)) return d->message();
  static const std::regex location(R"( (\[[^\]]+:\d+\]|\([^()]+:\d+\))$)");
  return std::regex_replace(std::string(e.what()), location, "");
}

}  // namespace xs::train
