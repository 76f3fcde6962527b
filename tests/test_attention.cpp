// Attention math against hand-computed tiny cases (T=2, d=2) and a naive scalar reference (T=3..9),
// plus GQA and layout equivalences. Everything goes through Model::attention_probe, i.e. the same
// module code that capture runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

constexpr double kTol = 1e-5;

std::vector<float> identity(int64_t n) {
  std::vector<float> m(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) m[static_cast<size_t>(i * n + i)] = 1.0f;
  return m;
}

// One layer, E=4, d=2: DIFF has H=1 head (two 2-wide components, V 4 wide); the baseline 2 heads of 2.
ModelConfig hand_config(AttentionKind kind) {
  ModelConfig c;
  c.attention = kind;
  c.hidden_size = 4;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 2;
  c.intermediate_size = 4;
  c.vocab_size = 259;
  c.rope_theta = 10000.0;  // with d=2 the only frequency is θ^0 = 1: position t rotates by t radians
  c.validate();
  return c;
}

// All parameters of a model: identity projections, given λ vectors and subln weight, the rest ones.
std::vector<NamedTensor> hand_tensors(const ModelConfig& c) {
  std::vector<NamedTensor> t;
  const std::string p = "model.layers.0.";
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"})
    t.push_back({p + "self_attn." + proj + ".weight", {4, 4}, identity(4)});
  if (c.is_diff()) {
    t.push_back({p + "self_attn.lambda_q1", {2}, {0.5f, 0.2f}});
    t.push_back({p + "self_attn.lambda_k1", {2}, {0.4f, 1.0f}});
    t.push_back({p + "self_attn.lambda_q2", {2}, {0.1f, 0.3f}});
    t.push_back({p + "self_attn.lambda_k2", {2}, {1.0f, -1.0f}});
    t.push_back({p + "self_attn.subln.weight", {4}, {1.0f, 2.0f, 0.5f, 1.0f}});
  }
  for (const char* mlp : {"gate_proj", "up_proj"})
    t.push_back({p + "mlp." + mlp + ".weight", {4, 4}, identity(4)});
  t.push_back({p + "mlp.down_proj.weight", {4, 4}, identity(4)});
  t.push_back({p + "input_layernorm.weight", {4}, std::vector<float>(4, 1.0f)});
  t.push_back({p + "post_attention_layernorm.weight", {4}, std::vector<float>(4, 1.0f)});
  t.push_back({"model.embed_tokens.weight", {259, 4}, std::vector<float>(259 * 4, 0.1f)});
  t.push_back({"model.norm.weight", {4}, std::vector<float>(4, 1.0f)});
  t.push_back({"lm_head.weight", {259, 4}, std::vector<float>(259 * 4, 0.1f)});
  return t;
}

std::vector<float> random_input(int64_t T, int64_t E, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(T * E));
  for (float& v : x) v = nd(rng);
  return x;
}

// x0 = [1,0,1,0], x1 = [1,0,0,1]
const std::vector<float> kHandX = {1, 0, 1, 0, 1, 0, 0, 1};

float at3(const FloatArray& a, int64_t h, int64_t i, int64_t j) {
  const int64_t T = a.shape[1];
  return a.data[static_cast<size_t>((h * T + i) * T + j)];
}

}  // namespace

TEST_CASE("hand-computed DIFF maps, lambda and head output at T=2, d=2", "[attention][diff]") {
  const ModelConfig c = hand_config(AttentionKind::Diff);
  const Model m = Model::from_tensors(c, hand_tensors(c));
  std::vector<float> out;
  const LayerTrace lt = m.attention_probe(0, kHandX, 2, &out);

  // λ = exp(0.5·0.4 + 0.2·1.0) − exp(0.1·1.0 + 0.3·(−1.0)) + λ_init(0) = e^0.4 − e^−0.2 + 0.2
  CHECK(lt.lambda_exp1 == Approx(1.4918246976).epsilon(1e-6));
  CHECK(lt.lambda_exp2 == Approx(0.8187307531).epsilon(1e-6));
  CHECK(lt.lambda_init == Approx(0.2).epsilon(1e-12));
  CHECK(lt.lambda == Approx(0.8730939446).epsilon(1e-6));

  // Component 1 uses dims 0..1: q1(1) = rot(1 rad)·[1,0] = [cos1, sin1], k1(0) = [1,0], k1(1) = [cos1, sin1].
  // Logits row 1 = [cos1/√2, 1/√2] = [0.382051, 0.707107]; softmax = [0.419444, 0.580556].
  CHECK(at3(lt.logits1, 0, 1, 0) == Approx(0.3820514).margin(kTol));
  CHECK(at3(lt.logits1, 0, 1, 1) == Approx(0.7071068).margin(kTol));
  CHECK(std::isinf(at3(lt.logits1, 0, 0, 1)));
  CHECK(at3(lt.a1, 0, 0, 0) == Approx(1.0).margin(kTol));
  CHECK(at3(lt.a1, 0, 0, 1) == 0.0f);
  CHECK(at3(lt.a1, 0, 1, 0) == Approx(0.4194442).margin(kTol));
  CHECK(at3(lt.a1, 0, 1, 1) == Approx(0.5805558).margin(kTol));
  // Component 2 uses dims 2..3: q2(1) = rot(1)·[0,1] = [−sin1, cos1]; logits row 1 = [−sin1/√2, 1/√2].
  CHECK(at3(lt.logits2, 0, 1, 0) == Approx(-0.5950098).margin(kTol));
  CHECK(at3(lt.a2, 0, 1, 0) == Approx(0.2138090).margin(kTol));
  CHECK(at3(lt.a2, 0, 1, 1) == Approx(0.7861910).margin(kTol));
  // A = A1 − λ·A2
  CHECK(at3(lt.a, 0, 0, 0) == Approx(0.1269061).margin(kTol));
  CHECK(at3(lt.a, 0, 1, 0) == Approx(0.2327689).margin(kTol));
  CHECK(at3(lt.a, 0, 1, 1) == Approx(-0.1058628).margin(kTol));
  // O = A·V (V = x, 4 wide), RMSNorm over 4 with eps 1e-5, × subln [1,2,0.5,1], × (1 − 0.2), o_proj = I.
  REQUIRE(out.size() == 8);
  const std::vector<double> expected = {1.1306690, 0, 0.5653345, 0, 0.7111062, 0, 0.6521493, -0.5931924};
  for (size_t i = 0; i < 8; ++i) CHECK(out[i] == Approx(expected[i]).margin(kTol));
}

TEST_CASE("hand-computed baseline maps and head output at T=2, d=2", "[attention][baseline]") {
  const ModelConfig c = hand_config(AttentionKind::Baseline);
  const Model m = Model::from_tensors(c, hand_tensors(c));
  std::vector<float> out;
  const LayerTrace lt = m.attention_probe(0, kHandX, 2, &out);
  REQUIRE(lt.a.shape == std::vector<int64_t>{2, 2, 2});
  CHECK(lt.a1.empty());
  // Head 0 sees dims 0..1 (the DIFF component-1 case), head 1 dims 2..3 (component 2).
  CHECK(at3(lt.a, 0, 1, 0) == Approx(0.4194442).margin(kTol));
  CHECK(at3(lt.a, 1, 1, 0) == Approx(0.2138090).margin(kTol));
  CHECK(at3(lt.a, 1, 0, 1) == 0.0f);
  // Output = concat(A_h · V_h): row 0 copies x0, row 1 = [1, 0, 0.213809, 0.786191].
  const std::vector<double> expected = {1, 0, 1, 0, 1, 0, 0.2138090, 0.7861910};
  for (size_t i = 0; i < 8; ++i) CHECK(out[i] == Approx(expected[i]).margin(kTol));
}

namespace {

// Naive scalar reference of one DIFF layer's maps for the official (adjacent, interleaved) layout.
struct NaiveMaps {
  std::vector<std::vector<std::vector<double>>> a1, a2;  // [H][T][T]
  double lambda = 0;
};

NaiveMaps naive_diff_maps(const ModelConfig& c, const std::map<std::string, std::vector<float>>& w,
                          const std::vector<float>& x, int64_t T) {
  const int64_t E = c.hidden_size, d = c.head_dim, H = c.num_attention_heads / 2,
                Hkv = c.num_key_value_heads / 2;
  auto proj = [&](const std::vector<float>& W, int64_t rows, int64_t t, int64_t r) {
    (void)rows;
    double s = 0;
    for (int64_t e = 0; e < E; ++e)
      s += static_cast<double>(W[static_cast<size_t>(r * E + e)]) * x[static_cast<size_t>(t * E + e)];
    return s;
  };
  auto rotated = [&](const std::vector<float>& W, int64_t rows, int64_t t, int64_t sub) {
    std::vector<double> v(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) v[static_cast<size_t>(i)] = proj(W, rows, t, sub * d + i);
    for (int64_t i = 0; i < d / 2; ++i) {
      const double ang = static_cast<double>(t) *
                         std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double a = v[static_cast<size_t>(2 * i)], b = v[static_cast<size_t>(2 * i + 1)];
      v[static_cast<size_t>(2 * i)] = a * std::cos(ang) - b * std::sin(ang);
      v[static_cast<size_t>(2 * i + 1)] = a * std::sin(ang) + b * std::cos(ang);
    }
    return v;
  };
  const auto& Wq = w.at("model.layers.0.self_attn.q_proj.weight");
  const auto& Wk = w.at("model.layers.0.self_attn.k_proj.weight");
  NaiveMaps out;
  for (int comp = 0; comp < 2; ++comp) {
    auto& maps = comp == 0 ? out.a1 : out.a2;
    maps.assign(static_cast<size_t>(H),
                std::vector<std::vector<double>>(static_cast<size_t>(T),
                                                 std::vector<double>(static_cast<size_t>(T), 0.0)));
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      for (int64_t i = 0; i < T; ++i) {
        const auto q = rotated(Wq, 0, i, 2 * h + comp);
        std::vector<double> logits(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const auto k = rotated(Wk, 0, j, 2 * g + comp);
          double s = 0;
          for (int64_t e = 0; e < d; ++e) s += q[static_cast<size_t>(e)] * k[static_cast<size_t>(e)];
          logits[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, logits[static_cast<size_t>(j)]);
        }
        double z = 0;
        for (double& l : logits) z += (l = std::exp(l - mx));
        for (int64_t j = 0; j <= i; ++j)
          maps[static_cast<size_t>(h)][static_cast<size_t>(i)][static_cast<size_t>(j)] =
              logits[static_cast<size_t>(j)] / z;
      }
    }
  }
  auto dot = [&](const char* a, const char* b) {
    double s = 0;
    const auto& va = w.at(std::string("model.layers.0.self_attn.") + a);
    const auto& vb = w.at(std::string("model.layers.0.self_attn.") + b);
    for (size_t i = 0; i < va.size(); ++i) s += static_cast<double>(va[i]) * vb[i];
    return s;
  };
  out.lambda =
      std::exp(dot("lambda_q1", "lambda_k1")) - std::exp(dot("lambda_q2", "lambda_k2")) + lambda_init(0);
  return out;
}

}  // namespace

TEST_CASE("DIFF maps match a naive scalar reference, with and without GQA", "[attention][diff]") {
  const int64_t kv_heads = GENERATE(4, 2, 1);
  const int64_t T = GENERATE(3, 9);
  ModelConfig c = test::tiny_config(AttentionKind::Diff, 64, 1, 4, kv_heads);
  const Model m = Model::random(c, 7 + static_cast<uint64_t>(kv_heads));
  std::map<std::string, std::vector<float>> w;
  for (auto& t : m.tensors()) w[t.name] = t.data;
  const std::vector<float> x = random_input(T, c.hidden_size, 3, 3.0f);  // large inputs: sharp maps
  const LayerTrace lt = m.attention_probe(0, x, T, nullptr);
  const NaiveMaps ref = naive_diff_maps(c, w, x, T);
  CHECK(lt.lambda == Approx(ref.lambda).margin(1e-6));
  double max_err = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const double r1 = ref.a1[h][i][j], r2 = ref.a2[h][i][j];
        max_err = std::max({max_err, std::fabs(at3(lt.a1, h, i, j) - r1), std::fabs(at3(lt.a2, h, i, j) - r2),
                            std::fabs(at3(lt.a, h, i, j) - (r1 - ref.lambda * r2))});
      }
  INFO("kv heads " << kv_heads << ", T " << T);
  CHECK(max_err < 1e-5);
}

namespace {

// Rows [sub*d, (sub+1)*d) of a [rows, E] projection weight.
std::vector<float> rows_of(const std::vector<float>& W, int64_t E, int64_t first_row, int64_t count) {
  return std::vector<float>(W.begin() + first_row * E, W.begin() + (first_row + count) * E);
}

void append(std::vector<float>& dst, const std::vector<float>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

// Layer 0 of both models gives the same A1, A2, A and output on a random [T, E] input.
void require_same_layer(const Model& a, const Model& b, int64_t T, uint32_t seed) {
  const std::vector<float> x = random_input(T, a.config().hidden_size, seed, 2.0f);
  std::vector<float> out_a, out_b;
  const LayerTrace la = a.attention_probe(0, x, T, &out_a);
  const LayerTrace lb = b.attention_probe(0, x, T, &out_b);
  REQUIRE(la.a.data.size() == lb.a.data.size());
  for (size_t i = 0; i < la.a.data.size(); ++i) {
    REQUIRE(la.a1.data[i] == Approx(lb.a1.data[i]).margin(1e-6));
    REQUIRE(la.a2.data[i] == Approx(lb.a2.data[i]).margin(1e-6));
    REQUIRE(la.a.data[i] == Approx(lb.a.data[i]).margin(1e-6));
  }
  for (size_t i = 0; i < out_a.size(); ++i) REQUIRE(out_a[i] == Approx(out_b[i]).margin(1e-5));
}

}  // namespace

TEST_CASE("GQA pairs component 1 with 1 and 2 with 2: equal to explicitly repeated key/value heads",
          "[attention][diff][gqa]") {
  const DiffPairing pairing = GENERATE(DiffPairing::Adjacent, DiffPairing::Half);
  ModelConfig gqa = test::tiny_config(AttentionKind::Diff, 64, 1, 4, 2);  // H=4, Hkv=2, d=8
  gqa.diff_pairing = pairing;
  const Model m = Model::random(gqa, 11);
  const int64_t E = 64, d = gqa.head_dim, H = 4, Hkv = 2, rep = H / Hkv;
  ModelConfig full = gqa;
  full.num_key_value_heads = gqa.num_attention_heads;
  std::vector<NamedTensor> tensors = m.tensors();
  for (auto& t : tensors) {
    const bool is_k = t.name.find("k_proj") != std::string::npos,
               is_v = t.name.find("v_proj") != std::string::npos;
    if (!is_k && !is_v) continue;
    std::vector<float> expanded;
    if (pairing == DiffPairing::Adjacent) {
      // k: group g = [comp1 d rows, comp2 d rows]; v: group g = 2d rows. Head h takes group h/rep.
      for (int64_t h = 0; h < H; ++h) append(expanded, rows_of(t.data, E, (h / rep) * 2 * d, 2 * d));
    } else {
      // Half layout: all component-1 sub-heads first, then all component-2 ones (v alike).
      for (int comp = 0; comp < 2; ++comp)
        for (int64_t h = 0; h < H; ++h) append(expanded, rows_of(t.data, E, (comp * Hkv + h / rep) * d, d));
    }
    t.shape = {2 * H * d, E};
    t.data = expanded;
  }
  const Model ref = Model::from_tensors(full, tensors);
  require_same_layer(m, ref, 7, 5);
}

TEST_CASE("half pairing with rotate-half RoPE equals the official layout after an exact permutation",
          "[attention][diff][layout]") {
  // Native (adjacent, interleaved) model → DiffLlama-style (half, rotate-half) by permuting rows:
  // sub-head order [c1 h0, c2 h0, c1 h1, ...] → [c1 h0, c1 h1, ..., c2 h0, ...], and inside each q/k
  // sub-head interleaved dim 2i → i, 2i+1 → i + d/2. v: group g's 2d rows split into v_g and v_{g+Hkv}.
  const ModelConfig native = test::tiny_config(AttentionKind::Diff, 64, 1, 4, 4);
  const Model m = Model::random(native, 21);
  const int64_t E = 64, d = native.head_dim, H = 4;
  ModelConfig hf = native;
  hf.diff_pairing = DiffPairing::Half;
  hf.rope_style = RopeStyle::Half;
  std::vector<NamedTensor> tensors = m.tensors();
  for (auto& t : tensors) {
    const bool qk = t.name.find("q_proj") != std::string::npos || t.name.find("k_proj") != std::string::npos;
    const bool v = t.name.find("v_proj") != std::string::npos;
    if (!qk && !v) continue;
    std::vector<float> out;
    for (int comp = 0; comp < 2; ++comp)
      for (int64_t h = 0; h < H; ++h) {
        const std::vector<float> sub = rows_of(t.data, E, (2 * h + comp) * d, d);
        if (v) {
          append(out, sub);
          continue;
        }
        for (int64_t i = 0; i < d; ++i) {  // half dim i ← interleaved dim 2i (i < d/2) or 2(i−d/2)+1
          const int64_t src = i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1;
          append(out, rows_of(sub, E, src, 1));
        }
      }
    t.data = out;
  }
  require_same_layer(m, Model::from_tensors(hf, tensors), 6, 8);
}
