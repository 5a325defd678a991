// module.cpp: the `xspawn._xspawn` extension: the worker API of xspawn.hpp for a Python program
// started by `xspawn run` (who am I, named rendezvous with bytes payloads, barrier), with the
// collectives (buffers.cpp) and the exception classes (errors.cpp). xspawn/__init__.py
// re-exports it and documents it; the calls wait with the GIL released.
#include <string>
#include <utility>
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

void attach() {
  if (!initialized()) init();
}

namespace {

template <class F>
auto attached(F f) {
  return [f]() {
    attach();
    return f();
  };
}

py::list rendezvousBytes(const std::string& tag, const py::bytes& payload) {
  attach();
  std::string mine = payload;  // copied while the GIL is held
  std::vector<std::string> all;
  {
    py::gil_scoped_release unlocked;
    all = rendezvous(tag, mine);
  }
  py::list out;
  for (const std::string& p : all) out.append(py::bytes(p));
  return out;
}

void registerIdentity(py::module_& m) {
  m.def("init", &init,
        "Attaches this process to its job (from the environment `xspawn run` sets); outside xspawn, "
        "a world of one. Idempotent; every other call does it by itself.");
  m.def("initialized", &initialized, "Whether init() ran.");
  m.def("get_ordinal", attached(&get_ordinal), "This rank's global ordinal (torch_xla: xm.get_ordinal).");
  m.def("get_local_ordinal", attached(&get_local_ordinal), "This rank's ordinal on its machine.");
  m.def("world_size", attached(&world_size), "The number of ranks in the job.");
  m.def("local_world_size", attached(&local_world_size), "The number of ranks on this machine.");
  m.def("is_master_ordinal", [](bool local) { attach(); return is_master_ordinal(local); }, "local"_a = true,
        "Whether this rank is the master of its machine (local=True) or of the whole job.");
  m.def("job_id", attached([] { return job_id(); }), "The job's id (the launcher's, or 'standalone').");
  m.def("restart_count", &restart_count,
        "How many times the job's gang was restarted before this worker started (--max-restarts).");
  py::class_<DeviceInfo>(m, "DeviceInfo", "The emulated core a worker owns.")
      .def_readonly("name", &DeviceInfo::name, "'xcore:N', as 'TPU:N' on a TPU host")
      .def_readonly("ordinal", &DeviceInfo::ordinal)
      .def_readonly("local_ordinal", &DeviceInfo::localOrdinal)
      .def_readonly("cpu", &DeviceInfo::cpu, "the CPU it is bound to, -1 when not bound")
      .def("__repr__", [](const DeviceInfo& d) { return "<xspawn.DeviceInfo " + d.name + ">"; });
  m.def("device", attached([]() -> const DeviceInfo& { return device(); }), py::return_value_policy::copy,
        "The emulated core this worker owns.");
  m.def("slice_of", [](std::size_t count, int rank, int world) {
    attach();
    if (rank < 0) rank = get_ordinal();
    if (world < 1) world = world_size();
    XS_CHECK(rank < world, UsageError,
             fmt::format("xspawn.slice_of: rank={} is not a rank of a world of {}", rank, world));
    const Slice s = slice_of(count, rank, world);
    return py::make_tuple(s.first, s.size);
  }, "count"_a, "rank"_a = -1, "world"_a = 0,
  "(first, size): the slice of `count` elements a rank owns in all_gather and reduce_scatter "
  "(default: this rank, this job).");
}

void registerMeetings(py::module_& m) {
  m.def("rendezvous", &rendezvousBytes, "tag"_a, "payload"_a = py::bytes(),
        "Returns once every rank reached `tag`, with every rank's payload (bytes) in rank order "
        "(torch_xla: xm.rendezvous). Ranks at different tags raise DivergenceError naming who is "
        "where; a dead peer raises AbortedError; past --timeout, TimeoutError.");
  m.def("barrier", [](const std::string& tag) {
    attach();
    py::gil_scoped_release unlocked;
    barrier(tag);
  }, "tag"_a = "barrier", "Waits until every rank reached this barrier (checked as rendezvous is).");
}

}  // namespace
}  // namespace xs::python

PYBIND11_MODULE(_xspawn, m) {
  m.doc() = "xspawn's worker API and shared-memory collectives (see the xspawn package).";
  xs::python::registerErrors(m);
  xs::python::registerIdentity(m);
  xs::python::registerMeetings(m);
  xs::python::registerCollectives(m);
}
