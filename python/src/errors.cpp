// errors.cpp: xs::Error's kinds as Python exceptions. Every kind is a class of the module with
// the C++ hierarchy (xspawn.DivergenceError is an xspawn.AbortedError is an xspawn.Error, a
// RuntimeError), and the kinds with a Python counterpart also derive from it (UsageError is a
// ValueError, TimeoutError a builtins.TimeoutError, ...), so `except ValueError` still works.
// The raised exception carries the message and `where` ("file:line" in xspawn's sources).
#include <array>
#include <exception>
#include <string>
#include <typeindex>
#include <typeinfo>

#include "bindings.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace py = pybind11;

namespace xs::python {
namespace {

struct Kind {
  const char* name;
  const std::type_info& type;
  int parent;            // index in kKinds (-1: the root, xspawn.Error)
  PyObject* const* builtin;  // the Python exception it also is, or nullptr
  const char* doc;
};

// Parents come before their children: the classes are made in this order.
const std::array<Kind, 20> kKinds{{
    {"Error", typeid(Error), -1, &PyExc_RuntimeError, "Base of every xspawn error: what, where (.where) and how to fix it."},
    {"UsageError", typeid(UsageError), 0, &PyExc_ValueError, "A bad argument, option or setting."},
    {"ShapeError", typeid(ShapeError), 1, nullptr, "A tensor or buffer whose shape does not fit."},
    {"SystemError", typeid(SystemError), 0, &PyExc_OSError, "An operating-system call failed."},
    {"ShmSpaceError", typeid(ShmSpaceError), 0, nullptr, "Not enough room in /dev/shm."},
    {"SegmentError", typeid(SegmentError), 0, nullptr, "The job's shared-memory segment could not be opened or validated."},
    {"NotInitializedError", typeid(NotInitializedError), 0, nullptr, "A call made outside a worker."},
    {"AbortedError", typeid(AbortedError), 0, nullptr, "The job was aborted: another rank failed or exited, or it was stopped."},
    {"DivergenceError", typeid(DivergenceError), 7, nullptr, "Ranks reached different rendezvous points or collectives."},
    {"TimeoutError", typeid(TimeoutError), 7, &PyExc_TimeoutError, "A rendezvous or collective passed its deadline."},
    {"FaultInjectedError", typeid(FaultInjectedError), 0, nullptr, "A failure acted out on purpose (--inject-fault)."},
    {"OutOfMemoryError", typeid(OutOfMemoryError), 0, &PyExc_MemoryError, "An emulated core's memory cannot hold an allocation."},
    {"BackendError", typeid(BackendError), 0, nullptr, "A math backend refused an operation."},
    {"CheckpointError", typeid(CheckpointError), 0, nullptr, "A checkpoint is missing, truncated, corrupt or of another model."},
    {"DataError", typeid(DataError), 0, nullptr, "A dataset could not be read."},
    {"FileNotFoundError", typeid(FileNotFoundError), 14, &PyExc_FileNotFoundError, "A dataset file does not exist."},
    {"FormatError", typeid(FormatError), 14, nullptr, "A file's content is not what its format requires."},
    {"TruncatedError", typeid(TruncatedError), 16, nullptr, "A file is shorter or longer than its header says."},
    {"MismatchError", typeid(MismatchError), 16, nullptr, "Two files that belong together disagree."},
    {"LabelRangeError", typeid(LabelRangeError), 16, nullptr, "A label is outside [0, number of classes)."},
}};

std::array<PyObject*, kKinds.size()> gClasses{};

PyObject* makeClass(py::module_& m, const Kind& kind) {
  PyObject* parent = kind.parent < 0 ? nullptr : gClasses[kind.parent];
  py::tuple bases;
  if (parent && kind.builtin) bases = py::make_tuple(py::handle(parent), py::handle(*kind.builtin));
  else if (parent) bases = py::make_tuple(py::handle(parent));
  else bases = py::make_tuple(py::handle(*kind.builtin));
  const std::string qualified = std::string("xspawn.") + kind.name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), kind.doc, bases.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(kind.name, py::handle(cls));  // the module keeps a reference
  return cls;
}

PyObject* classOf(const Error& e) {
  const std::type_index t(typeid(e));
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    if (t == std::type_index(kKinds[i].type)) return gClasses[i];
  }
  return gClasses[0];  // a kind this table does not know yet: still an xspawn.Error
}

void raise(const Error& e, std::exception_ptr error) {
  // An aborted job is recorded as this rank's error (secondary unless this rank raised the
  // abort), so the root-cause report tells the culprit from the ranks it stopped even when
  // the Python program catches the exception.
  if (dynamic_cast<const AbortedError*>(&e)) record_error(error);
  PyObject* cls = classOf(e);
  // Messages cut to fit shared memory may end inside a UTF-8 sequence: replaced, not an error.
  const std::string what = e.what();
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "replace"));
  if (!text) throw py::error_already_set();
  py::object instance = py::reinterpret_steal<py::object>(PyObject_CallOneArg(cls, text.ptr()));
  if (!instance) throw py::error_already_set();
  instance.attr("where") = e.where();
  PyErr_SetObject(cls, instance.ptr());
}

}  // namespace

void registerErrors(py::module_& m) {
  for (std::size_t i = 0; i < kKinds.size(); ++i) gClasses[i] = makeClass(m, kKinds[i]);
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e, p);
    }
  });
}

}  // namespace xs::python
