// The Explain view's numbers (core/formats/explain): recomputed from a trace's kept queries, keys and values,
// they must equal the trace's own logits and maps, λ, and — through the output norm and o_proj — the model's
// attention output.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "app/reports/explain_slides.h"
#include "core/formats/error.h"
#include "core/formats/explain.h"
#include "core/formats/intervention.h"
#include "core/formats/metrics.h"
#include "core/formats/tiles.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "helpers.h"
#include "viz/font.h"

using namespace difflens;

namespace {

ModelConfig windowed(ModelConfig c, int64_t w) {
  c.sliding_window = w;
  return c;
}

const NamedTensor& tensor(const std::vector<NamedTensor>& all, const std::string& name) {
  for (const auto& t : all)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return all.front();
}

// The bundled DIFF model's and baseline's traces of `text`, queries and keys kept (what Explain reads).
struct CapturedPair {
  Trace diff, base;
};
CapturedPair capture_bundled_pair(const std::string& text) {
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small", DeviceChoice::Cpu);
  const Model base = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/baseline-small", DeviceChoice::Cpu);
  CaptureOptions o;
  o.keep_qkv = true;
  return {diff.capture(diff.tokenizer().encode(text, true).ids, o),
          base.capture(base.tokenizer().encode(text, true).ids, o)};
}

}  // namespace

TEST_CASE("explain: each step's numbers are the trace's own", "[explain]") {
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff, 32, 2, 4, 2),  // GQA
                               test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 2),
                               windowed(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 9)}) {
    INFO(to_string(c.attention) << " window " << c.sliding_window);
    const Model m = Model::random(c, 17);
    const std::vector<int64_t> ids = test::random_ids(40, c.vocab_size, 3);
    CaptureOptions o;
    o.keep_qkv = true;
    o.keep_logits = true;
    const Trace t = m.capture(ids, o);
    const int64_t T = t.length();
    for (int layer : {0, 1})
      for (int head = 0; head < c.map_heads(); ++head)
        for (int64_t q : {int64_t{0}, int64_t{7}, T - 1}) {
          INFO("layer " << layer << " head " << head << " query " << q);
          const HeadExplain e = explain_head(t, layer, head, q);
          const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
          const size_t row = static_cast<size_t>((head * T + q) * T);
          // The visible keys: causal, inside the window.
          REQUIRE(!e.keys.empty());
          CHECK(e.keys.back() == q);
          CHECK(static_cast<int64_t>(e.keys.size()) ==
                (c.sliding_window > 0 ? std::min<int64_t>(q + 1, c.sliding_window) : q + 1));
          double s1 = 0, s2 = 0;
          for (size_t k = 0; k < e.keys.size(); ++k) {
            const size_t at = row + static_cast<size_t>(e.keys[k]);
            CHECK(e.logits1[k] == Approx(l.logits1.data[at]).margin(2e-5));
            CHECK(e.a1[k] == Approx(e.diff ? l.a1.data[at] : l.a.data[at]).margin(1e-6));
            if (e.diff) {
              CHECK(e.logits2[k] == Approx(l.logits2.data[at]).margin(2e-5));
              CHECK(e.a2[k] == Approx(l.a2.data[at]).margin(1e-6));
              CHECK(e.common[k] <= std::min(e.a1[k], e.lambda * e.a2[k]) + 1e-12);
              s2 += e.a2[k];
            }
            CHECK(e.a[k] == Approx(l.a.data[at]).margin(1e-6));
            s1 += e.a1[k];
          }
          CHECK(s1 == Approx(1.0).margin(1e-9));
          if (e.diff) {
            CHECK(s2 == Approx(1.0).margin(1e-9));
            CHECK(e.lambda == l.lambda);
            CHECK(e.lambda == Approx(e.lambda_exp1 - e.lambda_exp2 + e.lambda_init).margin(1e-9));
            CHECK(e.lambda_init == Approx(lambda_init(layer)));
            CHECK(e.a_sum == Approx(1.0 - e.lambda).margin(1e-9));
          } else {
            CHECK(e.a_sum == Approx(1.0).margin(1e-9));
          }
          CHECK(static_cast<int64_t>(e.out.size()) == (e.diff ? 2 : 1) * c.head_dim);
        }
    // A long-prompt (pooled) capture keeps the same vectors: the same numbers.
    CaptureOptions pooled = o;
    pooled.keep_logits = false;
    pooled.pooled_budget_bytes = 4096;
    const Trace tp = m.capture(ids, pooled);
    REQUIRE(tp.layers[1].pooled > 0);
    const HeadExplain ep = explain_head(tp, 1, 1, T - 1), ee = explain_head(t, 1, 1, T - 1);
    CHECK(ep.a == ee.a);
    CHECK(ep.out == ee.out);
    // Kept through a trace bundle, the numbers are the same.
    test::ScratchDir dir("explain");
    write_trace_bundle(t, dir.path());
    const Trace back = read_trace_bundle(dir.path());
    const HeadExplain a = explain_head(t, 1, 1, T - 1), b = explain_head(back, 1, 1, T - 1);
    CHECK(a.out == b.out);
    CHECK(a.a == b.a);
  }
}

TEST_CASE("explain: the heads' outputs through o_proj are the model's attention output", "[explain]") {
  // Layer 0: its input is the embedding, normed by input_layernorm; attention_probe runs the attention
  // module on that normed input and returns o_proj(...) per token.
  const ModelConfig c = test::tiny_config(AttentionKind::Diff, 32, 1, 4, 2);
  Model m = Model::random(c, 23);
  std::vector<NamedTensor> w = m.tensors();
  for (auto& t : w)  // a non-trivial output norm weight, so that its use is checked
    if (t.name.find("subln") != std::string::npos)
      for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = 0.5f + 0.1f * static_cast<float>(i % 7);
  m = Model::from_tensors(c, w);
  const std::vector<int64_t> ids = test::random_ids(12, c.vocab_size, 5);
  CaptureOptions o;
  o.keep_qkv = true;
  const Trace t = m.capture(ids, o);
  const int64_t T = t.length(), E = c.hidden_size, H = c.map_heads();
  const NamedTensor& emb = tensor(w, "model.embed_tokens.weight");
  const NamedTensor& norm = tensor(w, "model.layers.0.input_layernorm.weight");
  std::vector<float> x(static_cast<size_t>(T * E));
  for (int64_t i = 0; i < T; ++i) {
    double ms = 0;
    for (int64_t k = 0; k < E; ++k) ms += std::pow(emb.data[static_cast<size_t>(ids[i] * E + k)], 2);
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(E) + c.rms_norm_eps);
    for (int64_t k = 0; k < E; ++k)
      x[static_cast<size_t>(i * E + k)] = static_cast<float>(emb.data[static_cast<size_t>(ids[i] * E + k)] *
                                                             inv * norm.data[static_cast<size_t>(k)]);
  }
  std::vector<float> out;
  (void)m.attention_probe(0, x, T, &out);
  const NamedTensor& wo = tensor(w, "model.layers.0.self_attn.o_proj.weight");  // [E, H·2d]
  const int64_t dv = 2 * c.head_dim;
  REQUIRE(wo.shape == std::vector<int64_t>{E, H * dv});
  double worst = 0;
  for (int64_t q : {int64_t{0}, int64_t{5}, T - 1}) {
    std::vector<double> concat;
    for (int h = 0; h < H; ++h) {
      const HeadExplain e = explain_head(t, 0, h, q);
      concat.insert(concat.end(), e.out.begin(), e.out.end());
    }
    for (int64_t r = 0; r < E; ++r) {
      double y = 0;
      for (int64_t k = 0; k < H * dv; ++k)
        y += wo.data[static_cast<size_t>(r * H * dv + k)] * concat[static_cast<size_t>(k)];
      worst = std::max(worst, std::fabs(y - out[static_cast<size_t>(q * E + r)]));
    }
  }
  INFO("largest difference " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("explain: bad requests and traces without queries and keys are refused", "[explain][errors]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff), 4);
  const Trace plain = m.capture({1, 5, 6});
  CHECK_FALSE(explain_available(plain, 0));
  CHECK_THROWS_WITH(explain_head(plain, 0, 0, 2), Catch::Contains("capture with --keep-qkv"));
  CaptureOptions o;
  o.keep_qkv = true;
  const Trace t = m.capture({1, 5, 6}, o);
  CHECK(explain_available(t, 1));
  CHECK_THROWS_WITH(explain_head(t, 5, 0, 2), Catch::Contains("layer 5 is not in the trace"));
  CHECK_THROWS_WITH(explain_head(t, 0, 9, 2), Catch::Contains("head 9 does not exist"));
  CHECK_THROWS_WITH(explain_head(t, 0, 0, 3), Catch::Contains("query 3 is outside the 3-token prompt"));
  const HeadExplain e = explain_head(t, 0, 0, 2);
  const AttentionShare s = explained_share(e, e.a1, {1, 2}, {2, 3});
  CHECK(s.answer == Approx(e.a1[1]));
  CHECK(s.noise == Approx(e.a1[0]));
}

TEST_CASE("explain slides: the numbers drawn are the trace's, and every step exports at 1920x1080",
          "[explain][app]") {
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small", DeviceChoice::Cpu);
  const Model base = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/baseline-small", DeviceChoice::Cpu);
  const std::string text =
      "The secret code of Thomas is 7182. The river was high. Q: What is the secret code of Thomas?\nA: 7";
  CaptureOptions o;
  o.keep_qkv = true;
  const Trace td = diff.capture(diff.tokenizer().encode(text, true).ids, o);
  const Trace tb = base.capture(base.tokenizer().encode(text, true).ids, o);
  const int64_t T = td.length(), q = T - 1;
  app::ExplainInput in;
  in.diff = app::explain_side("diff-small", &td, 1, 3, q);
  in.base = app::explain_side("baseline-small", &tb, 1, 4, q);
  REQUIRE(in.diff.head);
  REQUIRE(in.base.head);
  in.answer = {7, 11};
  auto texts = [&](int step) {
    std::string all;
    for (const auto& t : app::explain_slide(in, step).texts) all += t.text + "\n";
    return all;
  };
  auto f4 = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4f", v);
    return std::string(b);
  };
  const LayerTrace& l = td.layers[1];
  // Step 3: the largest A1 entry of the row, as the trace holds it.
  double best = 0;
  for (int64_t j = 0; j <= q; ++j)
    best = std::max<double>(best, l.a1.data[static_cast<size_t>((3 * T + q) * T + j)]);
  char peak[32];
  std::snprintf(peak, sizeof peak, "largest %.3f on", best);
  CHECK_THAT(texts(3), Catch::Contains(peak));
  // Step 4: λ and its terms.
  CHECK_THAT(texts(4), Catch::Contains(f4(l.lambda_exp1) + " − " + f4(l.lambda_exp2) + " + " +
                                       f4(l.lambda_init) + " = " + f4(l.lambda)));
  // Step 5: the row sums to 1 − λ.
  char sum[64];
  std::snprintf(sum, sizeof sum, "sums to 1 − λ = %.3f", 1.0 - l.lambda);
  CHECK_THAT(texts(5), Catch::Contains(sum));
  CHECK_THAT(texts(5), Catch::Contains("mass: answer (green) A1 "));
  CHECK_THAT(texts(5), Catch::Contains("noise's output share A1 "));
  CHECK_THAT(texts(5), Catch::Contains(" of budget "));
  // Step 6: the output's length.
  CHECK_THAT(texts(6), Catch::Contains("|·| = " + f4(in.diff.head->out_norm)));
  // Bars: one data rectangle per visible key in each map row of step 3 (A1, A2 and the baseline's A).
  size_t cells = 0;
  for (const auto& r : app::explain_slide(in, 3).rects) cells += r.cell;
  CHECK(cells <= static_cast<size_t>(3 * T));
  CHECK(cells > static_cast<size_t>(T));  // most entries are at least a pixel tall
  CHECK_THROWS_WITH(app::explain_slide(in, 7), Catch::Contains("step 7 is outside 1..6"));
  // A side without a head says why.
  app::ExplainInput missing = in;
  missing.base = app::explain_side("baseline-small", nullptr, 1, 4, q);
  CHECK_THAT(texts(1), Catch::Contains("k1 of the keys"));
  bool says = false;
  for (const auto& t : app::explain_slide(missing, 2).texts) says |= t.text == "no trace in this slot";
  CHECK(says);
  // Export: six steps, PNG and SVG, 1920 x 1080.
  test::ScratchDir dir("slides");
  const std::vector<std::string> files = app::export_explain_slides(in, dir.path().string());
  REQUIRE(files.size() == 12);
  for (int step = 1; step <= 6; ++step) {
    const std::string png = test::read_all(dir / ("explain-step-" + std::to_string(step) + ".png"));
    REQUIRE(png.size() > 24);
    auto be32 = [&](size_t at) {
      return (static_cast<uint32_t>(static_cast<uint8_t>(png[at])) << 24) |
             (static_cast<uint8_t>(png[at + 1]) << 16) | (static_cast<uint8_t>(png[at + 2]) << 8) |
             static_cast<uint8_t>(png[at + 3]);
    };
    CHECK(be32(16) == 1920);
    CHECK(be32(20) == 1080);
    const std::string svg = test::read_all(dir / ("explain-step-" + std::to_string(step) + ".svg"));
    CHECK_THAT(svg, Catch::Contains("width=\"1920\" height=\"1080\""));
    CHECK_THAT(svg, Catch::Contains("Step " + std::to_string(step) + " of 6"));
  }
}

TEST_CASE("explain: keeping queries, keys and values changes no other readout of an exact trace",
          "[explain][metrics]") {
  // Regression: tiles and the noise readout once took any trace with queries for a long-prompt one and read
  // its (absent) row log-sum-exps.
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 8);
  const std::vector<int64_t> ids = test::random_ids(30, m.config().vocab_size, 2);
  CaptureOptions o;
  o.keep_qkv = true;
  const Trace plain = m.capture(ids), kept = m.capture(ids, o);
  CHECK(tile_available(kept, 1, 1));
  const AttentionTile a = attention_tile(plain, 1, 1, 20, 10, 0, 30),
                      b = attention_tile(kept, 1, 1, 20, 10, 0, 30);
  CHECK(a.a == b.a);
  CHECK(a.a1 == b.a1);
  const NoiseReadout na = attention_noise(plain, {3, 5}, {25, 30}),
                     nb = attention_noise(kept, {3, 5}, {25, 30});
  CHECK(na.mean.answer == nb.mean.answer);
  CHECK(na.mean.noise == nb.mean.noise);
}

TEST_CASE("explain slides: no text leaves a slide, and a command-line reader is told the flag",
          "[explain][app]") {
  const CapturedPair pair = capture_bundled_pair(
      "The secret code of Mira is 4821. The river was high that spring. Q: What is the secret code of Mira? "
      "A: The secret code of Mira is");
  const Trace &td = pair.diff, &tb = pair.base;
  const int64_t q = td.length() - 1;
  app::ExplainInput in;
  in.diff = app::explain_side("diff-small", &td, 1, 3, q);
  in.base = app::explain_side("baseline-small", &tb, 1, 4, q);
  in.answer_hint = "give --answer BEGIN,END";
  const viz::FigureFont& font = viz::FigureFont::standard();
  for (const bool answer : {false, true}) {
    in.answer = answer ? TokenSpan{10, 14} : TokenSpan{-1, -1};
    // As exported, and as presented on a 1280x800 projector (text at least 16 px: the slide lays itself out
    // for it, no text leaving the slide or lying over another).
    for (const auto [w, h, min_px] :
         {std::tuple{1920, 1080, 0.0f}, std::tuple{1280, 720, 0.0f}, std::tuple{1264, 711, 16.0f}})
      for (int step = 1; step <= app::kExplainSteps; ++step) {
        const viz::FigureScene s = app::explain_slide(in, step, w, h, min_px);
        std::string all;
        for (size_t i = 0; i < s.texts.size(); ++i) {
          const auto& t = s.texts[i];
          INFO("step " << step << " at " << w << "x" << h << " min " << min_px
                       << (answer ? " with" : " without") << " an answer: \"" << t.text << "\" at x " << t.x
                       << " y " << t.y);
          CHECK(t.x >= 0);
          CHECK(t.px >= min_px - 1e-3f);
          if (!t.vertical) CHECK(t.x + font.text_width(t.text, t.px) <= w);
          CHECK(t.y + t.px <= h + 1);
          if (min_px > 0 && !t.vertical)
            for (size_t j = 0; j < i; ++j) {
              const auto& u = s.texts[j];
              if (u.vertical) continue;
              const bool apart = t.x >= u.x + font.text_width(u.text, u.px) ||
                                 u.x >= t.x + font.text_width(t.text, t.px) || t.y >= u.y + u.px * 0.9f ||
                                 u.y >= t.y + t.px * 0.9f;
              INFO("over \"" << u.text << "\" at x " << u.x << " y " << u.y);
              CHECK(apart);
            }
          all += t.text + "\n";
        }
        if (step == 5 && !answer) {
          CHECK_THAT(all, Catch::Contains("give --answer BEGIN,END"));
          CHECK_THAT(all, !Catch::Contains("right-drag"));
        }
      }
  }
}

TEST_CASE("explain slides: crowded in a small window, clean in the Present layout the window falls back to",
          "[explain][app][layout]") {
  const CapturedPair pair = capture_bundled_pair(
      "The secret code of Mira is 4821. The river was high that spring. Q: What is the secret code of Mira? "
      "A: The secret code of Mira is 4821");
  const Trace &td = pair.diff, &tb = pair.base;
  const int64_t q = td.length() - 5;
  app::ExplainInput in;
  in.diff = app::explain_side("diff-small", &td, 1, 0, q);
  in.base = app::explain_side("baseline-small", &tb, 1, 7, q);
  in.answer = {10, 14};
  // The lecture window at 1280 x 800 gave the slide 768 x 432 with 14 px text: step 1's chart labels lay
  // over each other there (what the layout check now reports); the panel then lays the slide out larger,
  // up to 1920 x 1080, where no step has a fault, and shows it scaled down.
  int crowded = 0;
  for (int step = 1; step <= app::kExplainSteps; ++step) {
    const viz::SceneTextFaults small = viz::scene_text_faults(app::explain_slide(in, step, 768, 432, 14.3f));
    crowded += small.overlaps + small.outside;
    const viz::SceneTextFaults present =
        viz::scene_text_faults(app::explain_slide(in, step, 1920, 1080, 14.3f));
    INFO("step " << step << ": " << (present.examples.empty() ? "" : present.examples[0]));
    CHECK(present.clean());
  }
  CHECK(crowded > 0);
}

TEST_CASE("explain follows an intervention: the λ in force, named on every slide", "[explain][app]") {
  for (const ModelConfig& c : {test::tiny_config(AttentionKind::Diff, 32, 2, 4, 2), test::v2_config()}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 23);
    const std::vector<int64_t> ids = test::random_ids(24, c.vocab_size, 5);
    const int64_t T = static_cast<int64_t>(ids.size()), q = T - 1;
    CaptureOptions o;
    o.keep_qkv = true;
    const Trace trained = m.capture(ids, o);
    o.interventions = resolve_interventions({"lambda=0"}, c, {}, T);
    const Trace zero = m.capture(ids, o);
    REQUIRE_FALSE(zero.interventions.empty());
    // Layer 0: its input is the same in both runs, so its own λ is too (V2's depends on the input).
    const HeadExplain before = explain_head(trained, 0, 1, q), after = explain_head(zero, 0, 1, q);
    CHECK_FALSE(before.lambda_set);
    CHECK(before.lambda == Approx(before.lambda_own).margin(1e-6));
    CHECK(std::abs(before.lambda) > 1e-3);
    CHECK(after.lambda_set);
    CHECK(after.lambda == 0.0);
    CHECK(after.lambda_own == Approx(before.lambda_own).margin(1e-6));  // the learned λ, still shown
    CHECK(after.a_sum == Approx(1.0).margin(1e-9));                     // nothing subtracted
    CHECK(after.common_sum == 0.0);
    for (size_t k = 0; k < after.a.size(); ++k) CHECK(after.a[k] == after.a1[k]);
    // The slides: step 4 gives both values, step 5 sums to 1, every step names the intervention.
    app::ExplainInput in;
    in.diff = app::explain_side("m", &zero, 0, 1, q);
    REQUIRE(in.diff.head);
    CHECK(in.diff.interventions == "lambda=0");
    auto texts = [&](int step) {
      std::string all;
      for (const auto& t : app::explain_slide(in, step).texts) all += t.text + "\n";
      return all;
    };
    char own[64];
    std::snprintf(own, sizeof own, "λ as trained: %.4f", before.lambda_own);
    CHECK_THAT(texts(4),
               Catch::Contains(own) && Catch::Contains("this run: λ = 0.0000, set by an intervention"));
    CHECK_THAT(texts(5), Catch::Contains("sums to 1 − λ = 1.000"));
    for (int step = 1; step <= 6; ++step) CHECK_THAT(texts(step), Catch::Contains("INTERVENED m: lambda=0"));
    app::ExplainInput as_trained;
    as_trained.diff = app::explain_side("m", &trained, 0, 1, q);
    CHECK_THAT(texts(4), !Catch::Contains("σ(") || Catch::Contains("as trained"));
    std::string t4;
    for (const auto& t : app::explain_slide(as_trained, 4).texts) t4 += t.text + "\n";
    CHECK_THAT(t4, !Catch::Contains("INTERVENED") && !Catch::Contains("set by an intervention"));
  }
}
