// Attention to answer / attention noise on hand-made maps with known answers.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/metrics.h"
#include "core/model.h"
#include "helpers.h"

using namespace difflens;

TEST_CASE("attention share on a hand-made softmax map", "[metrics]") {
  // T = 5: tokens 0-1 context, 2 answer, 3-4 question. Row 4 = [0.1, 0.1, 0.6, 0.1, 0.1].
  std::vector<float> A(25, 0.0f);
  const float row3[] = {0.2f, 0.2f, 0.4f, 0.2f};
  const float row4[] = {0.1f, 0.1f, 0.6f, 0.1f, 0.1f};
  for (int j = 0; j < 4; ++j) A[static_cast<size_t>(15 + j)] = row3[j];
  for (int j = 0; j < 5; ++j) A[static_cast<size_t>(20 + j)] = row4[j];
  const AttentionShare s4 = attention_share(A.data(), 5, {4}, {2, 3}, {3, 5});
  CHECK(s4.answer == Approx(0.6));
  CHECK(s4.noise == Approx(0.2));  // keys 0 and 1; the question keys 3, 4 are neither
  const AttentionShare both = attention_share(A.data(), 5, {3, 4}, {2, 3}, {3, 5});
  CHECK(both.answer == Approx((0.4 + 0.6) / 2));
  CHECK(both.noise == Approx((0.4 + 0.2) / 2));
}

TEST_CASE("attention share of a differential map: negative weights and the |A| normaliser", "[metrics]") {
  // Row 2 of A1 − λA2 = [-0.1, 0.7, -0.2]: Σ|A| = 1.0; answer key 1; question key 2.
  std::vector<float> A = {0.5f, 0, 0, 0.2f, 0.3f, 0, -0.1f, 0.7f, -0.2f};
  const AttentionShare s = attention_share(A.data(), 3, {2}, {1, 2}, {2, 3});
  CHECK(s.answer == Approx(0.7));
  CHECK(s.noise == Approx(-0.1));  // net negative weight on the irrelevant key
}

TEST_CASE("attention metrics reject spans and rows outside the map", "[metrics][errors]") {
  std::vector<float> A(9, 0.1f);
  CHECK_THROWS_WITH(attention_share(A.data(), 3, {2}, {1, 4}, {2, 3}),
                    Catch::Contains("outside the 3 tokens"));
  CHECK_THROWS_WITH(attention_share(A.data(), 3, {5}, {1, 2}, {2, 3}), Catch::Contains("query row 5"));
  CHECK_THROWS_WITH(attention_share(A.data(), 3, {}, {1, 2}, {2, 3}), Catch::Contains("no query rows"));
}

TEST_CASE("attention noise over a trace averages heads then layers", "[metrics]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  const Model m = Model::random(c, 80);
  const Trace t = m.capture(test::random_ids(12, c.vocab_size, 12));
  const NoiseReadout r = attention_noise(t, {3, 5}, {9, 12});
  REQUIRE(r.layers == std::vector<int>{0, 1});
  REQUIRE(r.per_head[1].size() == 2);
  const AttentionShare h = attention_share(t.layers[1].a.data.data() + 144, 12, {9, 10, 11}, {3, 5}, {9, 12});
  CHECK(r.per_head[1][1].answer == Approx(h.answer));
  CHECK(r.per_layer[1].noise == Approx((r.per_head[1][0].noise + r.per_head[1][1].noise) / 2));
  CHECK(r.mean.answer == Approx((r.per_layer[0].answer + r.per_layer[1].answer) / 2));
  CaptureOptions none;
  none.keep_maps = false;
  CHECK_THROWS_WITH(attention_noise(m.capture({1, 2, 3}, none), {0, 1}, {1, 2}),
                    Catch::Contains("kept no attention maps"));
}

TEST_CASE("the strongest answer head names the layer and head index it measured", "[metrics]") {
  NoiseReadout r;
  r.layers = {0, 2};
  r.heads = {{0, 1, 2}, {1, 3}};  // layer 2 kept heads 1 and 3 only
  r.per_head = {{{0.10, 0.5}, {0.05, 0.6}, {0.20, 0.3}}, {{0.15, 0.4}, {0.62, 0.01}}};
  const auto best = strongest_answer_head(r);
  REQUIRE(best);
  CHECK(best->layer == 2);
  CHECK(best->head == 3);
  CHECK(best->share.answer == Approx(0.62));
  const auto in0 = strongest_answer_head(r, 0);
  REQUIRE(in0);
  CHECK(in0->layer == 0);
  CHECK(in0->head == 2);
  CHECK_FALSE(strongest_answer_head(r, 1));  // layer 1 was not kept
  CHECK_FALSE(strongest_answer_head(NoiseReadout{}));

  // On a capture that kept only some heads, the readout's head indices are the trace's.
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  const Model m = Model::random(c, 81);
  CaptureOptions some;
  some.heads = {1};
  const Trace t = m.capture(test::random_ids(10, c.vocab_size, 13), some);
  const NoiseReadout rt = attention_noise(t, {2, 4}, {7, 10});
  REQUIRE(rt.heads == std::vector<std::vector<int>>{{1}, {1}});
  const auto bt = strongest_answer_head(rt);
  REQUIRE(bt);
  CHECK(bt->head == 1);
  CHECK(bt->share.answer == Approx(std::max(rt.per_head[0][0].answer, rt.per_head[1][0].answer)));
}
