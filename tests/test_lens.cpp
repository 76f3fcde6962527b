// The logit lens and direct logit attribution (core/model/lens.h) against exact math: the lens after the last
// layer is the model's own prediction at every position; the heads', MLPs' and embedding's shares add up to
// the target's logit, also under interventions; a DIFF head's A1 and −λA2 parts add up to the head; a head
// ablated to zero has no share.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/formats/intervention.h"
#include "core/model/model.h"
#include "tests/helpers.h"

using namespace difflens;

TEST_CASE("lens: after the last layer it is the model's own prediction at every position", "[lens]") {
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff),
                               test::tiny_config(AttentionKind::Baseline), test::v2_config()}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 13);
    const std::vector<int64_t> ids = test::random_ids(29, c.vocab_size, 2);
    CaptureOptions o;
    o.position_top_k = 5;
    const Trace t = m.capture(ids, o);
    LensOptions lo;
    lo.top_k = 5;
    const AnswerExplanation e = m.explain_answer(ids, lo);
    REQUIRE(e.layers.size() == static_cast<size_t>(c.num_hidden_layers));
    const LensLayer& last = e.layers.back();
    for (int64_t p = 0; p < 29; ++p) {
      INFO("position " << p);
      REQUIRE(last.top[static_cast<size_t>(p)].size() == 5);
      for (int64_t k = 0; k < 5; ++k) {
        CHECK(last.top[static_cast<size_t>(p)][static_cast<size_t>(k)].id == t.predictions.id(p, k));
        CHECK(std::fabs(last.top[static_cast<size_t>(p)][static_cast<size_t>(k)].probability -
                        t.predictions.prob(p, k)) < 1e-5);
      }
      if (p + 1 < 29) {  // the actual next token's probability and rank, as the capture has them
        CHECK(e.targets[static_cast<size_t>(p)] == ids[static_cast<size_t>(p + 1)]);
        CHECK(std::fabs(last.target_probability[static_cast<size_t>(p)] -
                        t.predictions.actual.data[static_cast<size_t>(2 * p)]) < 1e-5);
        CHECK(last.target_rank[static_cast<size_t>(p)] ==
              t.predictions.actual.data[static_cast<size_t>(2 * p + 1)]);
      }
    }
    // The last position's target is the model's own top-1 there.
    CHECK(e.targets.back() == t.next_token[0].id);
    CHECK(last.target_rank.back() == 1);
    // Earlier layers read other things (a lens of one layer is not the model's output).
    bool differs = false;
    for (int64_t p = 0; p < 29; ++p)
      differs =
          differs ||
          e.layers.front().top[static_cast<size_t>(p)][0].id != last.top[static_cast<size_t>(p)][0].id ||
          std::fabs(e.layers.front().target_probability[static_cast<size_t>(p)] -
                    last.target_probability[static_cast<size_t>(p)]) > 1e-7;
    CHECK(differs);
  }
}

TEST_CASE("lens: the direct attributions add up to the target's logit, DIFF's parts to their head",
          "[lens]") {
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff),
                               test::tiny_config(AttentionKind::Baseline), test::v2_config()}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 7);
    const std::vector<int64_t> ids = test::random_ids(24, c.vocab_size, 5);
    PromptMarks marks;
    marks.answer = {3, 6};
    marks.query = 18;
    for (const std::vector<std::string>& specs :
         {std::vector<std::string>{}, std::vector<std::string>{"ablate:1:1", "knockout=not-noise"},
          std::vector<std::string>{"ablate:0:0=mean"}}) {
      INFO("interventions " << specs.size());
      LensOptions lo;
      lo.query = 18;
      lo.interventions = resolve_interventions(specs, c, marks, 24);
      const LogitAttribution a = m.explain_answer(ids, lo).attribution;
      CHECK(a.query == 18);
      CHECK(a.target == ids[19]);  // the token that follows the query
      CHECK(std::fabs(a.total() - a.logit) < 1e-4 * std::max(1.0, std::fabs(a.logit)));
      REQUIRE(a.heads.size() == static_cast<size_t>(c.num_hidden_layers));
      if (specs.size() == 2) CHECK(a.heads[1][1] == 0.0);  // ablated to zero: no share
      if (!c.is_diff()) {
        CHECK(a.heads_a1.empty());
        continue;
      }
      REQUIRE(a.heads_a1.size() == a.heads.size());
      for (size_t l = 0; l < a.heads.size(); ++l)
        for (size_t h = 0; h < a.heads[l].size(); ++h) {
          const bool ablated =
              (specs.size() == 2 && l == 1 && h == 1) || (specs.size() == 1 && l == 0 && h == 0);
          if (ablated) {
            CHECK(std::isnan(a.heads_a1[l][h]));
            continue;
          }
          CHECK(std::fabs(a.heads_a1[l][h] + a.heads_a2[l][h] - a.heads[l][h]) < 1e-5);
        }
    }
    // A target given: the logit is that token's; a query beyond the prompt or a target outside the vocabulary
    // is refused.
    LensOptions given;
    given.target = 42;
    CHECK(m.explain_answer(ids, given).attribution.target == 42);
    given.query = 24;
    CHECK_THROWS_WITH(m.explain_answer(ids, given), Catch::Contains("beyond the 24-token prompt"));
    given.query = -1;
    given.target = c.vocab_size;
    CHECK_THROWS_WITH(m.explain_answer(ids, given), Catch::Contains("outside the vocabulary"));
    CHECK_THROWS_WITH(m.explain_answer({}, {}), Catch::Contains("empty"));
  }
}

TEST_CASE("lens: at the query only, the query's entries are the full lens's and the rest are empty",
          "[lens]") {
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff), test::v2_config()}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 9);
    const std::vector<int64_t> ids = test::random_ids(30, c.vocab_size, 4);
    PromptMarks marks;
    marks.query = 20;
    LensOptions full;
    full.query = 20;
    full.interventions =
        resolve_interventions(std::vector<std::string>{"lambda=0", "knockout=drop:2-5"}, c, marks, 30);
    LensOptions one = full;
    one.lens_at_query_only = true;
    const AnswerExplanation a = m.explain_answer(ids, full), b = m.explain_answer(ids, one);
    REQUIRE(a.layers.size() == b.layers.size());
    for (size_t l = 0; l < a.layers.size(); ++l) {
      CHECK(b.layers[l].target_probability[20] == Approx(a.layers[l].target_probability[20]).margin(1e-6));
      CHECK(b.layers[l].target_rank[20] == a.layers[l].target_rank[20]);
      REQUIRE(b.layers[l].top[20].size() == a.layers[l].top[20].size());
      for (size_t k = 0; k < a.layers[l].top[20].size(); ++k)
        CHECK(b.layers[l].top[20][k].id == a.layers[l].top[20][k].id);
      CHECK(b.layers[l].top[3].empty());
      CHECK(std::isnan(b.layers[l].target_probability[3]));
      CHECK(b.layers[l].target_rank[3] == 0);
    }
    CHECK(b.attribution.logit == Approx(a.attribution.logit).margin(1e-6));
  }
}
