// bench_data.cpp: xspawn-bench-data, throughput of the data pipeline (decode + transform + batch
// assembly) in images/s for typical pipelines and thread counts, plus Fashion-MNIST load time.
//   xspawn-bench-data [images=3000] [max_threads=2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "xspawn/data/catalog.hpp"
#include "xspawn/data/loader.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  int channels, side;
  xs::data::TransformConfig transform;
};

void runCase(const Case& c, std::int64_t images, int threads) {
  xs::data::SyntheticConfig sc;
  sc.trainCount = images;
  sc.channels = c.channels;
  sc.height = sc.width = c.side;
  const xs::data::Dataset ds = xs::data::makeSynthetic(sc, xs::data::Split::kTrain);
  xs::data::Transform tf(c.transform, ds.channels, ds.height, ds.width);
  xs::data::DistributedSampler sampler({ds.size(), 1, 0, true, 1, false});
  xs::data::LoaderConfig lc;
  lc.batchSize = 32;
  lc.numThreads = threads;
  lc.prefetch = 2 * threads;
  xs::data::ParallelLoader loader(ds, tf, sampler, lc);
  const auto t0 = Clock::now();
  loader.startEpoch(0);
  double checksum = 0;
  while (auto batch = loader.next()) {
    checksum += batch->images[0];
    loader.recycle(std::move(*batch));
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const xs::data::LoaderStats st = loader.stats();
  std::printf("%-34s threads=%d  %8.0f images/s  (%lld images in %.3f s, consumer waited %.0f%%, %.0f images/s per busy thread)  [%g]\n",
              c.name, threads, static_cast<double>(images) / s, static_cast<long long>(images), s,
              100.0 * st.waitSeconds / s, static_cast<double>(images) / st.buildSeconds, checksum);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::int64_t images = argc > 1 ? std::atoll(argv[1]) : 3000;
    const int maxThreads = argc > 2 ? std::atoi(argv[2]) : 2;
    xs::data::TransformConfig mnist;
    mnist.mean = {0.2860f};
    mnist.std = {0.3530f};
    xs::data::TransformConfig alexnet;
    alexnet.resize = 224;
    alexnet.toRgb = true;
    alexnet.mean = xs::data::kImagenetMean;
    alexnet.std = xs::data::kImagenetStd;
    xs::data::TransformConfig cifar;
    cifar.crop = 32;
    cifar.cropPadding = 4;
    cifar.horizontalFlip = true;
    cifar.mean = {0.4914f, 0.4822f, 0.4465f};
    cifar.std = {0.2470f, 0.2435f, 0.2616f};
    const Case cases[] = {{"28x28x1 to-float+normalize", 1, 28, mnist},
                          {"28x28x1 -> 224x224x3 resize+rgb+norm", 1, 28, alexnet},
                          {"32x32x3 pad4-crop+flip+norm", 3, 32, cifar}};
    for (const Case& c : cases) {
      for (int t = 1; t <= maxThreads; ++t) runCase(c, images, t);
    }
    const auto choice = xs::data::resolveDefaultDataset();
    if (choice.spec.name == "fashion-mnist") {
      const auto t0 = Clock::now();
      const xs::data::Dataset train = xs::data::loadDataset(choice.spec, xs::data::Split::kTrain);
      std::printf("fashion-mnist train: %lld images read + gunzipped in %.3f s\n",
                  static_cast<long long>(train.size()),
                  std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      std::printf("%s\n", choice.notice.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xspawn-bench-data: %s\n", e.what());
    return 1;
  }
  return 0;
}
