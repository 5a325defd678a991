// ops_loss.cpp: log-softmax, NLL, cross-entropy (fused softmax + NLL) and accuracy.
#include <cmath>
#include <cstring>
#include <vector>

#include "xspawn/error.hpp"
#include "ops.hpp"

namespace xs::engine {

void checkLabels(const std::int32_t* labels, int B, int C) {
  for (int b = 0; b < B; ++b)
    XS_CHECK(labels[b] >= 0 && labels[b] < C, ShapeError,
             "label " + std::to_string(labels[b]) + " of sample " + std::to_string(b) +
                 " is outside [0, " + std::to_string(C) + "): check the dataset's class count");
}

void logSoftmaxForward(float* y, const float* x, int B, int C) {
  for (int b = 0; b < B; ++b) {
    const float* r = x + static_cast<std::size_t>(b) * C;
    float mx = r[0];
    for (int c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double s = 0.0;
    for (int c = 0; c < C; ++c) s += std::exp(static_cast<double>(r[c] - mx));
    float lse = mx + static_cast<float>(std::log(s));
    for (int c = 0; c < C; ++c) y[static_cast<std::size_t>(b) * C + c] = r[c] - lse;
  }
}

void logSoftmaxBackward(float* dx, const float* dy, const float* y, int B, int C) {
  for (int b = 0; b < B; ++b) {
    std::size_t o = static_cast<std::size_t>(b) * C;
    double s = 0.0;
    for (int c = 0; c < C; ++c) s += dy[o + c];
    for (int c = 0; c < C; ++c) dx[o + c] = dy[o + c] - std::exp(y[o + c]) * static_cast<float>(s);
  }
}

float nllLossForward(const float* logp, const std::int32_t* labels, int B, int C) {
  checkLabels(labels, B, C);
  double s = 0.0;
  for (int b = 0; b < B; ++b) s -= logp[static_cast<std::size_t>(b) * C + labels[b]];
  return static_cast<float>(s / B);
}

void nllLossBackward(float* dlogp, const std::int32_t* labels, int B, int C, float dloss) {
  std::memset(dlogp, 0, static_cast<std::size_t>(B) * C * sizeof(float));
  for (int b = 0; b < B; ++b) dlogp[static_cast<std::size_t>(b) * C + labels[b]] = -dloss / B;
}

float crossEntropyForward(float* probs, const float* logits, const std::int32_t* labels, int B,
                          int C, float smoothing) {
  checkLabels(labels, B, C);
  double loss = 0.0;
  // A row's exponentials, each taken once: on the stack for up to 256 classes (no allocation a
  // step), on the heap beyond.
  constexpr int kOnStack = 256;
  double onStack[kOnStack];
  std::vector<double> onHeap(C > kOnStack ? static_cast<std::size_t>(C) : 0);
  double* e = C > kOnStack ? onHeap.data() : onStack;
  for (int b = 0; b < B; ++b) {
    const float* r = logits + static_cast<std::size_t>(b) * C;
    float* p = probs + static_cast<std::size_t>(b) * C;
    float mx = r[0];
    for (int c = 1; c < C; ++c) mx = std::max(mx, r[c]);
    double s = 0.0, sum = 0.0;
    for (int c = 0; c < C; ++c) e[c] = std::exp(static_cast<double>(r[c] - mx)), s += e[c], sum += r[c];
    for (int c = 0; c < C; ++c) p[c] = static_cast<float>(e[c] / s);
    // -sum_c target_c * log p_c, target = (1 - smoothing) at the label + smoothing / C everywhere
    const double lse = std::log(s) + mx;
    loss += lse - (1.0 - smoothing) * r[labels[b]];
    if (smoothing != 0.f) loss -= smoothing * sum / C;
  }
  return static_cast<float>(loss / B);
}

void crossEntropyBackward(float* dlogits, const float* probs, const std::int32_t* labels, int B,
                          int C, float dloss, float smoothing) {
  const float k = dloss / B, uniform = smoothing / static_cast<float>(C);
  for (int b = 0; b < B; ++b) {
    std::size_t o = static_cast<std::size_t>(b) * C;
    for (int c = 0; c < C; ++c) dlogits[o + c] = (probs[o + c] - uniform) * k;
    dlogits[o + labels[b]] -= (1.f - smoothing) * k;
  }
}

int countCorrect(const float* logits, const std::int32_t* labels, int B, int C) {
  int n = 0;
  for (int b = 0; b < B; ++b) {
    const float* r = logits + static_cast<std::size_t>(b) * C;
    int best = 0;
    for (int c = 1; c < C; ++c)
      if (r[c] > r[best]) best = c;
    n += best == labels[b];
  }
  return n;
}

}  // namespace xs::engine
