// trace.cpp: xs::Trace, xs::tracing and xs::expect_steps (see xspawn/trace.hpp).
#include "xspawn/trace.hpp"

#include "telemetry.hpp"

namespace xs {

Trace::Trace(std::string_view name) {
  if (!detail::telemetry::tracing()) return;
  name_ = std::string(name);
  startNs_ = detail::telemetry::nowNs();
}

Trace::~Trace() {
  if (startNs_ == 0) return;
  detail::telemetry::traceSpan(detail::Category::kUser, name_, startNs_, detail::telemetry::nowNs());
}

bool tracing() { return detail::telemetry::tracing(); }

void expect_steps(std::int64_t steps) {
  detail::telemetry::setStepTarget(steps > 0 ? static_cast<std::uint64_t>(steps) : 0);
}

}  // namespace xs
