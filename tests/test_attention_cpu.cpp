// The CPU's fused attention pass (core/cpu/attention_cpu.h) against the tensor operations training and the
// GPU use, on the same inputs; its statistics against the same numbers computed directly from the logits it
// keeps; its histogram bins against LogHistogram's own.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/cpu/attention_cpu.h"
#include "core/model/model.h"
#include "helpers.h"
#include "isa.h"

using namespace difflens;

namespace {

ModelConfig windowed(ModelConfig c, int64_t w) {
  c.sliding_window = w;
  return c;
}

double worst_difference(const FloatArray& a, const FloatArray& b) {
  REQUIRE(a.shape == b.shape);
  double worst = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const float x = a.data[i], y = b.data[i];
    if (std::isinf(x) || std::isinf(y)) {
      CHECK(x == y);  // hidden keys: -inf in both
      continue;
    }
    worst = std::max(worst, static_cast<double>(std::fabs(x - y)));
  }
  return worst;
}

std::vector<float> normal_input(int64_t T, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * E));
  for (float& v : x) v = nd(rng);
  return x;
}

}  // namespace

TEST_CASE("fused attention: maps, logits and outputs equal the tensor operations' on the same inputs",
          "[attention][fused]") {
  std::vector<std::pair<std::string, Model>> models;
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff, 32, 1, 4, 2),      // GQA
                               test::tiny_config(AttentionKind::Baseline, 32, 1, 2, 1),  // GQA
                               windowed(test::tiny_config(AttentionKind::Diff, 32, 1, 2, 2), 7),
                               windowed(test::tiny_config(AttentionKind::Baseline, 32, 1, 2, 2), 7)})
    models.emplace_back(std::string(to_string(c.attention)) + " window " + std::to_string(c.sliding_window),
                        Model::random(c, 41));
  // The bundled pair: trained, sharp maps (its logits reach tens).
  for (const char* name : {"diff-small", "baseline-small"})
    models.emplace_back(name, Model::load(std::string(DIFFLENS_SOURCE_DIR "/assets/models/") + name));
  test::on_every_isa([&] {
    for (auto& [name, m] : models) {
      const ModelConfig& c = m.config();
      for (const int64_t T : {int64_t{1}, int64_t{17}, int64_t{130}})
        for (const int layer : {0, static_cast<int>(c.num_hidden_layers) - 1}) {
          INFO(name << ", T " << T << ", layer " << layer);
          const std::vector<float> x = normal_input(T, c.hidden_size, static_cast<uint32_t>(T + layer));
          std::vector<float> out_fused, out_tensor;
          const LayerTrace f = m.attention_probe(layer, x, T, &out_fused);
          const LayerTrace t = m.attention_probe(layer, x, T, &out_tensor, /*tensor_ops=*/true);
          CHECK(f.heads == t.heads);
          CHECK(worst_difference(f.a, t.a) < 1e-6);
          if (c.is_diff()) {
            CHECK(worst_difference(f.a1, t.a1) < 1e-6);
            CHECK(worst_difference(f.a2, t.a2) < 1e-6);
            CHECK(f.lambda == t.lambda);
            CHECK(worst_difference(f.logits2, t.logits2) < 2e-5);
          }
          CHECK(worst_difference(f.logits1, t.logits1) < 2e-5);
          double worst_out = 0;
          for (size_t i = 0; i < out_fused.size(); ++i)
            worst_out = std::max(worst_out, static_cast<double>(std::fabs(out_fused[i] - out_tensor[i])));
          CHECK(worst_out < 1e-5);
          // Nothing on the future or outside the window: exact zeros and -inf.
          const int64_t H = c.map_heads();
          for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < T; ++i)
              for (int64_t j = 0; j < T; ++j) {
                const bool hidden = j > i || (c.sliding_window > 0 && j <= i - c.sliding_window);
                if (!hidden) continue;
                const size_t at = static_cast<size_t>((h * T + i) * T + j);
                REQUIRE(f.a.data[at] == 0.0f);
                REQUIRE(f.logits1.data[at] == -std::numeric_limits<float>::infinity());
              }
        }
    }
  });
}

TEST_CASE("fused attention: quantized logits are the tensor operations' quantized logits",
          "[attention][fused][quantize]") {
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff, 32, 1, 2, 2),
                               test::tiny_config(AttentionKind::Baseline, 32, 1)}) {
    Model m = Model::random(c, 5);
    const int64_t T = 60;
    const std::vector<float> x = normal_input(T, c.hidden_size, 9);
    for (int bits : {8, 4}) {
      INFO(to_string(c.attention) << " " << bits << " bits");
      m.set_logit_bits(bits);
      const LayerTrace f = m.attention_probe(0, x, T, nullptr);
      const LayerTrace t = m.attention_probe(0, x, T, nullptr, true);
      // Each logit is a multiple of its head's step; a value within rounding of a half step may round the
      // other way (1e-7 apart before rounding), so count those instead of asking for none.
      size_t moved = 0, visible = 0;
      for (size_t i = 0; i < f.logits1.data.size(); ++i) {
        if (std::isinf(t.logits1.data[i])) continue;
        ++visible;
        if (std::fabs(f.logits1.data[i] - t.logits1.data[i]) > 1e-5) ++moved;
      }
      CHECK(moved * 1000 <= visible);
      if (moved == 0) CHECK(worst_difference(f.a, t.a) < 1e-6);
    }
  }
}

TEST_CASE("fused attention: logit statistics are the kept logits' own, exactly",
          "[attention][fused][stats]") {
  test::on_every_isa([&] {
    for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff, 32, 2, 2, 1),
                                 windowed(test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 2), 11)})
      for (const int64_t stats_from : {int64_t{0}, int64_t{13}}) {
        INFO(to_string(c.attention) << " window " << c.sliding_window << ", statistics from " << stats_from);
        const Model m = Model::random(c, 77);
        CaptureOptions o;
        o.keep_logits = true;
        o.stats_from = stats_from;
        const Trace t = m.capture(test::random_ids(90, c.vocab_size, 4), o);
        const int64_t T = t.length();
        for (const LayerTrace& l : t.layers) {
          std::vector<float> values;
          LogHistogram hist;
          double sum = 0;
          for (const FloatArray* logits : {&l.logits1, &l.logits2}) {
            if (logits->empty()) continue;
            const int64_t H = logits->shape[0];
            for (int64_t h = 0; h < H; ++h)
              for (int64_t i = stats_from; i < T; ++i)
                for (int64_t j = 0; j < T; ++j) {
                  const float v = logits->data[static_cast<size_t>((h * T + i) * T + j)];
                  if (std::isinf(v)) continue;  // hidden
                  values.push_back(std::fabs(v));
                  hist.add(v);
                  sum += std::fabs(v);
                }
          }
          const ValueStats& s = l.logit_stats;
          REQUIRE(s.count == values.size());
          CHECK(s.histogram.counts == hist.counts);
          CHECK(s.histogram.below == hist.below);
          CHECK(s.histogram.above == hist.above);
          CHECK(s.mean == Approx(sum / static_cast<double>(values.size())).epsilon(1e-6));
          std::sort(values.begin(), values.end());
          CHECK(s.median == values[(values.size() + 1) / 2 - 1]);  // the lower median
          std::vector<float> top(values.rbegin(), values.rbegin() + ValueStats::kTopK);
          CHECK(s.top == top);
        }
      }
  });
}

TEST_CASE("fused attention: logit statistics with infinite and huge logits, with idle workers too",
          "[attention][fused][stats]") {
  // A baseline pass on hand-made inputs: key 3 is huge in its first dimension (every later row's logit to
  // it is around 1e20, past the histogram), and row 10's query is so large that its logit to key 3
  // overflows to infinity (and its others reach 1e25). The statistics must be those of the logits the pass
  // writes: the infinities counted above the histogram and first in the top-k, the exact median.
  const int64_t T = 40, heads = 2, d = 4;
  std::vector<float> q = normal_input(heads * T, d, 5), k = normal_input(heads * T, d, 6),
                     v = normal_input(heads * T, d, 7);
  for (int64_t h = 0; h < heads; ++h) {
    k[static_cast<size_t>((h * T + 3) * d)] = 1e20f;
    q[static_cast<size_t>((h * T + 10) * d)] = 1e25f;
    for (int64_t c = 1; c < d; ++c) k[static_cast<size_t>((h * T + 3) * d + c)] = 0.0f;  // no inf − inf
  }
  CpuAttentionInputs in;
  in.T = T;
  in.heads = in.kv_heads = heads;
  in.d = in.dv = d;
  in.q1 = q.data();
  in.k1 = k.data();
  in.v = v.data();
  for (const int workers : {1, 2, 3})
    for (const int64_t stats_from : {int64_t{0}, int64_t{12}}) {
      INFO(workers << " worker(s), statistics from row " << stats_from);
      test::on_every_isa([&] {
        std::vector<float> o(static_cast<size_t>(heads * T * d)), logits(static_cast<size_t>(heads * T * T));
        CpuAttentionOutputs out;
        out.row1 = out.ld = T;
        out.o = o.data();
        out.logits1 = logits.data();
        ValueStats s;
        out.logit_stats = &s;
        out.stats_from = stats_from;
        // Two workers take the jobs' two halves in turn; of three, the second takes every job and the
        // others stay idle (their statistics empty: nothing collected, nothing allocated).
        const CpuParallelFor parallel = [&](int64_t n,
                                            const std::function<void(int64_t, int64_t, int)>& body) {
          if (workers != 2) return body(0, n, workers == 3 ? 1 : 0);
          body(0, n / 2, 0);
          body(n / 2, n, 1);
        };
        attention_cpu(in, out, workers, parallel);
        std::vector<float> values;
        LogHistogram hist;
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = stats_from; i < T; ++i)
            for (int64_t j = 0; j <= i; ++j) {
              const float x = logits[static_cast<size_t>((h * T + i) * T + j)];
              values.push_back(std::fabs(x));
              hist.add(x);
            }
        std::sort(values.begin(), values.end());
        REQUIRE(std::count(values.begin(), values.end(), std::numeric_limits<float>::infinity()) ==
                (stats_from <= 10 ? 2 : 0));
        CHECK(s.count == values.size());
        CHECK(s.histogram.counts == hist.counts);
        CHECK(s.histogram.above == hist.above);
        CHECK(s.histogram.below == hist.below);
        CHECK(s.median == values[(values.size() + 1) / 2 - 1]);
        CHECK(s.top == std::vector<float>(values.rbegin(), values.rbegin() + ValueStats::kTopK));
        CHECK(std::isinf(s.mean) == (stats_from <= 10));
      });
    }
}

TEST_CASE("fused attention: histogram bins are LogHistogram's, at bin edges too",
          "[attention][fused][stats]") {
  std::vector<float> values = {0.0f,         1e-9f,    1e-8f, 0.5f,  1.0f,
                               10.0f,        99999.9f, 1e8f,  3e38f, std::numeric_limits<float>::infinity(),
                               std::nanf("")};
  for (int b = 0; b <= LogHistogram::kBins; ++b) {  // the float nearest each edge and its neighbours
    const float edge = static_cast<float>(LogHistogram::bin_lower(b));
    values.insert(values.end(), {edge, std::nextafter(edge, 0.0f), std::nextafter(edge, 1e30f)});
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> exponent(-10.0, 10.0);
  for (int i = 0; i < 20000; ++i) values.push_back(static_cast<float>(std::pow(10.0, exponent(rng))));
  for (float v : values) {
    LogHistogram h;
    h.add(v);
    int expected = h.below ? 0 : h.above ? LogHistogram::kBins + 1 : -1;
    for (int b = 0; expected < 0 && b < LogHistogram::kBins; ++b)
      if (h.counts[static_cast<size_t>(b)]) expected = b + 1;
    INFO(v);
    REQUIRE(log_bucket(v) == expected);
    REQUIRE(log_bucket(-v) == expected);
  }
}

TEST_CASE("fused attention: hidden-state statistics are exact", "[attention][fused][stats]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (const size_t n : {size_t{1}, size_t{2}, size_t{99}, size_t{5000}, size_t{70001}}) {
    INFO(n << " values");
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    if (n > 10) {
      v[3] = 0.0f;     // below the histogram
      v[7] = 250.0f;   // an outlier: the top
      v[8] = -250.0f;  // the same magnitude, negative
      v[9] = 1e-9f;
    }
    const ValueStats s = value_stats_cpu(v.data(), static_cast<int64_t>(n));
    LogHistogram hist;
    double sum = 0;
    std::vector<float> a;
    for (float x : v) {
      hist.add(x);
      sum += std::fabs(x);
      a.push_back(std::fabs(x));
    }
    std::sort(a.begin(), a.end());
    CHECK(s.count == n);
    CHECK(s.histogram.counts == hist.counts);
    CHECK(s.histogram.below == hist.below);
    CHECK(s.mean == Approx(sum / static_cast<double>(n)).epsilon(1e-6));
    CHECK(s.median == a[(n + 1) / 2 - 1]);
    const size_t k = std::min<size_t>(n, ValueStats::kTopK);
    CHECK(s.top == std::vector<float>(a.rbegin(), a.rbegin() + static_cast<std::ptrdiff_t>(k)));
  }
  CHECK(value_stats_cpu(nullptr, 0).count == 0);
}

TEST_CASE("fused attention: exact median when thousands of values share its bin, ties and zeros too",
          "[attention][fused][stats]") {
  // The median's bin holds most values here, so that its search narrows them by their bits first.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> narrow(1.0f, 1.03f);
  std::vector<std::vector<float>> cases;
  std::vector<float> v(50001);
  for (float& x : v) x = narrow(rng) * (rng() % 2 ? 1.0f : -1.0f);
  cases.push_back(v);
  for (size_t i = 0; i < v.size(); i += 3) v[i] = 1.01f;  // a third of them one value
  cases.push_back(v);
  cases.push_back(std::vector<float>(9000, 2.5f));  // all equal
  std::vector<float> zeros(9001, 0.0f);             // the bin below the histogram, zeros and tiny values
  for (size_t i = 0; i < zeros.size(); i += 2) zeros[i] = 1e-9f * static_cast<float>(i % 7);
  cases.push_back(zeros);
  for (const std::vector<float>& c : cases) {
    std::vector<float> a;
    for (float x : c) a.push_back(std::fabs(x));
    std::sort(a.begin(), a.end());
    INFO(c.size() << " values from " << a.front() << " to " << a.back());
    CHECK(value_stats_cpu(c.data(), static_cast<int64_t>(c.size())).median == a[(a.size() + 1) / 2 - 1]);
  }
}

TEST_CASE("fused attention: statistics count infinities above and NaN below, on every instruction set",
          "[attention][fused][stats]") {
  test::on_every_isa([&] {
    // 40 values (the vector paths take 16 or 8 at a time) with infinities and NaN among them: counted in the
    // histogram's `above` and `below`, never past its last bin.
    std::vector<float> v(40, 0.5f);
    v[0] = std::numeric_limits<float>::infinity();
    v[17] = -std::numeric_limits<float>::infinity();
    v[5] = std::nanf("");
    v[33] = 2e9f;
    const ValueStats s = value_stats_cpu(v.data(), static_cast<int64_t>(v.size()));
    CHECK(s.count == 40);
    CHECK(s.histogram.above == 3);  // two infinities and 2e9
    CHECK(s.histogram.below == 1);  // NaN
    CHECK(s.top[0] == std::numeric_limits<float>::infinity());
    CHECK(s.top[1] == std::numeric_limits<float>::infinity());
    CHECK(s.top[2] == 2e9f);
    CHECK(std::isinf(s.mean));  // NaN adds nothing to the sum: the infinities make it infinite, not NaN
    v[0] = v[17] = 1.0f;
    CHECK(value_stats_cpu(v.data(), 40).mean ==
          Approx((36 * 0.5 + 2 * 1.0 + 2e9) / 40.0));  // NaN counted as 0
    CHECK(log_bucket(std::numeric_limits<float>::infinity()) == LogHistogram::kBins + 1);
  });
}
