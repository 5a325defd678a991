// mpi_transport.cpp: MachineTransport over Open MPI, built as the module libxspawn_mpi.so.
// Only the launcher's proxy thread calls into it (MPI_THREAD_FUNNELED: that thread joins).
// Collectives are MPI's nonblocking ones on a duplicate of MPI_COMM_WORLD; failure notices
// travel as point-to-point messages on their own tag, with a receive always posted.
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "machine_transport.hpp"
#include "mca_params.hpp"
#include "xspawn/error.hpp"
#include "reduce_kernels.hpp"

namespace xs::detail {
namespace {

constexpr int kNoticeTag = 7001;
constexpr int kDataTag = 7002;  // point-to-point data (clock pings, trace parts)
// Small enough for every transport's eager protocol: a notice arrives even if its sender
// exits right after sending it.
constexpr std::size_t kNoticeBytes = 1024;

// A notice on the wire: exit code, then the text (NUL-terminated, truncated to fit).
struct NoticeWire {
  std::int32_t exitCode;
  char text[kNoticeBytes - 4];
};

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  XS_THROW(SystemError, std::string(what) + " failed: " + std::string(text, len) +
                            "; check the job's mpirun options and the network between the machines");
}

// bfloat16 has no MPI type: its elements travel as 16-bit words and reduce with the
// shared-memory kernels (float32 arithmetic, rounded to nearest even). inout = in op inout.
template <ReduceOp kOp>
void bfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const void* srcs[2] = {in, inout};
  void* dsts[1] = {inout};
  reduceInto(DType::kBFloat16, kOp, srcs, 2, dsts, 1, static_cast<std::size_t>(*len), 1);
}

class MpiTransport final : public MachineTransport {
 public:
  ~MpiTransport() override {
    // Without finalize (a failed job) the process ends with MPI still initialised; mpirun
    // then ends the other machines too, which is what a failed job needs.
  }

  void prepare(const std::string& fileDir) override {
    // The proxy all-reduces with MPI_Iallreduce (non-blocking, so it keeps checking the job's
    // abort word and deadline). Open MPI runs it in libnbc, whose own choice measured 0.48-0.65x
    // of the blocking MPI_Allreduce between the same launchers from 64 KiB up; its ring measured
    // 0.62-1.40x (private buffers) and 1.02-1.28x (the shared heap, from 1 MiB; docs/cluster.md).
    // A value the user set (the environment, --mca, a parameter file) wins: mca_params.hpp.
    preferMcaParam("coll_libnbc_iallreduce_algorithm", "1");
    // Open MPI's shared-memory transport keeps a file per process in /dev/shm, which mpirun
    // removes at the job's end; when mpirun is killed, nobody does. In the launcher's own
    // directory the next sweep removes it with the job's segment. The user's choice wins.
    // (Open MPI 4 calls that transport vader, Open MPI 5 sm.)
    if (!fileDir.empty()) {
      preferMcaParam("btl_vader_backing_directory", fileDir);
      preferMcaParam("btl_sm_backing_directory", fileDir);
    }
  }

  void join() override {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    check(MPI_Op_create(bfReduce<ReduceOp::kSum>, 1, &bfOps_[0]), "MPI_Op_create");
    check(MPI_Op_create(bfReduce<ReduceOp::kMax>, 1, &bfOps_[1]), "MPI_Op_create");
    check(MPI_Op_create(bfReduce<ReduceOp::kMin>, 1, &bfOps_[2]), "MPI_Op_create");
    postNoticeReceive();
    joined_ = true;
  }
  int machine() const override { return rank_; }
  int machines() const override { return size_; }
  std::string hostName() const override {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS) {
      ::gethostname(name, sizeof name - 1);
      return name;
    }
    return std::string(name, len);
  }

  Handle allReduce(void* data, std::size_t count, DType type, ReduceOp op) override {
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpiType(type), mpiOp(type, op), comm_, &r),
          "MPI_Iallreduce");
    return keep(r);
  }
  Handle broadcast(void* data, std::size_t bytes, int root) override {
    MPI_Request r;
    check(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &r), "MPI_Ibcast");
    return keep(r);
  }
  Handle allGather(const void* in, std::size_t bytes, void* out) override {
    MPI_Request r;
    check(MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, comm_, &r),
          "MPI_Iallgather");
    return keep(r);
  }
  Handle send(const void* data, std::size_t bytes, int to) override {
    MPI_Request r;
    check(MPI_Isend(data, count(bytes), MPI_BYTE, to, kDataTag, comm_, &r), "MPI_Isend");
    return keep(r);
  }
  Handle receive(void* data, std::size_t bytes, int from) override {
    MPI_Request r;
    check(MPI_Irecv(data, count(bytes), MPI_BYTE, from, kDataTag, comm_, &r), "MPI_Irecv");
    return keep(r);
  }
  bool test(Handle handle) override {
    auto it = requests_.find(handle);
    if (it == requests_.end()) return true;
    int done = 0;
    check(MPI_Test(&it->second, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) requests_.erase(it);
    return done != 0;
  }

  void sendNotice(const MachineNotice& notice) override {
    auto wire = std::make_unique<NoticeWire>();
    wire->exitCode = notice.exitCode;
    std::snprintf(wire->text, sizeof wire->text, "%s", notice.text.c_str());
    for (int to = 0; to < size_; ++to) {
      if (to == rank_) continue;
      MPI_Request r;
      if (MPI_Isend(wire.get(), sizeof *wire, MPI_BYTE, to, kNoticeTag, comm_, &r) == MPI_SUCCESS) {
        sends_.push_back(r);
      }
    }
    sent_.push_back(std::move(wire));  // the buffer lives as long as the sends may
    // Start the sends moving; the proxy keeps testing the notice receive, which progresses them.
    for (MPI_Request& r : sends_) {
      int done = 0;
      if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
  }
  bool noticesSent() override {
    bool all = true;
    for (MPI_Request& r : sends_) {
      int done = 0;
      if (r != MPI_REQUEST_NULL && MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) all = false;
    }
    return all;
  }
  std::optional<MachineNotice> pollNotice() override {
    if (!joined_) return std::nullopt;
    for (MPI_Request& r : sends_) {
      int done = 0;
      if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&noticeRequest_, &done, &status) != MPI_SUCCESS || !done) return std::nullopt;
    MachineNotice n;
    n.from = status.MPI_SOURCE;
    n.exitCode = noticeIn_.exitCode;
    noticeIn_.text[sizeof noticeIn_.text - 1] = '\0';
    n.text = noticeIn_.text;
    postNoticeReceive();
    return n;
  }

  void finalize() override {
    if (!joined_) return;
    MPI_Cancel(&noticeRequest_);
    MPI_Wait(&noticeRequest_, MPI_STATUS_IGNORE);
    for (MPI_Op& op : bfOps_) MPI_Op_free(&op);
    MPI_Comm_free(&comm_);
    MPI_Finalize();
    joined_ = false;
  }

 private:
  static int count(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT_MAX)) XS_THROW(SystemError, "a point-to-point message above 2 GiB");
    return static_cast<int>(bytes);
  }
  Handle keep(MPI_Request r) {
    requests_[++lastHandle_] = r;
    return lastHandle_;
  }
  void postNoticeReceive() {
    check(MPI_Irecv(&noticeIn_, sizeof noticeIn_, MPI_BYTE, MPI_ANY_SOURCE, kNoticeTag, comm_, &noticeRequest_),
          "MPI_Irecv");
  }
  static MPI_Datatype mpiType(DType type) {
    switch (type) {
      case DType::kFloat32: return MPI_FLOAT;
      case DType::kFloat64: return MPI_DOUBLE;
      case DType::kInt32: return MPI_INT32_T;
      case DType::kInt64: return MPI_INT64_T;
      case DType::kBFloat16: return MPI_UINT16_T;
    }
    return MPI_BYTE;
  }
  MPI_Op mpiOp(DType type, ReduceOp op) const {
    if (type == DType::kBFloat16) return op == ReduceOp::kMax ? bfOps_[1] : op == ReduceOp::kMin ? bfOps_[2] : bfOps_[0];
    return op == ReduceOp::kMax ? MPI_MAX : op == ReduceOp::kMin ? MPI_MIN : MPI_SUM;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool joined_ = false;
  MPI_Op bfOps_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  std::map<Handle, MPI_Request> requests_;
  Handle lastHandle_ = 0;
  NoticeWire noticeIn_{};
  MPI_Request noticeRequest_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
  std::vector<std::unique_ptr<NoticeWire>> sent_;
};

}  // namespace
}  // namespace xs::detail

extern "C" xs::detail::MachineTransport* xspawnCreateMpiTransport() { return new xs::detail::MpiTransport(); }
