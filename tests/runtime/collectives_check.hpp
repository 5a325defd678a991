// collectives_check.hpp: every collective, op, type, count and algorithm checked against a
// serial reference on the calling rank; shared by the in-process tests and by the worker
// program the tests across machines run.
#pragma once

#include <cstddef>
#include <vector>

#include "xspawn/collectives.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::test {

// Rank `rank`'s test input of `count` elements (exact in every type, sums exact in float32).
std::vector<std::byte> input(DType type, int rank, std::size_t count);
// The reduction over `world` ranks of elements [first, first + count), computed serially.
std::vector<std::byte> reference(DType type, ReduceOp op, int world, std::size_t first, std::size_t count);
// Prints which result was wrong on this rank; returns 1.
int fail(const char* what, DType type, ReduceOp op, std::size_t count, const char* algo);

// Runs the whole check on this rank (all ranks must call it); 0 when every result matched,
// else 1 after printing the first mismatch.
int checkEverything(int rank, const Flags& flags);

}  // namespace xs::test
