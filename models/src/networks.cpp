// networks.cpp: the five built-in networks (mlp, convnet, lenet5, alexnet, resnet18), built
// from the public xs::nn layers and named like their PyTorch counterparts so parameters map one
// to one.
#include <algorithm>

#include "xspawn/error.hpp"
#include "xspawn/models.hpp"

namespace xs::models {

using nn::Sequential;


std::unique_ptr<Sequential> mlp(int numClasses) {
  // [c, h, w] -> flatten -> 256 -> 128 -> classes (784-256-128-10 on 28x28 grey images)
  auto n = std::make_unique<Sequential>();
  n->add("flatten", nn::Flatten())
      .add("fc1", nn::Linear(0, 256)).add("relu1", nn::ReLU())
      .add("fc2", nn::Linear(256, 128)).add("relu2", nn::ReLU())
      .add("fc3", nn::Linear(128, numClasses));
  return n;
}

std::unique_ptr<Sequential> convnet(int c, int numClasses) {
  // Seed 004: [1,28,28] -conv5p1-> [32,26,26] -pool2-> [32,13,13] -conv3-> [64,11,11]
  // -pool2s1-> [64,10,10] -conv3-> [128,8,8] -pool2-> [128,4,4] -> fc 2048 -> classes
  auto n = std::make_unique<Sequential>();
  n->add("conv1", nn::Conv2d(c, 32, 5, 1, 1)).add("relu1", nn::ReLU()).add("maxpool1", nn::MaxPool2d(2, 2))
      .add("conv2", nn::Conv2d(32, 64, 3)).add("relu2", nn::ReLU()).add("maxpool2", nn::MaxPool2d(2, 1))
      .add("conv3", nn::Conv2d(64, 128, 3)).add("relu3", nn::ReLU()).add("maxpool3", nn::MaxPool2d(2, 2))
      .add("flatten", nn::Flatten())
      .add("fc1", nn::Linear(0, numClasses));
  return n;
}

std::unique_ptr<Sequential> lenet5(int c, int numClasses) {
  // [1,28,28] -conv5p2-> [6,28,28] -avg2-> [6,14,14] -conv5-> [16,10,10] -avg2-> [16,5,5]
  // -> 400 -> 120 -> 84 -> classes
  auto n = std::make_unique<Sequential>();
  n->add("conv1", nn::Conv2d(c, 6, 5, 1, 2)).add("relu1", nn::ReLU()).add("pool1", nn::AvgPool2d(2, 2))
      .add("conv2", nn::Conv2d(6, 16, 5)).add("relu2", nn::ReLU()).add("pool2", nn::AvgPool2d(2, 2))
      .add("flatten", nn::Flatten())
      .add("fc1", nn::Linear(0, 120)).add("relu3", nn::ReLU())
      .add("fc2", nn::Linear(120, 84)).add("relu4", nn::ReLU())
      .add("fc3", nn::Linear(84, numClasses));
  return n;
}

std::unique_ptr<Sequential> alexnet(int c, int numClasses, float dropout) {
  // torchvision: features [3,224,224] -> [256,6,6]; adaptive pool to 6x6; classifier 9216 ->
  // 4096 -> 4096 -> classes with dropout before the two hidden layers.
  auto f = std::make_unique<Sequential>();
  f->add("0", nn::Conv2d(c, 64, 11, 4, 2)).add("1", nn::ReLU()).add("2", nn::MaxPool2d(3, 2))
      .add("3", nn::Conv2d(64, 192, 5, 1, 2)).add("4", nn::ReLU()).add("5", nn::MaxPool2d(3, 2))
      .add("6", nn::Conv2d(192, 384, 3, 1, 1)).add("7", nn::ReLU())
      .add("8", nn::Conv2d(384, 256, 3, 1, 1)).add("9", nn::ReLU())
      .add("10", nn::Conv2d(256, 256, 3, 1, 1)).add("11", nn::ReLU()).add("12", nn::MaxPool2d(3, 2));
  auto k = std::make_unique<Sequential>();
  k->add("0", nn::Dropout(dropout)).add("1", nn::Linear(256 * 6 * 6, 4096)).add("2", nn::ReLU())
      .add("3", nn::Dropout(dropout)).add("4", nn::Linear(4096, 4096)).add("5", nn::ReLU())
      .add("6", nn::Linear(4096, numClasses));
  auto n = std::make_unique<Sequential>();
  n->add("features", std::move(f)).add("avgpool", nn::AdaptiveAvgPool2d(6, 6))
      .add("flatten", nn::Flatten()).add("classifier", std::move(k));
  return n;
}

std::unique_ptr<Sequential> resnet18(int c, int numClasses) {
  // Seed 003 (CIFAR): 3x3 stem conv + BN + ReLU, stages of 2 basic blocks with 64, 128, 256,
  // 512 channels (stride 2 from the second stage), global average pool, fc -> classes.
  auto n = std::make_unique<Sequential>();
  n->add("conv1", nn::Conv2d(c, 64, 3, 1, 1)).add("bn1", nn::BatchNorm2d(64, true, true));  // + ReLU
  int in = 64;
  const int widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    auto stage = std::make_unique<Sequential>();
    // Every block's input is a ReLU's output (the stem's or the previous block's), so each block
    // hands back its input gradient already through that ReLU; all but the last receive theirs so.
    stage->add("0", nn::BasicBlock(in, widths[s], s == 0 ? 1 : 2, true, true))
        .add("1", nn::BasicBlock(widths[s], widths[s], 1, true, s < 3));
    in = widths[s];
    n->add("layer" + std::to_string(s + 1), std::move(stage));
  }
  n->add("avgpool", nn::AdaptiveAvgPool2d(1, 1)).add("flatten", nn::Flatten())
      .add("fc", nn::Linear(512, numClasses));
  return n;
}

std::vector<std::string> names() { return {"mlp", "convnet", "lenet5", "alexnet", "resnet18"}; }

engine::Shape defaultInput(const ModelConfig& cfg) {
  bool colour = cfg.name == "alexnet" || cfg.name == "resnet18";
  int c = cfg.channels > 0 ? cfg.channels : (colour ? 3 : 1);
  int s = cfg.imageSize > 0 ? cfg.imageSize
                            : (cfg.name == "alexnet" ? 224 : cfg.name == "resnet18" ? 32 : 28);
  return engine::Shape{c, s, s};
}

namespace {

std::unique_ptr<Sequential> byName(const ModelConfig& cfg) {
  XS_CHECK(cfg.numClasses > 0, UsageError,
           "the number of classes must be positive, got " + std::to_string(cfg.numClasses));
  const engine::Shape in = defaultInput(cfg);
  const int c = in[0];
  if (cfg.name == "mlp") return mlp(cfg.numClasses);
  if (cfg.name == "convnet") return convnet(c, cfg.numClasses);
  if (cfg.name == "lenet5") return lenet5(c, cfg.numClasses);
  if (cfg.name == "alexnet") {
    XS_CHECK(in[1] >= 63, UsageError,
             "alexnet needs images of at least 63x63, got " + std::to_string(in[1]) +
                 ": use --image-size 63 or more");
    return alexnet(c, cfg.numClasses, cfg.dropout);
  }
  if (cfg.name == "resnet18") return resnet18(c, cfg.numClasses);
  XS_THROW(UsageError, "unknown model '" + cfg.name + "': use mlp, convnet, lenet5, alexnet or resnet18");
}

}  // namespace

engine::Network network(const ModelConfig& cfg) {
  engine::Network n;
  n.layers = byName(cfg);
  n.input = defaultInput(cfg);
  n.numClasses = cfg.numClasses;
  n.name = cfg.name;
  return n;
}

std::unique_ptr<engine::Model> create(engine::Device& dev, const ModelConfig& cfg) {
  return std::make_unique<engine::Model>(dev, network(cfg), cfg.seed);
}

}  // namespace xs::models
