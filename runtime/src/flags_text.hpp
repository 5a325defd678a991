// flags_text.hpp: Flags' length-prefixed text form (flags.cpp), how the flags travel to exec'd
// workers in an environment variable (internal header).
#pragma once

#include <string>
#include <string_view>

#include "xspawn/flags.hpp"

namespace xs::detail {

// "<klen>:<key><vlen>:<value>..." for every flag, any bytes in keys and values.
std::string serializeFlags(const Flags& flags);
// The flags back; UsageError on text serializeFlags did not make.
Flags deserializeFlags(std::string_view text);

}  // namespace xs::detail
