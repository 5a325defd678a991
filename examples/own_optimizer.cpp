// own_optimizer.cpp: an optimizer of one's own, signSGD with momentum (each weight moves by lr
// along the sign of its momentum), derived from xs::optim::Optimizer. It steps after backward on
// any number of cores; alone it can also step inside backward, view by view as each layer
// finishes its gradients (engine::Model::setOptimizerInBackward), to the same weights.
//
//   ./own_optimizer --nprocs 2 --max-steps 50
//   ./own_optimizer --nprocs 1 --max-steps 50 --step-in-backward 1   # the same hash as with 0
#include <cmath>
#include <memory>
#include <vector>

#include <xspawn/data/catalog.hpp>
#include <xspawn/data/loader.hpp>
#include <xspawn/error.hpp>
#include <xspawn/nn.hpp>
#include <xspawn/optim.hpp>
#include <xspawn/train.hpp>
#include <xspawn/xspawn.hpp>

namespace nn = xs::nn;
namespace data = xs::data;

class SignSgd : public xs::optim::Optimizer {
 public:
  SignSgd(xs::engine::Model& model, float lr, float beta)
      : Optimizer(model.params()), momentum_(model.params().size(), 0.f), beta_(beta) {
    lr_ = lr;
  }
  const char* kind() const override { return "signsgd"; }
  // After backward: every view from the whole gradient buffer.
  void step() override {
    checkNotInBackward("step()");
    const float* g = params_.grads();
    for (const auto& v : params_.views()) stepView(v.offset, v.count, g + v.offset);
    ++steps_;
  }

 protected:
  // Inside backward: the same update, one view at a time (beginViews, stepView..., endViews).
  bool stepsByViews() const override { return true; }
  void beginViews() override {}
  void stepView(std::size_t offset, std::size_t count, const float* grad) override {
    float* p = params_.values() + offset;  // counts the values as changed (bf16's copies follow)
    float* m = momentum_.data() + offset;
    for (std::size_t i = 0; i < count; ++i) {
      m[i] = beta_ * m[i] + (1.f - beta_) * grad[i];
      p[i] -= lr_ * (m[i] > 0.f ? 1.f : m[i] < 0.f ? -1.f : 0.f);
    }
  }
  void endViews() override { ++steps_; }

 private:
  std::vector<float> momentum_;  // kept out of checkpoints in this example
  float beta_;
};

void map_fn(int, const xs::Flags& flags) {
  const data::Dataset train = data::loadDataset({}, data::Split::kTrain);  // Fashion-MNIST
  auto net = std::make_unique<nn::Sequential>();
  net->add("flatten", nn::Flatten()).add("fc1", nn::Linear(784, 128)).add("relu", nn::ReLU())
      .add("fc2", nn::Linear(128, 10));
  xs::engine::Device device(xs::device_options());
  xs::engine::Model model(device, {std::move(net), {1, 28, 28}, 10, "mlp"}, /*seed=*/1234);
  SignSgd optimizer(model, flags.get("lr", 1e-3f), 0.9f);
  if (flags.get("step-in-backward", 0) != 0) {
    XS_CHECK(xs::world_size() == 1, xs::UsageError, "--step-in-backward 1 needs --nprocs 1: ranks all-reduce first");
    model.setOptimizerInBackward(&optimizer);  // refused unless the optimizer steps by views
  }
  xs::master_print("optimizer {}: step {} backward", optimizer.kind(), optimizer.inBackward() ? "inside" : "after");
  const data::Transform transform({}, 1, 28, 28);
  data::DistributedSampler sampler({train.size(), xs::world_size(), xs::get_ordinal(), true, 1234});
  data::ParallelLoader loader(train, transform, sampler, {.batchSize = 64});
  const long maxSteps = flags.get("max-steps", 100L);
  loader.startEpoch(0);
  float loss[1] = {0};
  for (long step = 0; step < maxSteps; ++step) {
    auto batch = loader.next();
    if (!batch) break;
    loss[0] = xs::train_step(model, *batch).loss;
    xs::optimizer_step(model, optimizer, loss);  // alone and inside backward: only counts the step
    loader.recycle(std::move(*batch));
  }
  xs::master_print("{} steps, loss {:.4f}, weights hash {:016x}", optimizer.steps(), loss[0], xs::weights_hash(model));
}

int main(int argc, char** argv) { return xs::spawn_main(map_fn, argc, argv, 8); }
