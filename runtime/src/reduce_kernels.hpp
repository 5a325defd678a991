// reduce_kernels.hpp: the element-wise reductions of the collectives: N sources reduced in
// rank order (so every rank computes bit-identical results), written to one or more
// destinations, with the mean's scaling fused in.
#pragma once

#include <cstddef>

#include "xspawn/collectives.hpp"

namespace xs::detail {

// For i < n: v = srcs[0][i] op srcs[1][i] op ... (left to right); v *= scale for kMean;
// dsts[d][i] = v for every d. kMean sums; `meanDivisor` is N. bfloat16 accumulates in float32.
// Destinations may alias sources (each block is read whole before it is written).
void reduceInto(DType type, ReduceOp op, const void* const* srcs, int nsrc, void* const* dsts,
                int ndst, std::size_t n, int meanDivisor);

// dst = src / divisor (the mean of one source: a world of one).
void scaleCopy(DType type, const void* src, void* dst, std::size_t n, int divisor);

}  // namespace xs::detail
