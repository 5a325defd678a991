// checkpoint.hpp: saving and loading a model's parameters, running statistics and optimizer
// state. Format (version 1, little-endian), documented in docs/engine.md:
//   "XSPWCKPT" | u32 version | u32 header bytes | JSON header | float32 sections | u32 CRC-32
// The CRC-32 (zlib's) covers every byte before it.
#pragma once

#include <string>

#include "xspawn/engine/model.hpp"
#include "xspawn/optim.hpp"

namespace xs::engine {

inline constexpr std::uint32_t kCheckpointVersion = 1;

// `extra`: any text kept in the header (xs::save keeps the training state there); loadCheckpoint
// returns it. Writes atomically and durably (path + ".tmp", fsync, rename, fsync of the directory). The
// model's step counter (Model::step) is not saved: a trainer restores it with setStep. opt may
// be null.
void saveCheckpoint(const std::string& path, Model& model, optim::Optimizer* opt, const std::string& extra = {});
// Restores into a model (and optimizer) built with the same layout; throws CheckpointError on
// a missing, truncated, corrupt or mismatching file, leaving the model untouched.
std::string loadCheckpoint(const std::string& path, Model& model, optim::Optimizer* opt);

}  // namespace xs::engine
