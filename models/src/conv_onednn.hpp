// conv_onednn.hpp: conv2d on oneDNN's convolution primitives (internal header); each call
// returns false when oneDNN has no primitive for the geometry, so the caller uses im2col.
#pragma once

#include "xspawn/engine/ops.hpp"

namespace xs::engine::detail {

bool conv2dForwardOneDnn(Device& dev, float* y, const float* x, const float* w, const float* b,
                         const ConvGeom& g);
bool conv2dBackwardOneDnn(Device& dev, float* dx, float* dw, float* db, const float* dy,
                          const float* x, const float* w, const ConvGeom& g);

// Channels-last convolution as GEMMs (conv_gemm_nhwc.cpp), chosen by useNhwcGemm: both
// activations NHWC and at most setNhwcGemmMaxPixels output pixels per image.
bool useNhwcGemm(const ConvGeom& g);
void conv2dForwardGemmNhwc(Device& dev, float* y, const float* x, const float* w, const float* b,
                           const ConvGeom& g);
void conv2dBackwardGemmNhwc(Device& dev, float* dx, float* dw, float* db, const float* dy,
                            const float* x, const float* w, const ConvGeom& g);

}  // namespace xs::engine::detail
