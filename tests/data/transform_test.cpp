// transform_test.cpp: transforms against hand-derived values. Bilinear resize follows
// interpolate(mode="bilinear", align_corners=False): src = (dst + 0.5) * in/out - 0.5, clamped
// at 0, neighbours i0 = floor(src), i1 = min(i0 + 1, in - 1).
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "test_util.hpp"
#include "xspawn/data/transform.hpp"

namespace xs::data {
namespace {

void expectNear(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

std::vector<float> resized(const std::vector<float>& in, int c, int h, int w, int oh, int ow) {
  std::vector<float> out(static_cast<std::size_t>(c) * oh * ow);
  resizeBilinear(in.data(), c, h, w, out.data(), oh, ow);
  return out;
}

TEST(Transform, ToFloatScalesTo01) {
  const std::uint8_t src[] = {0, 51, 255};
  float dst[3];
  toFloat(src, 3, dst);
  EXPECT_FLOAT_EQ(dst[0], 0.0f);
  EXPECT_FLOAT_EQ(dst[1], 0.2f);
  EXPECT_FLOAT_EQ(dst[2], 1.0f);
}

TEST(Resize, Upsample2x2To4x4) {  // the classic interpolate() example
  expectNear(resized({0, 1, 2, 3}, 1, 2, 2, 4, 4),
             {0.0f, 0.25f, 0.75f, 1.0f, 0.5f, 0.75f, 1.25f, 1.5f,  //
              1.5f, 1.75f, 2.25f, 2.5f, 2.0f, 2.25f, 2.75f, 3.0f});
}

TEST(Resize, Downsample4x4To2x2AveragesBlocks) {
  std::vector<float> in(16);
  std::iota(in.begin(), in.end(), 0.0f);
  expectNear(resized(in, 1, 4, 4, 2, 2), {2.5f, 4.5f, 10.5f, 12.5f});
}

TEST(Resize, NonIntegerRatios) {
  // 3 -> 2: src 0.25 and 1.75.
  expectNear(resized({0, 3, 6}, 1, 1, 3, 1, 2), {0.75f, 5.25f});
  // 3 -> 5: src 0 (clamped), 0.4, 1.0, 1.6, 2.2 (right neighbour clamped).
  expectNear(resized({0, 10, 20}, 1, 1, 3, 1, 5), {0.0f, 4.0f, 10.0f, 16.0f, 20.0f});
  // Two channels are resized independently.
  expectNear(resized({0, 3, 6, 6, 3, 0}, 2, 1, 3, 1, 2), {0.75f, 5.25f, 5.25f, 0.75f});
}

TEST(Resize, SameSizeIsIdentity) {
  std::vector<float> in(12);
  std::iota(in.begin(), in.end(), 1.0f);
  expectNear(resized(in, 1, 3, 4, 3, 4), in);
}

TEST(Resize, Fashion28To224) {
  // in(y, x) = 28 y + x is linear, so out = 28 sy + sx with s = clamp((d + 0.5) / 8 - 0.5, 0, 27).
  std::vector<float> in(28 * 28);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) in[y * 28 + x] = static_cast<float>(28 * y + x);
  const std::vector<float> out = resized(in, 1, 28, 28, 224, 224);
  auto at = [&](int y, int x) { return out[static_cast<std::size_t>(y) * 224 + x]; };
  EXPECT_NEAR(at(0, 0), 0.0f, 1e-4);
  EXPECT_NEAR(at(0, 3), 0.0f, 1e-4);
  EXPECT_NEAR(at(0, 4), 0.0625f, 1e-4);
  EXPECT_NEAR(at(0, 100), 12.0625f, 1e-4);
  EXPECT_NEAR(at(4, 0), 28 * 0.0625f, 1e-4);
  EXPECT_NEAR(at(100, 7), 28 * 12.0625f + 0.4375f, 1e-3);
  EXPECT_NEAR(at(223, 223), 28 * 27 + 27, 1e-3);
  EXPECT_NEAR(at(219, 219), 28 * 26.9375f + 26.9375f, 1e-3);
}

TEST(Transform, GrayToRgbRepeatsTheChannel) {
  const float src[] = {1, 2, 3, 4};
  std::vector<float> dst(12);
  grayToRgb(src, 2, 2, dst.data());
  expectNear(dst, {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
}

TEST(Transform, PadCropZeroPads) {
  const float src[] = {1, 2, 3, 4};  // 2x2, padding 1 -> 4x4 padded
  std::vector<float> dst(4);
  padCrop(src, 1, 2, 2, 1, 0, 0, dst.data(), 2, 2);
  expectNear(dst, {0, 0, 0, 1});
  padCrop(src, 1, 2, 2, 1, 2, 1, dst.data(), 2, 2);
  expectNear(dst, {3, 4, 0, 0});
  padCrop(src, 1, 2, 2, 1, 1, 1, dst.data(), 2, 2);
  expectNear(dst, {1, 2, 3, 4});
}

TEST(Transform, FlipAndNormalize) {
  std::vector<float> d = {1, 2, 3, 4, 5, 6};  // 2 channels of 1x3
  flipHorizontal(d.data(), 2, 1, 3);
  expectNear(d, {3, 2, 1, 6, 5, 4});
  const float mean[] = {1.0f, 2.0f};
  const float std[] = {2.0f, 0.5f};
  normalize(d.data(), 2, 1, 3, mean, std);
  expectNear(d, {1.0f, 0.5f, 0.0f, 8.0f, 6.0f, 4.0f});
}

TEST(Transform, AlexNetPipelineShapesAndValues) {
  TransformConfig c;
  c.resize = 224;
  c.toRgb = true;
  c.mean = kImagenetMean;
  c.std = kImagenetStd;
  const Transform t(c, 1, 28, 28);
  EXPECT_EQ(t.outChannels(), 3);
  EXPECT_EQ(t.outHeight(), 224);
  EXPECT_EQ(t.outSize(), 3u * 224 * 224);
  std::vector<std::uint8_t> img(28 * 28, 51);  // 0.2 everywhere
  std::vector<float> out(t.outSize());
  SampleRng rng(1);
  t.apply(img.data(), out.data(), rng);
  for (int ch = 0; ch < 3; ++ch) {
    const float want = (0.2f - kImagenetMean[ch]) / kImagenetStd[ch];
    EXPECT_NEAR(out[ch * 224 * 224], want, 1e-5);
    EXPECT_NEAR(out[ch * 224 * 224 + 224 * 224 - 1], want, 1e-5);
  }
}

TEST(Transform, RandomCropAndFlipAreSeededAndCoverTheRange) {
  TransformConfig c;
  c.crop = 4;
  c.cropPadding = 2;
  c.horizontalFlip = true;
  const Transform t(c, 1, 4, 4);
  std::vector<std::uint8_t> img(16);
  std::iota(img.begin(), img.end(), std::uint8_t{1});
  std::set<std::vector<float>> seen;
  for (std::uint64_t i = 0; i < 400; ++i) {
    std::vector<float> a(16), b(16);
    SampleRng ra(7, 0, i), rb(7, 0, i);
    t.apply(img.data(), a.data(), ra);
    t.apply(img.data(), b.data(), rb);
    ASSERT_EQ(a, b);  // same (seed, epoch, index) -> same result
    seen.insert(a);
  }
  EXPECT_EQ(seen.size(), 5u * 5u * 2u);  // 5 offsets per axis x flip
}

// The fused pipeline must equal the primitives chained in torchvision's order.
TEST(Transform, PipelineEqualsTheChainedPrimitives) {
  TransformConfig c;
  c.resize = 9;
  c.toRgb = true;
  c.crop = 8;
  c.cropPadding = 3;
  c.horizontalFlip = true;
  c.mean = {0.1f, 0.2f, 0.3f};
  c.std = {0.5f, 0.25f, 2.0f};
  const Transform t(c, 1, 5, 6);
  std::vector<std::uint8_t> img(30);
  for (std::size_t i = 0; i < img.size(); ++i) img[i] = static_cast<std::uint8_t>(i * 37 % 256);
  int flips = 0;
  for (std::uint64_t i = 0; i < 40; ++i) {
    std::vector<float> got(t.outSize());
    SampleRng rng(3, 1, i);
    t.apply(img.data(), got.data(), rng);
    SampleRng draw(3, 1, i);  // the same draws, in the same order: top, left, flip
    const int top = static_cast<int>(draw.below(9 + 6 - 8 + 1));
    const int left = static_cast<int>(draw.below(9 + 6 - 8 + 1));
    const bool flip = draw.coin();
    flips += flip;
    std::vector<float> f(30), r(81), rgb(243), want(192);
    toFloat(img.data(), 30, f.data());
    resizeBilinear(f.data(), 1, 5, 6, r.data(), 9, 9);
    grayToRgb(r.data(), 9, 9, rgb.data());
    padCrop(rgb.data(), 3, 9, 9, 3, top, left, want.data(), 8, 8);
    if (flip) flipHorizontal(want.data(), 3, 8, 8);
    normalize(want.data(), 3, 8, 8, c.mean.data(), c.std.data());
    expectNear(got, want);
  }
  EXPECT_GT(flips, 5);
  EXPECT_LT(flips, 35);
}

TEST(Transform, RejectsBadSettings) {
  TransformConfig c;
  c.crop = 40;
  EXPECT_THROW(Transform(c, 1, 28, 28), UsageError);
  c = {};
  c.mean = {0.5f};
  c.std = {0.5f};
  c.toRgb = true;
  EXPECT_THROW(Transform(c, 1, 28, 28), UsageError);  // 3 output channels need 3 means
  c = {};
  c.mean = {0.5f};
  c.std = {0.0f};
  EXPECT_THROW(Transform(c, 1, 28, 28), UsageError);
  c = {};
  c.toRgb = true;
  EXPECT_THROW(Transform(c, 2, 28, 28), UsageError);
}

}  // namespace
}  // namespace xs::data
