// grad_sync.cpp: the models' layout check across ranks, binding the gradients to the shared heap,
// and the step's all-reduce-mean (see grad_sync.hpp).
#include "grad_sync.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fnv.hpp"
#include "telemetry.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/error.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::detail {
namespace {

static_assert(kStepStats * sizeof(float) == 64, "the gradients after the statistics stay 64-byte aligned");

// The model's parameter layout in one number: names, shapes and offsets (FNV-1a).
std::uint64_t layoutHash(engine::Model& model) {
  std::uint64_t h = kFnvOffset;
  for (const engine::ParamView& v : model.params().views()) {
    h = fnv1a(v.name.data(), v.name.size(), h);
    h = fnv1a(&v.offset, sizeof v.offset, h);
    h = fnv1a(&v.count, sizeof v.count, h);
  }
  return h;
}

struct Layout {
  std::uint64_t hash;
  std::uint64_t floats;
  std::uint64_t buffers;
};

// Every rank must train the same network: otherwise the gradient all-reduce would mix unrelated
// values (or, with other sizes, fail with a less helpful message).
void checkSameModel(engine::Model& model) {
  Layout mine{layoutHash(model), model.params().size(), model.buffers().size()};
  std::vector<Layout> all = xs::mesh_reduce("optimizer_step: model layout", mine,
                                            [](const std::vector<Layout>& v) { return v; });
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r].hash == all[0].hash && all[r].floats == all[0].floats && all[r].buffers == all[0].buffers) continue;
    XS_THROW(ShapeError,
             fmt::format("optimizer_step: rank {}'s model has {} parameter floats ({} running statistics) but rank "
                         "0's has {} ({}), or their layers differ: every rank must build the same network for "
                         "the same input shape and classes",
                         r, all[r].floats, all[r].buffers, all[0].floats, all[0].buffers));
  }
}

}  // namespace

GradientSync::GradientSync(engine::Model& model, std::size_t bucketBytes)
    : model_(model), count_(model.gradientCount()) {
  if (xs::world_size() == 1) return;
  checkSameModel(model);
  // Every rank allocates at the same point of the program, so the buffers line up in the heap.
  shared_ = static_cast<float*>(xs::shared_alloc((kStepStats + count_) * sizeof(float)));
  model_.bindGradients(shared_ + kStepStats, count_);
  const std::size_t bucketFloats = bucketBytes / sizeof(float);
  if (bucketFloats == 0 || bucketFloats >= count_) return;  // one all-reduce after backward
  reducer_ = std::make_unique<BucketReducer>(shared_, kStepStats + count_, kStepStats, bucketFloats);
  model_.setGradReadyHook([this](std::size_t offset, std::size_t count) {
    if (armed_) reducer_->ready(offset, count);
  });
}

GradientSync::~GradientSync() {
  if (reducer_) model_.setGradReadyHook({});
}

void GradientSync::allReduce(std::span<float> stats) {
  XS_CHECK(stats.size() <= kStepStats, UsageError,
           fmt::format("optimizer_step: {} statistics given, at most {} travel with the gradients", stats.size(),
                       kStepStats));
  if (!shared_) return;
  model_.params().grads();  // zeros into views zeroGrad cleared and no backward wrote since
  std::fill(shared_, shared_ + kStepStats, 0.f);
  std::copy(stats.begin(), stats.end(), shared_);
  xs::CollectiveOptions opt;
  opt.tag = "gradients";
  if (reducer_ && armed_) {
    // The buckets of this backward, then what is left: the bucket thread's all-reduces overlap
    // backward, so the rank's collective time is this wait after it.
    telemetry::Span span(Category::kCollectiveWait, "gradient buckets");
    reducer_->finish();
  }
  else
    xs::all_reduce(shared_, shared_, kStepStats + count_, xs::DType::kFloat32, xs::ReduceOp::kMean, opt);
  std::copy(shared_, shared_ + stats.size(), stats.begin());
  engine::ParamStore& buffers = model_.buffers();
  if (buffers.size() > 0) {
    opt.tag = "running statistics";
    xs::all_reduce(buffers.values(), buffers.values(), buffers.size(), xs::DType::kFloat32,
                   xs::ReduceOp::kMean, opt);
  }
  arm();  // the next backward's buckets
}

GradientSync& gradientSync(engine::Model& model, const DataParallelOptions& options) {
  if (auto* sync = dynamic_cast<GradientSync*>(model.attachment())) return *sync;
  auto sync = std::make_unique<GradientSync>(model, options.bucketBytes);
  GradientSync& s = *sync;
  model.setAttachment(std::move(sync));
  return s;
}

}  // namespace xs::detail
