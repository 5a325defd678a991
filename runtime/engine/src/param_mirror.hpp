// param_mirror.hpp: bf16 mirrors of a ParamStore's values (emulated bf16's rounded floats, native
// bf16's bits), for the engine's layers (which read weights rounded) and optimizers (which write
// the rounding as they update).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xspawn/engine/params.hpp"

namespace xs::engine::detail {

struct ParamStoreAccess {
  // View i's values rounded to bf16 (as floats, roundToBf16), for emulated bf16. They are
  // rounded into the mirror at the first call and again only after the values may have changed
  // (ParamStore::value(i), values()), or written by an optimizer step (update).
  static const float* rounded(ParamStore& s, std::size_t i);
  // The same as bf16 bits (toBf16Bits: roundToBf16's bits, as the optimizers write them), for
  // native bf16's kernels.
  static const std::uint16_t* bits(ParamStore& s, std::size_t i);

  // An optimizer step over every value: values to update, and the one mirror into which the
  // same pass writes each new value rounded (both null while no view has been read through a
  // mirror; a store read both ways gets the bits, and its rounded floats count as stale). The
  // mirror counts as current from this call on: the caller writes all of size() values of the
  // rounded floats, or of the bits those of the views in bitsViews.
  struct Update {
    float* values;
    float* rounded;
    std::uint16_t* bits;
    // With bits: per view, 1 where a step writes them, the views read through them so far (the
    // linear layers' weights; the convolutions read the values); the others' bits count as
    // stale, to be converted at their first read.
    const std::uint8_t* bitsViews = nullptr;
  };
  static Update update(ParamStore& s);
  // The same pointers, for a step made view by view (inside backward), which calls written() at
  // its end. Meanwhile each view's mirror stays as current as it was: one the step has not
  // reached still holds its values' rounding, and one it has reached holds the new values' (or
  // is rounded from them at its next read). A rounded mirror the step does not write (the store
  // keeps bits) counts as stale from here.
  static Update target(ParamStore& s);
  // Ends that step: the mirror it wrote (t, from target()) counts as current, and one made while
  // it ran counts as stale.
  static void written(ParamStore& s, const Update& t);
};

}  // namespace xs::engine::detail
