// job_report.cpp: what a finished job tells the program that started it. xs::spawn and xs::run
// return a JobResult whose report says where every rank's time went (report.utilisation, the
// table `xspawn train` prints) and, when a rank failed, which one and why: the root cause, its
// last lines of output and, for a Python worker, its traceback.
//
//   ./job_report                          # 2 workers train the built-in MLP, then the figures
//   taskset -c 0 ./job_report             # the same on one core: oversubscribed
//   ./job_report --fail-rank 1            # rank 1 throws at step 5: the root cause
//   ./job_report --python /usr/bin/python3   # 2 Python workers, rank 1 raises: its traceback
#include <cstdio>
#include <string>

#include <xspawn/data/catalog.hpp>
#include <xspawn/data/loader.hpp>
#include <xspawn/models.hpp>
#include <xspawn/optim.hpp>
#include <xspawn/train.hpp>
#include <xspawn/xspawn.hpp>

namespace data = xs::data;

void train(int index, const xs::Flags& flags) {
  data::DatasetSpec spec;
  spec.name = "synthetic";
  const data::Dataset set = data::loadDataset(spec, data::Split::kTrain);
  xs::engine::Device device(xs::device_options());
  auto model = xs::models::create(device, {.name = "mlp", .seed = 1});
  auto optimizer = xs::optim::Adam(*model, {.lr = 1e-3f});
  const data::Transform transform(data::TransformConfig{}, 1, 28, 28);
  data::DistributedSampler sampler({set.size(), xs::world_size(), xs::get_ordinal(), true, 1});
  data::ParallelLoader loader(set, transform, sampler, {.batchSize = 32, .seed = 1});
  loader.startEpoch(0);
  for (int step = 0; step < 40; ++step) {
    auto batch = loader.next();
    if (!batch) break;
    if (step == 5 && index == flags.get("fail-rank", -1)) XS_THROW(xs::UsageError, "rank asked to fail at step 5");
    float loss[1] = {xs::train_step(*model, *batch).loss};
    xs::optimizer_step(*model, *optimizer, loss);
    loader.recycle(std::move(*batch));
  }
}

// The root cause of a failed job, from the report's fields.
void printFailure(const xs::JobReport& report) {
  const xs::RankOutcome& culprit = report.ranks.at(report.rootCause);
  std::printf("rank %d %s: %s\n", culprit.rank, culprit.describeEnd().c_str(), culprit.error.c_str());
  for (const std::string& line : culprit.traceback) std::printf("  traceback | %s\n", line.c_str());
  if (culprit.traceback.empty()) {
    for (const std::string& line : culprit.outputTail) std::printf("  output | %s\n", line.c_str());
  }
}

int main(int argc, char** argv) {
  xs::Flags flags = xs::Flags::fromArgs(argc, argv);
  xs::SpawnOptions options;
  options.quiet = true;
  options.printReport = false;  // this program prints what it wants of it
  options.flags = flags;
  xs::JobResult job;
  if (const std::string python = flags.get("python", std::string()); !python.empty()) {
    options.nprocs = 2;
    options.startMethod = xs::StartMethod::kExec;
    options.program = {python, "-c",
                       "import os\nprint('loading', flush=True)\n"
                       "if os.environ['RANK'] == '1':\n    raise KeyError('labels')\n"};
    job = xs::run(options);
  } else {
    job = xs::spawn(train, 2, options);
  }
  if (!job.succeeded()) {
    printFailure(job.report);
    return job.exitCode;
  }
  // usableCores: what the launcher could run on (its CPU affinity, a container's CPU quota).
  std::printf("%d ranks on %d usable cores%s; this machine has %d online\n", job.report.worldSize,
              xs::usableCores(), job.report.worldSize > job.report.usableCores ? " (oversubscribed)" : "",
              xs::onlineCores());
  const xs::UtilisationReport& use = job.report.utilisation;
  for (const xs::RankUtilisation& r : use.ranks) {
    std::printf("rank %d: %lld steps in %.2f s, compute %.0f%%, collectives %.0f%%, median step %.2f ms", r.rank,
                static_cast<long long>(r.steps), r.windowSeconds, r.share(r.compute()), r.share(r.collectives()),
                1e3 * r.stepMedian);
    // From the kernel's scheduler statistics (-1 when the job was too short for a sample): with
    // more ranks than cores, each time a rank gets a CPU is a switch (`xspawn bench switch`).
    if (r.cpuTurnsPerStep >= 0) std::printf(", given a CPU %.1f times a step", r.cpuTurnsPerStep);
    std::printf("\n");
  }
  if (use.cpuTurnsPerStep >= 0) std::printf("each rank was given a CPU %.1f times a step\n", use.cpuTurnsPerStep);
  std::printf("straggler: %s\n", use.straggler.rank < 0 ? "none" : use.straggler.text.c_str());
  return 0;
}
