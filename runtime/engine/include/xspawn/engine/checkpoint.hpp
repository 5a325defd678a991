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
// returns it. Written with writeFileAtomically. The
// model's step counter (Model::step) is not saved: a trainer restores it with setStep. opt may
// be null.
void saveCheckpoint(const std::string& path, Model& model, optim::Optimizer* opt, const std::string& extra = {});
// Restores into a model (and optimizer) built with the same layout; throws CheckpointError on
// a missing, truncated, corrupt or mismatching file, leaving the model untouched.
std::string loadCheckpoint(const std::string& path, Model& model, optim::Optimizer* opt);

// Replaces `path` with `bytes` atomically and durably: written to an unnamed file in the same
// directory (O_TMPFILE: a process killed meanwhile leaves nothing), fsynced, named path + ".tmp",
// renamed over path, the directory fsynced. A reader sees the old file or the new one. A
// failure (a full disk) removes what it wrote and throws CheckpointError naming `what`.
void writeFileAtomically(const std::string& path, const std::string& bytes, const std::string& what = "file");

}  // namespace xs::engine
