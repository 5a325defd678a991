// bindings.hpp: what the parts of the `xspawn._xspawn` extension register on the module, and
// the one helper they share (the worker API attaches on first use, as torch_xla's does).
#pragma once

#include <pybind11/pybind11.h>

namespace xs::python {

// One Python exception class per xs::Error kind (errors.cpp) and the translator raising them.
void registerErrors(pybind11::module_& m);
// all_reduce, broadcast, all_gather, reduce_scatter on writable Python buffers (buffers.cpp).
void registerCollectives(pybind11::module_& m);
// xs::init() unless done: every call of the module works without an explicit init().
void attach();

}  // namespace xs::python
