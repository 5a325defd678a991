// minimal.cpp: the smallest complete training program (the README shows it): an MLP on
// Fashion-MNIST, data-parallel on 8 emulated cores.
#include <xspawn/data/catalog.hpp>
#include <xspawn/data/loader.hpp>
#include <xspawn/nn.hpp>
#include <xspawn/optim.hpp>
#include <xspawn/train.hpp>
#include <xspawn/xspawn.hpp>
namespace nn = xs::nn;
namespace data = xs::data;

void map_fn(int index, const xs::Flags& flags) {
  const data::Dataset train = data::loadDataset({}, data::Split::kTrain);  // Fashion-MNIST
  auto net = std::make_unique<nn::Sequential>();
  net->add("flatten", nn::Flatten()).add("fc1", nn::Linear(784, 128)).add("relu", nn::ReLU())
      .add("fc2", nn::Linear(128, 10));
  xs::engine::Device device(xs::device_options());  // this worker's emulated core
  xs::engine::Model model(device, {std::move(net), {1, 28, 28}, 10, "mlp"}, /*seed=*/1234);
  auto optimizer = xs::optim::AdamW(model, {.lr = 1e-3f});
  const data::Transform transform({}, 1, 28, 28);
  data::DistributedSampler sampler({train.size(), xs::world_size(), xs::get_ordinal(), true, 1234});
  data::ParallelLoader loader(train, transform, sampler, {.batchSize = 64});
  for (int epoch = 0; epoch < flags.get("epochs", 2); ++epoch) {
    loader.startEpoch(epoch);
    float loss[1] = {0};
    while (auto batch = loader.next()) {
      loss[0] = xs::train_step(model, *batch).loss;
      xs::optimizer_step(model, *optimizer, loss);  // gradients and loss: means over the cores
    }
    xs::master_print("epoch {}: loss {:.4f}", epoch + 1, loss[0]);
  }
}

int main(int argc, char** argv) { return xs::spawn_main(map_fn, argc, argv, 8); }
