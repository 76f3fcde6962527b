// Activation patching (core/formats/patch_site.h) against its ends and against edited checkpoints: patching
// nothing gives the corrupt run, patching the residual stream entering layer 0 (or every head, MLP and the
// embedding) gives the clean run, exactly; a layer's heads' outputs (or maps) copied from a checkpoint whose
// values (or queries) were edited give that checkpoint's own run, as the capture path computes it, within
// 1e-5.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "core/cpu/qkv_layout.h"
#include "core/formats/error.h"
#include "core/formats/intervention.h"
#include "core/formats/patch_site.h"
#include "core/model/model.h"
#include "tests/helpers.h"

using namespace difflens;

namespace {

std::vector<ModelConfig> configs() {
  return {test::tiny_config(AttentionKind::Diff), test::tiny_config(AttentionKind::Baseline),
          test::v2_config()};
}

// Two prompts of 21 tokens that agree before position 8.
struct Pair {
  std::vector<int64_t> clean, corrupt;
  explicit Pair(int64_t vocab) : clean(test::random_ids(21, vocab, 3)), corrupt(clean) {
    for (size_t i = 8; i < 12; ++i) corrupt[i] = (corrupt[i] + 17) % vocab;
  }
};

// The logit difference of the model's own run, by the lens's path (the capture's fused pass on the CPU).
double lens_diff(const Model& m, const std::vector<int64_t>& ids, int64_t target, int64_t alternative,
                 const Interventions& iv = {}) {
  LensOptions o;
  o.interventions = iv;
  o.target = target;
  const double a = m.explain_answer(ids, o).attribution.logit;
  o.target = alternative;
  return a - m.explain_answer(ids, o).attribution.logit;
}

// `m` with rows of a layer's projection `which` ("v_proj", "q_proj") scaled: the rows of key/value head
// `kv_head` (v_proj; -1: every row), every row of q_proj.
Model edited(const Model& m, int64_t layer, const std::string& which, int64_t kv_head) {
  std::vector<NamedTensor> tensors = m.tensors();
  const QkvLayout l = qkv_layout(m.config());
  bool found = false;
  for (NamedTensor& t : tensors) {
    if (t.name != "model.layers." + std::to_string(layer) + ".self_attn." + which + ".weight") continue;
    found = true;
    const int64_t in = t.shape[1];
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      bool edit = kv_head < 0;
      for (int64_t k = 0; k < l.v.components && !edit; ++k) {
        const int64_t c0 = l.v.column(kv_head, k);
        edit = r >= c0 && r < c0 + l.v.d;
      }
      if (!edit) continue;
      for (int64_t j = 0; j < in; ++j) t.data[static_cast<size_t>(r * in + j)] *= (j % 3 == 0 ? -1.5f : 2.0f);
    }
  }
  REQUIRE(found);
  return Model::from_tensors(m.config(), tensors);
}

}  // namespace

TEST_CASE("patching: nothing gives the corrupt run, the whole residual stream the clean one, exactly",
          "[patch]") {
  for (const ModelConfig& c : configs()) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 11);
    const Pair p(c.vocab_size);
    std::vector<PatchSite> everything = {{PatchComponent::Resid, 0, -1, {}}};
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (int64_t h = 0; h < c.map_heads(); ++h) everything.push_back({PatchComponent::Head, l, h, {}});
      everything.push_back({PatchComponent::Mlp, l, -1, {}});
    }
    // Heads and MLPs without the embedding: the corrupt tokens' embeddings stay in the stream, which the
    // query reads only at its own position (the same token in both prompts here; not at position 10).
    std::vector<PatchSite> no_embedding(everything.begin() + 1, everything.end());
    for (const bool denoise : {true, false}) {
      INFO((denoise ? "denoising" : "noising"));
      PatchOptions o;
      o.denoise = denoise;
      o.target = 5;
      o.alternative = 9;
      const PatchReport r = m.patch(p.clean, p.corrupt, {{}, {everything[0]}, everything, no_embedding}, o);
      REQUIRE(r.results.size() == 4);
      CHECK(r.tokens == 21);
      CHECK(r.query == 20);
      // The two ends, from the capture's path.
      CHECK(std::fabs(r.clean_diff - lens_diff(m, p.clean, 5, 9)) < 1e-5);
      CHECK(std::fabs(r.corrupt_diff - lens_diff(m, p.corrupt, 5, 9)) < 1e-5);
      CHECK(std::fabs(r.clean_diff - r.corrupt_diff) > 1e-3);
      const double unpatched = denoise ? r.corrupt_diff : r.clean_diff;
      const double copied = denoise ? r.clean_diff : r.corrupt_diff;
      CHECK(r.results[0].logit_diff == unpatched);
      CHECK(r.results[0].normalized == (denoise ? 0.0 : 1.0));
      CHECK(r.results[1].logit_diff == copied);
      CHECK(r.results[1].normalized == (denoise ? 1.0 : 0.0));
      CHECK(r.results[2].logit_diff == copied);
      CHECK(r.results[3].logit_diff == copied);
      o.query = 10;
      const PatchReport at10 = m.patch(p.clean, p.corrupt, {everything, no_embedding}, o);
      CHECK(at10.results[0].logit_diff == (denoise ? at10.clean_diff : at10.corrupt_diff));
      CHECK(std::fabs(at10.results[1].logit_diff - at10.results[0].logit_diff) > 1e-4);
    }
  }
}

TEST_CASE("patching: a layer's heads' outputs or maps from an edited checkpoint give its own run",
          "[patch]") {
  for (const ModelConfig& c : configs()) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 5);
    const std::vector<int64_t> ids = test::random_ids(19, c.vocab_size, 8);
    const QkvLayout l = qkv_layout(c);
    const int64_t H = c.map_heads(), per_kv = H / l.v.heads;
    PatchOptions o;
    o.target = 3;
    o.alternative = 4;
    // Values of key/value head 0 in layer 0 edited: only the heads that read them change; their outputs
    // copied into this model's run give the edited model's logits.
    const Model values = edited(m, 0, "v_proj", 0);
    std::vector<PatchSite> readers, others;
    for (int64_t h = 0; h < H; ++h)
      (h / per_kv == 0 ? readers : others).push_back({PatchComponent::Head, 0, h, {}});
    REQUIRE(!others.empty());
    const PatchReport r = m.patch(ids, ids, {readers, others}, o, nullptr, &values);
    const double edited_diff = lens_diff(values, ids, 3, 4);
    CHECK(std::fabs(r.clean_diff - edited_diff) < 1e-5);  // the run copied from: the edited model's
    CHECK(std::fabs(r.corrupt_diff - lens_diff(m, ids, 3, 4)) < 1e-5);
    CHECK(std::fabs(r.results[0].logit_diff - edited_diff) < 1e-5);
    CHECK(std::fabs(r.results[0].normalized - 1.0) < 1e-4);
    // The heads that do not read them change nothing.
    CHECK(r.results[1].logit_diff == r.corrupt_diff);
    // Queries of layer 1 edited: every map of the layer changes, values and λ's projection do not; the maps
    // copied give the edited model's run (DIFF: both maps).
    const Model queries = edited(m, 1, "q_proj", -1);
    std::vector<PatchSite> maps;
    for (int64_t h = 0; h < H; ++h) {
      maps.push_back({PatchComponent::A1, 1, h, {}});
      if (c.is_diff()) maps.push_back({PatchComponent::A2, 1, h, {}});
    }
    const PatchReport q = m.patch(ids, ids, {maps, {maps.front()}}, o, nullptr, &queries);
    CHECK(std::fabs(q.results[0].logit_diff - lens_diff(queries, ids, 3, 4)) < 1e-5);
    CHECK(std::fabs(q.results[1].logit_diff - q.results[0].logit_diff) > 1e-6);  // one map is not all
  }
}

TEST_CASE("patching: rows before the prompts differ change nothing, under interventions too", "[patch]") {
  for (const ModelConfig& c : configs()) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 2);
    const Pair p(c.vocab_size);
    PatchOptions o;
    o.target = 7;
    o.alternative = 8;
    PromptMarks marks;
    marks.answer = {2, 4};
    marks.query = 20;
    o.interventions =
        resolve_interventions(std::vector<std::string>{"ablate:1:0", "knockout:0=not-answer"}, c, marks, 21);
    std::vector<std::vector<PatchSite>> runs;
    for (const PatchComponent k :
         {PatchComponent::Head, PatchComponent::A1, PatchComponent::A2, PatchComponent::Lambda}) {
      for (PatchSite s : head_sweep(c, k, {0, 3, 7})) runs.push_back({s});
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      runs.push_back({{PatchComponent::Mlp, l, -1, {7}}});
      runs.push_back({{PatchComponent::Resid, l, -1, {0, 1, 2, 3, 4, 5, 6, 7}}});
    }
    const PatchReport r = m.patch(p.clean, p.corrupt, runs, o);
    CHECK(std::fabs(r.clean_diff - lens_diff(m, p.clean, 7, 8, o.interventions)) < 1e-5);
    CHECK(std::fabs(r.corrupt_diff - lens_diff(m, p.corrupt, 7, 8, o.interventions)) < 1e-5);
    for (const PatchResult& pr : r.results) {
      INFO(pr.sites[0].text());
      CHECK(std::fabs(pr.logit_diff - r.corrupt_diff) < 1e-5);
    }
    // The query's own row does change things (the sweep at the query is not all zero).
    const PatchReport at_query = m.patch(p.clean, p.corrupt, {{{PatchComponent::Resid, 1, -1, {20}}}}, o);
    CHECK(std::fabs(at_query.results[0].logit_diff - r.corrupt_diff) > 1e-4);
  }
}

TEST_CASE("patching: sweeps, defaults and what is refused", "[patch]") {
  const ModelConfig d = test::tiny_config(AttentionKind::Diff),
                    b = test::tiny_config(AttentionKind::Baseline), v2 = test::v2_config();
  CHECK(head_sweep(d, PatchComponent::Head).size() ==
        static_cast<size_t>(d.num_hidden_layers * d.map_heads()));
  CHECK(head_sweep(d, PatchComponent::A2).size() == static_cast<size_t>(d.num_hidden_layers * d.map_heads()));
  CHECK(head_sweep(d, PatchComponent::Lambda).empty());
  CHECK(head_sweep(b, PatchComponent::A2).empty());
  CHECK(head_sweep(v2, PatchComponent::Lambda).size() ==
        static_cast<size_t>(v2.num_hidden_layers * v2.map_heads()));
  CHECK(head_sweep(d, PatchComponent::Mlp).empty());
  const auto resid = resid_sweep(d, 5);
  REQUIRE(resid.size() == static_cast<size_t>(5 * d.num_hidden_layers));
  CHECK(resid[6].layer == 1);
  CHECK(resid[6].positions == std::vector<int64_t>{1});
  CHECK(resid[6].text() == "resid L1 @ 1");
  CHECK(PatchSite{PatchComponent::A2, 0, 3, {}}.text() == "a2 L0 H3 @ all");
  CHECK(parse_patch_component("lambda") == PatchComponent::Lambda);
  CHECK_THROWS_WITH(parse_patch_component("attn"),
                    Catch::Contains("one of head, a1, a2, lambda, mlp, resid"));

  const Model m = Model::random(d, 4);
  const Pair p(d.vocab_size);
  std::vector<int64_t> longer = p.corrupt;
  longer.push_back(1);
  CHECK_THROWS_WITH(m.patch(p.clean, longer, {}),
                    Catch::Contains("the clean prompt has 21 tokens and the corrupt one 22"));
  CHECK_THROWS_WITH(m.patch(p.clean, p.corrupt, {{{PatchComponent::Lambda, 0, 0, {}}}}),
                    Catch::Contains("DIFF's lambda is a weight of the layer"));
  CHECK_THROWS_WITH(m.patch(p.clean, p.corrupt, {{{PatchComponent::Head, 0, 9, {}}}}),
                    Catch::Contains("has heads 0-"));
  CHECK_THROWS_WITH(m.patch(p.clean, p.corrupt, {{{PatchComponent::Mlp, 0, -1, {21}}}}),
                    Catch::Contains("position 21 is beyond the 21-token prompts"));
  CHECK_THROWS_WITH(m.patch({}, {}, {}), Catch::Contains("the clean prompt is empty"));
  const Model base = Model::random(b, 4);
  CHECK_THROWS_WITH(base.patch(p.clean, p.corrupt, {{{PatchComponent::A2, 0, 0, {}}}}),
                    Catch::Contains("a baseline head has one map (a1) and no lambda"));
  CHECK_THROWS_WITH(m.patch(p.clean, p.corrupt, {}, {}, nullptr, &base), Catch::Contains("another shape"));
  // Defaults: the target is the clean run's greedy token, the alternative the corrupt run's.
  PatchOptions same;
  same.target = same.alternative = 6;
  CHECK_THROWS_WITH(m.patch(p.clean, p.corrupt, {}, same), Catch::Contains("are both"));
  CHECK_THROWS_WITH(m.patch(p.clean, p.clean, {}), Catch::Contains("both prompts' likeliest next token"));
  // A model whose greedy answers differ on the two prompts (random models often agree).
  bool found = false;
  for (uint64_t seed = 1; seed < 40 && !found; ++seed) {
    const Model g = Model::random(d, seed);
    const CaptureOptions co;
    const int64_t a = g.capture(p.clean, co).next_token[0].id, b2 = g.capture(p.corrupt, co).next_token[0].id;
    if (a == b2) continue;
    found = true;
    const PatchReport r = g.patch(p.clean, p.corrupt, {});
    CHECK(r.target == a);
    CHECK(r.alternative == b2);
    CHECK(r.clean_diff > 0);
    CHECK(r.corrupt_diff < 0);
  }
  CHECK(found);
  // Cancelled between layers.
  std::atomic<bool> stop{true};
  CHECK_THROWS_AS(m.patch(p.clean, p.corrupt, {}, {}, &stop), Cancelled);
}
