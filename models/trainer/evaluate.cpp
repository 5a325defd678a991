// evaluate.cpp: test-set evaluation split across ranks and the weights hash.
#include "evaluate.hpp"

#include <algorithm>

#include "xspawn/collectives.hpp"
#include "xspawn/data/rng.h"
#include "xspawn/xspawn.hpp"

namespace xs::train {

EvalResult evaluate(engine::Model& model, const data::Dataset& test, const data::Transform& transform,
                    int batchSize) {
  const xs::Slice slice = xs::slice_of(static_cast<std::size_t>(test.size()), xs::get_ordinal(), xs::world_size());
  const std::size_t per = transform.outSize();
  std::vector<float> images(per * static_cast<std::size_t>(batchSize));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batchSize));
  double sums[3] = {0, 0, 0};  // correct, loss * images, images
  for (std::size_t first = slice.first; first < slice.first + slice.size; first += batchSize) {
    const int n = static_cast<int>(std::min<std::size_t>(batchSize, slice.first + slice.size - first));
    for (int i = 0; i < n; ++i) {
      const auto index = static_cast<std::int64_t>(first) + i;
      data::SampleRng rng(0, 0, static_cast<std::uint64_t>(index));  // unused: no random steps
      transform.apply(test.image(index), images.data() + per * i, rng);
      labels[i] = test.labels[static_cast<std::size_t>(index)];
    }
    engine::StepResult r = model.evaluate(images.data(), labels.data(), n);
    sums[0] += r.correct;
    sums[1] += static_cast<double>(r.loss) * n;
    sums[2] += n;
  }
  xs::CollectiveOptions opt;
  opt.tag = "evaluation";
  xs::all_reduce(sums, sums, 3, xs::DType::kFloat64, xs::ReduceOp::kSum, opt);
  EvalResult e;
  e.correct = static_cast<std::int64_t>(sums[0]);
  e.count = static_cast<std::int64_t>(sums[2]);
  e.accuracy = e.count > 0 ? sums[0] / sums[2] : 0;
  e.loss = e.count > 0 ? sums[1] / sums[2] : 0;
  return e;
}

std::uint64_t weightsHash(engine::Model& model) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (engine::ParamStore* store : {&model.params(), &model.buffers()}) {
    const auto* p = reinterpret_cast<const unsigned char*>(store->values());
    const std::size_t bytes = store->size() * sizeof(float);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  }
  return h;
}

std::vector<std::uint64_t> gatherHashes(std::uint64_t hash) {
  return xs::mesh_reduce("weights_hash", hash, [](const std::vector<std::uint64_t>& all) { return all; });
}

}  // namespace xs::train
