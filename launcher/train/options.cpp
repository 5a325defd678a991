// options.cpp: parsing `xspawn train` options (Boost.Program_options) and the defaults each
// model gets: the seeds' settings, tuned so the default run is short and accurate.
#include "options.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "xspawn/error.hpp"
#include "xspawn/data/catalog.hpp"

namespace xs::train {
namespace po = boost::program_options;
namespace {

constexpr double kAdamBeta2 = 0.999;  // torch.optim.Adam's

// Per-model defaults (every one can be overridden on the command line).
struct ModelDefaults {
  const char* model;
  const char* optimizer;
  double lr, momentum, weightDecay;
  int batchSize, epochs;
  const char* lrSchedule;
  int lrStep;
  double lrDecay;
  const char* precision;
  double beta2 = kAdamBeta2;    // Adam's second beta (the first is torch's 0.9 everywhere)
  double labelSmoothing = 0.0;  // torch.nn.CrossEntropyLoss(label_smoothing=...)
};

// convnet: the default run (8 workers, Fashion-MNIST): 91% in 3 epochs with a one-cycle
// schedule, Adam's betas (0.9, 0.99) and label smoothing 0.2, over seeds (docs/training.md).
// alexnet: seed 000. resnet18: seed 003.
constexpr ModelDefaults kDefaults[] = {
    {"mlp", "sgd", 0.05, 0.9, 0.0, 64, 5, "step", 0, 0.1, "fp32"},
    {"convnet", "adam", 3e-3, 0.0, 0.0, 16, 3, "onecycle", 0, 0.1, "bf16", 0.99, 0.2},
    {"lenet5", "adam", 1e-3, 0.0, 0.0, 64, 5, "step", 0, 0.1, "fp32"},
    {"alexnet", "adam", 1e-3, 0.0, 0.0, 32, 1, "step", 0, 0.1, "fp32"},
    {"resnet18", "sgd", 0.1, 0.9, 5e-4, 128, 30, "step", 10, 0.1, "fp32"},
};

po::options_description describeOptions() {
  po::options_description d("xspawn train options");
  d.add_options()
      ("help,h", "show this help")
      ("plan", "validate the options and the dataset, print the shared-memory plan (used by xspawn)")
      ("model", po::value<std::string>(), "mlp | convnet (default) | lenet5 | alexnet | resnet18")
      ("dataset", po::value<std::string>(), "fashion-mnist | mnist | cifar10 | synthetic (default: fashion-mnist when installed, else synthetic)")
      ("data-dir", po::value<std::string>(), "directory of the dataset files (default: /usr/share/datasets/fashion-mnist for fashion-mnist)")
      ("image-size", po::value<int>(), "side of the images the model sees, resized bilinearly (default: 224 alexnet, 32 resnet18, the dataset's own otherwise)")
      ("train-size", po::value<std::int64_t>(), "use only the first N training images (default: all)")
      ("test-size", po::value<std::int64_t>(), "use only the first N test images (default: all)")
      ("augment", po::value<std::string>(), "on | off: random crop (padding 4) and flip (default: on for resnet18)")
      ("epochs", po::value<int>(), "passes over the training set (default per model)")
      ("batch-size", po::value<int>(), "batch of EACH worker (default per model: convnet 16, alexnet 32, resnet18 128)")
      ("optimizer", po::value<std::string>(), "sgd | adam (default per model)")
      ("lr", po::value<double>(), "learning rate (default per model)")
      ("momentum", po::value<double>(), "SGD momentum")
      ("betas", po::value<std::string>(), "Adam's B1,B2, as torch's betas (default 0.9,0.999; convnet 0.9,0.99)")
      ("label-smoothing", po::value<double>(), "eps in [0, 1]: the loss's target is 1 - eps on the label plus eps / classes on every class, as torch's CrossEntropyLoss(label_smoothing) (default 0; convnet 0.2)")
      ("weight-decay", po::value<double>(), "L2 weight decay")
      ("lr-schedule", po::value<std::string>(), "step: x--lr-decay every --lr-step epochs (torch's StepLR) | onecycle: up from --lr/25 to --lr over the first 30% of the steps, then down to --lr/25e4 along a half cosine, set before every step (torch's OneCycleLR) (default per model)")
      ("lr-step", po::value<int>(), "with --lr-schedule step: decay the learning rate every N epochs (0: never)")
      ("lr-decay", po::value<double>(), "factor of each decay (default per model)")
      ("seed", po::value<std::uint64_t>(), "seed of the weights, the shuffling and the augmentation (default 1234)")
      ("precision", po::value<std::string>(), "fp32 | bf16: bf16 products, fp32 accumulation (default: bf16 for convnet, fp32 otherwise)")
      ("eval-every", po::value<int>(), "evaluate on the test set every N epochs (0: only at the end; default 1)")
      ("checkpoint-dir", po::value<std::string>(), "write a checkpoint there after every epoch and at the end; a restarted job (xspawn --max-restarts) resumes from it by itself")
      ("checkpoint-every", po::value<std::int64_t>(), "also write a checkpoint every N optimizer steps, so a restart loses at most N steps (0, the default: per epoch only)")
      ("resume", po::value<std::string>(), "continue from the checkpoint in this directory")
      ("metrics", po::value<std::string>(), "append one JSON line per epoch and evaluation to FILE")
      ("max-steps", po::value<std::int64_t>(), "stop after N optimizer steps in total (0: no limit)")
      ("log-every", po::value<std::int64_t>(), "print the progress line (when not on a terminal) and a metrics 'progress' event every N steps (0: only at the end of each epoch)")
      ("stop-at-accuracy", po::value<double>(), "stop at the first evaluation with at least this test accuracy, in percent (0: never)")
      ("device-memory", po::value<std::string>(), "memory of each emulated core, e.g. 2G (default 4G)")
      ("prefetch", po::value<int>(), "batches the loader prepares ahead (default 2)")
      ("loader-threads", po::value<int>(), "threads building batches in each worker; 0: each worker builds its own, in its step (default: 1 where the machine has a core to spare for them, else 0, and 0 for workers bound to a core)")
      ("module-times", "at the end, rank 0 prints each module's own forward and backward time a training step, its share of the step and its GFLOP/s (evaluation passes and the first step, which builds the kernels, left out)")
      ("module-clock", po::value<std::string>(), "what --module-times measures (implies it): wall, elapsed time (the default), or cpu, rank 0's thread CPU time, which leaves out its waits for a core (for ranks that outnumber the cores)")
      ("bucket-mb", po::value<double>(), "all-reduce the gradients in buckets of this many MB (1e6 bytes) while backward still runs, as DDP's bucket_cap_mb (0, the default: one all-reduce after backward; buckets measured no faster on one machine: docs/training.md)");
  return d;
}

template <class T>
void take(const po::variables_map& vm, const char* name, T& into) {
  if (vm.count(name)) into = vm[name].as<T>();
}

const ModelDefaults& defaultsOf(const std::string& model) {
  for (const auto& d : kDefaults)
    if (model == d.model) return d;
  XS_THROW(UsageError, fmt::format("--model {}: unknown model; use mlp, convnet, lenet5, alexnet or resnet18",
                             model));
}

// "B1,B2" with both in [0, 1), as torch.optim.Adam's betas.
void parseBetas(const std::string& text, TrainOptions& o) {
  const std::string bad = fmt::format("--betas {}: give two numbers in [0, 1) separated by a comma, e.g. 0.9,0.999", text);
  const std::size_t comma = text.find(',');
  XS_CHECK(comma != std::string::npos, UsageError, bad);
  double b[2];
  const std::string parts[2] = {text.substr(0, comma), text.substr(comma + 1)};
  for (int i = 0; i < 2; ++i) {
    std::size_t used = 0;
    try {
      b[i] = std::stod(parts[i], &used);
    } catch (const std::exception&) {
      XS_THROW(UsageError, bad);
    }
    XS_CHECK(used == parts[i].size() && b[i] >= 0 && b[i] < 1, UsageError, bad);
  }
  o.beta1 = b[0], o.beta2 = b[1];
}

}  // namespace

std::string usage() {
  std::ostringstream s;
  s << "usage: xspawn [launcher options] train [options]\n\n"
       "Data-parallel training: every worker trains a replica of the model on its share of each\n"
       "batch; gradients are averaged over shared memory after every step.\n"
       "Default: convnet on Fashion-MNIST (synthetic data when it is not installed).\n\n"
    << describeOptions();
  return s.str();
}

TrainOptions parseOptions(const std::vector<std::string>& args) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(describeOptions()).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    XS_THROW(UsageError, fmt::format("{}; see `xspawn train --help`", e.what()));
  }
  TrainOptions o;
  o.help = vm.count("help") > 0;
  o.plan = vm.count("plan") > 0;
  o.moduleTimes = vm.count("module-times") > 0 || vm.count("module-clock") > 0;
  if (vm.count("module-clock")) {
    const std::string clock = vm["module-clock"].as<std::string>();
    XS_CHECK(clock == "wall" || clock == "cpu", UsageError,
             fmt::format("--module-clock {}: use wall (elapsed time) or cpu (the thread's CPU time)", clock));
    o.moduleCpuClock = clock == "cpu";
  }
  take(vm, "model", o.model);
  take(vm, "dataset", o.dataset);
  take(vm, "data-dir", o.dataDir);
  take(vm, "image-size", o.imageSize);
  take(vm, "train-size", o.trainSize);
  take(vm, "test-size", o.testSize);
  const ModelDefaults& d = defaultsOf(o.model);
  o.optimizer = d.optimizer;
  o.lr = d.lr;
  o.momentum = d.momentum;
  o.weightDecay = d.weightDecay;
  o.batchSize = d.batchSize;
  o.epochs = d.epochs;
  o.lrSchedule = d.lrSchedule;
  o.lrStep = d.lrStep;
  o.lrDecay = d.lrDecay;
  o.precision = d.precision;
  take(vm, "optimizer", o.optimizer);
  if (vm.count("optimizer") && !vm.count("lr")) o.lr = o.optimizer == "adam" ? 1e-3 : 0.01;
  o.beta2 = d.beta2;
  o.labelSmoothing = d.labelSmoothing;
  if (vm.count("optimizer") && o.optimizer != d.optimizer)
    o.momentum = 0, o.weightDecay = 0, o.lrSchedule = "step", o.lrStep = 0, o.beta2 = kAdamBeta2;
  take(vm, "epochs", o.epochs);
  take(vm, "batch-size", o.batchSize);
  take(vm, "lr", o.lr);
  take(vm, "momentum", o.momentum);
  take(vm, "weight-decay", o.weightDecay);
  if (vm.count("betas")) parseBetas(vm["betas"].as<std::string>(), o);
  take(vm, "label-smoothing", o.labelSmoothing);
  take(vm, "lr-schedule", o.lrSchedule);
  if (vm.count("lr-step") && !vm.count("lr-schedule")) o.lrSchedule = "step";
  take(vm, "lr-step", o.lrStep);
  take(vm, "lr-decay", o.lrDecay);
  take(vm, "seed", o.seed);
  take(vm, "precision", o.precision);
  take(vm, "eval-every", o.evalEvery);
  take(vm, "max-steps", o.maxSteps);
  take(vm, "stop-at-accuracy", o.stopAtAccuracy);
  take(vm, "log-every", o.logEvery);
  take(vm, "checkpoint-dir", o.checkpointDir);
  take(vm, "checkpoint-every", o.checkpointEvery);
  take(vm, "resume", o.resume);
  take(vm, "metrics", o.metrics);
  take(vm, "device-memory", o.deviceMemory);
  take(vm, "prefetch", o.prefetch);
  take(vm, "loader-threads", o.loaderThreads);
  take(vm, "bucket-mb", o.bucketMb);
  std::string augment = "";
  take(vm, "augment", augment);
  XS_CHECK(augment.empty() || augment == "on" || augment == "off", UsageError,
                 fmt::format("--augment {}: use on or off", augment));
  o.augment = augment.empty() ? o.model == "resnet18" : augment == "on";

  XS_CHECK(o.optimizer == "sgd" || o.optimizer == "adam", UsageError,
                 fmt::format("--optimizer {}: unknown optimizer; use sgd or adam", o.optimizer));
  XS_CHECK(o.batchSize >= 1, UsageError, fmt::format("--batch-size {}: must be at least 1 (the batch of each worker)", o.batchSize));
  XS_CHECK(o.epochs >= 1, UsageError, fmt::format("--epochs {}: must be at least 1", o.epochs));
  XS_CHECK(o.lr > 0, UsageError, fmt::format("--lr {}: the learning rate must be positive", o.lr));
  XS_CHECK(o.momentum >= 0 && o.momentum < 1, UsageError, fmt::format("--momentum {}: use a value in [0, 1)", o.momentum));
  XS_CHECK(o.optimizer == "adam" || !vm.count("betas"), UsageError,
           "--betas: they are Adam's; with --optimizer sgd use --momentum");
  XS_CHECK(o.labelSmoothing >= 0 && o.labelSmoothing <= 1, UsageError,
           fmt::format("--label-smoothing {}: use a value in [0, 1] (0: plain cross-entropy)", o.labelSmoothing));
  XS_CHECK(o.weightDecay >= 0, UsageError, fmt::format("--weight-decay {}: must not be negative", o.weightDecay));
  XS_CHECK(o.lrSchedule == "step" || o.lrSchedule == "onecycle", UsageError,
           fmt::format("--lr-schedule {}: unknown schedule; use step or onecycle", o.lrSchedule));
  XS_CHECK(o.lrStep >= 0, UsageError, fmt::format("--lr-step {}: must not be negative (0 keeps the rate constant)", o.lrStep));
  XS_CHECK(o.lrDecay > 0 && o.lrDecay <= 1, UsageError, fmt::format("--lr-decay {}: use a factor in (0, 1]", o.lrDecay));
  XS_CHECK(o.precision == "fp32" || o.precision == "bf16", UsageError,
                 fmt::format("--precision {}: use fp32 or bf16", o.precision));
  XS_CHECK(o.evalEvery >= 0, UsageError, fmt::format("--eval-every {}: must not be negative", o.evalEvery));
  XS_CHECK(o.maxSteps >= 0, UsageError, fmt::format("--max-steps {}: must not be negative", o.maxSteps));
  XS_CHECK(o.checkpointEvery >= 0, UsageError,
           fmt::format("--checkpoint-every {}: must not be negative (0: a checkpoint per epoch)", o.checkpointEvery));
  XS_CHECK(o.checkpointEvery == 0 || !o.checkpointDir.empty(), UsageError,
           "--checkpoint-every needs --checkpoint-dir DIR (where the checkpoints go)");
  XS_CHECK(o.logEvery >= 0, UsageError, fmt::format("--log-every {}: must not be negative", o.logEvery));
  XS_CHECK(o.stopAtAccuracy >= 0 && o.stopAtAccuracy <= 100, UsageError,
                 fmt::format("--stop-at-accuracy {}: use a percentage in [0, 100] (0: never stop early)", o.stopAtAccuracy));
  XS_CHECK(o.trainSize >= 0 && o.testSize >= 0, UsageError, "--train-size/--test-size: must not be negative");
  XS_CHECK(o.prefetch >= 1, UsageError, fmt::format("--prefetch {}: must be at least 1", o.prefetch));
  XS_CHECK(!vm.count("loader-threads") || (o.loaderThreads >= 0 && o.loaderThreads <= 16), UsageError,
                 fmt::format("--loader-threads {}: use 0 (each worker builds its batches itself) to 16", o.loaderThreads));
  XS_CHECK(o.bucketMb >= 0 && o.bucketMb <= 4096, UsageError,
                 fmt::format("--bucket-mb {}: use 0 (one all-reduce after backward) up to 4096", o.bucketMb));
  XS_CHECK(o.imageSize >= 0, UsageError, fmt::format("--image-size {}: must be positive", o.imageSize));
  return o;
}

void resolveDefaults(TrainOptions& o) {
  if (o.dataset.empty()) {
    if (o.model == "resnet18" && !o.dataDir.empty()) {
      o.dataset = "cifar10";
    } else if (o.dataDir.empty()) {
      data::DefaultDataset d = data::resolveDefaultDataset();
      o.dataset = d.spec.name;
      o.datasetNotice = d.notice;
    } else {
      o.dataset = "fashion-mnist";
    }
  }
  auto names = data::datasetNames();
  XS_CHECK(std::find(names.begin(), names.end(), o.dataset) != names.end(), UsageError,
                 fmt::format("--dataset {}: unknown dataset; use fashion-mnist, mnist, cifar10 or synthetic",
                             o.dataset));
  XS_CHECK(o.dataset == "fashion-mnist" || o.dataset == "synthetic" || !o.dataDir.empty(), UsageError,
                 fmt::format("--dataset {} needs --data-dir DIR (the directory holding its files)", o.dataset));
  int native = o.dataset == "cifar10" ? 32 : 28;
  if (o.imageSize == 0)
    o.imageSize = o.model == "alexnet" ? 224 : o.model == "resnet18" ? 32 : native;
}

std::string describe(const TrainOptions& o) {
  std::string opt = o.optimizer == "sgd"
                        ? fmt::format("sgd lr {:g} momentum {:g} weight decay {:g}", o.lr, o.momentum, o.weightDecay)
                        : fmt::format("adam lr {:g} betas {:g},{:g} weight decay {:g}", o.lr, o.beta1, o.beta2, o.weightDecay);
  if (o.labelSmoothing > 0) opt += fmt::format(", label smoothing {:g}", o.labelSmoothing);
  std::string sched = o.lrSchedule == "onecycle" ? ", one cycle" : o.lrStep > 0 ? fmt::format(", x{:g} every {} epoch{}", o.lrDecay, o.lrStep, o.lrStep > 1 ? "s" : "") : "";
  return fmt::format("{} on {} {}x{}, {} epochs, batch {} per worker, {}{}, {}, seed {}", o.model, o.dataset,
                     o.imageSize, o.imageSize, o.epochs, o.batchSize, opt, sched, o.precision, o.seed);
}

}  // namespace xs::train
