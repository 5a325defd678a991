// trainer.hpp: one worker's training run: data, model replica, optimizer, the data-parallel
// step (local forward/backward, all-reduce-mean of the gradients, update), evaluation,
// checkpoints, the replica check and the summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "console.hpp"
#include "options.hpp"
#include "xspawn/data/loader.hpp"
#include "xspawn/engine/device.hpp"
#include "xspawn/engine/model.hpp"
#include "xspawn/optim.hpp"
#include "xspawn/train.hpp"

namespace xs::train {

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  ~Trainer();
  // Trains; returns the process exit status (0, or 3 when the replicas' weights differ).
  int run();

 private:
  // train_step, then optimizer_step with the step's loss and correct count.
  void step(const data::Batch& batch);
  float lrAt(std::int64_t epoch, std::int64_t step) const;  // the rate of a step (--lr-schedule)
  void resume(const std::string& from);
  // On a restart of the job (xspawn --max-restarts), where to resume from: --checkpoint-dir
  // when it holds a checkpoint, else "" (start over).
  std::string restartCheckpoint();
  void saveCheckpoint(std::int64_t epoch, data::SamplerState sampler);
  xs::EvalResult evaluateAndReport(std::int64_t epoch);
  void metrics(nlohmann::json line);
  int finish(double wallSeconds);
  // --module-times: the model's module times since their last reset (training steps only: each
  // evaluation resets them after it) added into moduleSeconds_; at the end, rank 0 prints them.
  void foldModuleTimes();
  void reportModules(double stepSeconds);

  TrainOptions o_;
  int rank_ = 0, world_ = 1;
  bool master_ = false;
  data::Dataset train_, test_;
  std::unique_ptr<engine::Device> device_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  float stepStats_[2] = {};  // the step's loss and correct count: local, then means over ranks
  std::unique_ptr<data::ParallelLoader> loader_;
  std::unique_ptr<data::Transform> testTransform_;
  Progress progress_;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point trainStart_{};  // set by run() at "train_start"

  std::int64_t step_ = 0;        // optimizer steps done (global, identical on every rank)
  std::int64_t firstEpoch_ = 0;
  std::int64_t images_ = 0;      // images this run trained on, over all ranks
  double lastLoss_ = 0;
  xs::EvalResult lastEval_;
  bool evaluated_ = false;       // lastEval_ is of the current weights
  RankStats stats_;
  std::vector<engine::ModuleTime> moduleSeconds_;  // --module-times: the training steps' sums
  std::int64_t timedSteps_ = 0;                     // ... and the steps this run made (the first not timed)
  double stepCpuSeconds_ = 0;                       // --module-clock cpu: those timed steps' thread CPU time
};

}  // namespace xs::train
