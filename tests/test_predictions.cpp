// Every position's prediction (Trace::predictions): equal to the full softmax of the model's logits at each
// position (read as the next-token distribution of a capture of the prefix: causal attention leaves a
// position's state as it is), kept within the budget, through bundles and the remote format, refused when
// corrupt; and how the app words it (app/reports/prediction_text).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "app/reports/prediction_text.h"
#include "core/formats/error.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

TEST_CASE("predictions: every position's top k and the actual next token equal the full softmax there",
          "[predictions]") {
  for (const AttentionKind kind : {AttentionKind::Diff, AttentionKind::Baseline}) {
    const ModelConfig c = test::tiny_config(kind, 32, 2);
    const Model m = Model::random(c, 9, DeviceChoice::Cpu);
    const std::vector<int64_t> ids = test::random_ids(17, c.vocab_size, 6);
    CaptureOptions o;
    o.position_top_k = 4;
    const Trace t = m.capture(ids, o);
    const Predictions& p = t.predictions;
    REQUIRE(p.k == 4);
    CHECK(p.from == 0);
    const int64_t T = t.length();
    for (int64_t pos = 0; pos < T; ++pos) {
      INFO(to_string(kind) << " position " << pos);
      REQUIRE(p.has(pos));
      CaptureOptions full;
      full.next_token_top_k = static_cast<int>(c.vocab_size);  // the whole distribution, sorted
      full.keep_maps = false;
      const Trace prefix = m.capture(std::vector<int64_t>(ids.begin(), ids.begin() + pos + 1), full);
      REQUIRE(prefix.next_token.size() == static_cast<size_t>(c.vocab_size));
      for (int64_t j = 0; j < p.k; ++j) {
        CHECK(p.id(pos, j) == prefix.next_token[static_cast<size_t>(j)].id);
        CHECK(p.prob(pos, j) == Approx(prefix.next_token[static_cast<size_t>(j)].probability).margin(1e-6));
        CHECK(p.pieces.at(p.id(pos, j)) == m.tokenizer().piece(p.id(pos, j)));
      }
      if (pos == T - 1) {
        CHECK(std::isnan(p.actual_prob(pos)));
        for (int64_t j = 0; j < p.k; ++j) CHECK(p.id(pos, j) == t.next_token[static_cast<size_t>(j)].id);
        continue;
      }
      const int64_t next = ids[static_cast<size_t>(pos + 1)];
      const auto at = std::find_if(prefix.next_token.begin(), prefix.next_token.end(),
                                   [&](const TokenProbability& q) { return q.id == next; });
      REQUIRE(at != prefix.next_token.end());
      CHECK(p.actual_prob(pos) == Approx(at->probability).margin(1e-6));
      const auto likelier =
          std::count_if(prefix.next_token.begin(), prefix.next_token.end(),
                        [&](const TokenProbability& q) { return q.probability > at->probability; });
      CHECK(p.actual_rank(pos) == likelier + 1);
    }
  }
}

TEST_CASE("predictions: the budget keeps the last positions, and bundles and remote bytes carry them",
          "[predictions][trace]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 2);
  const Model m = Model::random(c, 9, DeviceChoice::Cpu);
  const std::vector<int64_t> ids = test::random_ids(30, c.vocab_size, 7);
  CaptureOptions o;
  o.position_top_k = 3;
  o.prediction_budget = 10.5 * static_cast<double>(c.hidden_size * c.vocab_size);  // 10 rows' logits
  const Trace t = m.capture(ids, o);
  CHECK(t.predictions.from == 20);
  CHECK_FALSE(t.predictions.has(19));
  CHECK(t.predictions.has(20));
  CHECK(std::isnan(t.predictions.prob(19, 0)));
  CHECK(t.byte_size() >= 30 * (8 * 3 + 8));
  test::ScratchDir dir("predictions");
  write_trace_bundle(t, dir / "b");
  for (const Trace& back : {read_trace_bundle(dir / "b"), trace_from_bytes(trace_to_bytes(t), "reply")}) {
    CHECK(back.predictions.k == 3);
    CHECK(back.predictions.from == 20);
    CHECK(test::same_bits(back.predictions.ids, t.predictions.ids));
    CHECK(test::same_bits(back.predictions.probs, t.predictions.probs));
    CHECK(test::same_bits(back.predictions.actual, t.predictions.actual));
    CHECK(back.predictions.pieces == t.predictions.pieces);
  }
  // Corrupt values are refused with what is wrong.
  auto refused = [&](auto&& spoil, const std::string& words) {
    Trace bad = t;
    spoil(bad.predictions);
    INFO(words);
    CHECK_THROWS_WITH(trace_from_bytes(trace_to_bytes(bad), "reply"), Catch::Contains(words));
  };
  refused([](Predictions& p) { p.probs.data[20 * 3] = 1.5f; }, "probability outside [0, 1] or out of order");
  refused([](Predictions& p) { p.probs.data[20 * 3 + 1] = 0.999f; }, "out of order");
  refused([&](Predictions& p) { p.ids.data[25 * 3] = static_cast<float>(c.vocab_size); },
          "not one of the model's");
  refused([](Predictions& p) { p.ids.data[25 * 3] = 2.5f; }, "not one of the model's");
  refused([](Predictions& p) { p.actual.data[2 * 21 + 1] = 0; }, "probability or rank out of range");
  refused([](Predictions& p) { p.actual.data[2 * 29] = 0.5f; }, "where none was kept");
  refused([](Predictions& p) { p.ids.data[0] = 1; }, "before 'from' but not empty");
  refused([](Predictions& p) { p.pieces.erase(p.pieces.begin()); }, "has no text for token");
  {  // A kept row may be empty (logits that were not finite): read back as no prediction there.
    Trace gap = t;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t j = 0; j < 3; ++j)
      gap.predictions.ids.data[25 * 3 + j] = gap.predictions.probs.data[25 * 3 + j] = nan;
    gap.predictions.actual.data[50] = gap.predictions.actual.data[51] = nan;
    const Trace back = trace_from_bytes(trace_to_bytes(gap), "reply");
    CHECK_FALSE(back.predictions.has(25));
    CHECK(back.predictions.has(26));
    CHECK(app::expected_here(back, 26).empty());
    CHECK_FALSE(app::expected_here(back, 27).empty());
  }
  // A trace without predictions reads back without them.
  CaptureOptions none;
  const Trace plain = m.capture(ids, none);
  CHECK(plain.predictions.k == 0);
  CHECK(trace_from_bytes(trace_to_bytes(plain), "reply").predictions.k == 0);
}

TEST_CASE("predictions: the app's words for what a model expected at a token and after it", "[predictions]") {
  Trace t;
  t.config = test::tiny_config(AttentionKind::Baseline);
  t.token_ids = {1, 70, 80};
  t.tokens = {"<s>", "\xE2\x96\x81the",
              "\xE2\x96\x81"
              "code"};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Predictions& p = t.predictions;
  p.k = 2;
  p.from = 1;
  p.ids.shape = {3, 2};
  p.ids.data.assign({nan, nan, 80, 90, 70, 80});
  p.probs.shape = {3, 2};
  p.probs.data.assign({nan, nan, 0.5f, 0.25f, 0.125f, 0.0625f});
  p.actual.shape = {3, 2};
  p.actual.data.assign({nan, nan, 0.5f, 1, nan, nan});
  p.pieces = {{70, "\xE2\x96\x81the"},
              {80,
               "\xE2\x96\x81"
               "code"},
              {90, "\xE2\x96\x81key"}};
  t.next_token = {{5, "x", 0.9f}};
  // Token 2 (' code') was predicted after token 1: the likeliest, 50 %.
  CHECK(app::expected_here(t, 2) ==
        "expected here: ' code' 50.0 %, ' key' 25.0 %\nhere: ' code' 50.0 %, rank 1");
  CHECK(app::expected_here(t, 1).empty());  // the prediction after token 0 is not kept (from = 1)
  CHECK(app::expected_here(t, 0).empty());  // nothing precedes the first token
  const auto after = app::candidates_after(t, 2, 5);
  REQUIRE(after.size() == 2);
  CHECK(after[0].probability == 0.125f);
  CHECK(after[0].text == " the");
  CHECK(app::candidates_after(t, 0, 5).empty());
  p.k = 0;  // without predictions: the last token's next-token top k only
  REQUIRE(app::candidates_after(t, 2, 5).size() == 1);
  CHECK(app::candidates_after(t, 2, 5)[0].text == "x");
  CHECK(app::candidates_after(t, 1, 5).empty());
}
