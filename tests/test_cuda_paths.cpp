// What the app and the CLI do to a model, run on a GPU against the same model on the CPU: captures under
// interventions (λ, zero and mean ablation, knockouts: the GPU's tensor operations without the fused
// attention), the logit lens and direct attribution, activation patching, and generation with the key/value
// cache under interventions. The CPU's paths are held to exact references elsewhere (test_interventions,
// test_lens, test_patch); here the GPU must give their numbers. Skipped (exit 77, with the reason) where this
// LibTorch build or this machine has no GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/formats/error.h"
#include "core/formats/intervention.h"
#include "core/formats/patch_site.h"
#include "core/model/lens.h"
#include "core/model/model.h"
#include "tests/helpers.h"

using namespace difflens;
using test::max_diff;

namespace {

void need_gpu() {
  if (!cuda_available()) test::skip("no CUDA device (this LibTorch build or this machine has no GPU)");
}

struct Case {
  std::string name;
  ModelConfig config;
};

// DIFF with grouped key/value heads, the matched baseline, DIFF V2.
std::vector<Case> cases() {
  return {{"DIFF", test::tiny_config(AttentionKind::Diff, 64, 2, 4, 2)},
          {"baseline", test::tiny_config(AttentionKind::Baseline, 64, 2, 4, 2)},
          {"DIFF V2", test::v2_config()}};
}

// The CPU's model and the same weights on the GPU.
struct Pair {
  Model cpu, gpu;
  explicit Pair(const ModelConfig& c, uint64_t seed)
      : cpu(Model::random(c, seed, DeviceChoice::Cpu)),
        gpu(Model::from_tensors(c, cpu.tensors(), DeviceChoice::Cuda)) {}
};

// Equal within 1e-4, or both NaN.
bool same(double a, double b) {
  return std::isnan(a) ? std::isnan(b) : std::fabs(a - b) <= 1e-4;
}

constexpr int64_t kTokens = 33;

PromptMarks marks() {
  PromptMarks m;
  m.answer = {4, 7};
  m.query = 28;
  return m;
}

// Each spec alone, then all the model takes together (a baseline takes no λ).
std::vector<std::vector<std::string>> spec_sets(const ModelConfig& c) {
  const std::vector<std::string> all = {
      "lambda:0=0",       "lambda:1:1=0.25",       "ablate:0:1",
      "ablate:0:2=mean",  "knockout:0=not-answer", "knockout:1:0=keep:0-2@10-12",
      "knockout=drop:3-5"};
  std::vector<std::string> refused;
  const std::vector<std::string> taken = takeable_interventions(all, c, marks(), kTokens, refused);
  std::vector<std::vector<std::string>> sets;
  for (const std::string& s : taken) sets.push_back({s});
  sets.push_back(taken);
  return sets;
}

}  // namespace

TEST_CASE("CUDA captures under interventions give the CPU's maps, λ and next tokens",
          "[interventions][gpu]") {
  need_gpu();
  for (const Case& k : cases()) {
    INFO(k.name);
    const Pair m(k.config, 71);
    const auto ids = test::random_ids(kTokens, k.config.vocab_size, 5);
    CaptureOptions plain;
    plain.position_top_k = 3;
    const Trace own = m.cpu.capture(ids, plain);
    for (const auto& specs : spec_sets(k.config)) {
      INFO("under " << under_interventions(specs));
      CaptureOptions o = plain;
      o.interventions = resolve_interventions(specs, k.config, marks(), kTokens);
      const Trace a = m.cpu.capture(ids, o), b = m.gpu.capture(ids, o);
      REQUIRE(a.layers.size() == b.layers.size());
      double changed = 0;
      for (size_t l = 0; l < a.layers.size(); ++l) {
        INFO("layer " << l);
        const LayerTrace &x = a.layers[l], &y = b.layers[l];
        CHECK(max_diff(x.a, y.a) <= 1e-5);
        changed = std::max(changed, max_diff(x.a, own.layers[l].a));
        if (!x.a1.empty()) {
          CHECK(max_diff(x.a1, y.a1) <= 1e-5);
          CHECK(max_diff(x.a2, y.a2) <= 1e-5);
        }
        CHECK(y.lambda == Approx(x.lambda).margin(1e-6));
        if (!x.lambda_rows.empty()) CHECK(max_diff(x.lambda_rows, y.lambda_rows) <= 1e-6);
      }
      // The intervention did something on the CPU (else agreeing would prove nothing); a mean ablation of a
      // random model's head can move the maps little, its next-token distribution still.
      REQUIRE(a.next_token.size() == b.next_token.size());
      double moved = 0;
      for (size_t t = 0; t < a.next_token.size(); ++t) {
        CHECK(a.next_token[t].id == b.next_token[t].id);
        CHECK(std::fabs(a.next_token[t].probability - b.next_token[t].probability) <= 1e-5);
        moved = std::max(
            moved, std::fabs(double(a.next_token[t].probability) - double(own.next_token[t].probability)));
      }
      CHECK(std::max(changed, moved) > 1e-4);
    }
  }
}

TEST_CASE("CUDA logit lens and direct attribution give the CPU's, under interventions too", "[lens][gpu]") {
  need_gpu();
  for (const Case& k : cases()) {
    INFO(k.name);
    const Pair m(k.config, 72);
    const auto ids = test::random_ids(kTokens, k.config.vocab_size, 6);
    for (const std::vector<std::string>& specs : {std::vector<std::string>{}, spec_sets(k.config).back()}) {
      INFO("under " << under_interventions(specs));
      LensOptions o;
      o.interventions = resolve_interventions(specs, k.config, marks(), kTokens);
      const AnswerExplanation a = m.cpu.explain_answer(ids, o), b = m.gpu.explain_answer(ids, o);
      const LogitAttribution &x = a.attribution, &y = b.attribution;
      CHECK(y.target == x.target);
      CHECK(y.logit == Approx(x.logit).margin(1e-4));
      CHECK(y.norm_scale == Approx(x.norm_scale).epsilon(1e-5));
      CHECK(y.embedding == Approx(x.embedding).margin(1e-4));
      CHECK(y.total() == Approx(y.logit).margin(1e-3));
      REQUIRE(x.heads.size() == y.heads.size());
      for (size_t l = 0; l < x.heads.size(); ++l) {
        CHECK(y.mlps[l] == Approx(x.mlps[l]).margin(1e-4));
        for (size_t h = 0; h < x.heads[l].size(); ++h) {
          CHECK(y.heads[l][h] == Approx(x.heads[l][h]).margin(1e-4));
          if (!x.heads_a1.empty()) {  // NaN where the split does not exist (an ablated head): NaN on both
            CHECK(same(y.heads_a1[l][h], x.heads_a1[l][h]));
            CHECK(same(y.heads_a2[l][h], x.heads_a2[l][h]));
          }
        }
      }
      CHECK(b.targets == a.targets);
      REQUIRE(a.layers.size() == b.layers.size());
      for (size_t l = 0; l < a.layers.size(); ++l)
        for (size_t t = 0; t < a.layers[l].target_probability.size(); ++t) {
          const float p = a.layers[l].target_probability[t], q = b.layers[l].target_probability[t];
          if (std::isnan(p)) {
            CHECK(std::isnan(q));
            continue;
          }
          CHECK(std::fabs(p - q) <= 1e-5);
          CHECK(a.layers[l].top[t].front().id == b.layers[l].top[t].front().id);
        }
    }
  }
}

TEST_CASE("CUDA activation patching gives the CPU's logit differences", "[patch][gpu]") {
  need_gpu();
  for (const Case& k : cases()) {
    INFO(k.name);
    const Pair m(k.config, 73);
    const auto clean = test::random_ids(21, k.config.vocab_size, 3);
    auto corrupt = clean;
    for (size_t i = 8; i < 12; ++i) corrupt[i] = (corrupt[i] + 17) % k.config.vocab_size;
    std::vector<std::vector<PatchSite>> runs;
    for (const PatchComponent c :
         {PatchComponent::Head, PatchComponent::A1, PatchComponent::Lambda, PatchComponent::Mlp}) {
      std::vector<PatchSite> sites;
      try {
        sites = head_sweep(k.config, c, {20});
      } catch (const Error&) {
        continue;  // a component this kind of model has not (a baseline's A1, DIFF's per-token λ)
      }
      for (const PatchSite& s : sites) runs.push_back({s});
    }
    for (const PatchSite& s : resid_sweep(k.config, 21))
      if (s.positions.front() % 5 == 0) runs.push_back({s});
    REQUIRE(runs.size() > 8);
    for (const bool denoise : {true, false}) {
      INFO("denoise " << denoise);
      PatchOptions o;
      o.denoise = denoise;
      o.target = 11;
      o.alternative = 12;
      o.interventions = resolve_interventions({"ablate:0:1"}, k.config, {}, 21);
      const PatchReport a = m.cpu.patch(clean, corrupt, runs, o), b = m.gpu.patch(clean, corrupt, runs, o);
      CHECK(b.clean_diff == Approx(a.clean_diff).margin(1e-4));
      CHECK(b.corrupt_diff == Approx(a.corrupt_diff).margin(1e-4));
      REQUIRE(a.results.size() == b.results.size());
      double spread = 0;
      for (size_t r = 0; r < a.results.size(); ++r) {
        INFO(a.results[r].sites.front().text());
        CHECK(b.results[r].logit_diff == Approx(a.results[r].logit_diff).margin(1e-4));
        spread = std::max(spread, std::fabs(a.results[r].logit_diff - a.corrupt_diff));
      }
      CHECK(spread > 1e-3);  // some patch moved the difference: the comparison is not of idle runs
    }
  }
}

TEST_CASE("CUDA generation under interventions with the key/value cache writes the CPU's tokens and rows",
          "[generate][interventions][gpu]") {
  need_gpu();
  for (const Case& k : cases()) {
    INFO(k.name);
    const Pair m(k.config, 74);
    const auto prompt = test::random_ids(23, k.config.vocab_size, 4);
    PromptMarks pm;
    pm.answer = {3, 6};
    pm.query = 22;
    std::vector<std::string> refused;
    const auto specs = takeable_interventions({"lambda:0=0", "ablate:1:0", "knockout:1=not-answer"}, k.config,
                                              pm, 23, refused);
    GenerateOptions o;
    o.max_new = 8;
    o.keep_rows = true;
    o.interventions = resolve_interventions(specs, k.config, pm, 23);
    const Generation a = m.cpu.generate(prompt, o), b = m.gpu.generate(prompt, o);
    CHECK(b.cached);
    REQUIRE(b.ids == a.ids);
    REQUIRE(a.rows.size() == b.rows.size());
    for (size_t t = 0; t < a.rows.size(); ++t)
      for (size_t l = 0; l < a.rows[t].a.size(); ++l) {
        CHECK(max_diff(a.rows[t].a[l], b.rows[t].a[l]) <= 1e-5);
        if (!a.rows[t].a1.empty()) CHECK(max_diff(a.rows[t].a1[l], b.rows[t].a1[l]) <= 1e-5);
      }
  }
}
