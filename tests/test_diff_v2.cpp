// Differential Attention V2 (core/FORMATS.md): its config, the fused CPU pass on a hand-computed case, a
// capture against an independent double-precision forward written out here, its invariants, the fused pass
// against the tensor operations, pooled maps, and the trace bundle.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "core/cpu/attention_cpu.h"
#include "core/formats/error.h"
#include "core/formats/explain.h"
#include "core/formats/trace_io.h"
#include "core/model/checkpoint_layout.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

using test::v2_config;

std::map<std::string, NamedTensor> by_name(const Model& m) {
  std::map<std::string, NamedTensor> w;
  for (NamedTensor& t : m.tensors()) w[t.name] = std::move(t);
  return w;
}

// y = W x for W [out, in] row-major.
std::vector<double> matvec(const NamedTensor& w, const std::vector<double>& x) {
  const int64_t out = w.shape[0], in = w.shape[1];
  REQUIRE(static_cast<int64_t>(x.size()) == in);
  std::vector<double> y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      y[static_cast<size_t>(o)] += w.data[static_cast<size_t>(o * in + i)] * x[i];
  return y;
}

std::vector<double> rms(const std::vector<double>& x, const NamedTensor& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w.data[i];
  return y;
}

// Interleaved rotary embedding of one d-wide head at position t: pairs (2i, 2i+1) by t · θ^(-2i/d).
void rotate(double* v, int64_t d, int64_t t, double theta) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double a = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / d);
    const double x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
    v[2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
  }
}

// One DIFF V2 layer in doubles, from the layer's input hidden states h [T][E]: the maps A1, A2, A
// [H][T][T], λ [H][T] and the layer's output hidden states.
struct V2Layer {
  std::vector<std::vector<std::vector<double>>> a1, a2, a;
  std::vector<std::vector<double>> lambda, out;
};
V2Layer reference_layer(const ModelConfig& c, const std::map<std::string, NamedTensor>& w, int layer,
                        const std::vector<std::vector<double>>& h) {
  const int64_t T = static_cast<int64_t>(h.size()), E = c.hidden_size, d = c.head_dim, H = c.map_heads();
  const int64_t Hkv = c.num_key_value_heads, per_kv = 2 * H / Hkv;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  auto W = [&](const std::string& n) -> const NamedTensor& { return w.at(p + n); };
  std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)),
      v(static_cast<size_t>(T));
  V2Layer r;
  r.lambda.assign(static_cast<size_t>(H), std::vector<double>(static_cast<size_t>(T)));
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> x = rms(h[static_cast<size_t>(t)], W("input_layernorm.weight"), c.rms_norm_eps);
    q[t] = matvec(W("self_attn.q_proj.weight"), x);  // 2H sub-heads
    k[t] = matvec(W("self_attn.k_proj.weight"), x);
    v[t] = matvec(W("self_attn.v_proj.weight"), x);
    for (int64_t j = 0; j < 2 * H; ++j) rotate(q[t].data() + j * d, d, t, c.rope_theta);
    for (int64_t j = 0; j < Hkv; ++j) rotate(k[t].data() + j * d, d, t, c.rope_theta);
    const std::vector<double> z = matvec(W("self_attn.lambda_proj.weight"), x);
    for (int64_t hh = 0; hh < H; ++hh) r.lambda[hh][t] = 1.0 / (1.0 + std::exp(-z[hh]));
  }
  auto softmax_row = [&](int64_t sub, int64_t t) {  // sub-head `sub`'s row t over keys 0..t
    const int64_t g = sub / per_kv;                 // its key/value head (FlashAttention's grouping)
    std::vector<double> l(static_cast<size_t>(T), 0.0);
    double mx = -1e300;
    for (int64_t j = 0; j <= t; ++j) {
      double s = 0;
      for (int64_t e = 0; e < d; ++e) s += q[t][sub * d + e] * k[j][g * d + e];
      l[j] = s / std::sqrt(static_cast<double>(d));
      mx = std::max(mx, l[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= t; ++j) sum += (l[j] = std::exp(l[j] - mx));
    for (int64_t j = 0; j <= t; ++j) l[j] /= sum;
    return l;
  };
  auto grid = [&] {
    return std::vector<std::vector<std::vector<double>>>(
        static_cast<size_t>(H), std::vector<std::vector<double>>(static_cast<size_t>(T)));
  };
  r.a1 = grid();
  r.a2 = grid();
  r.a = grid();
  std::vector<std::vector<double>> o(static_cast<size_t>(T),
                                     std::vector<double>(static_cast<size_t>(H * d), 0.0));
  for (int64_t hh = 0; hh < H; ++hh)
    for (int64_t t = 0; t < T; ++t) {
      r.a1[hh][t] = softmax_row(2 * hh, t);
      r.a2[hh][t] = softmax_row(2 * hh + 1, t);
      r.a[hh][t].resize(static_cast<size_t>(T));
      const int64_t g = 2 * hh / per_kv;
      REQUIRE(g == (2 * hh + 1) / per_kv);  // a pair shares its key/value head
      for (int64_t j = 0; j < T; ++j) {
        r.a[hh][t][j] = r.a1[hh][t][j] - r.lambda[hh][t] * r.a2[hh][t][j];
        for (int64_t e = 0; e < d; ++e) o[t][hh * d + e] += r.a[hh][t][j] * v[j][g * d + e];
      }
    }
  r.out = h;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> att = matvec(W("self_attn.o_proj.weight"), o[t]);
    for (int64_t e = 0; e < E; ++e) r.out[t][e] += att[e];
    const std::vector<double> y = rms(r.out[t], W("post_attention_layernorm.weight"), c.rms_norm_eps);
    const std::vector<double> gate = matvec(W("mlp.gate_proj.weight"), y),
                              up = matvec(W("mlp.up_proj.weight"), y);
    std::vector<double> m(gate.size());
    for (size_t i = 0; i < m.size(); ++i) m[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    const std::vector<double> down = matvec(W("mlp.down_proj.weight"), m);
    for (int64_t e = 0; e < E; ++e) r.out[t][e] += down[e];
  }
  return r;
}

}  // namespace

TEST_CASE("DIFF V2 config: written and read back, its parameters counted, bad ones refused", "[v2][config]") {
  const ModelConfig c = v2_config(4, 2);
  const ModelConfig back = config_from_json_text(config_to_json_text(c), "v2");
  CHECK(back.attention == AttentionKind::DiffV2);
  CHECK(back.is_diff());
  CHECK(back.is_diff_v2());
  CHECK(back.map_heads() == 4);
  CHECK(back.kv_groups() == 2);
  CHECK(config_to_json_text(back).find("\"attention\": \"diff-v2\"") != std::string::npos);
  // q 8·8·32, k and v 2·8·32 each, o 4·8·32, lambda_proj 4·32, MLP 3·32·48, two norms; embeddings, lm_head,
  // norm.
  const int64_t layer = 64 * 32 + 2 * 16 * 32 + 32 * 32 + 4 * 32 + 3 * 32 * 48 + 2 * 32;
  CHECK(parameter_count(c) == 2 * layer + 2 * 259 * 32 + 32);
  CHECK(Model::random(c, 3).parameter_count() == parameter_count(c));

  auto refused = [](ModelConfig bad, const std::string& says) {
    try {
      bad.validate("cfg");
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  };
  refused(v2_config(4, 3), "multiple of 'num_key_value_heads'");  // 8 query sub-heads over 3 KV heads
  refused(v2_config(4, 8), "even multiple");  // sub-heads 2h and 2h+1 would read two KV heads
  ModelConfig odd = v2_config();
  odd.num_attention_heads = 7;
  odd.num_key_value_heads = 7;
  refused(odd, "even multiple");
  std::string text = config_to_json_text(c);
  text.insert(text.find('{') + 1, "\"diff_pairing\": \"half\",");
  CHECK_THROWS_WITH(config_from_json_text(text, "v2"), Catch::Contains("always adjacent"));
}

TEST_CASE("DIFF V2 fused pass: a hand-computed two-head case", "[v2][fused]") {
  // T = 2, two heads sharing one key/value head, d = 2. Head 0: row 1's component-1 logits [0, ln 3]
  // (A1 = [1/4, 3/4]), component 2's [0, 0] (A2 = [1/2, 1/2]); λ = 1/2 on row 1, 0.2 on row 0.
  // A row 0 = 1 − 0.2 = 0.8; row 1 = [1/4 − 1/4, 3/4 − 1/4] = [0, 1/2]. Head 1: both components' logits
  // [ln 2, 0] on row 1 (A1 = A2 = [2/3, 1/3]), λ = 0.9 there and 0.6 on row 0.
  const float l3 = std::log(3.0f), l2 = std::log(2.0f);
  // Keys k0 = (1, 0), k1 = (0, 1); queries (scaled) give the logits above as q · k.
  const std::vector<float> k = {1, 0, 0, 1};
  const std::vector<float> q1 = {5, 5, 0, l3, 7, 7, l2, 0};  // [head][row][d]
  const std::vector<float> q2 = {1, 1, 0, 0, 3, 3, l2, 0};
  const std::vector<float> v = {2, 0, 0, 4};  // v0 = (2, 0), v1 = (0, 4)
  const std::vector<float> lambda = {0.2f, 0.5f, 0.6f, 0.9f};
  CpuAttentionInputs in;
  in.T = 2;
  in.heads = 2;
  in.kv_heads = 1;
  in.d = in.dv = 2;
  in.q1 = q1.data();
  in.q2 = q2.data();
  in.k1 = in.k2 = k.data();
  in.v = v.data();
  in.lambda_rows = lambda.data();
  std::vector<float> o(8), a1(8), a2(8), a(8);
  CpuAttentionOutputs out;
  out.row0 = 0;
  out.row1 = out.ld = 2;
  out.o = o.data();
  out.map_heads = {0, 1};
  out.a1 = a1.data();
  out.a2 = a2.data();
  out.a = a.data();
  attention_cpu(in, out, 1, [](int64_t n, const auto& body) { body(0, n, 0); });
  const std::vector<float> want_a1 = {1, 0, 0.25f, 0.75f, 1, 0, 2 / 3.0f, 1 / 3.0f};
  const std::vector<float> want_a2 = {1, 0, 0.5f, 0.5f, 1, 0, 2 / 3.0f, 1 / 3.0f};
  const std::vector<float> want_a = {0.8f, 0, 0, 0.5f, 0.4f, 0, 2 / 3.0f * 0.1f, 1 / 3.0f * 0.1f};
  // o = A · V: head 0 row 0 0.8·v0 = (1.6, 0), row 1 0.5·v1 = (0, 2); head 1 row 0 0.4·v0 = (0.8, 0),
  // row 1 (2/30)·v0 + (1/30)·v1 = (4/30, 4/30).
  const std::vector<float> want_o = {1.6f, 0, 0, 2, 0.8f, 0, 4 / 30.0f, 4 / 30.0f};
  for (size_t i = 0; i < 8; ++i) {
    INFO("entry " << i);
    CHECK(a1[i] == Approx(want_a1[i]).margin(1e-6));
    CHECK(a2[i] == Approx(want_a2[i]).margin(1e-6));
    CHECK(a[i] == Approx(want_a[i]).margin(1e-6));
    CHECK(o[i] == Approx(want_o[i]).margin(1e-6));
  }
}

TEST_CASE("DIFF V2 capture equals an independent double-precision forward", "[v2][capture]") {
  for (const auto& [H, kv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {2, 1}}) {
    const ModelConfig c = v2_config(H, kv);
    INFO("H " << H << ", KV heads " << kv);
    const Model m = Model::random(c, 11);
    const auto w = by_name(m);
    const std::vector<int64_t> ids = test::random_ids(23, c.vocab_size, 5);
    CaptureOptions o;
    o.keep_hidden = true;
    o.keep_qkv = true;
    const Trace t = m.capture(ids, o);
    // The first layer's input: the embeddings; each later one's: the trace's kept output of the one before.
    std::vector<std::vector<double>> h;
    const NamedTensor& emb = w.at("model.embed_tokens.weight");
    for (int64_t id : ids)
      h.emplace_back(emb.data.begin() + id * c.hidden_size, emb.data.begin() + (id + 1) * c.hidden_size);
    const int64_t T = static_cast<int64_t>(ids.size());
    for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
      INFO("layer " << layer);
      const V2Layer r = reference_layer(c, w, layer, h);
      const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
      REQUIRE(l.lambda_rows.shape == std::vector<int64_t>{H, T});
      double worst_map = 0, worst_lambda = 0, worst_out = 0, mean = 0;
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t i = 0; i < T; ++i) {
          worst_lambda = std::max(worst_lambda, std::fabs(l.lambda_at(hh, i) - r.lambda[hh][i]));
          mean += r.lambda[hh][i];
          for (int64_t j = 0; j < T; ++j) {
            const size_t at = static_cast<size_t>((hh * T + i) * T + j);
            worst_map = std::max({worst_map, std::fabs(l.a1.data[at] - r.a1[hh][i][j]),
                                  std::fabs(l.a2.data[at] - r.a2[hh][i][j]),
                                  std::fabs(l.a.data[at] - r.a[hh][i][j])});
          }
        }
      CHECK(worst_map < 1e-5);
      CHECK(worst_lambda < 1e-6);
      CHECK(l.lambda == Approx(mean / static_cast<double>(H * T)).epsilon(1e-6));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t e = 0; e < c.hidden_size; ++e)
          worst_out = std::max(
              worst_out, std::fabs(l.hidden.data[static_cast<size_t>(i * c.hidden_size + e)] - r.out[i][e]));
      CHECK(worst_out < 1e-4);
      // λ's logit is kept beside it: σ(z) = λ.
      for (size_t x = 0; x < l.lambda_rows.data.size(); ++x)
        REQUIRE(1.0 / (1.0 + std::exp(-l.lambda_logits.data[x])) ==
                Approx(l.lambda_rows.data[x]).epsilon(1e-6));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t e = 0; e < c.hidden_size; ++e)
          h[i][e] = l.hidden.data[static_cast<size_t>(i * c.hidden_size + e)];
    }
  }
}

TEST_CASE("DIFF V2 invariants: λ in (0, 1), rows of A1 and A2 sum to 1, rows of A to 1 − λ(t), causal",
          "[v2][invariants]") {
  const ModelConfig c = v2_config(4, 2, 8, 32, 3);
  const Model m = Model::random(c, 7);
  for (const size_t n : {size_t{1}, size_t{40}, size_t{97}}) {
    const std::vector<int64_t> ids = test::random_ids(n, c.vocab_size, static_cast<uint32_t>(n));
    const Trace t = m.capture(ids);
    const int64_t T = t.length(), H = c.map_heads();
    for (const LayerTrace& l : t.layers)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          const double lam = l.lambda_at(h, i);
          REQUIRE(lam > 0.0);
          REQUIRE(lam < 1.0);
          double s1 = 0, s2 = 0, s = 0;
          for (int64_t j = 0; j < T; ++j) {
            const size_t at = static_cast<size_t>((h * T + i) * T + j);
            if (j > i) {
              REQUIRE(l.a1.data[at] == 0.0f);
              REQUIRE(l.a2.data[at] == 0.0f);
              REQUIRE(l.a.data[at] == 0.0f);
            }
            s1 += l.a1.data[at];
            s2 += l.a2.data[at];
            s += l.a.data[at];
          }
          REQUIRE(s1 == Approx(1.0).margin(1e-5));
          REQUIRE(s2 == Approx(1.0).margin(1e-5));
          REQUIRE(s == Approx(1.0 - lam).margin(1e-5));
        }
  }
}

TEST_CASE("DIFF V2: the fused pass equals the tensor operations, also with a sliding window", "[v2][fused]") {
  for (int64_t window : {int64_t{0}, int64_t{5}}) {
    ModelConfig c = v2_config(4, 2);
    c.sliding_window = window;
    const Model m = Model::random(c, 17);
    const int64_t T = 37;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T * c.hidden_size));
    for (float& v : x) v = nd(rng);
    std::vector<float> out_fused, out_tensor;
    const LayerTrace f = m.attention_probe(1, x, T, &out_fused);
    const LayerTrace g = m.attention_probe(1, x, T, &out_tensor, /*tensor_ops=*/true);
    INFO("window " << window);
    REQUIRE(f.a.data.size() == g.a.data.size());
    double worst = 0, worst_out = 0;
    for (size_t i = 0; i < f.a.data.size(); ++i)
      worst = std::max({worst, static_cast<double>(std::fabs(f.a.data[i] - g.a.data[i])),
                        static_cast<double>(std::fabs(f.a1.data[i] - g.a1.data[i])),
                        static_cast<double>(std::fabs(f.a2.data[i] - g.a2.data[i]))});
    for (size_t i = 0; i < out_fused.size(); ++i)
      worst_out = std::max(worst_out, static_cast<double>(std::fabs(out_fused[i] - out_tensor[i])));
    CHECK(worst < 1e-6);
    CHECK(worst_out < 1e-5);
    CHECK(f.lambda_rows.data == g.lambda_rows.data);
  }
}

TEST_CASE("DIFF V2 pooled capture: λ as the exact capture's, cells the means of the exact maps",
          "[v2][long]") {
  const ModelConfig c = v2_config(2, 1, 8, 32, 2);
  const Model m = Model::random(c, 23);
  const std::vector<int64_t> ids = test::random_ids(200, c.vocab_size, 9);
  const Trace exact = m.capture(ids);
  CaptureOptions o;
  o.pooled_budget_bytes = 64 * 1024;  // far below the exact maps: pooled
  const Trace pooled = m.capture(ids, o);
  const int64_t T = exact.length();
  for (size_t li = 0; li < exact.layers.size(); ++li) {
    const LayerTrace &e = exact.layers[li], &p = pooled.layers[li];
    REQUIRE(p.pooled > 0);
    REQUIRE(p.pooled < T);
    double worst_lambda = 0;
    for (size_t x = 0; x < e.lambda_rows.data.size(); ++x)
      worst_lambda = std::max(worst_lambda,
                              static_cast<double>(std::fabs(e.lambda_rows.data[x] - p.lambda_rows.data[x])));
    CHECK(worst_lambda < 1e-6);
    const int64_t P = p.pooled;
    double worst = 0;
    for (size_t k = 0; k < p.heads.size(); ++k)
      for (int64_t r = 0; r < P; ++r)
        for (int64_t col = 0; col <= r; ++col) {
          double sum = 0;
          int64_t n = 0;
          for (int64_t i = r * T / P; i < (r + 1) * T / P; ++i)
            for (int64_t j = col * T / P; j < (col + 1) * T / P && j <= i; ++j, ++n)
              sum += e.a.data[static_cast<size_t>((p.heads[k] * T + i) * T + j)];
          if (n == 0) continue;
          worst =
              std::max(worst, std::fabs(sum / n - p.a_mean.data[static_cast<size_t>((k * P + r) * P + col)]));
        }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("DIFF V2 trace bundle: λ per token round-trips, and a λ outside [0, 1] is refused", "[v2][trace]") {
  test::ScratchDir dir("v2bundle");
  const ModelConfig c = v2_config(2, 2);
  const Trace t = Model::random(c, 4).capture(test::random_ids(12, c.vocab_size, 1));
  write_trace_bundle(t, dir.path());
  const Trace back = read_trace_bundle(dir.path());
  REQUIRE(back.config.is_diff_v2());
  for (size_t i = 0; i < t.layers.size(); ++i) {
    CHECK(back.layers[i].lambda_rows.data == t.layers[i].lambda_rows.data);
    CHECK(back.layers[i].lambda_logits.data == t.layers[i].lambda_logits.data);
    CHECK(back.layers[i].a.data == t.layers[i].a.data);
  }
  Trace bad = t;
  bad.layers[1].lambda_rows.data[3] = 1.5f;
  write_trace_bundle(bad, dir.path());
  CHECK_THROWS_WITH(read_trace_bundle(dir.path()), Catch::Contains("outside [0, 1]"));
  bad.layers[1].lambda_rows = FloatArray{};
  write_trace_bundle(bad, dir.path());
  CHECK_THROWS_WITH(read_trace_bundle(dir.path()), Catch::Contains("DIFF V2"));
}

TEST_CASE("DIFF V2 explain: λ = σ(z) of the query's token, A = A1 − λA2, out = A·V with no norm step",
          "[v2][explain]") {
  const ModelConfig c = v2_config(4, 2);
  CaptureOptions o;
  o.keep_qkv = true;
  const Trace t = Model::random(c, 8).capture(test::random_ids(19, c.vocab_size, 2), o);
  const int64_t T = t.length();
  for (const int head : {0, 3})
    for (const int64_t query : {int64_t{0}, int64_t{11}, T - 1}) {
      INFO("head " << head << ", query " << query);
      REQUIRE(explain_available(t, 1));
      const HeadExplain e = explain_head(t, 1, head, query);
      const LayerTrace& l = t.layers[1];
      CHECK(e.v2);
      CHECK(e.lambda == Approx(l.lambda_at(head, query)).epsilon(1e-6));
      CHECK(e.lambda == Approx(1.0 / (1.0 + std::exp(-e.lambda_logit))).epsilon(1e-12));
      CHECK(e.lambda_init == 0);
      CHECK(e.a_sum == Approx(1.0 - e.lambda).margin(1e-6));
      for (size_t k = 0; k < e.keys.size(); ++k)  // the explained row is the captured one
        CHECK(e.a[k] ==
              Approx(l.a.data[static_cast<size_t>((head * T + query) * T + e.keys[k])]).margin(1e-6));
      CHECK(e.out == e.o);  // no per-head norm, no (1 − λ_init) scale
      CHECK(e.dv == c.head_dim);
    }
}

TEST_CASE(
    "DIFF V2 layouts: rotate-half written in the official module's interleaved layout captures the same",
    "[v2][layout]") {
  ModelConfig half = v2_config(4, 2);
  half.rope_style = RopeStyle::Half;
  const Model m = Model::random(half, 31);
  const ModelConfig official = official_layout(half);
  CHECK(official.rope_style == RopeStyle::Interleaved);
  const Model o = Model::from_tensors(official, convert_layout(half, m.tensors(), official));
  const std::vector<int64_t> ids = test::random_ids(29, half.vocab_size, 4);
  const Trace a = m.capture(ids), b = o.capture(ids);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    double worst = 0;
    for (size_t i = 0; i < a.layers[l].a.data.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(a.layers[l].a.data[i] - b.layers[l].a.data[i])));
    CHECK(worst < 1e-6);
    // Layer 0's λ reads the same embeddings; a later layer's reads hidden states whose sums ran in
    // the other layout's order, so they agree to rounding, not bit for bit.
    const auto& la = a.layers[l].lambda_rows.data;
    const auto& lb = b.layers[l].lambda_rows.data;
    REQUIRE(la.size() == lb.size());
    double worst_lambda = 0;
    for (size_t i = 0; i < la.size(); ++i)
      worst_lambda = std::max(worst_lambda, static_cast<double>(std::fabs(la[i] - lb[i])));
    CHECK(worst_lambda < 1e-6);
  }
  CHECK_THROWS_WITH(hf_layout(half), Catch::Contains("no Hugging Face architecture"));
}

TEST_CASE("DIFF V2 quantized logits: the fused pass quantizes as the tensor operations do",
          "[v2][quantize]") {
  Model m = Model::random(v2_config(4, 2), 12);
  const int64_t T = 45;
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * 32));
  for (float& v : x) v = nd(rng);
  for (const int bits : {8, 4}) {
    INFO(bits << " bits");
    m.set_logit_bits(bits);
    const LayerTrace f = m.attention_probe(0, x, T, nullptr), t = m.attention_probe(0, x, T, nullptr, true);
    size_t moved = 0, visible = 0;  // a value within rounding of a half step may round the other way
    for (const auto* pair : {&f.logits1, &f.logits2}) {
      const FloatArray& other = pair == &f.logits1 ? t.logits1 : t.logits2;
      for (size_t i = 0; i < pair->data.size(); ++i) {
        if (std::isinf(other.data[i])) continue;
        ++visible;
        if (std::fabs(pair->data[i] - other.data[i]) > 1e-5) ++moved;
      }
    }
    CHECK(visible > 0);
    CHECK(moved * 1000 <= visible);
  }
}

TEST_CASE("DIFF V2 checkpoints: a wrong lambda_proj or a V1 tensor is refused by name", "[v2][checkpoint]") {
  const ModelConfig c = v2_config(2, 2);
  std::vector<NamedTensor> w = Model::random(c, 1).tensors();
  test::ScratchDir dir("v2ckpt");
  for (NamedTensor& t : w)
    if (t.name == "model.layers.1.self_attn.lambda_proj.weight") {
      t.shape = {3, 32};  // 3 heads, not 2
      t.data.resize(3 * 32, 0.0f);
    }
  CHECK_THROWS_WITH(Model::from_tensors(c, w), Catch::Contains("lambda_proj"));
  std::vector<NamedTensor> v1 = Model::random(c, 1).tensors();
  v1.push_back({"model.layers.0.self_attn.lambda_q1", {8}, std::vector<float>(8, 0.0f)});
  CHECK_THROWS_WITH(Model::from_tensors(c, v1), Catch::Contains("lambda_q1"));
}
