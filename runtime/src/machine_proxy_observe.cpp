// machine_proxy_observe.cpp: what the proxy does for the trace of a job spanning machines.
// At the handshake it measures every launcher's clock against machine 0's; when the job
// ends cleanly it carries every machine's part of the trace to machine 0.
//
// The clocks: machine 0 pings machine k kClockPings times: t0 (machine 0's clock) out, t1
// (k's clock, read on arrival) back, t2 (machine 0's clock) on return. Each ping says k's
// clock minus machine 0's is t1 - (t0 + t2) / 2, within +-(t2 - t0) / 2 (t1 was read
// somewhere inside the round trip); the ping with the shortest round trip is kept. Machine 0
// then broadcasts every machine's offset and bound.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "machine_proxy.hpp"
#include "telemetry.hpp"

namespace xs::detail {
namespace {

constexpr int kClockPings = 16;
// A trace part crosses in pieces of at most this many bytes (MPI counts are ints).
constexpr std::size_t kPartPiece = std::size_t{64} << 20;

// What machine 0 broadcasts per machine after the pings.
struct ClockWire {
  std::int64_t offsetNs;
  std::uint64_t errorNs;
  std::uint64_t roundTripNs;
};

}  // namespace

std::uint64_t MachineProxy::clockNs() const { return telemetry::nowNs() + static_cast<std::uint64_t>(skewNs_); }

void MachineProxy::alignClocks(const std::vector<std::uint64_t>& origins) {
  const int machines = transport_->machines(), me = transport_->machine();
  std::vector<ClockWire> wire(machines, ClockWire{0, 0, 0});
  for (int k = 1; k < machines; ++k) {
    if (me != 0 && me != k) continue;
    std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
    for (int i = 0; i < kClockPings; ++i) {
      std::uint64_t out = 0, back = 0;
      if (me == 0) {
        // Posted before the ping leaves: the answer never waits for a receive.
        const MachineTransport::Handle answer = transport_->receive(&back, sizeof back, k);
        out = clockNs();
        complete({transport_->send(&out, sizeof out, k), answer});
        const std::uint64_t t2 = clockNs();
        if (t2 - out < best) {
          best = t2 - out;
          const auto offset = static_cast<std::int64_t>(back - out) - static_cast<std::int64_t>(best / 2);
          wire[k] = ClockWire{offset, (best + 1) / 2, best};
        }
      } else {
        complete({transport_->receive(&out, sizeof out, 0)});
        back = clockNs();
        complete({transport_->send(&back, sizeof back, 0)});
      }
    }
  }
  complete({transport_->broadcast(wire.data(), sizeof(ClockWire) * wire.size(), 0)});
  std::lock_guard lock(mutex_);
  clocks_.clear();
  for (int m = 0; m < machines; ++m) {
    clocks_.push_back(MachineClock{m < static_cast<int>(hosts_.size()) ? hosts_[m] : "", origins[m], wire[m].offsetNs,
                                   wire[m].errorNs, wire[m].roundTripNs});
  }
}

std::vector<MachineProxy::MachineClock> MachineProxy::clocks() const {
  std::lock_guard lock(mutex_);
  return clocks_;
}

void MachineProxy::setTracePart(std::string part) {
  std::lock_guard lock(mutex_);
  tracePart_ = std::move(part);
}

std::vector<std::string> MachineProxy::traceParts() const {
  std::lock_guard lock(mutex_);
  return traceParts_;
}

bool MachineProxy::tracePartSent() const {
  std::lock_guard lock(mutex_);
  return tracePartSent_;
}

void MachineProxy::gatherTraceParts() {
  // Every machine that ends cleanly comes here (after its finished notice), so the sizes'
  // allgather always completes; a machine that failed instead never comes, and mpirun ends
  // the others as it would in MPI_Finalize.
  const int machines = transport_->machines(), me = transport_->machine();
  std::string mine;
  {
    std::lock_guard lock(mutex_);
    mine = std::move(tracePart_);
  }
  std::uint64_t size = me == 0 ? 0 : mine.size();
  std::vector<std::uint64_t> sizes(machines);
  complete({transport_->allGather(&size, sizeof size, sizes.data())}, false);
  std::vector<std::string> parts(machines);
  std::vector<MachineTransport::Handle> handles;
  for (int k = 1; k < machines; ++k) {
    if (me != 0 && me != k) continue;
    std::string& part = me == 0 ? parts[k] : mine;
    part.resize(sizes[k]);
    for (std::size_t at = 0; at < part.size(); at += kPartPiece) {
      const std::size_t n = std::min(kPartPiece, part.size() - at);
      handles.push_back(me == 0 ? transport_->receive(part.data() + at, n, k) : transport_->send(part.data() + at, n, 0));
    }
  }
  complete(handles, false);
  std::lock_guard lock(mutex_);
  traceParts_ = std::move(parts);
  tracePartSent_ = me != 0 && size > 0;
}

}  // namespace xs::detail
