// networks.cpp: the five model layouts (mlp, convnet, lenet5, alexnet, resnet18), named like
// their PyTorch counterparts so parameters map one to one.
#include <algorithm>

#include "xspawn/engine/error.hpp"
#include "xspawn/engine/model.hpp"

namespace xs::engine {
namespace {

std::unique_ptr<Sequential> mlp(const ModelConfig& cfg) {
  // [c, h, w] -> flatten -> 256 -> 128 -> classes (784-256-128-10 on 28x28 grey images)
  auto n = std::make_unique<Sequential>();
  n->add("flatten", makeFlatten())
      .add("fc1", makeLinear(0, 256)).add("relu1", makeRelu())
      .add("fc2", makeLinear(256, 128)).add("relu2", makeRelu())
      .add("fc3", makeLinear(128, cfg.numClasses));
  return n;
}

std::unique_ptr<Sequential> convnet(const ModelConfig& cfg, int c) {
  // Seed 004: [1,28,28] -conv5p1-> [32,26,26] -pool2-> [32,13,13] -conv3-> [64,11,11]
  // -pool2s1-> [64,10,10] -conv3-> [128,8,8] -pool2-> [128,4,4] -> fc 2048 -> classes
  auto n = std::make_unique<Sequential>();
  n->add("conv1", makeConv2d(c, 32, 5, 1, 1)).add("relu1", makeRelu()).add("maxpool1", makeMaxPool2d(2, 2))
      .add("conv2", makeConv2d(32, 64, 3)).add("relu2", makeRelu()).add("maxpool2", makeMaxPool2d(2, 1))
      .add("conv3", makeConv2d(64, 128, 3)).add("relu3", makeRelu()).add("maxpool3", makeMaxPool2d(2, 2))
      .add("flatten", makeFlatten())
      .add("fc1", makeLinear(0, cfg.numClasses));
  return n;
}

std::unique_ptr<Sequential> lenet5(const ModelConfig& cfg, int c) {
  // [1,28,28] -conv5p2-> [6,28,28] -avg2-> [6,14,14] -conv5-> [16,10,10] -avg2-> [16,5,5]
  // -> 400 -> 120 -> 84 -> classes
  auto n = std::make_unique<Sequential>();
  n->add("conv1", makeConv2d(c, 6, 5, 1, 2)).add("relu1", makeRelu()).add("pool1", makeAvgPool2d(2, 2))
      .add("conv2", makeConv2d(6, 16, 5)).add("relu2", makeRelu()).add("pool2", makeAvgPool2d(2, 2))
      .add("flatten", makeFlatten())
      .add("fc1", makeLinear(0, 120)).add("relu3", makeRelu())
      .add("fc2", makeLinear(120, 84)).add("relu4", makeRelu())
      .add("fc3", makeLinear(84, cfg.numClasses));
  return n;
}

std::unique_ptr<Sequential> alexnet(const ModelConfig& cfg, int c) {
  // torchvision: features [3,224,224] -> [256,6,6]; adaptive pool to 6x6; classifier 9216 ->
  // 4096 -> 4096 -> classes with dropout before the two hidden layers.
  auto f = std::make_unique<Sequential>();
  f->add("0", makeConv2d(c, 64, 11, 4, 2)).add("1", makeRelu()).add("2", makeMaxPool2d(3, 2))
      .add("3", makeConv2d(64, 192, 5, 1, 2)).add("4", makeRelu()).add("5", makeMaxPool2d(3, 2))
      .add("6", makeConv2d(192, 384, 3, 1, 1)).add("7", makeRelu())
      .add("8", makeConv2d(384, 256, 3, 1, 1)).add("9", makeRelu())
      .add("10", makeConv2d(256, 256, 3, 1, 1)).add("11", makeRelu()).add("12", makeMaxPool2d(3, 2));
  auto k = std::make_unique<Sequential>();
  k->add("0", makeDropout(cfg.dropout)).add("1", makeLinear(256 * 6 * 6, 4096)).add("2", makeRelu())
      .add("3", makeDropout(cfg.dropout)).add("4", makeLinear(4096, 4096)).add("5", makeRelu())
      .add("6", makeLinear(4096, cfg.numClasses));
  auto n = std::make_unique<Sequential>();
  n->add("features", std::move(f)).add("avgpool", makeAdaptiveAvgPool2d(6, 6))
      .add("flatten", makeFlatten()).add("classifier", std::move(k));
  return n;
}

std::unique_ptr<Sequential> resnet18(const ModelConfig& cfg, int c) {
  // Seed 003 (CIFAR): 3x3 stem conv + BN + ReLU, stages of 2 basic blocks with 64, 128, 256,
  // 512 channels (stride 2 from the second stage), global average pool, fc -> classes.
  auto n = std::make_unique<Sequential>();
  n->add("conv1", makeConv2d(c, 64, 3, 1, 1)).add("bn1", makeBatchNorm2d(64, true, true));  // + ReLU
  int in = 64;
  const int widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    auto stage = std::make_unique<Sequential>();
    // Every block's input is a ReLU's output (the stem's or the previous block's), so each block
    // hands back its input gradient already through that ReLU; all but the last receive theirs so.
    stage->add("0", makeBasicBlock(in, widths[s], s == 0 ? 1 : 2, true, true))
        .add("1", makeBasicBlock(widths[s], widths[s], 1, true, s < 3));
    in = widths[s];
    n->add("layer" + std::to_string(s + 1), std::move(stage));
  }
  n->add("avgpool", makeAdaptiveAvgPool2d(1, 1)).add("flatten", makeFlatten())
      .add("fc", makeLinear(512, cfg.numClasses));
  return n;
}

}  // namespace

Shape defaultInput(const ModelConfig& cfg) {
  bool colour = cfg.name == "alexnet" || cfg.name == "resnet18";
  int c = cfg.channels > 0 ? cfg.channels : (colour ? 3 : 1);
  int s = cfg.imageSize > 0 ? cfg.imageSize
                            : (cfg.name == "alexnet" ? 224 : cfg.name == "resnet18" ? 32 : 28);
  return Shape{c, s, s};
}

std::unique_ptr<Sequential> buildNetwork(const ModelConfig& cfg) {
  XS_CHECK(cfg.numClasses > 0, ArgumentError,
           "the number of classes must be positive, got " + std::to_string(cfg.numClasses));
  int c = defaultInput(cfg)[0];
  if (cfg.name == "mlp") return mlp(cfg);
  if (cfg.name == "convnet") return convnet(cfg, c);
  if (cfg.name == "lenet5") return lenet5(cfg, c);
  if (cfg.name == "alexnet") {
    XS_CHECK(defaultInput(cfg)[1] >= 63, ArgumentError,
             "alexnet needs images of at least 63x63, got " + std::to_string(defaultInput(cfg)[1]) +
                 ": use --image-size 63 or more");
    return alexnet(cfg, c);
  }
  if (cfg.name == "resnet18") return resnet18(cfg, c);
  XS_THROW(ArgumentError,
           "unknown model '" + cfg.name + "': use mlp, convnet, lenet5, alexnet or resnet18");
}

}  // namespace xs::engine
