// Attention-logit quantization: the model quantizes exactly as the absmax rule says (checked against a
// plain reference on the probe's own exact logits), 32 bits is the identity, and map drift is measured
// as defined.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

// The rule, written out: per head, step = max |l| over causal entries / (2^(bits−1) − 1); l ↦
// round(l/step)·step.
template <typename Floats>
std::vector<float> reference_quantize(const Floats& l, int64_t heads, int64_t T, int bits) {
  std::vector<float> out(l.begin(), l.end());
  const double levels = std::pow(2.0, bits - 1) - 1;
  for (int64_t h = 0; h < heads; ++h) {
    double amax = 0;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j)
        amax = std::max(amax, std::fabs(static_cast<double>(l[(h * T + i) * T + j])));
    const double step = amax / levels;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        float& v = out[static_cast<size_t>((h * T + i) * T + j)];
        v = static_cast<float>(std::nearbyint(v / step) * step);
      }
  }
  return out;
}

}  // namespace

TEST_CASE("quantize: the reference rule on a hand-made 4-bit row", "[quantize]") {
  // One head, T = 3, the last row [0.4, 1.3, 3.5]: max 3.5, 7 levels → step 0.5 → [0.5, 1.5, 3.5].
  std::vector<float> l(9, 0);
  l[6] = 0.4f;
  l[7] = 1.3f;
  l[8] = 3.5f;
  const auto q = reference_quantize(l, 1, 3, 4);
  CHECK(q[6] == Approx(0.5));
  CHECK(q[7] == Approx(1.5));
  CHECK(q[8] == Approx(3.5));
}

TEST_CASE("quantize: DIFF and baseline quantize their logits by the absmax rule", "[quantize][attention]") {
  for (const AttentionKind kind : {AttentionKind::Diff, AttentionKind::Baseline}) {
    Model m = Model::random(test::tiny_config(kind, 32, 1), 11);
    const int64_t T = 9, E = 32;
    const std::vector<float> x = [&] {
      std::vector<float> v(static_cast<size_t>(T * E));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 2.0);
      return v;
    }();
    const LayerTrace exact = m.attention_probe(0, x, T, nullptr);
    m.set_logit_bits(32);
    const LayerTrace same = m.attention_probe(0, x, T, nullptr);
    CHECK(same.a.data == exact.a.data);  // 32 bits: identity
    m.set_logit_bits(4);
    CHECK(m.logit_bits() == 4);
    const LayerTrace q4 = m.attention_probe(0, x, T, nullptr);
    const int64_t H = exact.logits1.shape[0];
    const auto want1 = reference_quantize(exact.logits1.data, H, T, 4);
    double worst_logit = 0, worst_map = 0, worst_moved = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        // softmax of the reference-quantized row, compared with the model's quantized map
        double z = 0;
        const float* row = &want1[static_cast<size_t>((h * T + i) * T)];
        float mx = row[0];
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        for (int64_t j = 0; j <= i; ++j) z += std::exp(static_cast<double>(row[j] - mx));
        for (int64_t j = 0; j <= i; ++j) {
          const size_t k = static_cast<size_t>((h * T + i) * T + j);
          worst_logit = std::max(worst_logit, std::fabs(static_cast<double>(q4.logits1.data[k]) - want1[k]));
          const double p = std::exp(static_cast<double>(row[j] - mx)) / z;
          const float got = kind == AttentionKind::Diff ? q4.a1.data[k] : q4.a.data[k];
          worst_map = std::max(worst_map, std::fabs(got - p));
          worst_moved = std::max(
              worst_moved, std::fabs(static_cast<double>(got) -
                                     (kind == AttentionKind::Diff ? exact.a1.data[k] : exact.a.data[k])));
        }
      }
    INFO(to_string(kind));
    CHECK(worst_logit < 1e-5);
    CHECK(worst_map < 1e-6);
    CHECK(worst_moved > 1e-4);  // 4 bits really changes the maps
    // Quantization does not touch λ; DIFF's A is still A1 − λA2 of the quantized components.
    if (kind == AttentionKind::Diff) {
      CHECK(q4.lambda == exact.lambda);
      for (size_t k = 0; k < q4.a.data.size(); ++k)
        REQUIRE(q4.a.data[k] == Approx(q4.a1.data[k] - q4.lambda * q4.a2.data[k]).margin(1e-6));
    }
    m.set_logit_bits(0);
    CHECK(m.attention_probe(0, x, T, nullptr).a.data == exact.a.data);
  }
  Model m = Model::random(test::tiny_config(AttentionKind::Diff), 1);
  CHECK_THROWS_WITH(m.set_logit_bits(1), Catch::Contains("use 2 or more"));
  CHECK_THROWS_WITH(m.set_logit_bits(33), Catch::Contains("between 2 and 32"));
}

TEST_CASE("quantize: map drift measures |dA| and top-1 agreement over causal entries",
          "[quantize][metrics]") {
  auto trace = [](std::vector<float> a) {
    Trace t;
    t.token_ids = {1, 2};
    LayerTrace l;
    l.heads = {0};
    l.a = {{1, 2, 2}, FloatBuffer(a.begin(), a.end())};
    t.layers.push_back(l);
    return t;
  };
  // Row 0: [1 | future], row 1: [0.3, 0.7] vs [0.6, 0.4]: |dA| = 0.3 twice, row 1's top-1 moves.
  const Trace a = trace({1.0f, 0.0f, 0.3f, 0.7f}), b = trace({1.0f, 9.0f, 0.6f, 0.4f});
  const MapDrift d = map_drift(a, b);
  CHECK(d.max_abs == Approx(0.3));
  CHECK(d.mean_abs == Approx(0.2));  // (0 + 0.3 + 0.3) / 3 causal entries; the future entry is ignored
  CHECK(d.rows == 2);
  CHECK(d.top1_agreement == Approx(0.5));
  Trace shorter = a;
  shorter.token_ids = {1};
  CHECK_THROWS_WITH(map_drift(a, shorter), Catch::Contains("different lengths"));
}

TEST_CASE("quantize: a capture's own width applies to that capture only", "[quantize]") {
  Model m = Model::random(test::tiny_config(AttentionKind::Diff), 2);
  const std::vector<int64_t> ids = test::random_ids(12, 259, 5);
  const Trace exact = m.capture(ids);
  CaptureOptions four;
  four.logit_bits = 4;
  const Trace q = m.capture(ids, four);
  CHECK(q.logit_bits == 4);
  CHECK(exact.logit_bits == 0);
  CHECK(m.logit_bits() == 0);  // restored
  CHECK(q.layers[1].a.data != exact.layers[1].a.data);
  m.set_logit_bits(4);
  CHECK(m.capture(ids).layers[1].a.data == q.layers[1].a.data);
  CaptureOptions bad;
  bad.logit_bits = 1;
  CHECK_THROWS_WITH(m.capture(ids, bad), Catch::Contains("between 2 and 32"));
  CHECK(m.logit_bits() == 4);
}
