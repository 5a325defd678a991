// flags.hpp: xs::Flags, the settings every worker function receives (the `flags` dict of
// torch_xla's xmp.spawn examples): string keys, values read back as typed settings.
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include "xspawn/error.hpp"

namespace xs {

// String keys and values; set() chains; get<T>() converts.
class Flags {
 public:
  Flags() = default;
  // Sets `key` (replacing a value it had); the second form writes `value` with operator<<.
  Flags& set(std::string key, std::string value) {
    values_[std::move(key)] = std::move(value);
    return *this;
  }
  template <class T>
  Flags& set(std::string key, const T& value) {
    std::ostringstream out;
    out << value;
    return set(std::move(key), out.str());
  }
  // Whether `key` was set.
  bool has(std::string_view key) const { return values_.find(std::string(key)) != values_.end(); }
  // The value of `key` converted to T, or `fallback` when absent; a value that does not
  // convert throws UsageError naming the key.
  template <class T>
  T get(std::string_view key, const T& fallback) const {
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return fallback;
    if constexpr (std::is_same_v<T, std::string>) {
      return it->second;
    } else {
      std::istringstream in(it->second);
      T value{};
      if (!(in >> value) || !(in >> std::ws).eof()) {
        XS_THROW(UsageError, "flag '" + it->first + "' has value '" + it->second +
                                 "', which is not of the expected type");
      }
      return value;
    }
  }
  // get<std::string> for a literal fallback.
  std::string get(std::string_view key, const char* fallback) const {
    return get<std::string>(key, std::string(fallback));
  }
  // Every key and its value, in key order.
  const std::map<std::string, std::string>& values() const { return values_; }
  // Flags from a program's command line: "--key value", "--key=value" or "key=value"; a lone
  // "--switch" (followed by another option or nothing) is "1". UsageError on anything else,
  // naming the argument.
  static Flags fromArgs(int argc, const char* const* argv);

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace xs
