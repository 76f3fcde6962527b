// The CUDA pooled-attention kernels against a double-precision CPU computation of the exact maps pooled
// with the same cells (viz::pool_region's). Runs where a GPU is present; elsewhere it says why it skipped.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "core/cuda/pooled_attention.h"
#include "helpers.h"

using namespace difflens;

namespace {

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(const std::vector<float>& host) {
    REQUIRE(cudaMalloc(&p, host.size() * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit DeviceBuffer(size_t n) {
    REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, n * sizeof(float)) == cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<float> host(size_t n) const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
};

}  // namespace

TEST_CASE("CUDA pooled attention kernels match the exact maps pooled on the CPU", "[gpu][long]") {
  if (cuda::device_count() == 0)
    test::skip("no CUDA device on this machine: the kernels were built, not run");
  const int H = 4, Hkv = 2, T = 203, d = 8, P = 29, window = 60;
  const float lambda = 0.37f;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.7f);
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const std::vector<float> q1 = randv(size_t{H} * T * d), q2 = randv(size_t{H} * T * d);
  const std::vector<float> k1 = randv(size_t{Hkv} * T * d), k2 = randv(size_t{Hkv} * T * d);
  std::vector<int> bin(T);
  for (int r = 0; r < P; ++r)
    for (int i = r * T / P; i < (r + 1) * T / P; ++i) bin[static_cast<size_t>(i)] = r;
  std::vector<float> lambda_rows(size_t{H} * T);  // DIFF V2: λ per head and row, in (0, 1)
  for (size_t x = 0; x < lambda_rows.size(); ++x) lambda_rows[x] = 1.0f / (1.0f + std::exp(-nd(rng) * 2));
  for (const int w : {0, window})
    for (const bool per_row : {false, true}) {
      INFO("window " << w << (per_row ? ", λ per row (DIFF V2)" : ", one λ (DIFF V1)"));
      auto lambda_of = [&](int h, int i) { return per_row ? lambda_rows[size_t(h) * T + i] : lambda; };
      // Exact softmax maps in double on the CPU.
      auto softmax_map = [&](const std::vector<float>& q, const std::vector<float>& k, int h) {
        std::vector<double> a(size_t{T} * T, 0.0);
        for (int i = 0; i < T; ++i) {
          std::vector<double> l(static_cast<size_t>(i + 1), -INFINITY);
          double m = -INFINITY;
          for (int j = 0; j <= i; ++j) {
            if (w > 0 && i - j >= w) continue;
            double s = 0;
            for (int e = 0; e < d; ++e)
              s += double(q[(size_t(h) * T + i) * d + e]) * k[(size_t(h / (H / Hkv)) * T + j) * d + e];
            l[size_t(j)] = s;
            m = std::max(m, s);
          }
          double z = 0;
          for (int j = 0; j <= i; ++j) z += std::isinf(l[size_t(j)]) ? 0 : std::exp(l[size_t(j)] - m);
          for (int j = 0; j <= i; ++j)
            a[size_t(i) * T + j] = std::isinf(l[size_t(j)]) ? 0 : std::exp(l[size_t(j)] - m) / z;
        }
        return a;
      };
      DeviceBuffer dq1(q1), dq2(q2), dk1(k1), dk2(k2), lse1(size_t{H} * T), lse2(size_t{H} * T),
          dlam(lambda_rows);
      REQUIRE(cuda::row_lse(dq1.p, dk1.p, lse1.p, H, Hkv, T, d, w) == 0);
      REQUIRE(cuda::row_lse(dq2.p, dk2.p, lse2.p, H, Hkv, T, d, w) == 0);
      int* dbin = nullptr;
      REQUIRE(cudaMalloc(&dbin, bin.size() * sizeof(int)) == cudaSuccess);
      cudaMemcpy(dbin, bin.data(), bin.size() * sizeof(int), cudaMemcpyHostToDevice);
      const size_t cells = size_t{H} * P * P;
      DeviceBuffer s1(cells), b1(cells), s2(cells), b2(cells), sa(cells), ba(cells);
      cuda::PooledAttentionArgs args;
      args.q1 = dq1.p, args.k1 = dk1.p, args.q2 = dq2.p, args.k2 = dk2.p, args.lse1 = lse1.p,
      args.lse2 = lse2.p;
      args.lambda_rows = per_row ? dlam.p : nullptr;
      args.lambda = lambda, args.H = H, args.Hkv = Hkv, args.T = T, args.d = d, args.P = P, args.window = w;
      args.bin = dbin, args.sum1 = s1.p, args.best1 = b1.p, args.sum2 = s2.p, args.best2 = b2.p,
      args.suma = sa.p, args.besta = ba.p;
      REQUIRE(cuda::pooled_attention(args, true) == 0);
      cudaFree(dbin);
      const std::vector<float> gs = sa.host(cells), gb = ba.host(cells), g1 = s1.host(cells);
      double worst = 0;
      for (int h = 0; h < H; ++h) {
        const std::vector<double> a1 = softmax_map(q1, k1, h), a2 = softmax_map(q2, k2, h);
        for (int r = 0; r < P; ++r)
          for (int c = 0; c <= r; ++c) {
            double sum = 0, sum1 = 0, best = 0;
            for (int i = r * T / P; i < (r + 1) * T / P; ++i)
              for (int j = c * T / P; j < std::min((c + 1) * T / P, i + 1); ++j) {
                const double v = a1[size_t(i) * T + j] - lambda_of(h, i) * a2[size_t(i) * T + j];
                sum += v;
                sum1 += a1[size_t(i) * T + j];
                if (std::fabs(v) > std::fabs(best)) best = v;
              }
            const size_t cell = (size_t(h) * P + r) * P + c;
            worst = std::max(
                {worst, std::fabs(gs[cell] - sum), std::fabs(g1[cell] - sum1), std::fabs(gb[cell] - best)});
          }
      }
      INFO("largest difference " << worst);
      CHECK(worst < 1e-4);
    }
}
