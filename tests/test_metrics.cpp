// Attention to answer / attention noise on hand-made maps with known answers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "core/formats/error.h"
#include "core/formats/explain.h"
#include "core/formats/metrics.h"
#include "core/model/model.h"
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
  for (auto& layer : r.per_head)  // the head is chosen by its attention mass on the answer
    for (AttentionShare& s : layer) s.answer_mass = s.answer;
  r.per_head[0][1].answer_mass = 0.7;  // a large mass with a small net share (negative keys): chosen
  const auto first = strongest_answer_head(r);
  REQUIRE(first);
  CHECK(first->layer == 0);
  CHECK(first->head == 1);
  r.per_head[0][1].answer_mass = 0.05;
  const auto best = strongest_answer_head(r);
  REQUIRE(best);
  CHECK(best->layer == 2);
  CHECK(best->head == 3);
  CHECK(best->share.answer_mass == Approx(0.62));
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

namespace {

// A T-token trace whose layer 0 keeps the given [T, T] maps as heads `heads` (layer 1 kept none).
Trace trace_of_maps(int64_t T, const std::vector<int>& heads, const std::vector<std::vector<float>>& maps) {
  Trace t;
  t.token_ids.assign(static_cast<size_t>(T), 1);
  LayerTrace l;
  l.heads = heads;
  l.a.shape = {static_cast<int64_t>(heads.size()), T, T};
  for (const auto& m : maps) l.a.data.insert(l.a.data.end(), m.begin(), m.end());
  t.layers.push_back(l);
  t.layers.push_back(LayerTrace{});
  t.layers.back().index = 1;
  return t;
}

}  // namespace

TEST_CASE("head summaries of hand-made softmax maps: entropy, sink, answer and noise", "[metrics]") {
  const float third = 1.0f / 3;
  const std::vector<float> spread = {1, 0, 0, 0.5f, 0.5f, 0, third, third, third};  // rows 1, 2 uniform
  const std::vector<float> peaked = {1, 0, 0, 1, 0, 0, 0, 0, 1};                    // one-hot rows
  const Trace t = trace_of_maps(3, {2, 5}, {spread, peaked});
  const HeadSummaries r = head_summaries(t, {2}, {1, 2}, {2, 3});
  REQUIRE(r.layers == std::vector<int>{0});  // layer 1 kept no maps
  REQUIRE(r.heads == std::vector<std::vector<int>>{{2, 5}});
  REQUIRE(r.has_answer);
  const HeadSummary &u = r.per_head[0][0], &one = r.per_head[0][1];
  CHECK(u.entropy == Approx(std::log(3.0)));
  CHECK(u.entropy_norm == Approx(1.0));
  CHECK(u.sink == Approx(1.0 / 3));
  CHECK(one.entropy == Approx(0.0).margin(1e-12));
  CHECK(one.entropy_norm == Approx(0.0).margin(1e-12));
  CHECK(one.sink == Approx(0.0).margin(1e-12));
  // answer / noise are attention_share's on the same rows.
  const AttentionShare s = attention_share(spread.data(), 3, {2}, {1, 2}, {2, 3});
  CHECK(u.answer == Approx(s.answer));
  CHECK(u.noise == Approx(s.noise));

  // Averaged over rows 1 and 2; row 0 (a single key) has entropy 0 and counts 0 in the normalised mean.
  const HeadSummary both = head_summaries(t, {1, 2}, {}, {}).per_head[0][0];
  CHECK(both.entropy == Approx((std::log(2.0) + std::log(3.0)) / 2));
  CHECK(both.entropy_norm == Approx(1.0));
  CHECK(both.sink == Approx((0.5 + 1.0 / 3) / 2));
  const HeadSummary first = head_summaries(t, {0, 2}, {}, {}).per_head[0][1];
  CHECK(first.sink == Approx(0.5));  // row 0 all on key 0, row 2 on key 2
  CHECK(first.entropy_norm == Approx(0.0).margin(1e-12));

  // No answer span: answer and noise are NaN, the rest stays.
  const HeadSummaries none = head_summaries(t, {2}, {0, 0}, {2, 3});
  CHECK_FALSE(none.has_answer);
  CHECK(std::isnan(none.per_head[0][0].answer));
  CHECK(std::isnan(none.per_head[0][0].noise));
  CHECK(none.per_head[0][0].entropy == Approx(std::log(3.0)));
}

TEST_CASE("head summaries of a differential map take entropy over |A|", "[metrics]") {
  // Row 2 of A1 − λA2 = [-0.1, 0.7, -0.2]: Σ|A| = 1, p = (0.1, 0.7, 0.2).
  const std::vector<float> A = {0.5f, 0, 0, 0.2f, 0.3f, 0, -0.1f, 0.7f, -0.2f};
  const HeadSummary h = head_summaries(trace_of_maps(3, {0}, {A}), {2}, {1, 2}, {2, 3}).per_head[0][0];
  const double H = -(0.1 * std::log(0.1) + 0.7 * std::log(0.7) + 0.2 * std::log(0.2));
  CHECK(h.entropy == Approx(H));
  CHECK(h.entropy_norm == Approx(H / std::log(3.0)));
  CHECK(h.sink == Approx(-0.1));   // signed, like the answer share
  CHECK(h.answer == Approx(0.7));  // attention mass: |0.7| of sum |A| = 1
  CHECK(h.noise == Approx(0.1));   // |-0.1|: mass, whatever its sign
}

TEST_CASE("head summaries refuse rows and spans outside the trace, and traces without maps",
          "[metrics][errors]") {
  const Trace t = trace_of_maps(3, {0}, {std::vector<float>(9, 0.1f)});
  CHECK_THROWS_WITH(head_summaries(t, {3}, {1, 2}, {2, 3}),
                    Catch::Contains("query row 3 is outside the map"));
  CHECK_THROWS_WITH(head_summaries(t, {-1}, {}, {}), Catch::Contains("query row -1"));
  CHECK_THROWS_WITH(head_summaries(t, {}, {1, 2}, {2, 3}), Catch::Contains("no query rows"));
  CHECK_THROWS_WITH(head_summaries(t, {2}, {1, 4}, {2, 3}), Catch::Contains("outside the 3 tokens"));
  CHECK_THROWS_WITH(head_summaries(t, {2}, {1, 2}, {2, 1}), Catch::Contains("outside the 3 tokens"));
  Trace bare = t;
  bare.layers[0] = LayerTrace{};
  CHECK_THROWS_WITH(head_summaries(bare, {2}, {}, {}), Catch::Contains("kept no attention maps"));
  // A long-prompt layer that kept pooled maps but not the queries and keys its rows are recomputed from.
  Trace pooled = t;
  pooled.layers[0].a = FloatArray{};
  pooled.layers[0].pooled = 2;
  CHECK_THROWS_WITH(
      head_summaries(pooled, {2}, {}, {}),
      Catch::Contains("long-prompt traces keep pooled maps: per-head summaries need exact maps"));
}

TEST_CASE("head summaries of captures: bounded entropy, attention_noise's shares, long prompts exact",
          "[metrics]") {
  for (const ModelConfig& base : {test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 2),
                                  test::tiny_config(AttentionKind::Diff, 32, 2, 2, 1)}) {
    for (int64_t window : {0, 5}) {
      ModelConfig c = base;
      c.sliding_window = window;
      INFO(to_string(c.attention) << " window " << window);
      const Model m = Model::random(c, 82);
      const Trace t = m.capture(test::random_ids(12, c.vocab_size, 14));
      for (int64_t i = 0; i < 12; ++i) {
        const HeadSummaries r = head_summaries(t, {i}, {}, {});
        const double visible = static_cast<double>(window > 0 ? std::min<int64_t>(i + 1, window) : i + 1);
        for (const auto& layer : r.per_head)
          for (const HeadSummary& h : layer) {
            CHECK(h.entropy >= 0);
            CHECK(h.entropy <= std::log(visible) + 1e-6);
            CHECK(h.entropy_norm <= 1 + 1e-6);
            if (!c.is_diff()) CHECK((h.sink >= 0 && h.sink <= 1 + 1e-6));
          }
      }
      const NoiseReadout n = attention_noise(t, {3, 5}, {9, 12});
      const HeadSummaries r = head_summaries(t, {9, 10, 11}, {3, 5}, {9, 12});
      REQUIRE(r.heads == n.heads);
      for (size_t l = 0; l < r.per_head.size(); ++l)
        for (size_t h = 0; h < r.per_head[l].size(); ++h) {
          CHECK(r.per_head[l][h].answer == Approx(n.per_head[l][h].answer));
          CHECK(r.per_head[l][h].noise == Approx(n.per_head[l][h].noise));
        }
    }
    // A long-prompt trace summarises from recomputed rows exactly what the exact trace's maps give.
    const Model m = Model::random(base, 83);
    const std::vector<int64_t> ids = test::random_ids(200, base.vocab_size, 15);
    CaptureOptions o;
    o.pooled_budget_bytes = 4096;
    const Trace pooled = m.capture(ids, o);
    REQUIRE(pooled.layers[0].pooled > 0);
    const std::vector<int64_t> rows = {0, 57, 57, 150, 199};
    const HeadSummaries e = head_summaries(m.capture(ids), rows, {40, 44}, {190, 200});
    const HeadSummaries p = head_summaries(pooled, rows, {40, 44}, {190, 200});
    REQUIRE(p.heads == e.heads);
    for (size_t l = 0; l < e.per_head.size(); ++l)
      for (size_t h = 0; h < e.per_head[l].size(); ++h) {
        const HeadSummary &a = e.per_head[l][h], &b = p.per_head[l][h];
        CHECK(b.answer == Approx(a.answer).margin(1e-6));
        CHECK(b.noise == Approx(a.noise).margin(1e-6));
        CHECK(b.entropy == Approx(a.entropy).margin(1e-5));
        CHECK(b.entropy_norm == Approx(a.entropy_norm).margin(1e-5));
        CHECK(b.sink == Approx(a.sink).margin(1e-6));
      }
  }
}

TEST_CASE("head summaries carry TransformerLens's head scores over the whole map, from the trace's tokens",
          "[metrics][heads]") {
  // Tokens 5 9 5 9: head 0 on the previous token (row 0 on itself), head 1 uniform.
  const std::vector<float> prev = {1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  std::vector<float> uniform(16, 0.0f);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) uniform[static_cast<size_t>(i * 4 + j)] = 1.0f / static_cast<float>(i + 1);
  Trace t = trace_of_maps(4, {0, 1}, {prev, uniform});
  t.token_ids = {5, 9, 5, 9};
  const HeadSummaries r = head_summaries(t, {3}, {}, {});
  const HeadSummary &p = r.per_head[0][0], &u = r.per_head[0][1];
  CHECK(p.previous_token == Approx(3.0 / 4));  // rows 1-3 on the pattern, row 0 on itself
  CHECK(p.duplicate_token == 0.0);             // cells (2,0), (3,1): no weight there
  // Induction cells: row 2 (5) -> key 1, row 3 (9) -> key 2: both are the previous token here.
  CHECK(p.induction == Approx(2.0 / 4));
  CHECK(u.previous_token == Approx((1.0 / 2 + 1.0 / 3 + 1.0 / 4) / 4));
  CHECK(u.duplicate_token == Approx((1.0 / 3 + 1.0 / 4) / 4));
  CHECK(u.induction == Approx((1.0 / 3 + 1.0 / 4) / 4));
  // Every row is scored, whatever the query rows.
  CHECK(head_summaries(t, {1}, {}, {}).per_head[0][0].previous_token == p.previous_token);
}

namespace {
// Row 3 of a 4-token map with the answer at key 1, the question at key 3 and the noise at keys 0 and 2, and
// the values v0 = (1, 0), v1 = (0, 1), v2 = (1, 1), v3 = (2, 0).
std::vector<float> map_with_row3(const std::vector<float>& row) {
  std::vector<float> A(16, 0.0f);
  for (size_t j = 0; j < 4; ++j) A[12 + j] = row[j];
  return A;
}
const std::vector<float> kValues = {1, 0, 0, 1, 1, 1, 2, 0};
}  // namespace

TEST_CASE("attention mass, output share and net share of hand-computed rows", "[metrics]") {
  const std::vector<float> a1 = {0.1f, 0.5f, 0.2f, 0.2f}, a2 = {0.3f, 0.1f, 0.4f, 0.2f};
  SECTION("DIFF, lambda = 0.9: A = (-0.17, 0.41, -0.16, 0.02), sum 0.1, sum |A| 0.76") {
    std::vector<float> row(4);
    for (size_t j = 0; j < 4; ++j) row[j] = a1[j] - 0.9f * a2[j];
    const std::vector<float> A = map_with_row3(row);
    const AttentionShare s = attention_share(A.data(), 4, {3}, {1, 2}, {3, 4}, kValues.data(), 2);
    CHECK(s.answer_mass == Approx(0.41 / 0.76));
    CHECK(s.question_mass == Approx(0.02 / 0.76));
    CHECK(s.noise_mass == Approx(0.33 / 0.76));
    CHECK(s.answer == Approx(0.41 / 0.76));
    CHECK(s.noise == Approx(-0.33 / 0.76));
    CHECK(s.budget == Approx(0.10 / 0.76));
    // o_answer = (0, 0.41), o_question = (0.04, 0), o_noise = (-0.33, -0.16), o = (-0.29, 0.25), |o|^2
    // 0.1466.
    CHECK(s.answer_output == Approx(0.1025 / 0.1466));
    CHECK(s.question_output == Approx(-0.0116 / 0.1466));
    CHECK(s.noise_output == Approx(0.0557 / 0.1466));
    CHECK(s.answer_mass + s.question_mass + s.noise_mass == Approx(1.0));
    CHECK(s.answer_output + s.question_output + s.noise_output == Approx(1.0));
    // Scaled by a constant (the row's budget is what lambda changes) or flipped in sign: mass and output
    // share stay; the net share flips with the sign.
    for (const float k : {0.25f, -1.0f, 3.0f}) {
      std::vector<float> scaled = row;
      for (float& x : scaled) x *= k;
      const std::vector<float> B = map_with_row3(scaled);
      const AttentionShare t = attention_share(B.data(), 4, {3}, {1, 2}, {3, 4}, kValues.data(), 2);
      INFO("scaled by " << k);
      CHECK(t.noise_mass == Approx(s.noise_mass));
      CHECK(t.answer_mass == Approx(s.answer_mass));
      CHECK(t.noise_output == Approx(s.noise_output));
      CHECK(t.answer_output == Approx(s.answer_output));
      CHECK(t.noise == Approx(k > 0 ? s.noise : -s.noise));
    }
  }
  SECTION("DIFF, lambda = 0 (and the baseline's softmax row): mass = net share, budget 1") {
    const std::vector<float> A = map_with_row3(a1);
    const AttentionShare s = attention_share(A.data(), 4, {3}, {1, 2}, {3, 4}, kValues.data(), 2);
    CHECK(s.answer_mass == Approx(0.5));
    CHECK(s.question_mass == Approx(0.2));
    CHECK(s.noise_mass == Approx(0.3));
    CHECK(s.noise == Approx(0.3));
    CHECK(s.budget == Approx(1.0));
    // o_answer = (0, 0.5), o_question = (0.4, 0), o_noise = (0.3, 0.2), o = (0.7, 0.7), |o|^2 = 0.98.
    CHECK(s.answer_output == Approx(0.35 / 0.98));
    CHECK(s.question_output == Approx(0.28 / 0.98));
    CHECK(s.noise_output == Approx(0.35 / 0.98));
  }
  SECTION("without values the output shares are NaN, the rest as before") {
    const std::vector<float> A = map_with_row3(a1);
    const AttentionShare s = attention_share(A.data(), 4, {3}, {1, 2}, {3, 4});
    CHECK(std::isnan(s.noise_output));
    CHECK(std::isnan(s.answer_output));
    CHECK(s.noise_mass == Approx(0.3));
  }
}

TEST_CASE("captured heads: masses and output shares sum to 1, outputs equal the head's own output",
          "[metrics]") {
  for (const AttentionKind kind : {AttentionKind::Baseline, AttentionKind::Diff, AttentionKind::DiffV2}) {
    const ModelConfig c = test::tiny_config(kind, 32, 2, 2, kind == AttentionKind::DiffV2 ? 2 : 1);
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 91);
    CaptureOptions opt;
    opt.keep_qkv = true;
    const Trace t = m.capture(test::random_ids(14, c.vocab_size, 15), opt);
    const NoiseReadout r = attention_noise(t, {3, 6}, {10, 14});
    for (size_t l = 0; l < r.per_head.size(); ++l)
      for (size_t h = 0; h < r.per_head[l].size(); ++h) {
        const AttentionShare& s = r.per_head[l][h];
        CHECK(s.answer_mass + s.question_mass + s.noise_mass == Approx(1.0).epsilon(1e-9));
        CHECK(s.answer_output + s.question_output + s.noise_output == Approx(1.0).epsilon(1e-6));
        CHECK(s.answer_mass >= 0);
        CHECK(s.noise_mass <= 1 + 1e-9);
        if (!c.is_diff()) CHECK(s.noise == Approx(s.noise_mass).epsilon(1e-9));
        // One row against explain_head's recomputation in double: o_noise's projection on o.
        const HeadExplain e = explain_head(t, r.layers[l], r.heads[l][h], 12);
        std::vector<double> o_noise(static_cast<size_t>(e.dv), 0.0);
        const LayerTrace& lt = t.layers[l];
        const int64_t groups = lt.v.shape[0], kv = r.heads[l][h] / (c.map_heads() / groups);
        for (size_t k = 0; k < e.keys.size(); ++k) {
          const int64_t j = e.keys[k];
          if ((j >= 3 && j < 6) || (j >= 10 && j < 14)) continue;
          for (int64_t x = 0; x < e.dv; ++x)
            o_noise[static_cast<size_t>(x)] +=
                e.a[k] * lt.v.data[static_cast<size_t>((kv * 14 + j) * e.dv + x)];
        }
        double dot = 0, norm2 = 0;
        for (int64_t x = 0; x < e.dv; ++x) {
          dot += o_noise[static_cast<size_t>(x)] * e.o[static_cast<size_t>(x)];
          norm2 += e.o[static_cast<size_t>(x)] * e.o[static_cast<size_t>(x)];
        }
        const AttentionShare row =
            attention_share(lt.a.data.data() + static_cast<int64_t>(h) * 14 * 14, 14, {12}, {3, 6}, {10, 14},
                            lt.v.data.data() + kv * 14 * e.dv, e.dv);
        CHECK(row.noise_output == Approx(dot / norm2).margin(1e-4));
      }
  }
}

TEST_CASE("the strongest answer head leaves out the heads the run ablated", "[metrics]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2);
  const Model m = Model::random(c, 93);
  Trace t = m.capture(test::random_ids(12, c.vocab_size, 16));
  const auto free = strongest_answer_head(attention_noise(t, {3, 5}, {9, 12}));
  REQUIRE(free);
  // The same maps, recorded as run with that head ablated (its output zero, its map still computed).
  const std::string spec = "ablate:" + std::to_string(free->layer) + ":" + std::to_string(free->head);
  t.interventions = {{spec, spec}};
  const NoiseReadout r = attention_noise(t, {3, 5}, {9, 12});
  size_t flagged = 0;
  for (size_t l = 0; l < r.ablated.size(); ++l)
    for (size_t h = 0; h < r.ablated[l].size(); ++h)
      if (r.ablated[l][h]) {
        ++flagged;
        CHECK(r.layers[l] == free->layer);
        CHECK(r.heads[l][h] == free->head);
      }
  CHECK(flagged == 1);
  const auto other = strongest_answer_head(r);
  REQUIRE(other);
  CHECK_FALSE((other->layer == free->layer && other->head == free->head));
  CHECK(other->share.answer_mass <= free->share.answer_mass);
}

TEST_CASE("share columns: the Noise view's table cells, one place for each measure's text", "[metrics]") {
  AttentionShare a;
  a.answer_mass = 0.25;
  a.noise_mass = 0.5;
  a.noise_output = -0.0004;  // rounds to zero: "0.000", never "-0.000"
  a.noise = -0.125;
  a.budget = 0.5;
  const std::vector<ShareColumn>& c = share_columns();
  REQUIRE(c.size() == 4);
  CHECK(std::string(c[0].header) == "answer");
  CHECK(c[0].cell(a) == "0.250");
  CHECK(c[1].cell(a) == "0.500");
  CHECK(c[2].cell(a) == "0.000");
  CHECK(c[3].cell(a) == "-0.125 / 0.500");
  a.noise_output = std::nan("");  // no values kept: no output share
  CHECK(c[2].cell(a) == "-");
  for (const ShareColumn& col : c) CHECK(std::string(col.meaning).size() > 10);
}
