// collectives_check.hpp: every collective, op, type, count and algorithm checked against a
// serial reference on the calling rank; shared by the in-process tests and by the worker
// program the tests across machines run.
#pragma once

#include "xspawn/xspawn.hpp"

namespace xs::test {

// Runs the whole check on this rank (all ranks must call it); 0 when every result matched,
// else 1 after printing the first mismatch.
int checkEverything(int rank, const Flags& flags);

}  // namespace xs::test
