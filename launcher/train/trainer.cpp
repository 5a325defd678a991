// trainer.cpp: the training loop of one worker (see trainer.hpp).
#include "trainer.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "data_setup.hpp"
#include "train_checkpoint.hpp"
#include "xspawn/error.hpp"
#include "xspawn/models.hpp"
#include "xspawn/trace.hpp"
#include "xspawn/train.hpp"
#include "xspawn/xspawn.hpp"

namespace xs::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// This thread's CPU time, the clock of --module-clock cpu.
double threadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

bool terminal() {
  const char* tty = std::getenv("XSPAWN_TTY");
  return tty != nullptr && std::string(tty) == "1";
}

std::unique_ptr<optim::Optimizer> makeOptimizer(const TrainOptions& o, engine::Model& model) {
  if (o.optimizer == "sgd") {
    optim::SgdOptions s;
    s.lr = static_cast<float>(o.lr);
    s.momentum = static_cast<float>(o.momentum);
    s.weightDecay = static_cast<float>(o.weightDecay);
    return optim::SGD(model, s);
  }
  optim::AdamOptions a;
  a.lr = static_cast<float>(o.lr);
  a.weightDecay = static_cast<float>(o.weightDecay);
  a.beta1 = static_cast<float>(o.beta1);
  a.beta2 = static_cast<float>(o.beta2);
  return optim::Adam(model, a);
}

}  // namespace

Trainer::Trainer(const TrainOptions& options)
    : o_(options), rank_(xs::get_ordinal()), world_(xs::world_size()), master_(xs::is_master_ordinal(false)),
      progress_(master_, terminal()) {
  if (!o_.datasetNotice.empty()) progress_.line(o_.datasetNotice);
  train_ = loadSplitShared(o_, data::Split::kTrain);
  test_ = loadSplitShared(o_, data::Split::kTest);

  device_ = std::make_unique<engine::Device>(
      xs::device_options(engine::parsePrecision(o_.precision), engine::parseMemorySize(o_.deviceMemory)));
  models::ModelConfig cfg;
  cfg.name = o_.model;
  cfg.channels = modelChannels(o_);
  cfg.imageSize = o_.imageSize;
  cfg.numClasses = train_.numClasses;
  cfg.seed = o_.seed;
  model_ = models::create(*device_, cfg);
  model_->setLabelSmoothing(static_cast<float>(o_.labelSmoothing));
  model_->setModuleTimes(o_.moduleTimes,
                         o_.moduleCpuClock ? engine::ModuleTimeBase::kThreadCpu : engine::ModuleTimeBase::kWall);
  optimizer_ = makeOptimizer(o_, *model_);
  // Alone, the step is made inside backward, layer by layer while each gradient is in cache: the
  // same bits, less memory traffic (docs/engine.md). Several ranks all-reduce first.
  if (world_ == 1) model_->setOptimizerInBackward(optimizer_.get());
  xs::DataParallelOptions dp;
  dp.bucketBytes = static_cast<std::size_t>(o_.bucketMb * 1e6);
  xs::data_parallel(*model_, dp);

  data::Transform trainT(trainTransform(o_, train_), train_.channels, train_.height, train_.width);
  testTransform_ = std::make_unique<data::Transform>(testTransform(o_, train_), test_.channels, test_.height, test_.width);
  data::SamplerConfig sc{train_.size(), world_, rank_, true, o_.seed, false};
  data::LoaderConfig lc;
  lc.batchSize = o_.batchSize;
  lc.numThreads = o_.loaderThreads >= 0 ? o_.loaderThreads : data::kAutoThreads;
  lc.prefetch = o_.prefetch;
  lc.seed = o_.seed;
  loader_ = std::make_unique<data::ParallelLoader>(train_, trainT, data::DistributedSampler(sc), lc);
  if (master_ && !o_.metrics.empty()) {
    metrics_.open(o_.metrics, std::ios::app);
    XS_CHECK(metrics_.good(), UsageError, fmt::format("--metrics {}: cannot open it for writing; check the directory", o_.metrics));
  }
  progress_.line(fmt::format("training {} on {} workers ({} train / {} test images, {} steps per epoch, {} parameters)",
                             describe(o_), world_, train_.size(), test_.size(), loader_->batchesPerEpoch(),
                             model_->params().paramCount()));
}

Trainer::~Trainer() = default;

float Trainer::lrAt(std::int64_t epoch, std::int64_t step) const {
  // One cycle spans the whole run (--epochs), so --max-steps stops the same run early.
  if (o_.lrSchedule == "onecycle") return optim::OneCycleLR{o_.lr, loader_->batchesPerEpoch() * o_.epochs}.at(step);
  if (o_.lrStep <= 0) return static_cast<float>(o_.lr);
  return optim::StepLR{o_.lr, o_.lrStep, o_.lrDecay}.at(static_cast<int>(epoch));
}

void Trainer::metrics(nlohmann::json line) {
  if (!metrics_.is_open()) return;
  // Every line says when, since training started (what `xspawn plot` draws against wall time).
  if (!line.contains("wall_seconds")) line["wall_seconds"] = since(trainStart_);
  metrics_ << line.dump() << "\n";
  metrics_.flush();
}

void Trainer::step(const data::Batch& b) {
  // --module-clock cpu: the step's own CPU time, for the modules' shares of it.
  const double cpuStart = o_.moduleCpuClock ? threadCpuSeconds() : 0;
  engine::StepResult r = xs::train_step(*model_, b);
  stepStats_[0] = r.loss;
  stepStats_[1] = static_cast<float>(r.correct);
  xs::optimizer_step(*model_, *optimizer_, stepStats_);  // means over ranks of the gradients and stepStats_
  // --module-times: the run's first step builds the kernels (oneDNN's JIT); it is left out.
  if (o_.moduleTimes && ++timedSteps_ == 1) model_->resetModuleTimes();
  else if (o_.moduleCpuClock) stepCpuSeconds_ += threadCpuSeconds() - cpuStart;
}

void Trainer::foldModuleTimes() {
  const std::vector<engine::ModuleTime>& t = model_->moduleTimes();
  if (moduleSeconds_.empty()) {
    moduleSeconds_ = t;  // names, FLOPs and the first times
  } else {
    for (std::size_t i = 0; i < t.size() && i < moduleSeconds_.size(); ++i) {
      moduleSeconds_[i].forwardSeconds += t[i].forwardSeconds;
      moduleSeconds_[i].backwardSeconds += t[i].backwardSeconds;
    }
  }
  model_->resetModuleTimes();
}

void Trainer::reportModules(double stepSeconds) {
  if (!o_.moduleTimes) return;
  foldModuleTimes();
  if (!master_ || timedSteps_ < 2) return;
  const double steps = static_cast<double>(timedSteps_ - 1);
  if (o_.moduleCpuClock) stepSeconds = stepCpuSeconds_ / steps;
  progress_.line(fmt::format("module times (rank 0, own {} a training step after the first: modules inside "
                             "one count as theirs; {:.3f} ms a step in all):",
                             o_.moduleCpuClock ? "thread CPU time" : "time", 1e3 * stepSeconds));
  nlohmann::json rows = nlohmann::json::array();
  for (const engine::ModuleTime& m : moduleSeconds_) {
    const double f = m.forwardSeconds / steps, b = m.backwardSeconds / steps;
    const double flops = (m.forwardFlops + m.backwardFlops) * o_.batchSize;
    progress_.line(fmt::format("  {:<20} forward {:8.3f} ms, backward {:8.3f} ms, {:5.1f}% of the step{}", m.name,
                               1e3 * f, 1e3 * b, 100 * (f + b) / stepSeconds,
                               flops > 0 && f + b > 0 ? fmt::format(", {:.1f} GFLOP/s", flops / (f + b) / 1e9) : ""));
    rows.push_back({{"name", m.name}, {"forward_ms", 1e3 * f}, {"backward_ms", 1e3 * b}});
  }
  metrics({{"event", "modules"}, {"rank", rank_}, {"clock", o_.moduleCpuClock ? "cpu" : "wall"},
           {"step_ms", 1e3 * stepSeconds}, {"modules", rows}});
}

std::string Trainer::restartCheckpoint() {
  if (xs::restart_count() == 0 || o_.checkpointDir.empty()) return "";
  try {
    readTrainState(o_.checkpointDir);
  } catch (const UsageError&) {
    progress_.line(fmt::format("restart {}: no checkpoint in {} yet: training from the start", xs::restart_count(),
                               o_.checkpointDir));
    return "";
  }
  return o_.checkpointDir;
}

void Trainer::resume(const std::string& from) {
  TrainState s = loadTrainCheckpoint(from, *model_, *optimizer_);
  XS_CHECK(s.worldSize == world_ && s.batchSize == o_.batchSize && s.model == o_.model && s.seed == o_.seed, UsageError,
                 fmt::format("--resume {}: the checkpoint is of {} trained by {} workers with batch {} and seed {}; resume with "
                             "--nprocs {} --model {} --batch-size {} --seed {} (the data order depends on them)",
                             from, s.model, s.worldSize, s.batchSize, s.seed, s.worldSize, s.model, s.batchSize, s.seed));
  step_ = s.step;
  firstEpoch_ = s.sampler.epoch;
  loader_->restore(s.sampler);
  // Dropout masks are drawn from (seed, training forwards so far): continue the sequence.
  model_->setStep(static_cast<std::uint64_t>(step_));
  progress_.line(fmt::format("{}resumed from {} at step {} (epoch {}, {} images into it)",
                             xs::restart_count() > 0 ? fmt::format("restart {}: ", xs::restart_count()) : "", from, step_,
                             s.sampler.epoch + 1, s.sampler.position * world_));
}

void Trainer::saveCheckpoint(std::int64_t epoch, data::SamplerState sampler) {
  if (o_.checkpointDir.empty() || !master_) return;
  TrainState s;
  s.epoch = epoch;
  s.step = step_;
  s.sampler = sampler;
  s.worldSize = world_;
  s.batchSize = o_.batchSize;
  s.model = o_.model;
  s.dataset = o_.dataset;
  s.seed = o_.seed;
  saveTrainCheckpoint(o_.checkpointDir, *model_, *optimizer_, s);
}

EvalResult Trainer::evaluateAndReport(std::int64_t epoch) {
  if (o_.moduleTimes) foldModuleTimes();  // --module-times counts the training steps only
  lastEval_ = xs::evaluate(*model_, test_, *testTransform_, o_.batchSize);
  model_->resetModuleTimes();
  evaluated_ = true;
  progress_.line(fmt::format("epoch {}: test accuracy {:.2f}% ({}/{}), test loss {:.4f}", epoch + 1,
                             100.0 * lastEval_.accuracy, lastEval_.correct, lastEval_.count, lastEval_.loss));
  metrics({{"event", "eval"}, {"epoch", epoch + 1}, {"step", step_}, {"test_accuracy", lastEval_.accuracy},
           {"test_loss", lastEval_.loss}, {"correct", lastEval_.correct}, {"count", lastEval_.count},
           {"master_correct", lastEval_.masterCorrect}, {"master_count", lastEval_.masterCount}});
  return lastEval_;
}

int Trainer::run() {
  // A restarted job picks up its own last checkpoint; --resume names one explicitly.
  if (const std::string from = restartCheckpoint(); !from.empty()) resume(from);
  else if (!o_.resume.empty()) resume(o_.resume);
  xs::rendezvous("train_start");
  trainStart_ = Clock::now();
  const std::int64_t perEpoch = loader_->batchesPerEpoch();
  const std::int64_t firstStep = step_;
  std::int64_t total = perEpoch * o_.epochs;
  if (o_.maxSteps > 0) total = std::min(total, o_.maxSteps);
  xs::expect_steps(total);  // `xspawn top` shows the ETA
  double trainSeconds = 0;
  bool stop = step_ >= total;
  std::int64_t lastEpoch = std::max<std::int64_t>(firstEpoch_ - 1, 0);  // the epoch evaluations name
  for (std::int64_t epoch = firstEpoch_; epoch < o_.epochs && !stop; ++epoch) {
    lastEpoch = epoch;
    loader_->startEpoch(epoch);
    const auto epochStart = Clock::now();
    double lossSum = 0, correct = 0, seen = 0;
    std::int64_t steps = 0, inEpoch = 0;
    ProgressInfo info;
    info.epoch = static_cast<int>(epoch);
    info.epochs = o_.epochs;
    info.stepsInEpoch = perEpoch;
    while (auto b = loader_->next()) {
      optimizer_->setLr(lrAt(epoch, step_));
      step(*b);
      ++step_, ++steps;
      inEpoch = b->index + 1;
      lossSum += stepStats_[0];
      correct += static_cast<double>(stepStats_[1]) * world_;
      seen += static_cast<double>(b->size) * world_;
      images_ += static_cast<std::int64_t>(b->size) * world_;
      const double elapsed = since(epochStart);
      info.stepInEpoch = inEpoch;
      info.imagesPerSecond = seen / elapsed;
      info.loss = lossSum / static_cast<double>(steps);
      info.accuracy = correct / seen;
      info.etaSeconds = (trainSeconds + elapsed) / static_cast<double>(step_ - firstStep) * static_cast<double>(total - step_);
      progress_.update(info);
      if (o_.logEvery > 0 && step_ % o_.logEvery == 0) {
        progress_.log(info);
        metrics({{"event", "progress"}, {"epoch", epoch + 1}, {"step", step_}, {"train_loss", info.loss},
                 {"train_accuracy", info.accuracy}, {"images_per_second", info.imagesPerSecond}, {"seconds", elapsed}});
      }
      loader_->recycle(std::move(*b));
      if (o_.checkpointEvery > 0 && step_ % o_.checkpointEvery == 0 && inEpoch < perEpoch && step_ < total) {
        saveCheckpoint(epoch, loader_->state());
      }
      if (step_ >= total) {
        stop = true;
        break;
      }
    }
    trainSeconds += since(epochStart);
    lastLoss_ = steps > 0 ? lossSum / static_cast<double>(steps) : lastLoss_;
    if (steps > 0) progress_.finish(info);
    metrics({{"event", "epoch"}, {"epoch", epoch + 1}, {"step", step_}, {"train_loss", info.loss},
             {"train_accuracy", info.accuracy}, {"images_per_second", info.imagesPerSecond},
             {"seconds", since(epochStart)}, {"lr", optimizer_->lr()}});
    evaluated_ = false;
    const bool complete = inEpoch >= perEpoch || steps == 0;
    if (complete && o_.evalEvery > 0 && ((epoch + 1) % o_.evalEvery == 0 || epoch + 1 == o_.epochs)) {
      evaluateAndReport(epoch);
      // Every rank holds the same all-reduced accuracy, so all of them stop together.
      if (o_.stopAtAccuracy > 0 && 100.0 * lastEval_.accuracy >= o_.stopAtAccuracy) {
        progress_.line(fmt::format("stopping: test accuracy {:.2f}% reached --stop-at-accuracy {:g}",
                                   100.0 * lastEval_.accuracy, o_.stopAtAccuracy));
        stop = true;
      }
    }
    saveCheckpoint(epoch, complete ? data::SamplerState{epoch + 1, 0} : loader_->state());
    if (!complete) break;
  }
  if (!evaluated_) evaluateAndReport(lastEpoch);
  stats_.seconds = trainSeconds;
  stats_.steps = step_ - firstStep;
  return finish(since(trainStart_));
}

int Trainer::finish(double wallSeconds) {
  std::vector<std::uint64_t> hashes = xs::gather_weights_hashes(*model_);
  const std::uint64_t hash = hashes[static_cast<std::size_t>(rank_)];
  for (int r = 0; r < world_; ++r) {
    if (hashes[r] != hashes[0]) {
      if (master_)
        std::fprintf(stderr, "xspawn train: replicas diverged: the weights of rank %d (hash 0x%016llx) differ from rank 0's "
                     "(0x%016llx) after %lld steps; the gradient all-reduce did not give every rank the same values\n",
                     r, static_cast<unsigned long long>(hashes[r]), static_cast<unsigned long long>(hashes[0]),
                     static_cast<long long>(step_));
      return 3;
    }
  }
  Summary s;
  s.ranks = xs::mesh_reduce("rank_stats", stats_, [](const std::vector<RankStats>& all) { return all; });
  s.wallSeconds = wallSeconds;
  s.steps = stats_.steps;
  s.images = images_;
  double trainSeconds = 0;
  for (const RankStats& r : s.ranks) trainSeconds = std::max(trainSeconds, r.seconds);
  s.imagesPerSecond = trainSeconds > 0 ? static_cast<double>(images_) / trainSeconds : 0;
  s.finalLoss = lastLoss_;
  s.testAccuracy = lastEval_.accuracy;
  s.testLoss = lastEval_.loss;
  s.testCount = lastEval_.count;
  s.zeroCopy = xs::gradients_zero_copy(*model_);
  s.buckets = std::max(1, xs::gradient_buckets(*model_));
  s.acrossMachines = xs::local_world_size() < xs::world_size();
  s.weightsHash = hash;
  for (const std::string& line : summaryLines(s)) progress_.line(line);
  reportModules(stats_.steps > 0 ? stats_.seconds / static_cast<double>(stats_.steps) : 0);
  metrics({{"event", "summary"}, {"steps", s.steps}, {"images", s.images}, {"wall_seconds", s.wallSeconds},
           {"train_seconds", trainSeconds}, {"images_per_second", s.imagesPerSecond}, {"final_loss", s.finalLoss},
           {"test_accuracy", s.testAccuracy}, {"test_loss", s.testLoss}, {"world_size", world_},
           {"weights_hash", fmt::format("{:016x}", hash)}});
  return 0;
}

}  // namespace xs::train
