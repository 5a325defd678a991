// evaluate.cpp: evaluation over a dataset split across ranks, and the replica check.
#include "xspawn/train.hpp"

#include <algorithm>

#include "fnv.hpp"
#include "telemetry.hpp"
#include "xspawn/collectives.hpp"
#include "xspawn/data/rng.hpp"
#include "xspawn/xspawn.hpp"

namespace xs {

EvalResult evaluate(engine::Model& model, const data::Dataset& test, const data::Transform& transform,
                    int batchSize) {
  detail::telemetry::Span span(detail::Category::kEval, "evaluate");
  const std::int64_t rank = xs::get_ordinal(), world = xs::world_size();
  const std::int64_t share = (test.size() - rank + world - 1) / world;  // images rank, rank + world, ...
  const std::size_t per = transform.outSize();
  model.checkSample(engine::Shape{transform.outChannels(), transform.outHeight(), transform.outWidth()});
  std::vector<float> images(per * static_cast<std::size_t>(batchSize));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batchSize));
  double sums[5] = {0, 0, 0, 0, 0};  // correct, loss * images, images; rank 0's whole batches: correct, images
  for (std::int64_t first = 0; first < share; first += batchSize) {
    const int n = static_cast<int>(std::min<std::int64_t>(batchSize, share - first));
    for (int i = 0; i < n; ++i) {
      const std::int64_t index = rank + (first + i) * world;
      data::SampleRng rng(0, 0, static_cast<std::uint64_t>(index));  // unused: no random steps
      transform.apply(test.image(index), images.data() + per * i, rng);
      labels[i] = test.labels[static_cast<std::size_t>(index)];
    }
    engine::StepResult r = model.evaluate(images.data(), labels.data(), n);
    sums[0] += r.correct;
    sums[1] += static_cast<double>(r.loss) * n;
    sums[2] += n;
    if (rank == 0 && n == batchSize) sums[3] += r.correct, sums[4] += n;
  }
  xs::CollectiveOptions opt;
  opt.tag = "evaluation";
  xs::all_reduce(sums, sums, 5, xs::DType::kFloat64, xs::ReduceOp::kSum, opt);
  EvalResult e;
  e.masterCorrect = static_cast<std::int64_t>(sums[3]);
  e.masterCount = static_cast<std::int64_t>(sums[4]);
  e.correct = static_cast<std::int64_t>(sums[0]);
  e.count = static_cast<std::int64_t>(sums[2]);
  e.accuracy = e.count > 0 ? sums[0] / sums[2] : 0;
  e.loss = e.count > 0 ? sums[1] / sums[2] : 0;
  return e;
}

std::uint64_t weights_hash(engine::Model& model) {
  std::uint64_t h = detail::kFnvOffset;
  // Read through const: a mutable values() counts every weight as changed (ParamStore::values).
  for (const engine::ParamStore* store : {&model.params(), &model.buffers()})
    h = detail::fnv1a(store->values(), store->size() * sizeof(float), h);
  return h;
}

std::vector<std::uint64_t> gather_weights_hashes(engine::Model& model) {
  const std::uint64_t hash = weights_hash(model);
  return xs::mesh_reduce("weights_hash", hash, [](const std::vector<std::uint64_t>& all) { return all; });
}

}  // namespace xs
