// buffers.cpp: xspawn's collectives on Python buffers (NumPy arrays, array.array, memoryview,
// a CPU torch tensor's .numpy()), in place and with the GIL released while they wait. A buffer
// must be C-contiguous, native-endian and of float32, float64, int32 or int64 (or 2-byte
// bfloat16 bits with dtype="bfloat16"); anything else is a UsageError saying how to convert.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace xs::python {
namespace {

// One argument of a call: its buffer (kept open while the collective runs), where its
// elements start, how many, and of which type.
struct Array {
  py::buffer_info info;
  std::byte* data = nullptr;
  std::size_t count = 0;
  DType type = DType::kFloat32;
};

constexpr double kMaxTimeoutSeconds = 30.0 * 24 * 3600;  // a month: finite, fits any clock
const char* kTypes = "float32, float64, int32 and int64 (and bfloat16 bits with dtype='bfloat16')";

DType typeOf(const py::buffer_info& info, const std::optional<std::string>& dtype, const std::string& where) {
  std::string format = info.format;
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) format.erase(0, 1);
  const char code = format.size() == 1 ? format[0] : '?';
  if (dtype) {
    if (*dtype != "bfloat16") {
      XS_THROW(UsageError, fmt::format("{}: dtype='{}' is not one xspawn knows; only 'bfloat16' is given this way "
                                       "(the other types come from the buffer itself)", where, *dtype));
    }
    XS_CHECK(info.itemsize == 2 && (code == 'H' || code == 'h'), UsageError,
             fmt::format("{}: dtype='bfloat16' needs 2-byte elements (uint16/int16 bits, e.g. "
                         "tensor.view(torch.int16).numpy()), not format '{}'", where, info.format));
    return DType::kBFloat16;
  }
  const bool integer = code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q';
  if (code == 'f' && info.itemsize == 4) return DType::kFloat32;
  if (code == 'd' && info.itemsize == 8) return DType::kFloat64;
  if (integer && info.itemsize == 4) return DType::kInt32;
  if (integer && info.itemsize == 8) return DType::kInt64;
  XS_THROW(UsageError, fmt::format("{}: elements of format '{}' ({} bytes) cannot be reduced; xspawn's collectives "
                                   "take {}: convert it, e.g. numpy's .astype(numpy.float32)",
                                   where, info.format, info.itemsize, kTypes));
}

bool cContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

Array arrayOf(const py::buffer& b, bool writable, const std::optional<std::string>& dtype, const std::string& where) {
  Array a;
  try {
    a.info = b.request(writable);
  } catch (py::error_already_set& e) {
    if (!writable) throw;
    XS_THROW(UsageError, fmt::format("{}: the buffer is read-only ({}); the result is written into it, "
                                     "so pass a writable one (e.g. numpy's .copy())", where, e.what()));
  }
  XS_CHECK(cContiguous(a.info), UsageError,
           fmt::format("{}: the buffer is not C-contiguous (a strided view or a transpose); pass "
                       "numpy.ascontiguousarray(x) or tensor.contiguous()", where));
  a.type = typeOf(a.info, dtype, where);
  a.data = static_cast<std::byte*>(a.info.ptr);
  a.count = static_cast<std::size_t>(a.info.size);
  return a;
}

ReduceOp opOf(const std::string& op, const std::string& where) {
  for (ReduceOp o : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    if (op == reduceOpName(o)) return o;
  }
  XS_THROW(UsageError, fmt::format("{}: op='{}' is not one of 'sum', 'mean', 'max', 'min'", where, op));
}

CollectiveOptions optionsOf(const std::string& tag, std::optional<double> timeout, const std::string& algorithm,
                            const std::string& where) {
  CollectiveOptions o;
  o.tag = tag;
  if (timeout) {
    XS_CHECK(*timeout > 0 && *timeout <= kMaxTimeoutSeconds, UsageError,
             fmt::format("{}: timeout={} s; give a positive number of seconds up to {} (None: the job's "
                         "--timeout)", where, *timeout, kMaxTimeoutSeconds));
    // At least 1 ms: 0 would mean the job's --timeout.
    o.timeout = std::chrono::milliseconds(std::max(1LL, static_cast<long long>(*timeout * 1000.0 + 0.5)));
  }
  o.algorithm = parseAlgorithm(algorithm);
  return o;
}

// `part` is this rank's slice (`mine`) of `whole`: the same type, slice-sized.
void checkSlice(const Array& part, const char* partName, const Array& whole, const char* wholeName, Slice mine,
                const std::string& where) {
  XS_CHECK(part.type == whole.type, UsageError,
           fmt::format("{}: {} is {} but {} is {}; give both the same type", where, partName, dtypeName(part.type),
                       wholeName, dtypeName(whole.type)));
  XS_CHECK(part.count == mine.size, UsageError,
           fmt::format("{}: {} has {} elements but this rank's slice of the {} in {} has {} "
                       "(xspawn.slice_of({}) = ({}, {}))", where, partName, part.count, whole.count, wholeName,
                       mine.size, whole.count, mine.first, mine.size));
}

using Timeout = std::optional<double>;
using DTypeArg = std::optional<std::string>;

void allReduce(const py::buffer& data, const std::string& op, const std::string& tag, Timeout timeout,
               const std::string& algorithm, const DTypeArg& dtype) {
  attach();
  const std::string where = "xspawn.all_reduce";
  Array a = arrayOf(data, true, dtype, where);
  const ReduceOp o = opOf(op, where);
  const CollectiveOptions options = optionsOf(tag, timeout, algorithm, where);
  py::gil_scoped_release unlocked;
  all_reduce(a.data, a.data, a.count, a.type, o, options);
}

void broadcastBuffer(const py::buffer& data, int root, const std::string& tag, Timeout timeout,
                     const DTypeArg& dtype) {
  attach();
  const std::string where = "xspawn.broadcast";
  Array a = arrayOf(data, true, dtype, where);
  XS_CHECK(root >= 0 && root < world_size(), UsageError,
           fmt::format("{}: root={} is not a rank of this job (0..{})", where, root, world_size() - 1));
  const CollectiveOptions options = optionsOf(tag, timeout, "auto", where);
  py::gil_scoped_release unlocked;
  broadcast(a.data, a.count, a.type, root, options);
}

// all_gather(output, input=None): output (count) = every rank's slice in rank order; input is
// this rank's slice (slice_of), or, without it, this rank's slice of output already.
void allGather(const py::buffer& output, const std::optional<py::buffer>& input, const std::string& tag,
               Timeout timeout, const DTypeArg& dtype) {
  attach();
  const std::string where = "xspawn.all_gather";
  Array out = arrayOf(output, true, dtype, where);
  const Slice mine = slice_of(out.count, get_ordinal(), world_size());
  const std::size_t es = dtypeSize(out.type);
  std::vector<std::byte> own;
  const std::byte* in = nullptr;
  std::optional<Array> given;
  if (input) {
    given = arrayOf(*input, false, dtype, where);
    checkSlice(*given, "input", out, "output", mine, where);
    in = given->data;
  } else {  // in place: a copy of the own slice, so no algorithm reads what it already wrote
    own.assign(out.data + mine.first * es, out.data + (mine.first + mine.size) * es);
    in = own.data();
  }
  const CollectiveOptions options = optionsOf(tag, timeout, "auto", where);
  py::gil_scoped_release unlocked;
  all_gather(in, out.data, out.count, out.type, options);
}

// reduce_scatter(input, output=None, op): this rank's slice of op over ranks of input, into
// output (slice-sized) or, without it, into this rank's slice of input.
void reduceScatter(const py::buffer& input, const std::optional<py::buffer>& output, const std::string& op,
                   const std::string& tag, Timeout timeout, const DTypeArg& dtype) {
  attach();
  const std::string where = "xspawn.reduce_scatter";
  Array in = arrayOf(input, !output, dtype, where);
  const Slice mine = slice_of(in.count, get_ordinal(), world_size());
  const std::size_t es = dtypeSize(in.type);
  std::optional<Array> given;
  if (output) {
    given = arrayOf(*output, true, dtype, where);
    checkSlice(*given, "output", in, "input", mine, where);
  }
  const ReduceOp o = opOf(op, where);
  const CollectiveOptions options = optionsOf(tag, timeout, "auto", where);
  py::gil_scoped_release unlocked;
  if (given) {
    reduce_scatter(in.data, given->data, in.count, in.type, o, options);
    return;
  }
  std::vector<std::byte> result(mine.size * es);  // in place: input stays whole until the end
  reduce_scatter(in.data, result.data(), in.count, in.type, o, options);
  if (!result.empty()) std::memcpy(in.data + mine.first * es, result.data(), result.size());
}

// A machine's common buffer (shared_alloc_common) for Python's buffer protocol: its owner's
// writable pages, or on the other ranks a read-only view of them (shared_view, its mapping kept
// by this object; the same pages marked read-only where the system gives no second mapping).
struct CommonBuffer {
  std::shared_ptr<const std::byte> view;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  bool writable = false;
};

}  // namespace

void registerCollectives(py::module_& m) {
  py::class_<CommonBuffer>(m, "_CommonBuffer", py::buffer_protocol())
      .def_buffer([](CommonBuffer& b) {
        return py::buffer_info(b.data, 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes)}, {1}, !b.writable);
      });
  m.def("_shared_common_buffer", [](std::size_t bytes, int owner) -> py::object {
    attach();
    void* p = nullptr;
    {
      py::gil_scoped_release unlocked;
      p = shared_alloc_common(bytes, owner);
    }
    if (p == nullptr) return py::none();
    CommonBuffer b{nullptr, static_cast<std::byte*>(p), bytes, get_local_ordinal() == owner};
    if (!b.writable) {
      b.view = shared_view(p, bytes);
      if (b.view) b.data = const_cast<std::byte*>(b.view.get());  // exposed read-only all the same
    }
    return py::cast(std::move(b));
  }, "bytes"_a, "owner"_a, "One buffer of `bytes` the machine's ranks share (see shared_common_array).");

  m.def("_shared_buffer", [](std::size_t bytes) {
    attach();
    return py::memoryview::from_memory(shared_alloc(bytes), static_cast<py::ssize_t>(bytes), false);
  }, "bytes"_a, "A writable memoryview of `bytes` in this rank's region of the shared heap (see shared_array).");
  m.def("all_reduce", &allReduce, "data"_a, "op"_a = "sum", py::kw_only(), "tag"_a = "", "timeout"_a = py::none(),
        "algorithm"_a = "auto", "dtype"_a = py::none(),
        "data[i] = op over ranks (in rank order) of data[i], in place on every rank. op: 'sum', 'mean', "
        "'max', 'min'. Every rank passes the same size, type and op (DivergenceError otherwise).");
  m.def("broadcast", &broadcastBuffer, "data"_a, "root"_a = 0, py::kw_only(), "tag"_a = "",
        "timeout"_a = py::none(), "dtype"_a = py::none(), "data on every rank = data on `root`, in place.");
  m.def("all_gather", &allGather, "output"_a, "input"_a = py::none(), py::kw_only(), "tag"_a = "",
        "timeout"_a = py::none(), "dtype"_a = py::none(),
        "output = every rank's slice (slice_of) in rank order; `input` holds this rank's slice, or without "
        "it, this rank's slice of output does.");
  m.def("reduce_scatter", &reduceScatter, "input"_a, "output"_a = py::none(), "op"_a = "sum", py::kw_only(),
        "tag"_a = "", "timeout"_a = py::none(), "dtype"_a = py::none(),
        "This rank's slice (slice_of) of op over ranks of input, into output or, without it, into that "
        "slice of input.");
}

}  // namespace xs::python
