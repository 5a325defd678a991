// test_gemm.cpp: every GEMM backend against a double-precision reference, in fp32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "test_util.hpp"
#include "xspawn/error.hpp"
#include "gemm.hpp"

namespace xs::engine {
namespace {

// C = op(A) op(B) + beta C in double, with operands optionally rounded to bf16.
std::vector<float> reference(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A,
                             const std::vector<float>& B, float beta, std::vector<float> C, bool bf16) {
  auto r = [&](float v) { return bf16 ? roundToBf16(v) : v; };
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += static_cast<double>(r(ta ? A[k * M + i] : A[i * K + k])) * r(tb ? B[j * K + k] : B[k * N + j]);
      C[i * N + j] = static_cast<float>(s + beta * C[i * N + j]);
    }
  return C;
}

class GemmBackends : public ::testing::TestWithParam<std::tuple<GemmBackend, Precision>> {
  void TearDown() override { setGemmBackend(GemmBackend::kOneDnn); }
};

TEST_P(GemmBackends, MatchReference) {
  auto [backend, prec] = GetParam();
  setGemmBackend(backend);
  DeviceOptions o;
  o.precision = prec;
  Device dev(o);
  const int M = 13, N = 37, K = 70;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f}) {
        auto A = test::pattern(M * K, 1), B = test::pattern(K * N, 2), C = test::pattern(M * N, 3);
        auto want = reference(ta, tb, M, N, K, A, B, beta, C, prec == Precision::kBf16);
        gemm(dev, ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, C.data(), N);
        for (int i = 0; i < M * N; ++i)
          ASSERT_NEAR(C[i], want[i], 2e-4 * (1 + std::fabs(want[i])))
              << gemmBackendName(backend) << " ta=" << ta << " tb=" << tb << " beta=" << beta << " at " << i;
      }
}

INSTANTIATE_TEST_SUITE_P(
    All, GemmBackends,
    ::testing::Combine(::testing::Values(GemmBackend::kOneDnn, GemmBackend::kOpenBlas, GemmBackend::kOwn),
                       ::testing::Values(Precision::kFp32, Precision::kBf16)));

TEST(Gemm, Bf16RoundingIsNearestEven) {
  EXPECT_EQ(roundToBf16(1.0f), 1.0f);
  EXPECT_EQ(roundToBf16(1.00390625f), 1.0f);        // halfway 1 + 2^-8: ties to even (1.0)
  EXPECT_EQ(roundToBf16(1.01171875f), 1.015625f);   // halfway 1 + 3*2^-8: ties to even
  EXPECT_EQ(roundToBf16(1.005f), 1.0078125f);
  EXPECT_TRUE(std::isnan(roundToBf16(NAN)));
  EXPECT_EQ(toBf16Bits(-2.0f), 0xc000);
}

TEST(Gemm, BackendNames) {
  EXPECT_EQ(parseGemmBackend("openblas"), GemmBackend::kOpenBlas);
  EXPECT_STREQ(gemmBackendName(GemmBackend::kOwn), "own");
  EXPECT_THROW(parseGemmBackend("mkl"), UsageError);
}

// The default bf16 mode follows what oneDNN runs, not what the CPU has: on an Intel CPU, native
// only where oneDNN runs AMX. CTest runs this once more with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
// (engine.bf16_auto_without_amx), which on an AMX CPU must fall back to the emulation.
TEST(Bf16Auto, NativeOnIntelOnlyWhereOneDnnRunsAmx) {
  const char* forced = std::getenv("XS_ENGINE_BF16");
  if (forced && *forced && std::string(forced) != "auto") GTEST_SKIP() << "XS_ENGINE_BF16 chooses the mode";
  __builtin_cpu_init();
  if (!cpuHasBf16()) {
    EXPECT_EQ(bf16Mode(), Bf16Mode::kEmulated);
    return;
  }
  if (!__builtin_cpu_is("intel")) GTEST_SKIP() << "not an Intel CPU";
  if (const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA"); cap && std::string(cap) == "AVX512_CORE_BF16") {
    EXPECT_FALSE(oneDnnRunsAmx());
  }
  EXPECT_EQ(bf16Mode(), oneDnnRunsAmx() ? Bf16Mode::kNative : Bf16Mode::kEmulated);
}

}  // namespace
}  // namespace xs::engine
