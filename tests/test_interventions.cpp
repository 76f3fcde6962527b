// Interventions (core/formats/intervention.h) against exact math: the grammar and its refusals; λ set through
// the run equals λ set through an edited checkpoint (its parameter vectors), a head ablated to zero equals
// its o_proj columns zeroed, on the CPU's fused pass and the tensor operations a GPU runs; a knockout equals
// the softmax of the model's own logits over the keys left (a reference in double); generation with the
// key/value cache under interventions writes what re-running the whole text does.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/formats/intervention.h"
#include "core/formats/tiles.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "tests/helpers.h"

using namespace difflens;
using test::max_diff;

namespace {

using test::v2_config;

Interventions resolved(const ModelConfig& c, const std::vector<std::string>& specs, int64_t T,
                       PromptMarks marks = {}) {
  return resolve_interventions(specs, c, marks, T);
}

Trace run(const Model& m, const std::vector<int64_t>& ids, const Interventions& iv = {},
          bool logits = false) {
  CaptureOptions o;
  o.interventions = iv;
  o.keep_logits = logits;
  o.position_top_k = 3;
  return m.capture(ids, o);
}

std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Every map of every layer, the λ and the next-token distribution agree within `tol`.
void require_same(const Trace& a, const Trace& b, double tol = 1e-5) {
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    INFO("layer " << l);
    CHECK(max_diff(a.layers[l].a, b.layers[l].a) <= tol);
    if (!a.layers[l].a1.empty()) {
      CHECK(max_diff(a.layers[l].a1, b.layers[l].a1) <= tol);
      CHECK(max_diff(a.layers[l].a2, b.layers[l].a2) <= tol);
    }
  }
  REQUIRE(a.next_token.size() == b.next_token.size());
  for (size_t k = 0; k < a.next_token.size(); ++k) {
    CHECK(a.next_token[k].id == b.next_token[k].id);
    CHECK(std::fabs(a.next_token[k].probability - b.next_token[k].probability) <= tol);
  }
}

std::vector<NamedTensor> edited(const Model& m,
                                const std::map<std::string, std::function<void(NamedTensor&)>>& f) {
  std::vector<NamedTensor> ts = m.tensors();
  size_t hits = 0;
  for (NamedTensor& t : ts)
    if (auto it = f.find(t.name); it != f.end()) {
      it->second(t);
      ++hits;
    }
  REQUIRE(hits == f.size());
  return ts;
}

// Zeroes the o_proj input columns of head h (of `heads` equal blocks): the head's output no longer reaches
// the residual stream.
std::function<void(NamedTensor&)> zero_head_columns(int64_t h, int64_t heads) {
  return [h, heads](NamedTensor& t) {
    const int64_t rows = t.shape[0], cols = t.shape[1], w = cols / heads;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = h * w; c < (h + 1) * w; ++c) t.data[static_cast<size_t>(r * cols + c)] = 0;
  };
}

// Generation under `iv` from `m` writes what the edited checkpoint `e` writes, with the same attention rows
// of every written token: on the CPU's fused pass and on the tensor operations a GPU runs.
void require_same_generation(const Model& m, const Model& e, const std::vector<int64_t>& ids,
                             const Interventions& iv) {
  for (const bool tensor_ops : {false, true}) {
    INFO("tensor ops " << tensor_ops);
    GenerateOptions o;
    o.max_new = 5;
    o.keep_rows = true;
    o.tensor_ops = tensor_ops;
    const Generation ref = e.generate(ids, o);
    o.interventions = iv;
    const Generation got = m.generate(ids, o);
    REQUIRE(got.ids == ref.ids);
    REQUIRE(got.rows.size() == ref.rows.size());
    for (size_t k = 0; k < got.rows.size(); ++k)
      for (size_t l = 0; l < got.rows[k].a.size(); ++l)
        CHECK(max_diff(got.rows[k].a[l], ref.rows[k].a[l]) <= 1e-5);
  }
}

}  // namespace

TEST_CASE("interventions: the grammar reads every form and writes it back as read", "[interventions]") {
  for (const char* text :
       {"lambda=0", "lambda=init", "lambda:1=0", "lambda:0:1=0.25", "lambda:2=init", "ablate:1:3",
        "ablate:0:2=mean", "knockout=not-answer", "knockout:1=only-answer", "knockout:1:0=not-noise",
        "knockout=drop:3-5+9-12", "knockout:0=keep:0-4@10-", "knockout=not-answer@7-9"}) {
    INFO(text);
    const InterventionSpec s = parse_intervention(text);
    CHECK(s.text() == text);
    CHECK(parse_intervention(s.text()) == s);
  }
  CHECK(parse_intervention("ablate:1:3=zero").text() == "ablate:1:3");
  CHECK(parse_intervention("knockout=drop:9-12+3-5+4-6").text() == "knockout=drop:3-6+9-12");  // merged
  CHECK(parse_intervention("knockout=not-answer@query-").text() == "knockout=not-answer");
}

TEST_CASE("interventions: a bad spec is refused naming the part that is wrong", "[interventions][errors]") {
  auto refused = [](const std::string& text, const std::string& part) {
    INFO(text);
    CHECK_THROWS_WITH(parse_intervention(text), Catch::Contains(part) && Catch::Contains("--intervene"));
  };
  refused("", "empty");
  refused("scale:1=2", "unknown kind 'scale'");
  refused("lambda:=0", "the layer '' is not a number");
  refused("lambda:1", "lambda needs a value");
  refused("lambda:x=0", "the layer 'x' is not a number");
  refused("lambda:1:y=0", "the head 'y' is not a number");
  refused("lambda:1=abc", "'abc' is not a finite number");
  // The values: finite doubles that overflow float32 maps (3.4e38 gave NaN maps and predictions).
  refused("lambda=3.4e38", "outside the range accepted, -1000 to 1000");
  refused("lambda:0:0=1e300", "outside the range accepted");
  refused("lambda=-1000.5", "outside the range accepted");
  refused("lambda=inf", "not a finite number");
  CHECK(parse_intervention("lambda=-1000").value == -1000);
  CHECK(parse_intervention("lambda:2=1000").value == 1000);
  refused("lambda:1=nan", "'nan' is not a finite number");
  refused("ablate:1", "ablate needs a layer and a head");
  refused("ablate:1:2=half", "zero (ablate:L:H) or mean");
  refused("knockout", "knockout needs what it removes");
  refused("knockout=everything", "unknown keys 'everything'");
  refused("knockout=drop:5-3", "'5-3' is empty");
  refused("knockout=drop:a-3", "'a-3' is not a token range");
  refused("knockout=not-answer@x", "'x' is not a token range");
  refused("lambda:1:2:3=0", "too many ':' parts");
}

TEST_CASE("interventions: resolved against the model and the prompt, or refused saying why",
          "[interventions][errors]") {
  const ModelConfig d = test::tiny_config(AttentionKind::Diff),
                    b = test::tiny_config(AttentionKind::Baseline);
  PromptMarks marks;
  marks.answer = {10, 14};
  marks.query = 40;
  const Interventions iv = resolved(
      d, {"knockout:1=not-noise", "lambda:0=init", "lambda:1=0", "lambda:1:1=0.5", "ablate:0:1=mean"}, 48,
      marks);
  REQUIRE(iv.applied.size() == 5);
  CHECK(iv.applied[0] ==
        std::make_pair(std::string("knockout:1=not-noise"), std::string("knockout:1=keep:10-14+40-@40-")));
  CHECK(iv.applied[1].first == "lambda:0=init");
  CHECK(parse_intervention(iv.applied[1].second).value == Approx(lambda_init(0)).epsilon(1e-8));
  CHECK(std::fabs(*iv.layers[0].lambda - lambda_init(0)) < 1e-12);
  CHECK(iv.layers[1].lambda_of(0, 9.0) == 0.0);
  CHECK(iv.layers[1].lambda_of(1, 9.0) == 0.5);
  CHECK(iv.layers[0].knockouts.empty());
  REQUIRE(iv.layers[1].knockouts.size() == 1);
  const KeyKnockout& k = iv.layers[1].knockouts[0];
  CHECK(k.removes(0, 40, 5));         // noise
  CHECK_FALSE(k.removes(0, 40, 12));  // the answer
  CHECK_FALSE(k.removes(0, 45, 42));  // the query to the end
  CHECK_FALSE(k.removes(0, 39, 5));   // a row before the query
  CHECK(iv.layers[0].ablate == std::vector<std::pair<int64_t, bool>>{{1, true}});

  auto refused = [&](const ModelConfig& c, const std::string& spec, const std::string& why,
                     PromptMarks m = {}) {
    INFO(spec);
    CHECK_THROWS_WITH(resolved(c, {spec}, 48, m), Catch::Contains(why) && Catch::Contains(spec));
  };
  refused(b, "lambda:0=0", "has no λ (only DIFF layers do)");
  refused(b, "lambda=0", "a layer of this baseline model has no λ");
  const Interventions every = resolved(d, {"lambda=0.25"}, 48), inits = resolved(d, {"lambda=init"}, 48);
  for (int64_t l = 0; l < 2; ++l) {
    CHECK(*every.layers[static_cast<size_t>(l)].lambda == 0.25);
    CHECK(*inits.layers[static_cast<size_t>(l)].lambda == lambda_init(l));
  }
  CHECK(inits.applied[0].second == "lambda=init");
  refused(d, "lambda:2=0", "layer 2 is out of range: this model has 2 layers (0-1)");
  refused(d, "ablate:0:2", "head 2 is out of range: this model has 2 heads per layer (0-1)");
  refused(d, "knockout=not-answer", "the rows start at the query");
  PromptMarks only_query;
  only_query.query = 40;
  refused(d, "knockout=only-answer", "needs the answer's tokens", only_query);
  refused(d, "knockout=drop:50-52@0-", "start beyond the 48-token prompt");
  refused(d, "knockout=drop:1-2@60-", "start beyond the 48-token prompt");
  refused(v2_config(), "lambda:0=init", "DIFF V2 has no λ_init");
}

TEST_CASE("interventions: λ set in the run equals λ set through the checkpoint's λ vectors (DIFF)",
          "[interventions]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff);
  const Model m = Model::random(c, 11);
  const std::vector<int64_t> ids = test::random_ids(40, c.vocab_size, 3);
  for (const double v : {0.0, 0.3, lambda_init(1), 1.2}) {
    INFO("λ = " << v);
    // λ = exp(q1 · k1) − exp(q2 · k2) + λ_init with q1 = (a, 0, ...), k1 = (1, 0, ...), q2 = k2 = 0.
    const double a = std::log(v - lambda_init(1) + 1.0);
    const auto set_first = [a](double x) {
      return [a, x](NamedTensor& t) {
        std::fill(t.data.begin(), t.data.end(), 0.0f);
        t.data[0] = static_cast<float>(x);
      };
    };
    const Model e =
        Model::from_tensors(c, edited(m, {{"model.layers.1.self_attn.lambda_q1", set_first(a)},
                                          {"model.layers.1.self_attn.lambda_k1", set_first(1.0)},
                                          {"model.layers.1.self_attn.lambda_q2", set_first(0.0)},
                                          {"model.layers.1.self_attn.lambda_k2", set_first(0.0)}}));
    const Interventions iv = resolved(c, {"lambda:1=" + exact(v)}, 40);
    const Trace intervened = run(m, ids, iv);
    const Trace reference = run(e, ids);
    require_same(intervened, reference);
    require_same_generation(m, e, ids, iv);
    CHECK(std::fabs(intervened.layers[1].lambda - v) < 1e-6);
    CHECK(intervened.interventions.size() == 1);
    // Rows of A1 − λA2 sum to 1 − λ.
    const FloatArray& A = intervened.layers[1].a;
    const int64_t T = A.shape[1];
    for (int64_t i = 0; i < T; i += 7) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) sum += A.data[static_cast<size_t>(i * T + j)];
      CHECK(std::fabs(sum - (1.0 - v)) < 1e-5);
    }
  }
  // One head: its rows sum to 1 − V, the other head keeps the model's λ.
  const Trace own = run(m, ids);
  const Trace one = run(m, ids, resolved(c, {"lambda:0:1=0"}, 40));
  CHECK(one.layers[0].lambda_at(1, 5) == 0.0);
  CHECK(std::fabs(one.layers[0].lambda_at(0, 5) - own.layers[0].lambda) < 1e-7);
  CHECK(max_diff(one.layers[0].a1, own.layers[0].a1) == 0.0);  // λ acts after both softmaxes
}

TEST_CASE("interventions: a DIFF V2 head's λ set to 0.5 equals its λ projection row zeroed",
          "[interventions]") {
  const ModelConfig c = v2_config();
  const Model m = Model::random(c, 5);
  const std::vector<int64_t> ids = test::random_ids(33, c.vocab_size, 8);
  const Model e =
      Model::from_tensors(c, edited(m, {{"model.layers.0.self_attn.lambda_proj.weight", [&](NamedTensor& t) {
                                           const int64_t E = t.shape[1];
                                           for (int64_t k = 0; k < E; ++k)
                                             t.data[static_cast<size_t>(2 * E + k)] = 0;
                                         }}}));
  const Interventions iv = resolved(c, {"lambda:0:2=0.5"}, 33);
  require_same(run(m, ids, iv), run(e, ids));
  require_same_generation(m, e, ids, iv);
}

TEST_CASE("interventions: a head ablated to zero equals its o_proj columns zeroed, in every kind of model",
          "[interventions]") {
  for (const ModelConfig& c :
       {test::tiny_config(AttentionKind::Diff), test::tiny_config(AttentionKind::Baseline), v2_config()}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 21);
    const std::vector<int64_t> ids = test::random_ids(37, c.vocab_size, 4);
    const int64_t H = c.map_heads();
    const Model e = Model::from_tensors(
        c, edited(m, {{"model.layers.1.self_attn.o_proj.weight", zero_head_columns(1, H)}}));
    const Trace ablated = run(m, ids, resolved(c, {"ablate:1:1"}, 37));
    require_same(ablated, run(e, ids));
    require_same_generation(m, e, ids, resolved(c, {"ablate:1:1"}, 37));
  }
}

TEST_CASE("interventions: mean ablation replaces a head's output by its mean over the prompt",
          "[interventions]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff);
  const Model m = Model::random(c, 2);
  const std::vector<int64_t> ids = test::random_ids(30, c.vocab_size, 6);
  const Trace own = run(m, ids), mean = run(m, ids, resolved(c, {"ablate:1:0=mean"}, 30)),
              zero = run(m, ids, resolved(c, {"ablate:1:0"}, 30));
  // Layer 1's maps come before its output: unchanged; the prediction differs from both the model's own and
  // the zero ablation's.
  CHECK(max_diff(mean.layers[1].a, own.layers[1].a) == 0.0);
  CHECK(std::fabs(mean.next_token[0].probability - own.next_token[0].probability) > 1e-6);
  CHECK(std::fabs(mean.next_token[0].probability - zero.next_token[0].probability) > 1e-6);
}

TEST_CASE("interventions: a knockout is the softmax of the model's own logits over the keys left",
          "[interventions]") {
  for (const ModelConfig& c :
       {test::tiny_config(AttentionKind::Diff), test::tiny_config(AttentionKind::Baseline)}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 9);
    const int64_t T = 24;
    const std::vector<int64_t> ids = test::random_ids(T, c.vocab_size, 1);
    PromptMarks marks;
    marks.answer = {4, 7};
    marks.query = 20;
    const Trace own = run(m, ids, {}, true);
    const Trace knocked =
        run(m, ids, resolved(c, {"knockout:0=not-answer", "knockout:0:1=keep:0-2@10-12"}, T, marks), true);
    const LayerTrace &o = own.layers[0], &k = knocked.layers[0];
    CHECK(max_diff(o.logits1, k.logits1) == 0.0);  // the logits are the model's own
    const int64_t H = c.map_heads();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const bool not_answer = i >= 20, keep_first = h == 1 && i >= 10 && i < 12;
        for (const auto& [logits, maps] :
             {std::make_pair(&o.logits1, &k.a1), std::make_pair(&o.logits2, &k.a2),
              std::make_pair(&o.logits1, &k.a)}) {
          if (maps->empty() || (c.is_diff() && maps == &k.a)) continue;
          double z = 0;
          std::vector<double> e(static_cast<size_t>(T), 0.0);
          for (int64_t j = 0; j <= i; ++j) {
            const bool removed = (not_answer && j >= 4 && j < 7) || (keep_first && j >= 2);
            if (removed) continue;
            e[static_cast<size_t>(j)] =
                std::exp(double(logits->data[static_cast<size_t>((h * T + i) * T + j)]));
            z += e[static_cast<size_t>(j)];
          }
          for (int64_t j = 0; j < T; ++j) {
            const double want = z > 0 ? e[static_cast<size_t>(j)] / z : 0.0;
            const double got = maps->data[static_cast<size_t>((h * T + i) * T + j)];
            if (std::fabs(want - got) > 1e-5)
              FAIL("head " << h << " row " << i << " key " << j << ": " << got << " vs " << want);
          }
        }
      }
    // Rows before the knockout are the model's own; layer 1 differs (its input changed).
    CHECK(max_diff(k.a1.empty() ? k.a : k.a1, o.a1.empty() ? o.a : o.a1) > 1e-4);
  }
}

TEST_CASE("interventions: a row left with no key attends to nothing", "[interventions]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff);
  const Model m = Model::random(c, 4);
  const std::vector<int64_t> ids = test::random_ids(12, c.vocab_size, 2);
  const Trace t = run(m, ids, resolved(c, {"knockout:0=keep:11-12@3-6"}, 12));
  const FloatArray& a = t.layers[0].a;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 3; i < 6; ++i)
      for (int64_t j = 0; j < 12; ++j) CHECK(a.data[static_cast<size_t>((h * 12 + i) * 12 + j)] == 0.0f);
  for (float v : t.layers[1].a.data) CHECK(std::isfinite(v));
}

TEST_CASE("interventions: generation with the key/value cache writes what re-running writes, on both paths",
          "[interventions]") {
  for (const ModelConfig& c :
       {test::tiny_config(AttentionKind::Diff), v2_config(), test::tiny_config(AttentionKind::Baseline)}) {
    INFO(to_string(c.attention));
    const Model m = Model::random(c, 31);
    const std::vector<int64_t> ids = test::random_ids(20, c.vocab_size, 12);
    PromptMarks marks;
    marks.answer = {3, 6};
    marks.query = 15;
    std::vector<std::string> specs = {"ablate:1:0=mean", "knockout:0=not-noise", "ablate:0:1"};
    if (c.is_diff()) specs.push_back("lambda:1:1=0.1");
    GenerateOptions o;
    o.max_new = 8;
    o.keep_rows = true;
    o.interventions = resolved(c, specs, 20, marks);
    for (const bool tensor_ops : {false, true}) {
      INFO("tensor ops " << tensor_ops);
      o.tensor_ops = tensor_ops;
      o.cache = true;
      const Generation cached = m.generate(ids, o);
      o.cache = false;
      const Generation rerun = m.generate(ids, o);
      CHECK(cached.cached);
      CHECK(cached.ids == rerun.ids);
      REQUIRE(cached.rows.size() == rerun.rows.size());  // re-running: the rows of one capture at the end
      for (size_t k = 0; k < cached.rows.size(); ++k)
        for (size_t l = 0; l < cached.rows[k].a.size(); ++l)
          CHECK(max_diff(cached.rows[k].a[l], rerun.rows[k].a[l]) <= 1e-5);
      o.interventions = {};
      o.cache = true;
      const Generation plain = m.generate(ids, o);
      // The interventions change what it attends to (layer 0 knocks the noise out of the query's rows, its
      // heads' ablations change what layer 1 reads).
      REQUIRE(!plain.rows.empty());
      REQUIRE(!cached.rows.empty());
      CHECK(max_diff(plain.rows[0].a[0], cached.rows[0].a[0]) > 1e-4);
      o.interventions = resolved(c, specs, 20, marks);
    }
  }
}

TEST_CASE("interventions: a trace records them, its bundle keeps them, a malformed one is refused",
          "[interventions][trace]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff);
  const Model m = Model::random(c, 3);
  const std::vector<int64_t> ids = test::random_ids(16, c.vocab_size, 5);
  PromptMarks marks;
  marks.answer = {2, 4};
  marks.query = 12;
  const Trace t = run(m, ids, resolved(c, {"knockout=not-answer", "lambda:1:0=0"}, 16, marks));
  REQUIRE(t.interventions.size() == 2);
  CHECK(t.interventions[0].second == "knockout=drop:2-4@12-");
  const test::ScratchDir dir("interventions-bundle");
  write_trace_bundle(t, dir / "b");
  const Trace back = read_trace_bundle(dir / "b");
  CHECK(back.interventions == t.interventions);
  CHECK(back.layers[1].lambda_at(0, 3) == 0.0);
  // A bundle whose intervention does not parse is refused by name.
  std::string json = test::read_all(dir / "b" / "trace.json");
  const size_t at = json.find("lambda:1:0=0");
  if (at != std::string::npos) {
    json.replace(at, 12, "lambda:1:0=x");
    test::write_all(dir / "b" / "trace.json", json);
    CHECK_THROWS_WITH(read_trace_bundle(dir / "b"),
                      Catch::Contains("intervention") && Catch::Contains("lambda:1:0=x"));
  }
}

TEST_CASE("interventions: a long prompt's exact tiles follow its knockouts and its λ",
          "[interventions][long]") {
  const ModelConfig c = test::tiny_config(AttentionKind::Diff);
  const Model m = Model::random(c, 17);
  const int64_t T = 96;
  const std::vector<int64_t> ids = test::random_ids(T, c.vocab_size, 9);
  PromptMarks marks;
  marks.answer = {20, 26};
  marks.query = 80;
  const Interventions iv =
      resolved(c, {"knockout=not-noise", "lambda:1:1=0.05", "knockout:0:0=keep:90-96@60-70"}, T, marks);
  CaptureOptions exact;
  exact.interventions = iv;
  const Trace full = m.capture(ids, exact);
  CaptureOptions pooled = exact;
  pooled.pooled_budget_bytes = 4096;  // far below the maps: pooled, with what recomputes tiles
  const Trace small = m.capture(ids, pooled);
  REQUIRE(small.layers[0].pooled > 0);
  for (int layer = 0; layer < 2; ++layer)
    for (int head = 0; head < 2; ++head) {
      INFO("layer " << layer << " head " << head);
      const AttentionTile got = attention_tile(small, layer, head, 0, T, 0, T);
      const AttentionTile want = attention_tile(full, layer, head, 0, T, 0, T);
      double worst = 0;
      for (size_t x = 0; x < got.a.size(); ++x) {
        worst = std::max(worst, std::fabs(double(got.a[x]) - want.a[x]));
        worst = std::max(worst, std::fabs(double(got.a1[x]) - want.a1[x]));
      }
      CHECK(worst <= 1e-5);
    }
}
