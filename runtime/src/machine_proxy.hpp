// machine_proxy.hpp: the launcher's proxy for a job spanning machines. A thread of the
// launcher joins the other machines' launchers over the transport (MPI), checks that they
// run the same job shape, and then serves the machine channel of the segment: each request
// local rank 0 posts (rendezvous, all-reduce of the staged slices, broadcast) becomes one
// nonblocking transport operation on the same shared buffers. It also carries failures: the
// first local failure goes to every other machine, and a failure another machine reports
// aborts this machine's job.
//
// At the handshake it also measures every launcher's clock against machine 0's (the trace's
// one time axis), and when the job ends cleanly it carries every machine's part of the trace
// to machine 0 before leaving (machine_proxy_observe.cpp).
//
//   kJoining --handshake, clocks--> kServing --stop--> kDone (trace parts gathered, finalize
//   when clean)
//            --mismatch / transport error / divergence across machines--> kBroken
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "machine_transport.hpp"
#include "segment.hpp"

namespace xs::detail {

class MachineProxy {
 public:
  // What the supervisor hears from the proxy.
  struct Event {
    bool remote = false;   // true: another machine failed (notice); false: the proxy itself failed
    MachineNotice notice;  // remote: who and what
    std::string text;      // one line for the report
  };

  // An op's identity, compared across machines before its first transport operation.
  struct OpCheck {
    std::uint64_t seq;
    std::uint64_t hash;
    char tag[kTagBytes];
  };

  // A launcher's clock against machine 0's, measured once at the handshake.
  struct MachineClock {
    std::string host;
    std::uint64_t originNs = 0;     // the job's start, on this machine's clock
    std::int64_t offsetNs = 0;      // this machine's clock minus machine 0's
    std::uint64_t errorNs = 0;      // the true offset lies within offsetNs +- errorNs
    std::uint64_t roundTripNs = 0;  // the best of the pings' round trips
  };

  // originNs: the job's start on this launcher's clock (CLOCK_MONOTONIC); skewNs: added to
  // every clock read of the alignment (XSPAWN_CLOCK_SKEW_US, for tests on one machine);
  // heldPort: the MASTER_PORT this launcher holds for PyTorch workers (machine 0), or 0;
  // transportDir: the transport's files (Segment::createTransportDir; empty: none of ours).
  MachineProxy(Segment& segment, std::unique_ptr<MachineTransport> transport, std::string transportDir,
               std::uint64_t originNs, std::int64_t skewNs = 0, int heldPort = 0);
  ~MachineProxy();
  MachineProxy(const MachineProxy&) = delete;
  MachineProxy& operator=(const MachineProxy&) = delete;

  // Starts the thread (after the workers are forked: MPI must not be initialised in them).
  void start();
  // Readable (eventfd) when events are waiting.
  int eventFd() const { return eventFd_; }
  std::vector<Event> takeEvents();
  // The first local failure, for the other machines (later calls are ignored).
  void reportFailure(int exitCode, const std::string& text);
  // Ends the thread, calling whileWaiting about every 10 ms meanwhile; `clean` (every local
  // worker succeeded, no machine failed): leave the transport in order (MPI_Finalize, which
  // returns when every machine has finished). Otherwise give the thread half a second, then
  // leave it as it is: mpirun ends the rest.
  void stop(bool clean, const std::function<void()>& whileWaiting = {});
  // Removes the transport's directory of files, once the transport is done with them (after
  // stop). Idempotent; the destructor does it too. forget = false: early, before stop (a job
  // that is ending anyway), and again later, should MPI write there meanwhile.
  void removeTransportFiles(bool forget = true);

  // Machine names in machine order, once joined (else empty).
  std::vector<std::string> hosts() const;
  // Machines that said they finished cleanly (every rank exited 0) and left for MPI_Finalize:
  // a failure after that cannot reach them.
  std::vector<int> finishedMachines() const;
  // The exit code of a notice that says "this machine finished cleanly" (not a failure).
  static constexpr int kFinishedNotice = -1;

  // Every machine's clock in machine order, once measured (else empty).
  std::vector<MachineClock> clocks() const;
  // This machine's part of the trace, for machine 0 (set before stop(true); machines > 0).
  void setTracePart(std::string part);
  // Machine 0, after stop(true): every other machine's part (index: machine; empty: none came).
  std::vector<std::string> traceParts() const;
  // Machines > 0, after stop(true): whether this machine's part reached machine 0.
  bool tracePartSent() const;

 private:
  struct Stopped {};
  void threadMain();
  void handshake();
  void serve(std::uint64_t seq);
  // Compares the request's op across machines (once per op); false after failing the job.
  bool checkOp(const MachineRequest& request);
  bool verifyOps(const std::vector<OpCheck>& all, const OpCheck& mine);
  bool serveSmallAllReduce(const MachineRequest& request, std::byte* const* slices);
  // Up to this many bytes an all-reduce crosses machines as one allgather with its op check
  // (latency-bound sizes); every op check exchanges the same number of bytes.
  static constexpr std::size_t kSmallAllReduceBytes = 4096;
  static constexpr std::size_t kCheckExchangeBytes = sizeof(OpCheck) + kSmallAllReduceBytes;
  void serveRendezvous(const MachineRequest& request);
  // Waits for the handles while moving notices both ways; throws Stopped on stop().
  // Unstoppable (the job's end, after the finished notice): waits as MPI_Finalize would.
  void complete(const std::vector<MachineTransport::Handle>& handles, bool stoppable = true);
  // machine_proxy_observe.cpp
  std::uint64_t clockNs() const;
  void alignClocks(const std::vector<std::uint64_t>& origins);
  void gatherTraceParts();
  void pump();
  void flushNotices();
  void post(Event event);
  void postLocal(const std::string& text);
  void fail(AbortReason reason, const std::string& text);

  Segment& segment_;
  std::unique_ptr<MachineTransport> transport_;
  std::string transportDir_;  // main thread only
  MachineChannel& channel_;
  std::uint64_t originNs_;
  std::int64_t skewNs_;
  int heldPort_;
  int eventFd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> clean_{false};
  std::atomic<bool> finished_{false};
  mutable std::mutex mutex_;  // guards the members below
  std::vector<Event> events_;
  std::optional<MachineNotice> toSend_;
  bool reported_ = false;
  std::vector<std::string> hosts_;
  std::vector<int> finishedMachines_;
  std::vector<MachineClock> clocks_;
  std::string tracePart_;
  std::vector<std::string> traceParts_;
  bool tracePartSent_ = false;
  // Thread-only state.
  bool broken_ = false;
  std::uint64_t served_ = 0;
  std::uint64_t checkedOp_ = 0;
};

}  // namespace xs::detail
