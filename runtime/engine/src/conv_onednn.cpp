// conv_onednn.cpp: conv2d through oneDNN's direct convolution primitives (forward, backward
// data, backward weights), NCHW at the interface and the primitives' own blocked layouts inside;
// bf16 feeds bf16 activations and weights with fp32 outputs and fp32 weight gradients.
#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "conv_onednn.hpp"
#include "device_internals.hpp"
#include "gemm.hpp"
#include "onednn_context.hpp"
#include "onednn_reorders.hpp"
#include "xspawn/error.hpp"
#include "xspawn/engine/tensor.hpp"

namespace xs::engine::detail {
namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// The staging buffers that every convolution of a device shares. A port's staged copy lives only
// within one call (converted in, read or written by the primitive, converted out), and calls run
// one at a time, so each port of every geometry stages in the buffer of its role. The roles keep
// apart the ports one call holds at once: the forward's src, weights and dst (A, B, C); the
// backward's dy for both passes (D, or E for the data pass when their layouts differ), x and dw
// of the weight pass (A, B), then w and dx of the data pass (A, C). One copy for all layers and
// batch sizes, where each geometry had its own nine (convnet at batch 16: the device's peak 13.7
// MiB instead of 18.1); a new batch size (an epoch's last, partial one) stages in memory touched.
enum StageRole { kStageA, kStageB, kStageC, kStageD, kStageE, kStageRoles };
struct Staging {
  Tensor buffers[kStageRoles];
  // Role r's buffer, grown to hold `n` floats (its contents need not survive a call).
  Tensor* reserve(Device& dev, StageRole r, std::size_t n) {
    if (buffers[r].empty() || n > buffers[r].numel())
      buffers[r] = Tensor(dev, Shape{static_cast<int>(n)}, "convolution staging");
    return &buffers[r];
  }
};

// A tensor crossing between our plain layout and a primitive's layout, through its role's
// staging buffer.
struct Port {
  memory::desc user, inner;
  // The memory objects of both layouts, made once: a call sets their data handles (made per
  // call, each was a few allocations).
  memory userMem, innerMem;
  bool same = true;
  dnnl::reorder toInner, toUser;  // built only where `own` has no reorder for the pair
  OwnReorder own;                  // ours in place of toInner or toUser, where it has one
  Tensor* stage = nullptr;         // Staging's buffer of this port's role
  void init(Device& dev, Staging& staging, StageRole role, const memory::desc& u, const memory::desc& in,
            bool input) {
    auto& eng = oneDnnContext().eng;
    user = u;
    inner = in;
    same = u == in;
    userMem = memory(u, eng, DNNL_MEMORY_NONE);
    innerMem = same ? userMem : memory(in, eng, DNNL_MEMORY_NONE);
    if (same) return;
    stage = staging.reserve(dev, role, (in.get_size() + 3) / 4);
    own = input ? OwnReorder::between(u, in) : OwnReorder::between(in, u);
    if (own) return;
    if (input) toInner = dnnl::reorder(memory(u, eng, nullptr), memory(in, eng, nullptr));
    else toUser = dnnl::reorder(memory(in, eng, nullptr), memory(u, eng, nullptr));
  }
  // The primitive's view of an input at p, converted (into to, or the staging buffer) when the
  // layouts differ.
  memory in(const float* p, float* to = nullptr) {
    userMem.set_data_handle(const_cast<float*>(p));
    if (same) return userMem;
    innerMem.set_data_handle(to ? to : stage->data());
    if (own) own(p, innerMem.get_data_handle());
    else toInner.execute(oneDnnContext().stream, userMem, innerMem);
    return innerMem;
  }
  // The primitive's layout at p itself: a buffer already in it (channel blocks, a kept copy).
  memory at(const float* p) {
    innerMem.set_data_handle(const_cast<float*>(p));
    return innerMem;
  }
  // Where the primitive writes an output destined for p.
  memory out(float* p) { return at(same ? p : stage->data()); }
  void finish(float* p) {
    if (same) return;
    if (own) return own(stage->data(), p);
    innerMem.set_data_handle(stage->data());
    userMem.set_data_handle(p);
    toUser.execute(oneDnnContext().stream, innerMem, userMem);
  }
};

struct Entry {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwdData;
  dnnl::convolution_backward_weights bwdWeights;
  Port src, wei, dst;               // forward
  Port bdDiffDst, bdWei, bdDiffSrc; // backward data
  Port bwSrc, bwDiffDst, bwDiffWei; // backward weights
  Tensor dwUser, dbUser;            // fp32 gradients before accumulation
  bool sharedDiffDst = false;       // both backward primitives read diff_dst in one layout
  // Native bf16: the weight gradient emulated (weightGradEmulated), its x and dy rounded here;
  // not where our kernel takes it, which rounds them as it reads them.
  bool roundedWeightGrad = false;
  bool wideWeightGrad = false;      // native bf16: the weight gradient on our kernel (useWideWeightGradientBf16)
  bool oneChannelWide = false;      // native bf16: the forward on our kernel (useOneChannelWideBf16)
  std::size_t scratchpadBytes = 0;
  memory scratchpadMem, biasMem, diffBiasMem;  // made once, as the ports' (scratchpad, bias)
  // keepSrc: the converted x of each call site (by x's address), kept from forward to backward.
  std::unordered_map<const float*, Tensor> keptSrc;
  // Emulated bf16 (gemm.hpp), and native bf16's emulated weight gradient: x of each call site,
  // w and dy rounded to bf16, in our layouts.
  std::unordered_map<const float*, Tensor> roundedSrc;
  Tensor roundedWei, roundedDiffDst, roundedStage;
};

// The kept tensor of call site x (keptSrc, roundedSrc). At most kKeptSites per geometry, so a
// caller passing a fresh buffer every step does not grow them without bound: past that both
// maps start again (keptSrc is keyed by rounded copies' addresses), and a backward that finds
// its x dropped converts it again.
constexpr std::size_t kKeptSites = 16;
Tensor& keptFor(Entry& e, std::unordered_map<const float*, Tensor>& sites, const float* x) {
  if (sites.size() >= kKeptSites && sites.find(x) == sites.end()) {
    e.keptSrc.clear();
    e.roundedSrc.clear();
  }
  return sites[x];
}

std::size_t srcCount(const ConvGeom& g) { return static_cast<std::size_t>(g.n) * g.c * g.h * g.w; }
std::size_t weiCount(const ConvGeom& g) { return static_cast<std::size_t>(g.oc) * g.c * g.kh * g.kw; }
std::size_t dstCount(const ConvGeom& g) { return static_cast<std::size_t>(g.n) * g.oc * g.oh() * g.ow(); }

constexpr int kScratchpadSlot = 3;  // Device scratch slot (0-2: im2col, 4-5: GEMM)

memory scratchpad(Device& dev, Entry& e) {
  e.scratchpadMem.set_data_handle(detail::scratch(dev, kScratchpadSlot, (e.scratchpadBytes + 3) / 4 + 1));
  return e.scratchpadMem;
}
// The bias (forward) or its gradient (backward weights) at p.
memory biasAt(memory& m, const float* p) {
  m.set_data_handle(const_cast<float*>(p));
  return m;
}

using Key = std::tuple<int, int, int, int, int, int, int, int, int, bool, bool, bool, bool, bool, bool>;

struct ConvCache : detail::KernelState {
  Staging staging;  // before the entries: their ports point into it
  std::map<Key, std::unique_ptr<Entry>> entries;
};
constexpr int kConvSlot = 0;

ConvCache& cache(Device& dev) {
  if (!detail::kernelState(dev, kConvSlot)) detail::setKernelState(dev, kConvSlot, std::make_unique<ConvCache>());
  return *static_cast<ConvCache*>(detail::kernelState(dev, kConvSlot));
}

// Native bf16, a convolution from fewer than 16 input channels (a first layer): its weight
// gradient runs emulated, the fp32 primitive on operands rounded to bf16, as the narrow
// convolutions do. oneDNN's AMX kernel for it reduces over few channels per tile row: convnet
// conv 1 (1 -> 32, batch 16) 0.43 ms against 0.12, AlexNet's (3 -> 64, 11x11, batch 32) 30.2
// against 25.3 (docs/engine.md). Where our vdpbf16ps kernels run, one channel into blocks of 16
// takes ours instead (wideWeightGrad below), on that pass's float32 layouts.
bool weightGradEmulated(const Device& dev, const ConvGeom& g) { return nativeBf16(dev) && g.c < 16; }

std::unique_ptr<Entry> build(Device& dev, const ConvGeom& g, bool bias, bool winograd) {
  auto& eng = oneDnnContext().eng;
  // Emulated bf16 runs the fp32 primitives on rounded operands (the callers round them).
  const dt act = nativeBf16(dev) ? dt::bf16 : dt::f32;
  const dt weightGradAct = weightGradEmulated(dev, g) ? dt::f32 : act;
  memory::dims srcD{g.n, g.c, g.h, g.w}, weiD{g.oc, g.c, g.kh, g.kw}, dstD{g.n, g.oc, g.oh(), g.ow()};
  memory::dims strides{g.stride, g.stride}, pad{g.pad, g.pad};
  // fp32 channels-last: the primitives read and write our NHWC tensors as they are, without the
  // reorders to and from nChw16c that `any` would pick (convnet fp32: 1.20x the step).
  const bool nspc = act == dt::f32 && g.srcNhwc && g.dstNhwc;
  const tag actTag = nspc ? tag::nhwc : tag::any;
  memory::desc srcFwd(srcD, act, actTag), weiAny(weiD, act, tag::any), dstFwd(dstD, dt::f32, actTag);
  memory::desc diffWeiAny(weiD, dt::f32, tag::any), biasMd({g.oc}, dt::f32, tag::a);
  // The backward passes of fp32 3x3 stride-1 convolutions with at least 16 input channels run
  // on oneDNN's Winograd F(4x4, 3x3) primitives (blocked layouts inside): 2.25x fewer
  // multiplies, measured 1.10x (convnet) to 1.23x (ResNet-18) the whole step; the data gradient
  // only on big passes (winogradDataGradient). Their gradients stay within the golden tests'
  // tolerance of PyTorch's; a Winograd forward does not (its rounding reaches ResNet-18's first
  // weight gradient through the batch-norms), so the forward stays direct.
  // setConvWinograd(false) or $XS_ENGINE_WINOGRAD=0: direct everywhere.
  // Emulated bf16 takes them too: they compute the convolution of its rounded operands with
  // fp32 arithmetic, to the same tolerance as fp32's direct passes.
  const bool wino = act == dt::f32 && winograd && g.kh == 3 && g.kw == 3 && g.stride == 1 && g.c >= 16;
  const auto direct = dnnl::algorithm::convolution_direct;
  const auto back = wino ? dnnl::algorithm::convolution_winograd : direct;
  const auto backData = wino && winogradDataGradient(g) ? dnnl::algorithm::convolution_winograd : direct;
  // A single input channel (a grey image's first layer, which needs no input gradient): the
  // weight gradient on oneDNN's own layout of dy (nChw16c) takes 1.16 ms where the NHWC kernel
  // takes 2.39 (convnet conv 1, batch 100); the max-pool after it hands dy over in that layout.
  const tag backTag = wino || g.c == 1 ? tag::any : actTag;
  memory::desc bDiffSrc(srcD, dt::f32, backTag), bDiffDst(dstD, act, backTag);
  // The weight gradient's operands: an emulated one in native mode is built as emulated mode's.
  const tag weightGradTag = weightGradAct == act ? backTag
                            : g.c == 1 || !(g.srcNhwc && g.dstNhwc) ? tag::any
                                                                             : tag::nhwc;
  memory::desc bSrc(srcD, weightGradAct, weightGradTag), wDiffDst(dstD, weightGradAct, weightGradTag);
  // Scratchpads come from the device arena instead of per-call heap allocations.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto fd = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, srcFwd, weiAny,
                                                   biasMd, dstFwd, strides, pad, pad)
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, srcFwd, weiAny,
                                                   dstFwd, strides, pad, pad);
  dnnl::convolution_forward::primitive_desc fpd(fd, attr, eng);
  dnnl::convolution_backward_data::primitive_desc dpd(
      dnnl::convolution_backward_data::desc(backData, bDiffSrc, weiAny, bDiffDst, strides, pad, pad), attr, eng, fpd);
  auto wd = bias ? dnnl::convolution_backward_weights::desc(back, bSrc, diffWeiAny, biasMd, wDiffDst, strides,
                                                            pad, pad)
                 : dnnl::convolution_backward_weights::desc(back, bSrc, diffWeiAny, wDiffDst, strides, pad, pad);
  dnnl::convolution_backward_weights::primitive_desc wpd(wd, attr, eng, fpd);
  auto e = std::make_unique<Entry>();
  e->fwd = dnnl::convolution_forward(fpd);
  e->bwdData = dnnl::convolution_backward_data(dpd);
  e->bwdWeights = dnnl::convolution_backward_weights(wpd);
  memory::desc srcU(srcD, dt::f32, g.srcNhwc ? tag::nhwc : tag::nchw), weiU(weiD, dt::f32, tag::oihw);
  memory::desc dstU(dstD, dt::f32, g.dstNhwc ? tag::nhwc : tag::nchw);
  memory::desc diffDstU(dstD, g.dyBf16 ? dt::bf16 : dt::f32, g.dstNhwc ? tag::nhwc : tag::nchw);
  Staging& st = cache(dev).staging;
  e->src.init(dev, st, kStageA, srcU, fpd.src_desc(), true);
  e->wei.init(dev, st, kStageB, weiU, fpd.weights_desc(), true);
  e->dst.init(dev, st, kStageC, dstU, fpd.dst_desc(), false);
  e->bwSrc.init(dev, st, kStageA, srcU, wpd.src_desc(), true);
  e->bwDiffWei.init(dev, st, kStageB, weiU, wpd.diff_weights_desc(), false);
  e->bwDiffDst.init(dev, st, kStageD, diffDstU, wpd.diff_dst_desc(), true);
  e->bdDiffDst.init(dev, st, kStageE, diffDstU, dpd.diff_dst_desc(), true);
  e->bdWei.init(dev, st, kStageA, weiU, dpd.weights_desc(), true);
  e->bdDiffSrc.init(dev, st, kStageC, srcU, dpd.diff_src_desc(), false);
  e->dwUser = Tensor(dev, Shape{g.oc, g.c, g.kh, g.kw}, "convolution weight gradient");
  e->dbUser = Tensor(dev, Shape{g.oc}, "convolution bias gradient");
  e->sharedDiffDst = dpd.diff_dst_desc() == wpd.diff_dst_desc();
  // Our vdpbf16ps kernel reads x and dy and writes dw in the layouts oneDNN's weight pass would:
  // bf16 blocks, or for one input channel (its fp32 pass on rounded copies) float32 ones.
  const dt wideAct = g.c == 1 ? dt::f32 : dt::bf16;
  const memory::desc srcWide(srcD, wideAct, g.c == 1 ? tag::nchw : tag::nChw16c),
      dstWide(dstD, wideAct, tag::nChw16c), weiWide(weiD, dt::f32, g.c == 1 ? tag::Acdb16a : tag::ABcd16b16a);
  e->wideWeightGrad = wideBf16Slot() && useWideWeightGradientBf16(dev, g) && wpd.src_desc() == srcWide &&
                      wpd.diff_dst_desc() == dstWide && wpd.diff_weights_desc() == weiWide;
  e->roundedWeightGrad = weightGradAct != act && !e->wideWeightGrad;
  e->oneChannelWide = wideBf16Slot() && useOneChannelWideBf16(dev, g) &&
                      fpd.dst_desc() == memory::desc(dstD, dt::f32, tag::nChw16c);
  for (auto& pd : {fpd.scratchpad_desc(), dpd.scratchpad_desc(), wpd.scratchpad_desc()})
    e->scratchpadBytes = std::max(e->scratchpadBytes, pd.get_size());
  const memory::desc scratchpadMd({static_cast<memory::dim>(std::max<std::size_t>(e->scratchpadBytes, 1))}, dt::u8,
                                  tag::a);
  e->scratchpadMem = memory(scratchpadMd, eng, DNNL_MEMORY_NONE);
  e->biasMem = memory(biasMd, eng, DNNL_MEMORY_NONE);
  e->diffBiasMem = memory(biasMd, eng, DNNL_MEMORY_NONE);
  return e;
}

// The cached primitives of this geometry, or null when oneDNN has none for it.
Entry* entry(Device& dev, const ConvGeom& g, bool bias) {
  const bool winograd = convWinograd();
  Key k{g.n, g.c, g.h, g.w, g.oc, g.kh, g.kw, g.stride, g.pad, bias, dev.precision() == Precision::kBf16,
        g.srcNhwc, g.dstNhwc, g.dyBf16, winograd};
  auto& c = cache(dev).entries;
  auto it = c.find(k);
  if (it == c.end()) {
    std::unique_ptr<Entry> e;
    try {
      e = build(dev, g, bias, winograd);
    } catch (const dnnl::error&) {
      e = nullptr;  // the caller falls back to im2col + GEMM
    }
    it = c.emplace(k, std::move(e)).first;
  }
  return it->second.get();
}

}  // namespace

bool winogradDataGradient(const ConvGeom& g) {
  // Multiply-adds from which the data gradient runs on Winograd.
  constexpr double kWinogradDataMacs = 1 << 30;
  return static_cast<double>(g.n) * g.h * g.w * g.c * g.oc * g.kh * g.kw >= kWinogradDataMacs;
}

bool conv2dGradsBlocked16OneDnn(Device& dev, const ConvGeom& g, bool bias, bool dx) {
  if (!g.srcNhwc || !g.dstNhwc || g.oc % 16 != 0 || (dx && g.c % 16 != 0)) return false;
  Entry* e = entry(dev, g, bias);
  if (!e) return false;
  const memory::desc dst({g.n, g.oc, g.oh(), g.ow()}, dt::f32, tag::nChw16c);
  if (e->bwDiffDst.inner != dst) return false;
  return !dx || (e->sharedDiffDst && e->bdDiffDst.inner == dst &&
                 e->bdDiffSrc.inner == memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nChw16c));
}

bool conv2dDxBlocked16OneDnn(Device& dev, const ConvGeom& g, bool bias) {
  if (!nativeBf16(dev) || !g.srcNhwc || !g.dstNhwc || g.c % 16 != 0) return false;
  Entry* e = entry(dev, g, bias);
  return e && e->bdDiffSrc.inner == memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nChw16c);
}

bool conv2dWritesBlocked16OneDnn(Device& dev, const ConvGeom& g, bool bias) {
  if (!nativeBf16(dev) || !g.dstNhwc || g.oc % 16 != 0) return false;
  Entry* e = entry(dev, g, bias);
  return e && e->dst.inner == memory::desc({g.n, g.oc, g.oh(), g.ow()}, dt::f32, tag::nChw16c);
}

bool conv2dOneChannelWideOnOurs(Device& dev, const ConvGeom& g, bool bias) {
  if (!nativeBf16(dev) || !g.dstNhwc || g.oc % 16 != 0) return false;
  Entry* e = entry(dev, g, bias);
  return e && e->oneChannelWide && e->wideWeightGrad;
}

bool conv2dForwardOneDnn(Device& dev, float* y, const float* x, const float* w, const float* b,
                         const ConvGeom& g) {
  Entry* e = entry(dev, g, b != nullptr);
  if (!e) return false;
  auto& c = oneDnnContext();
  if (e->oneChannelWide) {  // our kernel writes the primitive's layout (no copy of x to keep)
    float* out = g.dstBlocked ? y : static_cast<float*>(e->dst.out(y).get_data_handle());
    conv2dForwardOneChannelWideBf16(dev, out, x, w, b, g);
    if (!g.dstBlocked) e->dst.finish(y);
    return true;
  }
  if (emulatesBf16(dev)) {
    if (!g.xRounded)
      x = roundedCopy(dev, g.keepSrc ? keptFor(*e, e->roundedSrc, x) : e->roundedStage, x, srcCount(g));
    if (!g.wRounded) w = roundedCopy(dev, e->roundedWei, w, weiCount(g));
  }
  float* keep = nullptr;
  if (g.keepSrc && !e->src.same) {
    Tensor& k = keptFor(*e, e->keptSrc, x);
    if (k.empty()) k = Tensor(dev, Shape{static_cast<int>((e->src.inner.get_size() + 3) / 4)}, "convolution staging");
    keep = k.data();
  }
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, e->src.in(x, keep)},
      {DNNL_ARG_WEIGHTS, e->wei.in(w)},
      {DNNL_ARG_DST, g.dstBlocked ? e->dst.at(y) : e->dst.out(y)},  // blocked: as it is
      {DNNL_ARG_SCRATCHPAD, scratchpad(dev, *e)}};
  if (b) args.emplace(DNNL_ARG_BIAS, biasAt(e->biasMem, b));
  e->fwd.execute(c.stream, args);
  if (!g.dstBlocked) e->dst.finish(y);
  c.stream.wait();
  return true;
}

bool conv2dBackwardOneDnn(Device& dev, float* dx, float* dw, float* db, const float* dy,
                          const float* x, const float* w, const ConvGeom& g) {
  Entry* e = entry(dev, g, db != nullptr);
  if (!e) return false;
  auto& c = oneDnnContext();
  // Emulated bf16: x as the forward rounded it, dy rounded (bf16 dy is exact in the fp32 kernels);
  // the same for native bf16's emulated weight gradient, x rounded here. A data-only call (no dw)
  // prepares nothing for the weight gradient.
  const bool emulated = emulatesBf16(dev);
  bool keptValid = g.keepSrc;
  if (emulated || (dw && e->roundedWeightGrad)) {
    if (dw && !g.xRounded) {
      auto r = g.keepSrc ? e->roundedSrc.find(x) : e->roundedSrc.end();
      keptValid = r != e->roundedSrc.end();
      x = keptValid ? r->second.data() : roundedCopy(dev, e->roundedStage, x, srcCount(g));
    }
    if (!g.dyBf16 && !g.dyRounded) dy = roundedCopy(dev, e->roundedDiffDst, dy, dstCount(g));
  }
  if (emulated && dx && !g.wRounded) w = roundedCopy(dev, e->roundedWei, w, weiCount(g));  // only dx reads w
  // Blocked dy and dx (g.dyBlocked / g.dxBlocked) are already in the primitives' layout.
  auto weightGradDiffDst = [&] {
    return g.dyBlocked ? e->bwDiffDst.at(dy) : e->bwDiffDst.in(dy);
  };
  memory diffDst;
  // Overwriting, the gradients go straight to the flat buffer; adding, through dwUser / dbUser.
  float* dwOut = g.overwriteGrads ? dw : e->dwUser.data();
  float* dbOut = g.overwriteGrads ? db : e->dbUser.data();
  if (dw) {
    // A fused max-pool's gradient (g.nhwcPool, only where conv2dBackward found our weight pass):
    // the pass spreads it itself.
    if (!g.nhwcPool) diffDst = weightGradDiffDst();
    memory src;
    auto kept = keptValid && e->src.inner == e->bwSrc.inner ? e->keptSrc.find(x) : e->keptSrc.end();
    if (kept != e->keptSrc.end()) src = e->bwSrc.at(kept->second.data());
    else src = e->bwSrc.in(x);
    memory diffWei = e->bwDiffWei.out(dwOut);
    if (e->wideWeightGrad) {
      conv2dWeightGradientWideBf16(dev, static_cast<float*>(diffWei.get_data_handle()), db ? dbOut : nullptr,
                                   g.nhwcPool ? nullptr : diffDst.get_data_handle(), src.get_data_handle(), g);
    } else {
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                           {DNNL_ARG_DIFF_DST, diffDst},
                                           {DNNL_ARG_DIFF_WEIGHTS, diffWei},
                                           {DNNL_ARG_SCRATCHPAD, scratchpad(dev, *e)}};
      if (db) args.emplace(DNNL_ARG_DIFF_BIAS, biasAt(e->diffBiasMem, dbOut));
      e->bwdWeights.execute(c.stream, args);
    }
    e->bwDiffWei.finish(dwOut);
  }
  if (dx) {
    memory diffSrc = g.dxBlocked ? e->bdDiffSrc.at(dx) : e->bdDiffSrc.out(dx);
    const memory dataDiffDst = !e->sharedDiffDst ? e->bdDiffDst.in(dy) : dw ? diffDst : weightGradDiffDst();
    e->bwdData.execute(c.stream, {{DNNL_ARG_DIFF_DST, dataDiffDst},
                                  {DNNL_ARG_WEIGHTS, e->bdWei.in(w)},
                                  {DNNL_ARG_DIFF_SRC, diffSrc},
                                  {DNNL_ARG_SCRATCHPAD, scratchpad(dev, *e)}});
    if (!g.dxBlocked) e->bdDiffSrc.finish(dx);
  }
  c.stream.wait();
  if (g.overwriteGrads || !dw) return true;
  const float* gw = e->dwUser.data();
  for (std::size_t i = 0, n = e->dwUser.numel(); i < n; ++i) dw[i] += gw[i];
  if (db)
    for (int i = 0; i < g.oc; ++i) db[i] += e->dbUser.data()[i];
  return true;
}

}  // namespace xs::engine::detail
