// machine_client.hpp: a worker's side of the machine channel (jobs spanning machines): local
// rank 0 posts a request for the launcher's proxy, every local rank waits for it to be served,
// with the abort word and the op's deadline checked on every wake. Also the rendezvous across
// machines, built on it.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "control.hpp"

namespace xs::detail {

class MachineClient {
 public:
  MachineClient(Segment& segment, ControlPlane& control);

  // False on a job of one machine (no channel).
  bool active() const { return channel_ != nullptr; }
  int machine() const { return channel_ ? static_cast<int>(channel_->machine) : 0; }
  int machines() const { return channel_ ? static_cast<int>(channel_->machines) : 1; }
  std::byte* buffer() const { return segment_.machineBuffer(); }
  std::size_t bufferBytes() const { return channel_->bufferBytes; }
  std::size_t resultBytes() const { return channel_->resultBytes; }

  // One request, served across machines. Call on every local rank, after a sync of the
  // current op (so that whatever the request names is complete on every local rank):
  // local rank 0 fills the request with `fill` and posts it; everyone gets its number.
  // At most two may be outstanding: wait for one before posting the one after the next.
  std::uint64_t post(const std::function<void(MachineRequest&)>& fill);
  // Returns once the proxy has served request `seq`. Throws AbortedError / TimeoutError like
  // any other wait.
  void wait(std::uint64_t seq, Clock::time_point deadline);
  void serve(const std::function<void(MachineRequest&)>& fill, Clock::time_point deadline) {
    wait(post(fill), deadline);
  }

  // The job-wide rendezvous: every global rank's payload in global rank order.
  std::vector<std::vector<std::byte>> rendezvous(std::string_view tag, std::span<const std::byte> payload);

 private:
  [[noreturn]] void failTimeout(Clock::time_point deadline);
  // "machine 1" / "machines 1-3": every machine but this one.
  std::string otherMachines() const;

  Segment& segment_;
  ControlPlane& control_;
  MachineChannel* channel_;
  std::uint64_t requests_ = 0;  // requests so far (the same count on every local rank)
};

// This process's client (the context's), created on first use.
MachineClient& machineClient();

}  // namespace xs::detail
