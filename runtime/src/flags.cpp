// flags.cpp: Flags' length-prefixed text form ("<klen>:<key><vlen>:<value>..."), so any bytes
// survive the trip through an environment variable to exec'd workers.
#include "xspawn/flags.hpp"

#include <string>

#include "flags_text.hpp"

namespace xs {

std::string detail::serializeFlags(const Flags& flags) {
  std::string out;
  for (const auto& [k, v] : flags.values()) {
    out += std::to_string(k.size()) + ":" + k + std::to_string(v.size()) + ":" + v;
  }
  return out;
}

Flags detail::deserializeFlags(std::string_view text) {
  Flags flags;
  std::size_t pos = 0;
  auto field = [&](std::string& out) {
    std::size_t colon = text.find(':', pos);
    if (colon == std::string_view::npos) XS_THROW(UsageError, "malformed XSPAWN_FLAGS");
    std::size_t n = std::stoul(std::string(text.substr(pos, colon - pos)));
    if (colon + 1 + n > text.size()) XS_THROW(UsageError, "malformed XSPAWN_FLAGS");
    out = std::string(text.substr(colon + 1, n));
    pos = colon + 1 + n;
  };
  while (pos < text.size()) {
    std::string k, v;
    field(k);
    field(v);
    flags.set(std::move(k), std::move(v));
  }
  return flags;
}

Flags Flags::fromArgs(int argc, const char* const* argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const bool dashed = arg.rfind("--", 0) == 0;
    if (dashed) arg = arg.substr(2);
    const std::size_t eq = arg.find('=');
    if (eq != std::string::npos && eq > 0) {
      flags.set(arg.substr(0, eq), arg.substr(eq + 1));
    } else if (dashed && !arg.empty()) {
      const bool hasValue = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0;
      flags.set(arg, hasValue ? std::string(argv[++i]) : std::string("1"));
    } else {
      XS_THROW(UsageError, "argument " + std::to_string(i) + " '" + std::string(argv[i]) +
                               "' is not an option: write --key value, --key=value or key=value");
    }
  }
  return flags;
}

}  // namespace xs
