// The Text view's weights (core/formats/token_weights): rows, columns and means over heads checked by hand on
// a trace built here, and a long prompt's recomputed rows and columns against the exact maps.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/formats/error.h"
#include "core/formats/token_weights.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

// A DIFF trace of 3 tokens, 2 layers of 2 heads, whose A maps are written out below (A1/A2 are not read).
// Layer 0 head h, entry (i, j) = 0.1 * (h + 1) * (i + 1) + 0.01 * j for j ≤ i, else 0; layer 1 = -layer 0.
Trace hand_trace() {
  Trace t;
  t.config.attention = AttentionKind::Diff;
  t.config.num_attention_heads = 4;  // 2 map heads
  t.token_ids = {1, 2, 3};
  t.tokens = {"<s>",
              "\xe2\x96\x81"
              "a",
              "\xe2\x96\x81"
              "b"};
  for (int l = 0; l < 2; ++l) {
    LayerTrace lt;
    lt.index = l;
    lt.heads = {0, 1};
    for (FloatArray* m : {&lt.a1, &lt.a2, &lt.a}) {
      m->shape = {2, 3, 3};
      m->data.assign(18, 0.0f);
    }
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j <= i; ++j)
          lt.a.data[static_cast<size_t>((h * 3 + i) * 3 + j)] =
              static_cast<float>((l == 0 ? 1 : -1) * (0.1 * (h + 1) * (i + 1) + 0.01 * j));
    t.layers.push_back(lt);
  }
  return t;
}

}  // namespace

TEST_CASE("text view: a head's row and column, by hand", "[text]") {
  const Trace t = hand_trace();
  // Row of query 1, layer 0 head 1: A[1, 0] = 0.2 * 2 + 0 = 0.4, A[1, 1] = 0.41; token 2 is not seen.
  TokenWeights r = token_weights(t, 0, 1, HeadPool::Head, WeightDirection::FromQuery, 1);
  REQUIRE(r.w.size() == 3);
  CHECK(r.w[0] == Approx(0.4f));
  CHECK(r.w[1] == Approx(0.41f));
  CHECK(r.w[2] == 0.0f);
  CHECK(r.first == 0);
  CHECK(r.end == 2);
  CHECK(r.heads == 1);
  CHECK(r.what == "A1 \xe2\x88\x92 \xce\xbb A2");
  // Column of token 1 (who reads it), layer 0 head 0: A[1, 1] = 0.21, A[2, 1] = 0.31; token 0 cannot.
  TokenWeights c = token_weights(t, 0, 0, HeadPool::Head, WeightDirection::ToToken, 1);
  CHECK(c.w[0] == 0.0f);
  CHECK(c.w[1] == Approx(0.21f));
  CHECK(c.w[2] == Approx(0.31f));
  CHECK(c.first == 1);
  CHECK(c.end == 3);
  // The last token's column holds only itself: A[2, 2] = 0.3 + 0.02.
  c = token_weights(t, 0, 0, HeadPool::Head, WeightDirection::ToToken, 2);
  CHECK(c.w[2] == Approx(0.32f));
  CHECK(c.first == 2);
}

TEST_CASE("text view: means over a layer's heads and over all layers, by hand", "[text]") {
  const Trace t = hand_trace();
  // Layer 1, row 2: head 0 = -(0.3, 0.31, 0.32), head 1 = -(0.6, 0.61, 0.62): mean -(0.45, 0.46, 0.47).
  TokenWeights m = token_weights(t, 1, 0, HeadPool::LayerMean, WeightDirection::FromQuery, 2);
  CHECK(m.heads == 2);
  CHECK(m.w[0] == Approx(-0.45f));
  CHECK(m.w[1] == Approx(-0.46f));
  CHECK(m.w[2] == Approx(-0.47f));
  CHECK(describe_pool(m, HeadPool::LayerMean, 1, 0) == "mean of layer 1's 2 heads");
  // All layers: layer 1 is layer 0 negated, so every mean is 0 (4 heads).
  m = token_weights(t, 0, 0, HeadPool::AllLayers, WeightDirection::FromQuery, 2);
  CHECK(m.heads == 4);
  for (float v : m.w) CHECK(std::abs(v) < 1e-7f);
  CHECK(describe_pool(m, HeadPool::AllLayers, 0, 0) == "mean of 4 heads over all layers");
  // Only layer 0 kept: the all-layer mean is layer 0's mean. Column of token 0: rows 0, 1, 2 of the heads
  // (0.1, 0.2, 0.3) and (0.2, 0.4, 0.6): means 0.15, 0.3, 0.45.
  Trace one = t;
  one.layers.pop_back();
  m = token_weights(one, 0, 0, HeadPool::AllLayers, WeightDirection::ToToken, 0);
  CHECK(m.heads == 2);
  CHECK(m.w[0] == Approx(0.15f));
  CHECK(m.w[1] == Approx(0.3f));
  CHECK(m.w[2] == Approx(0.45f));
  // A head whose map was not kept is left out of the layer's mean, and said in the count.
  one.layers[0].heads = {1};
  one.layers[0].a.data.erase(one.layers[0].a.data.begin(), one.layers[0].a.data.begin() + 9);
  one.layers[0].a.shape = {1, 3, 3};
  m = token_weights(one, 0, 0, HeadPool::LayerMean, WeightDirection::FromQuery, 0);
  CHECK(m.heads == 1);
  CHECK(m.w[0] == Approx(0.2f));
}

TEST_CASE("text view: bad layers, heads and queries are refused with what exists", "[text][errors]") {
  const Trace t = hand_trace();
  CHECK_THROWS_WITH(token_weights(t, 0, 0, HeadPool::Head, WeightDirection::FromQuery, 3),
                    "query token 3 is outside the 3-token prompt");
  CHECK_THROWS_WITH(token_weights(t, 0, 0, HeadPool::Head, WeightDirection::FromQuery, -1),
                    "query token -1 is outside the 3-token prompt");
  CHECK_THROWS_WITH(token_weights(t, 5, 0, HeadPool::Head, WeightDirection::FromQuery, 0),
                    "layer 5 is not in this trace (it holds 2 layers)");
  CHECK_THROWS_WITH(token_weights(t, 0, 2, HeadPool::Head, WeightDirection::FromQuery, 0),
                    "head 2 does not exist (the model has 2 heads)");
  Trace none = t;
  for (LayerTrace& l : none.layers) {
    l.heads.clear();
    l.a = l.a1 = l.a2 = {};
  }
  CHECK_THROWS_WITH(token_weights(none, 0, 0, HeadPool::Head, WeightDirection::FromQuery, 0),
                    "this trace kept no map of layer 0 head 0");
  CHECK_THROWS_WITH(token_weights(none, 0, 0, HeadPool::AllLayers, WeightDirection::FromQuery, 0),
                    "this trace kept no attention maps");
}

TEST_CASE("text view: a long prompt's rows and columns are exact (recomputed, not pooled)", "[text][long]") {
  for (AttentionKind kind : {AttentionKind::Diff, AttentionKind::Baseline}) {
    const Model m = Model::random(test::tiny_config(kind, 32, 2, 2, 2), 91);
    const std::vector<int64_t> ids = test::random_ids(120, 259, 5);
    const Trace exact = m.capture(ids, {});
    CaptureOptions o;
    o.pooled_budget_bytes = 20000;  // far below 2 layers x 2 heads x 120² maps: pooled
    const Trace pooled = m.capture(ids, o);
    REQUIRE(pooled.layers[0].pooled > 0);
    REQUIRE(exact.layers[0].pooled == 0);
    for (HeadPool pool : {HeadPool::Head, HeadPool::LayerMean, HeadPool::AllLayers})
      for (WeightDirection d : {WeightDirection::FromQuery, WeightDirection::ToToken})
        for (int64_t q : {0, 37, 119}) {
          const TokenWeights a = token_weights(exact, 1, 1, pool, d, q);
          const TokenWeights b = token_weights(pooled, 1, 1, pool, d, q);
          REQUIRE(a.w.size() == b.w.size());
          for (size_t j = 0; j < a.w.size(); ++j) REQUIRE(std::abs(a.w[j] - b.w[j]) < 1e-5f);
          // Rows of the exact head read straight from the map.
          if (pool == HeadPool::Head && d == WeightDirection::FromQuery) {
            const LayerTrace& l = exact.layers[1];
            for (int64_t j = 0; j <= q; ++j)
              REQUIRE(a.w[static_cast<size_t>(j)] == l.a.data[static_cast<size_t>((1 * 120 + q) * 120 + j)]);
          }
        }
  }
}
