// param_mirror.hpp: emulated bf16's rounded mirror of a ParamStore's values, for the engine's
// layers (which read weights rounded) and optimizers (which write the rounding as they update).
#pragma once

#include <cstddef>

#include "xspawn/engine/params.hpp"

namespace xs::engine::detail {

struct ParamStoreAccess {
  // View i's values rounded to bf16 (as floats, roundToBf16). They are rounded into the mirror
  // at the first call and again only after the values may have changed (ParamStore::value(i),
  // values()), or written by an optimizer step (update).
  static const float* rounded(ParamStore& s, std::size_t i);

  // An optimizer step over every value: values to update, and the mirror into which the same
  // pass writes each new value rounded (null while no view has been read rounded). The mirror
  // counts as current from this call on: the caller writes all of size() floats of it.
  struct Update {
    float* values;
    float* rounded;
  };
  static Update update(ParamStore& s);
};

}  // namespace xs::engine::detail
