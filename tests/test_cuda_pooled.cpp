// The CUDA long-prompt kernels (core/cuda/pooled_attention.h) against a double-precision CPU computation of
// the exact maps, pooled with the same cells (viz::pool_region's), and of the logit statistics
// (LogHistogram's buckets, mean and largest |logit|), both ways: each logit computed from the queries and
// keys, and read from logits given per launch (as a matrix product writes them), split over blocks of keys.
// Runs where a GPU is present; elsewhere it says why it skipped.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "core/cuda/pooled_attention.h"
#include "core/formats/trace.h"
#include "helpers.h"

using namespace difflens;

namespace {

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(const std::vector<T>& host) : n(host.size()) {
    REQUIRE(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit DeviceBuffer(size_t n_) : n(n_) {
    REQUIRE(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, n * sizeof(T)) == cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

struct Case {
  int H, Hkv, T, d, P, window;
  bool diff, per_row;
  int chunk;              // query rows per launch
  std::vector<int> kept;  // heads pooled, in slot order
  int stats_from;
  int split = 0;  // > 0: the kernels read each launch's logits, this many keys a block; 0: from q and k
};

void check_case(const Case& k) {
  INFO("H " << k.H << " Hkv " << k.Hkv << " T " << k.T << " d " << k.d << " P " << k.P << " window "
            << k.window << (k.diff ? (k.per_row ? " DIFF V2" : " DIFF") : " baseline") << " rows per launch "
            << k.chunk << " heads pooled " << k.kept.size() << " statistics from row " << k.stats_from
            << (k.split ? " from logits, keys per block " : "") << (k.split ? std::to_string(k.split) : ""));
  const int H = k.H, Hkv = k.Hkv, T = k.T, d = k.d, P = k.P, w = k.window;
  const float lambda = 0.37f;
  std::mt19937 rng(static_cast<unsigned>(5 + T + d));
  std::normal_distribution<float> nd(0.0f, 0.7f);
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const std::vector<float> q1 = randv(size_t(H) * T * d), q2 = randv(size_t(H) * T * d);
  const std::vector<float> k1 = randv(size_t(Hkv) * T * d), k2 = randv(size_t(Hkv) * T * d);
  std::vector<int> bin(static_cast<size_t>(T));
  for (int r = 0; r < P; ++r)
    for (int i = r * T / P; i < (r + 1) * T / P; ++i) bin[size_t(i)] = r;
  std::vector<float> lambda_rows(size_t(H) * T);  // DIFF V2: λ per head and row, in (0, 1)
  for (float& x : lambda_rows) x = 1.0f / (1.0f + std::exp(-nd(rng) * 2));
  auto lambda_of = [&](int h, int i) {
    return k.per_row ? double(lambda_rows[size_t(h) * T + i]) : double(lambda);
  };
  auto visible = [&](int i, int j) { return j <= i && (w <= 0 || i - j < w); };

  // Exact logits and softmax maps in double on the CPU.
  auto logits = [&](const std::vector<float>& q, const std::vector<float>& kk, int h, int i, int j) {
    double s = 0;
    for (int e = 0; e < d; ++e)
      s += double(q[(size_t(h) * T + i) * d + e]) * kk[(size_t(h / (H / Hkv)) * T + j) * d + e];
    return s;
  };
  auto softmax_map = [&](const std::vector<float>& q, const std::vector<float>& kk, int h) {
    std::vector<double> a(size_t(T) * T, 0.0), lse(static_cast<size_t>(T));
    for (int i = 0; i < T; ++i) {
      double m = -INFINITY;
      for (int j = 0; j <= i; ++j)
        if (visible(i, j)) m = std::max(m, logits(q, kk, h, i, j));
      double z = 0;
      for (int j = 0; j <= i; ++j)
        if (visible(i, j)) z += std::exp(logits(q, kk, h, i, j) - m);
      lse[size_t(i)] = m + std::log(z);
      for (int j = 0; j <= i; ++j)
        if (visible(i, j)) a[size_t(i) * T + j] = std::exp(logits(q, kk, h, i, j) - m) / z;
    }
    return std::make_pair(a, lse);
  };

  // From logits (k.split > 0): a launch's rows against the keys they see, as a matrix product writes them
  // (here the double dot product rounded to float), [H, rows, ld] from key0, the first key row0 sees.
  std::vector<std::unique_ptr<DeviceBuffer<float>>> held;
  auto use_logits = [&](cuda::AttentionRows& a) {
    if (k.split == 0) return;
    const int key0 = w > 0 ? std::max(0, a.row0 - w + 1) : 0, ld = a.row0 + a.rows - key0;
    for (int c = 0; c < (k.diff ? 2 : 1); ++c) {
      std::vector<float> s(size_t(H) * a.rows * ld);
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < a.rows; ++r)
          for (int j = 0; j < ld; ++j)
            s[(size_t(h) * a.rows + r) * ld + j] =
                static_cast<float>(logits(c ? q2 : q1, c ? k2 : k1, h, a.row0 + r, key0 + j));
      held.push_back(std::make_unique<DeviceBuffer<float>>(s));
      (c ? a.s2 : a.s1) = held.back()->p;
    }
    a.key0 = key0, a.ld = ld, a.split = k.split;
  };

  DeviceBuffer<float> dq1(q1), dq2(q2), dk1(k1), dk2(k2), lse1(size_t(H) * T), lse2(size_t(H) * T),
      max_abs(size_t(H) * T), dlam(lambda_rows);
  cuda::RowLseArgs la;
  la.q1 = dq1.p, la.k1 = dk1.p, la.q2 = k.diff ? dq2.p : nullptr, la.k2 = k.diff ? dk2.p : nullptr;
  la.H = H, la.Hkv = Hkv, la.T = T, la.d = d, la.window = w;
  la.lse1 = lse1.p, la.lse2 = k.diff ? lse2.p : nullptr, la.max_abs = max_abs.p;
  for (int r0 = 0; r0 < T; r0 += k.chunk) {
    la.row0 = r0, la.rows = std::min(k.chunk, T - r0);
    use_logits(la);
    DeviceBuffer<float> scratch(cuda::lse_scratch_floats(la, k.diff));
    la.scratch = scratch.p;
    if (k.split == 0) CHECK(scratch.n == 0);
    REQUIRE(cuda::row_lse(la, k.diff) == 0);
    REQUIRE(cuda::synchronize() == 0);
    held.clear();
  }

  std::vector<int> slot(size_t(H), -1);
  for (size_t s = 0; s < k.kept.size(); ++s) slot[size_t(k.kept[s])] = int(s);
  DeviceBuffer<int> dbin(bin), dslot(slot);
  const size_t cells = k.kept.size() * size_t(P) * P;
  DeviceBuffer<float> s1(cells), b1(cells), s2(cells), b2(cells), sa(cells), ba(cells);
  DeviceBuffer<unsigned long long> hist(static_cast<size_t>(cuda::kHistBuckets));
  DeviceBuffer<double> abs_sum(1);
  cuda::PooledAttentionArgs pa;
  static_cast<cuda::AttentionRows&>(pa) = la;
  pa.lse1 = lse1.p, pa.lse2 = k.diff ? lse2.p : nullptr;
  pa.lambda = lambda, pa.lambda_rows = k.per_row ? dlam.p : nullptr;
  pa.P = P, pa.bin = dbin.p, pa.head_slot = dslot.p;
  pa.sum1 = s1.p, pa.best1 = b1.p, pa.sum2 = s2.p, pa.best2 = b2.p, pa.suma = sa.p, pa.besta = ba.p;
  pa.stats_from = k.stats_from, pa.hist = hist.p, pa.abs_sum = abs_sum.p;
  // The floor from the rows' largest |logit|: the kTopK-th largest of them.
  std::vector<float> row_max = max_abs.host();
  std::vector<float> counted_rows;
  for (int h = 0; h < H; ++h)
    for (int i = k.stats_from; i < T; ++i) counted_rows.push_back(row_max[size_t(h) * T + i]);
  std::sort(counted_rows.rbegin(), counted_rows.rend());
  pa.top_floor = counted_rows.size() >= size_t(cuda::kTopK) ? counted_rows[cuda::kTopK - 1] : 0.0f;
  std::vector<float> tops;
  for (int r0 = 0; r0 < T; r0 += k.chunk) {
    pa.row0 = r0, pa.rows = std::min(k.chunk, T - r0);
    use_logits(pa);
    DeviceBuffer<float> top(cuda::top_slots(pa));
    pa.top = top.p;
    REQUIRE(cuda::pooled_attention(pa, k.diff) == 0);
    REQUIRE(cuda::synchronize() == 0);
    for (float t : top.host())
      if (t >= 0) tops.push_back(t);
    held.clear();
  }
  std::sort(tops.rbegin(), tops.rend());

  // The reference: pooled cells of the kept heads, row lse, the statistics of every head.
  double worst_cell = 0, worst_lse = 0, worst_row_max = 0;
  LogHistogram ref_hist;
  double ref_sum = 0;
  std::vector<double> ref_abs;
  const std::vector<float> g_lse1 = lse1.host(), g_lse2 = lse2.host();
  const std::vector<float> gs1 = s1.host(), gb1 = b1.host(), gs2 = s2.host(), gb2 = b2.host(),
                           gsa = sa.host(), gba = ba.host();
  for (int h = 0; h < H; ++h) {
    const auto [a1, l1] = softmax_map(q1, k1, h);
    const auto [a2, l2] =
        k.diff ? softmax_map(q2, k2, h) : std::make_pair(std::vector<double>(), std::vector<double>());
    for (int i = 0; i < T; ++i) {
      worst_lse = std::max(worst_lse, std::fabs(g_lse1[size_t(h) * T + i] - l1[size_t(i)]));
      if (k.diff) worst_lse = std::max(worst_lse, std::fabs(g_lse2[size_t(h) * T + i] - l2[size_t(i)]));
      double mx = 0;
      for (int j = 0; j <= i; ++j) {
        if (!visible(i, j)) continue;
        for (int c = 0; c < (k.diff ? 2 : 1); ++c) {
          const double v = std::fabs(logits(c ? q2 : q1, c ? k2 : k1, h, i, j));
          mx = std::max(mx, v);
          if (i >= k.stats_from) {
            ref_hist.add(static_cast<float>(v));
            ref_sum += v;
            ref_abs.push_back(v);
          }
        }
      }
      worst_row_max = std::max(worst_row_max, std::fabs(row_max[size_t(h) * T + i] - mx));
    }
    if (slot[size_t(h)] < 0) continue;
    for (int r = 0; r < P; ++r)
      for (int c = 0; c <= r; ++c) {
        double sum = 0, sum1 = 0, sum2 = 0, best = 0, best1 = 0, best2 = 0;
        for (int i = r * T / P; i < (r + 1) * T / P; ++i)
          for (int j = c * T / P; j < std::min((c + 1) * T / P, i + 1); ++j) {
            const double p1 = a1[size_t(i) * T + j], p2 = k.diff ? a2[size_t(i) * T + j] : 0.0;
            const double v = k.diff ? p1 - lambda_of(h, i) * p2 : p1;
            sum += v;
            sum1 += p1;
            sum2 += p2;
            if (std::fabs(v) > std::fabs(best)) best = v;
            if (p1 > best1) best1 = p1;
            if (p2 > best2) best2 = p2;
          }
        const size_t cell = (size_t(slot[size_t(h)]) * P + r) * P + c;
        // Relative to the value where it exceeds 1 (a sum of up to (T/P)^2 entries added in float).
        auto off = [](float got, double want) {
          return std::fabs(got - want) / std::max(1.0, std::fabs(want));
        };
        worst_cell = std::max({worst_cell, off(gsa[cell], sum), off(gba[cell], best)});
        if (k.diff)
          worst_cell = std::max({worst_cell, off(gs1[cell], sum1), off(gb1[cell], best1),
                                 off(gs2[cell], sum2), off(gb2[cell], best2)});
      }
  }
  INFO("largest difference: cells " << worst_cell << ", row lse " << worst_lse << ", row max "
                                    << worst_row_max);
  CHECK(worst_cell < 2e-5);
  CHECK(worst_lse < 1e-4);
  CHECK(worst_row_max < 1e-4);

  // Statistics: the same entries counted; buckets equal but for values within float rounding of a bucket's
  // edge; the mean and the kTopK largest as the reference's.
  const std::vector<unsigned long long> gh = hist.host();
  uint64_t total = 0, moved = 0;
  for (unsigned long long x : gh) total += x;
  REQUIRE(total == ref_hist.total());
  moved += uint64_t(std::llabs(static_cast<long long>(gh[0]) - static_cast<long long>(ref_hist.below)));
  for (int b = 0; b < LogHistogram::kBins; ++b)
    moved += uint64_t(std::llabs(static_cast<long long>(gh[size_t(b) + 1]) -
                                 static_cast<long long>(ref_hist.counts[size_t(b)])));
  INFO("entries counted " << total << ", in another bucket than the reference's " << moved);
  CHECK(moved <= 2 + total / 10000);
  CHECK(abs_sum.host()[0] / double(total) == Approx(ref_sum / double(total)).epsilon(1e-5));
  std::sort(ref_abs.rbegin(), ref_abs.rend());
  const size_t want = std::min<size_t>(cuda::kTopK, ref_abs.size());
  REQUIRE(tops.size() >= want);
  for (size_t x = 0; x < want; ++x) REQUIRE(tops[x] == Approx(ref_abs[x]).epsilon(1e-5).margin(1e-6));
}

}  // namespace

TEST_CASE("CUDA pooled attention kernels match the exact maps pooled on the CPU", "[gpu][long]") {
  if (cuda::device_count() == 0)
    test::skip("no CUDA device on this machine: the kernels were built, not run");
  CHECK(cuda::supports(8, true));
  CHECK(cuda::supports(64, true));
  CHECK_FALSE(cuda::supports(80, true));
  CHECK(cuda::supports(128, false));
  CHECK_FALSE(cuda::supports(129, false));
  // Each case from q and k, then from logits in blocks of 64 keys (several per row) and of 2048 (one).
  for (const int split : {0, 64, 2048}) {
    // Narrow cells (rows of one warp in several row cells), GQA, windows, DIFF V1 and V2, several launches.
    for (const int w : {0, 60})
      for (const bool per_row : {false, true})
        check_case({4, 2, 203, 8, 29, w, true, per_row, 203, {0, 1, 2, 3}, 0, split});
    // Cells wider than a block's 128 rows, launches of 96 rows, two heads of four pooled (in another order),
    // statistics from row 17.
    check_case({4, 4, 700, 64, 5, 0, true, false, 96, {3, 1}, 17, split});
    // The baseline at the widest components, one head group (MQA), cells of ~3 tokens.
    check_case({3, 1, 300, 100, 97, 0, false, false, 300, {0, 1, 2}, 0, split});
    // No head pooled: only the row log-sum-exps and the statistics.
    check_case({2, 1, 150, 16, 10, 33, true, true, 64, {}, 5, split});
  }
  // From logits, any width: DIFF components of 96 (too wide for q and k in registers), blocks of 100 keys
  // (not a multiple of a tile's 32), launches of 250 rows with a window of 90.
  check_case({2, 2, 520, 96, 13, 90, true, false, 250, {1, 0}, 0, 100});
}

TEST_CASE("CUDA pooled attention kernels refuse what they cannot run", "[gpu][long]") {
  cuda::RowLseArgs a;
  a.H = 4, a.Hkv = 3, a.T = 10, a.d = 16, a.rows = 10;  // heads not a multiple of the key groups
  CHECK(cuda::row_lse(a, false) != 0);
  a.Hkv = 2, a.d = 96;  // DIFF components wider than 64
  CHECK(cuda::row_lse(a, true) != 0);
  a.d = 16, a.row0 = 5;  // rows past the prompt's end
  CHECK(cuda::row_lse(a, false) != 0);
  // From logits: no room for the partial sums; keys that do not start at row0's first or do not reach its
  // rows' last; DIFF without the second component's logits. These need buffers on a GPU.
  if (cuda::device_count() == 0)
    test::skip(
        "no CUDA device on this machine: the refusals before a launch passed, those with buffers skip");
  std::vector<float> host(1000, 0.0f);
  DeviceBuffer<float> s(host), scratch(host), lse1(host), lse2(host);
  a.lse1 = lse1.p, a.lse2 = lse2.p;
  a.row0 = 0, a.rows = 10, a.Hkv = 2, a.d = 96, a.s1 = s.p, a.key0 = 0, a.ld = 10;
  CHECK(cuda::row_lse(a, false) != 0);
  a.scratch = scratch.p;
  CHECK(cuda::row_lse(a, false) == 0);  // any width: the logits are given
  a.ld = 9;
  CHECK(cuda::row_lse(a, false) != 0);
  a.ld = 10, a.row0 = 2, a.rows = 8, a.key0 = 1;
  CHECK(cuda::row_lse(a, false) != 0);
  a.row0 = 0, a.rows = 10, a.key0 = 0;
  CHECK(cuda::row_lse(a, true) != 0);
  a.s2 = s.p;
  CHECK(cuda::row_lse(a, true) == 0);
  CHECK(cuda::synchronize() == 0);
}
