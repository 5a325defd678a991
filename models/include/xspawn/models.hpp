// models.hpp: the built-in networks (mlp, convnet, lenet5, alexnet, resnet18) as ordinary
// functions that build xs::nn layers, exactly as a user builds their own; and the by-name
// construction `xspawn train --model NAME` uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xspawn/engine/device.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/nn.hpp"

namespace xs::models {

// mlp: flatten -> 256 -> 128 -> classes (784-256-128-10 on 28x28 grey images).
std::unique_ptr<nn::Sequential> mlp(int numClasses = 10);
// convnet (seed 004): [1,28,28] conv5p1 -> 32, pool 2; conv3 -> 64, pool 2 stride 1; conv3 ->
// 128, pool 2; fc 2048 -> classes.
std::unique_ptr<nn::Sequential> convnet(int channels = 1, int numClasses = 10);
// lenet5: conv5p2 -> 6, avg-pool 2; conv5 -> 16, avg-pool 2; 400 -> 120 -> 84 -> classes.
std::unique_ptr<nn::Sequential> lenet5(int channels = 1, int numClasses = 10);
// alexnet (seed 000, torchvision's layout): features to [256, 6, 6] (inputs of at least 63x63),
// adaptive average pool to 6x6, classifier 9216 -> 4096 -> 4096 -> classes with dropout.
std::unique_ptr<nn::Sequential> alexnet(int channels = 3, int numClasses = 10, float dropout = 0.5f);
// resnet18 (seed 003, CIFAR variant): 3x3 stem conv + BN + ReLU, four stages of two basic blocks
// (64, 128, 256, 512 channels), global average pool, fc -> classes.
std::unique_ptr<nn::Sequential> resnet18(int channels = 3, int numClasses = 10);

// A built-in network by name.
struct ModelConfig {
  std::string name = "mlp";  // mlp, convnet, lenet5, alexnet, resnet18
  int channels = 0;          // 0: the model's default (1 for mlp/convnet/lenet5, 3 otherwise)
  int imageSize = 0;         // 0: the model's default (28; 224 for alexnet, 32 for resnet18)
  int numClasses = 10;
  std::uint64_t seed = 0;    // the same seed gives bit-identical initial weights everywhere
  float dropout = 0.5f;      // alexnet's classifier dropout
};

// The built-in names, in the order above.
std::vector<std::string> names();
// The default per-sample input of a configuration: [c, h, w].
engine::Shape defaultInput(const ModelConfig& cfg);
// The network of a configuration; UsageError for an unknown name or an unusable image size.
engine::Network network(const ModelConfig& cfg);
// network(cfg) built on dev and initialised from cfg.seed.
std::unique_ptr<engine::Model> create(engine::Device& dev, const ModelConfig& cfg);

}  // namespace xs::models
