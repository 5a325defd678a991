// machine_client.cpp: posting requests to the machine proxy and waiting for them; the
// job-wide rendezvous.
#include "machine_client.hpp"

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "context.hpp"
#include "xspawn/error.hpp"

namespace xs::detail {
namespace {

std::size_t pad8(std::size_t n) { return (n + 7) / 8 * 8; }

void putWord(std::byte*& at, std::uint64_t v) {
  std::memcpy(at, &v, 8);
  at += 8;
}
std::uint64_t getWord(const std::byte*& at) {
  std::uint64_t v;
  std::memcpy(&v, at, 8);
  at += 8;
  return v;
}

}  // namespace

MachineClient::MachineClient(Segment& segment, ControlPlane& control)
    : segment_(segment), control_(control), channel_(segment.machineChannel()) {}

std::uint64_t MachineClient::post(const std::function<void(MachineRequest&)>& fill) {
  MachineChannel& ch = *channel_;
  const std::uint64_t seq = ++requests_;
  if (control_.rank() == 0) {
    // The proxy is done with this slot: request seq-2 was waited for before seq-1 was posted.
    MachineRequest& req = ch.requests[seq % 2];
    fill(req);
    req.opSeq = control_.opSeq();
    req.opHash = control_.opHash();
    std::snprintf(req.opTag, sizeof req.opTag, "%s", control_.opTag().c_str());
    // Release: the proxy that acquires the new sequence number sees the request's fields
    // (and, through the sync before this call, every local rank's data).
    ch.requestSeq.store(seq, std::memory_order_seq_cst);
    futexWakeAll(&ch.requestSeq);
  }
  return seq;
}

void MachineClient::wait(std::uint64_t seq, Clock::time_point deadline) {
  MachineChannel& ch = *channel_;
  // Acquire: pairs with the proxy's release of doneSeq, so the data it received over the
  // network is visible to our reads after this.
  std::uint64_t seen = ch.doneSeq.load(std::memory_order_acquire);
  while (seen < seq) {
    control_.waiter().waitChange(ch.doneSeq, seen, ch.doneSleepers, [&] {
      control_.throwIfAborted();
      if (Clock::now() >= deadline) failTimeout(deadline);
    });
    seen = ch.doneSeq.load(std::memory_order_acquire);
  }
}

std::string MachineClient::otherMachines() const {
  std::vector<int> others;
  for (int m = 0; m < machines(); ++m)
    if (m != machine()) others.push_back(m);
  return (others.size() == 1 ? "machine " : "machines ") + formatRankRanges(others);
}

void MachineClient::failTimeout(Clock::time_point) {
  const bool joined = channel_->joined.load(std::memory_order_acquire) != 0;
  std::string text =
      joined ? fmt::format("machine {}: {} '{}'#{} passed its deadline ({} ms) waiting for the other "
                           "machines: one of them is slower, stuck or gone; see its report",
                           machine(), "op", control_.opTag(), control_.opSeq(), control_.timeout().count())
             : fmt::format("machine {}: {} did not join the job within {} ms (MPI_Init waits for every "
                           "process of the mpirun job): a machine never started xspawn or cannot reach this "
                           "one; check the hostfile, ssh and the network MPI uses (docs/cluster.md)",
                           machine(), otherMachines(), control_.timeout().count());
  ControlPlane::raiseAbort(segment_, AbortReason::kTimeout, control_.rank(), text);
  control_.throwIfAborted();
  XS_THROW(TimeoutError, text);
}

std::vector<std::vector<std::byte>> MachineClient::rendezvous(std::string_view tag,
                                                              std::span<const std::byte> payload) {
  // First the machine's own ranks meet (tags checked among them), then local rank 0 sends
  // the machine's payloads as one blob: [count][len, bytes (8-aligned)]...
  std::vector<std::vector<std::byte>> local = control_.rendezvous(tag, payload);
  std::size_t blob = 8;
  for (const auto& p : local) blob += 8 + pad8(p.size());
  // Every local rank computes the same size from the same payloads, so all fail alike.
  if (blob > bufferBytes()) {
    XS_THROW(UsageError, fmt::format("rendezvous '{}': this machine's payloads take {} bytes, more than the "
                                     "{} bytes the machine channel carries; send bulk data with "
                                     "broadcast or all_gather",
                                     tag, blob, bufferBytes()));
  }
  serve(
      [&](MachineRequest& req) {
        std::byte* at = buffer();
        putWord(at, local.size());
        for (const auto& p : local) {
          putWord(at, p.size());
          if (!p.empty()) std::memcpy(at, p.data(), p.size());
          at += pad8(p.size());
        }
        req.kind = static_cast<std::uint32_t>(MachineOpKind::kRendezvous);
        req.count = blob;
      },
      Clock::now() + control_.timeout());
  // The proxy left every machine's blob in machine order: [blob bytes][blob]...
  std::vector<std::vector<std::byte>> all;
  const std::byte* at = buffer();
  for (int m = 0; m < machines(); ++m) {
    const std::size_t bytes = getWord(at);
    const std::byte* b = at;
    const std::uint64_t n = getWord(b);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::size_t len = getWord(b);
      all.emplace_back(b, b + len);
      b += pad8(len);
    }
    at += pad8(bytes);
  }
  return all;
}

MachineClient& machineClient() {
  Context& c = requireContext("machines");
  if (!c.machineClient) c.machineClient = std::make_unique<MachineClient>(*c.segment, *c.control);
  return *c.machineClient;
}

}  // namespace xs::detail
