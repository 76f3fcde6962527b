// Hugging Face checkpoints: tiny random Llama, Mistral and DiffLlama directories written here (config.json
// in the HF form, BF16 shards with an index, tied embeddings), loaded by Model::load and checked against a
// reference forward written out below in plain loops, literally following the transformers modeling code's
// semantics (rotate-half RoPE, repeat_kv GQA, DiffLlama's chunk/cat of V and weightless group norm) — not
// our tensor code. Layout conversions must keep every map.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "app/worker/inference_worker.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/formats/safetensors.h"
#include "core/model/checkpoint_layout.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

struct HfSpec {
  std::string arch = "LlamaForCausalLM";
  int64_t hidden = 32, layers = 2, heads = 8, kv_heads = 4, head_dim = 4, inter = 40, vocab = 300;
  bool tied = false;
  int64_t sliding_window = 0;
  double theta = 500.0;
  DType dtype = DType::BF16;
  int shards = 2;
  nlohmann::json rope_scaling = nullptr;
};

nlohmann::json hf_config_json(const HfSpec& s) {
  nlohmann::json j;
  j["architectures"] = {s.arch};
  j["model_type"] = s.arch == "DiffLlamaForCausalLM" ? "diffllama"
                    : s.arch == "MistralForCausalLM" ? "mistral"
                                                     : "llama";
  j["hidden_size"] = s.hidden;
  j["num_hidden_layers"] = s.layers;
  j["num_attention_heads"] = s.heads;
  j["num_key_value_heads"] = s.kv_heads;
  j["head_dim"] = s.head_dim;
  j["intermediate_size"] = s.inter;
  j["vocab_size"] = s.vocab;
  j["max_position_embeddings"] = 128;
  j["rms_norm_eps"] = 1e-5;
  j["rope_theta"] = s.theta;
  j["rope_scaling"] = s.rope_scaling;
  j["tie_word_embeddings"] = s.tied;
  j["hidden_act"] = "silu";
  j["bos_token_id"] = 1;
  j["eos_token_id"] = {2, 3};
  j["torch_dtype"] = "bfloat16";
  if (s.arch == "MistralForCausalLM")
    j["sliding_window"] = s.sliding_window > 0 ? nlohmann::json(s.sliding_window) : nlohmann::json(nullptr);
  if (s.arch == "DiffLlamaForCausalLM") j["lambda_std_dev"] = 0.1;
  return j;
}

// Writes a seeded random checkpoint of `s` in the Hugging Face layout into `dir`.
// The ConfigError message of the spec's config.json after `edit`, or "(accepted)".
std::string config_error(const HfSpec& s, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = hf_config_json(s);
  edit(j);
  try {
    config_from_json_text(j.dump(), "config.json");
  } catch (const ConfigError& e) {
    return std::string(e.what());
  }
  return std::string("(accepted)");
}

void write_hf(const HfSpec& s, const std::filesystem::path& dir, uint64_t seed) {
  std::filesystem::create_directories(dir);
  const std::string cfg_text = hf_config_json(s).dump(2);
  test::write_all(dir / "config.json", cfg_text);
  const ModelConfig c = config_from_json_text(cfg_text, "hf");
  std::vector<NamedTensor> tensors = Model::random(c, seed).tensors();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> noise(1.0f, 0.2f);
  for (auto& t : tensors)  // norms away from 1, so a dropped norm weight would show
    if (t.name.find("norm.weight") != std::string::npos)
      for (float& v : t.data) v = noise(rng);
  nlohmann::json index;
  const size_t per = (tensors.size() + static_cast<size_t>(s.shards) - 1) / static_cast<size_t>(s.shards);
  for (int k = 0; k < s.shards; ++k) {
    std::vector<TensorToWrite> w;
    const std::string file = s.shards == 1 ? "model.safetensors"
                                           : "model-0000" + std::to_string(k + 1) + "-of-0000" +
                                                 std::to_string(s.shards) + ".safetensors";
    for (size_t i = static_cast<size_t>(k) * per;
         i < std::min(tensors.size(), (static_cast<size_t>(k) + 1) * per); ++i) {
      // LayerNorm weights in F32 as some exports keep them; everything else in the spec's dtype.
      const DType dt = tensors[i].name.find("norm") != std::string::npos ? DType::F32 : s.dtype;
      w.push_back({tensors[i].name, tensors[i].shape, tensors[i].data.data(), dt});
      index["weight_map"][tensors[i].name] = file;
    }
    write_safetensors(dir / file, w, {{"format", "pt"}});
  }
  if (s.shards > 1) test::write_all(dir / "model.safetensors.index.json", index.dump(2));
}

// --- the reference forward ----------------------------------------------------------------------------

using Mat = std::vector<std::vector<double>>;

struct RefOut {
  std::vector<Mat> maps;                // per layer: [sub-head][T*T] flattened as Mat rows = sub-heads
  std::vector<std::vector<Mat>> probs;  // probs[layer][sub-head] = T x T
  std::vector<double> last_logits;
};

Mat matmul_t(const Mat& x, const std::vector<float>& w, int64_t out, int64_t in) {  // x [T, in] · wᵀ
  Mat y(x.size(), std::vector<double>(static_cast<size_t>(out), 0.0));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += x[t][static_cast<size_t>(i)] * w[static_cast<size_t>(o * in + i)];
      y[t][static_cast<size_t>(o)] = s;
    }
  return y;
}

Mat rms(const Mat& x, const std::vector<float>* w, double eps) {
  Mat y = x;
  for (auto& row : y) {
    double ms = 0;
    for (double v : row) ms += v * v;
    ms /= static_cast<double>(row.size());
    for (size_t i = 0; i < row.size(); ++i) row[i] = row[i] / std::sqrt(ms + eps) * (w ? (*w)[i] : 1.0);
  }
  return y;
}

RefOut reference(const std::map<std::string, std::vector<float>>& W, const HfSpec& s, const ModelConfig& c,
                 const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), E = s.hidden, d = s.head_dim, nh = s.heads,
                nkv = s.kv_heads;
  const bool diff = s.arch == "DiffLlamaForCausalLM";
  const std::vector<double> inv = rope_inv_freq(c);
  auto w = [&](const std::string& n) -> const std::vector<float>& { return W.at(n); };
  Mat x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e)
      x[t].push_back(w("model.embed_tokens.weight")[static_cast<size_t>(ids[t] * E + e)]);
  RefOut out;
  auto rope = [&](Mat& m, int64_t heads) {  // rotate-half on each d-wide sub-head
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d / 2; ++i) {
          const double a = static_cast<double>(t) * inv[static_cast<size_t>(i)];
          double& x0 = m[t][static_cast<size_t>(h * d + i)];
          double& x1 = m[t][static_cast<size_t>(h * d + i + d / 2)];
          const double n0 = x0 * std::cos(a) - x1 * std::sin(a), n1 = x1 * std::cos(a) + x0 * std::sin(a);
          x0 = n0;
          x1 = n1;
        }
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Mat hn = rms(x, &w(p + "input_layernorm.weight"), 1e-5);
    Mat q = matmul_t(hn, w(p + "self_attn.q_proj.weight"), nh * d, E);
    Mat k = matmul_t(hn, w(p + "self_attn.k_proj.weight"), nkv * d, E);
    const Mat v = matmul_t(hn, w(p + "self_attn.v_proj.weight"), nkv * d, E);
    rope(q, nh);
    rope(k, nkv);
    const int64_t g = nh / nkv;  // repeat_kv: sub-head s reads kv head s / g
    std::vector<Mat> P(static_cast<size_t>(nh),
                       Mat(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(T), 0.0)));
    for (int64_t sh = 0; sh < nh; ++sh)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> sc(static_cast<size_t>(T), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          if (s.sliding_window > 0 && i - j >= s.sliding_window) continue;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[i][static_cast<size_t>(sh * d + e)] * k[j][static_cast<size_t>((sh / g) * d + e)];
          sc[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < T; ++j) z += std::isinf(sc[j]) ? 0 : std::exp(sc[j] - mx);
        for (int64_t j = 0; j < T; ++j) P[sh][i][j] = std::isinf(sc[j]) ? 0 : std::exp(sc[j] - mx) / z;
      }
    out.probs.push_back(P);
    Mat attn(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(nh * d), 0.0));
    if (!diff) {
      for (int64_t sh = 0; sh < nh; ++sh)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t e = 0; e < d; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < T; ++j) acc += P[sh][i][j] * v[j][static_cast<size_t>((sh / g) * d + e)];
            attn[i][static_cast<size_t>(sh * d + e)] = acc;
          }
    } else {
      // value_states = cat(chunk(repeat_kv(v), 2, heads), -1): pair p's V = [v_rep[p], v_rep[p + nh/2]];
      // out1 = heads [0, nh/2), out2 = heads [nh/2, nh), both with pair p's V; o = out1 - λ out2.
      const int64_t half = nh / 2;
      auto dotv = [&](const std::string& a, const std::string& b) {
        double sdot = 0;
        for (int64_t e = 0; e < d; ++e)
          sdot += w(p + a)[static_cast<size_t>(e)] * w(p + b)[static_cast<size_t>(e)];
        return sdot;
      };
      const double linit = 0.8 - 0.6 * std::exp(-0.3 * static_cast<double>(l));
      const double lambda = std::exp(dotv("self_attn.lambda_q1", "self_attn.lambda_k1")) -
                            std::exp(dotv("self_attn.lambda_q2", "self_attn.lambda_k2")) + linit;
      for (int64_t pr = 0; pr < half; ++pr)
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> o(static_cast<size_t>(2 * d), 0.0);
          for (int64_t e = 0; e < 2 * d; ++e) {
            const int64_t src = e < d ? pr : pr + half;  // which repeated sub-head's v
            const int64_t col = (src / g) * d + (e % d);
            double a1 = 0, a2 = 0;
            for (int64_t j = 0; j < T; ++j) {
              a1 += P[pr][i][j] * v[j][static_cast<size_t>(col)];
              a2 += P[pr + half][i][j] * v[j][static_cast<size_t>(col)];
            }
            o[static_cast<size_t>(e)] = a1 - lambda * a2;
          }
          const Mat on = rms(Mat{o}, nullptr, 1e-5);  // weightless RMSNorm over 2d
          for (int64_t e = 0; e < 2 * d; ++e)
            attn[i][static_cast<size_t>(pr * 2 * d + e)] = (1 - linit) * on[0][static_cast<size_t>(e)];
        }
    }
    const Mat ao = matmul_t(attn, w(p + "self_attn.o_proj.weight"), E, nh * d);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) x[t][e] += ao[t][e];
    const Mat h2 = rms(x, &w(p + "post_attention_layernorm.weight"), 1e-5);
    const Mat gate = matmul_t(h2, w(p + "mlp.gate_proj.weight"), s.inter, E);
    const Mat up = matmul_t(h2, w(p + "mlp.up_proj.weight"), s.inter, E);
    Mat act = gate;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < s.inter; ++f) {
        const double gv = gate[t][f];
        act[t][f] = gv / (1 + std::exp(-gv)) * up[t][f];
      }
    const Mat down = matmul_t(act, w(p + "mlp.down_proj.weight"), E, s.inter);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) x[t][e] += down[t][e];
  }
  const Mat fin = rms(Mat{x.back()}, &w("model.norm.weight"), 1e-5);
  out.last_logits =
      matmul_t(fin, s.tied ? w("model.embed_tokens.weight") : w("lm_head.weight"), s.vocab, E)[0];
  return out;
}

std::map<std::string, std::vector<float>> by_name(const Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& t : m.tensors()) out[t.name] = t.data;
  return out;
}

// Our capture against the reference: every softmax map (DIFF: A1 = sub-head p, A2 = sub-head p + nh/2)
// and the next-token probabilities.
void check_against_reference(const Model& m, const HfSpec& s, const std::vector<int64_t>& ids) {
  const RefOut ref = reference(by_name(m), s, m.config(), ids);
  CaptureOptions opt;
  opt.next_token_top_k = 5;
  const Trace t = m.capture(ids, opt);
  const int64_t T = static_cast<int64_t>(ids.size());
  const bool diff = m.config().is_diff();
  double worst = 0;
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const LayerTrace& lt = t.layers[l];
    const int64_t heads = diff ? s.heads / 2 : s.heads;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const size_t at = static_cast<size_t>((h * T + i) * T + j);
          if (diff) {
            worst = std::max(worst, std::fabs(lt.a1.data[at] - ref.probs[l][static_cast<size_t>(h)][i][j]));
            worst = std::max(
                worst, std::fabs(lt.a2.data[at] - ref.probs[l][static_cast<size_t>(h + s.heads / 2)][i][j]));
          } else {
            worst = std::max(worst, std::fabs(lt.a.data[at] - ref.probs[l][static_cast<size_t>(h)][i][j]));
          }
        }
  }
  INFO("largest map difference " << worst);
  CHECK(worst < 2e-5);
  double mx = -INFINITY, z = 0;
  for (double v : ref.last_logits) mx = std::max(mx, v);
  for (double v : ref.last_logits) z += std::exp(v - mx);
  REQUIRE(t.next_token.size() == 5);
  for (const auto& tp : t.next_token) {
    const double expected = std::exp(ref.last_logits[static_cast<size_t>(tp.id)] - mx) / z;
    CHECK(tp.probability == Approx(expected).margin(2e-5));
  }
}

}  // namespace

TEST_CASE("hf: a Llama checkpoint (GQA, two BF16 shards, index) matches the reference forward",
          "[hf][checkpoint]") {
  test::ScratchDir dir("hfllama");
  HfSpec s;
  write_hf(s, dir / "m", 3);
  const Model m = Model::load(dir / "m");
  CHECK(m.config().architecture == "LlamaForCausalLM");
  CHECK(m.config().attention == AttentionKind::Baseline);
  CHECK(m.config().rope_style == RopeStyle::Half);
  CHECK(m.config().eos_token_id == 2);  // the first of a list
  CHECK(m.source_dtype() == "BF16+F32");
  CHECK(m.weight_storage() == "BF16");  // half precision stays half in memory
  const ModelConfig& mc = m.config();
  const uint64_t small = static_cast<uint64_t>(mc.num_hidden_layers * 2 * mc.hidden_size + mc.hidden_size);
  CHECK(Model::weight_memory_bytes(mc, true) ==
        (static_cast<uint64_t>(parameter_count(mc)) - small) * 2 + small * 4);
  CHECK(Model::weight_memory_bytes(mc) == static_cast<uint64_t>(parameter_count(mc)) * 4);
  CHECK(m.config().name == "m");
  CHECK_FALSE(m.tokenizer().can_encode());
  CHECK(m.tokenizer_note().find("no tokenizer.model or tokenizer.json") != std::string::npos);
  // Weights are the BF16 values exactly.
  const SafetensorsFile shard(dir / "m/model-00001-of-00002.safetensors");
  const TensorInfo& embed = shard.at("model.embed_tokens.weight");
  CHECK(embed.dtype == DType::BF16);
  CHECK(by_name(m).at("model.embed_tokens.weight") == shard.read_f32(embed));
  check_against_reference(m, s, {1, 17, 200, 45, 45, 9, 280, 3, 77, 120});
}

TEST_CASE("hf: tied embeddings, F16, one file and llama3 rope scaling", "[hf][checkpoint]") {
  test::ScratchDir dir("hftied");
  HfSpec s;
  s.tied = true;
  s.dtype = DType::F16;
  s.shards = 1;
  s.rope_scaling = {{"rope_type", "llama3"},
                    {"factor", 8.0},
                    {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 16}};
  write_hf(s, dir / "m", 4);
  const Model m = Model::load(dir / "m");
  CHECK(m.config().tie_word_embeddings);
  CHECK(m.config().rope_scaling.kind == RopeScaling::Kind::Llama3);
  CHECK_FALSE(by_name(m).count("lm_head.weight"));
  check_against_reference(m, s, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22});
}

TEST_CASE("hf: transformers 5's rope_parameters give the maps of the same checkpoint in the old style",
          "[hf][checkpoint][config]") {
  // transformers >= 5 writes {"rope_parameters": {"rope_type": ..., "rope_theta": ..., "factor": ...}}
  // instead of top-level rope_theta / rope_scaling. The same weights under either config must give the same
  // maps.
  test::ScratchDir dir("hfrope5");
  HfSpec s;
  s.theta = 500000.0;
  s.shards = 1;
  s.rope_scaling = {{"rope_type", "llama3"},
                    {"factor", 8.0},
                    {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 16}};
  write_hf(s, dir / "m", 6);
  const std::vector<int64_t> ids = {1, 40, 41, 42, 7,  8,  9,  250, 251, 3,
                                    3, 3,  60, 61, 62, 63, 64, 65,  66,  67};
  const Model old_style = Model::load(dir / "m");
  check_against_reference(old_style, s, ids);
  nlohmann::json j = hf_config_json(s);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = s.rope_scaling;
  j["rope_parameters"]["rope_theta"] = 500000.0;
  test::write_all(dir / "m/config.json", j.dump(2));
  const Model new_style = Model::load(dir / "m");
  CHECK(new_style.config().rope_theta == 500000.0);
  CHECK(new_style.config().rope_scaling.kind == RopeScaling::Kind::Llama3);
  CHECK(rope_inv_freq(new_style.config()) == rope_inv_freq(old_style.config()));
  const Trace a = old_style.capture(ids), b = new_style.capture(ids);
  for (size_t l = 0; l < a.layers.size(); ++l) REQUIRE(a.layers[l].a.data == b.layers[l].a.data);
  // The default kind carries θ alone; a config may keep both styles when they agree.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  const ModelConfig d = config_from_json_text(j.dump(), "config.json");
  CHECK(d.rope_theta == 250000.0);
  CHECK(d.rope_scaling.kind == RopeScaling::Kind::None);
  j["rope_theta"] = 250000.0;
  CHECK(config_from_json_text(j.dump(), "config.json").rope_theta == 250000.0);
}

TEST_CASE("hf: rotary and attention settings DiffLens does not compute are refused by name",
          "[hf][config][errors]") {
  HfSpec s;
  auto cfg_error = [&](const std::function<void(nlohmann::json&)>& edit) { return config_error(s, edit); };
  const nlohmann::json llama3 = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                                 {"factor", 8.0},           {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  CHECK(cfg_error([&](auto& j) {
          j.erase("rope_theta");
          j["rope_parameters"] = llama3;
        }) == "(accepted)");
  CHECK_THAT(cfg_error([&](auto& j) { j["rope_parameters"] = llama3; }),  // top-level θ 500 vs 500000
             Catch::Contains("rope_theta 500.0 and rope_parameters.rope_theta 500000.0 disagree"));
  CHECK_THAT(cfg_error([&](auto& j) {
               j.erase("rope_theta");
               j["rope_parameters"] = {
                   {"rope_type", "yarn"}, {"rope_theta", 1e4}, {"factor", 4.0}, {"beta_fast", 32}};
             }),
             Catch::Contains("rope_parameters type 'yarn' is not supported"));
  CHECK_THAT(cfg_error([&](auto& j) {
               j.erase("rope_theta");
               auto p = llama3;
               p["mscale"] = 1.0;
               j["rope_parameters"] = p;
             }),
             Catch::Contains("rope_parameters has 'mscale'"));
  CHECK_THAT(cfg_error([&](auto& j) {
               j.erase("rope_theta");
               auto p = llama3;
               p.erase("low_freq_factor");
               j["rope_parameters"] = p;
             }),
             Catch::Contains("needs a number 'low_freq_factor'"));
  CHECK_THAT(cfg_error([&](auto& j) {
               j["rope_parameters"] = {{"rope_type", "default"}};
             }),
             Catch::Contains("rope_parameters has no numeric rope_theta"));
  CHECK_THAT(cfg_error([&](auto& j) {  // per-layer-type parameters (Gemma 3 style)
               j.erase("rope_theta");
               j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                                       {"rope_theta", 1e4}};
             }),
             Catch::Contains("rope_parameters has 'full_attention'"));
  CHECK_THAT(cfg_error([&](auto& j) {
               j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
               j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", j["rope_theta"]}};
             }),
             Catch::Contains("declare different rotary scalings"));
  CHECK_THAT(cfg_error([](auto& j) {
               j["rope_scaling"] = {{"rope_type", "linear"}};
             }),
             Catch::Contains("needs a number 'factor'"));
  CHECK_THAT(
      cfg_error([](auto& j) { j["attn_logit_softcapping"] = 50.0; }),
      Catch::Contains("'attn_logit_softcapping' is a rotary/attention setting DiffLens does not compute"));
  CHECK_THAT(cfg_error([](auto& j) { j["query_pre_attn_scalar"] = 256; }),
             Catch::Contains("'query_pre_attn_scalar'"));
  CHECK(cfg_error([](auto& j) {
          j["attention_dropout"] = 0.0;
          j["_attn_implementation"] = "eager";
        }) == "(accepted)");
}

TEST_CASE("hf: Mistral's sliding window hides keys beyond it", "[hf][checkpoint]") {
  test::ScratchDir dir("hfmistral");
  HfSpec s;
  s.arch = "MistralForCausalLM";
  s.sliding_window = 4;
  write_hf(s, dir / "m", 5);
  const Model m = Model::load(dir / "m");
  CHECK(m.config().sliding_window == 4);
  const std::vector<int64_t> ids = {1, 50, 51, 52, 53, 54, 55, 56, 57};
  check_against_reference(m, s, ids);
  const Trace t = m.capture(ids);
  const int64_t T = 9;
  for (int64_t i = 0; i < T; ++i) {
    double row = 0;
    for (int64_t j = 0; j < T; ++j) {
      const float a = t.layers[0].a.data[static_cast<size_t>(i * T + j)];
      row += a;
      if (j > i || i - j >= 4) CHECK(a == 0.0f);
    }
    CHECK(row == Approx(1.0).margin(1e-5));
  }
}

TEST_CASE("hf: a DiffLlama checkpoint matches the literal DiffLlama forward", "[hf][checkpoint][attention]") {
  test::ScratchDir dir("hfdiff");
  HfSpec s;
  s.arch = "DiffLlamaForCausalLM";
  write_hf(s, dir / "m", 6);
  const Model m = Model::load(dir / "m");
  const ModelConfig& c = m.config();
  CHECK(c.is_diff());
  CHECK(c.diff_pairing == DiffPairing::Half);
  CHECK(c.rope_style == RopeStyle::Half);
  CHECK_FALSE(c.subln_weight);
  CHECK(c.map_heads() == 4);
  check_against_reference(m, s, {1, 40, 41, 99, 42, 43, 250, 44, 45, 46, 47});
}

TEST_CASE("hf: layout conversions keep every map, and our DIFF exports exactly as DiffLlama",
          "[hf][checkpoint][convert]") {
  test::ScratchDir dir("hfconvert");
  HfSpec s;
  s.arch = "DiffLlamaForCausalLM";
  write_hf(s, dir / "m", 7);
  const Model hf = Model::load(dir / "m");
  const std::vector<int64_t> ids = {1, 9, 8, 7, 6, 5, 4, 3, 200, 201, 202, 203};
  auto same_maps = [&](const Model& a, const Model& b) {
    const Trace ta = a.capture(ids), tb = b.capture(ids);
    float worst = 0;
    for (size_t l = 0; l < ta.layers.size(); ++l)
      for (auto member : {&LayerTrace::a1, &LayerTrace::a2, &LayerTrace::a})
        for (size_t i = 0; i < (ta.layers[l].*member).data.size(); ++i)
          worst = std::max(worst, std::fabs((ta.layers[l].*member).data[i] - (tb.layers[l].*member).data[i]));
    INFO("largest map difference " << worst);
    CHECK(worst < 1e-5f);
    for (size_t k = 0; k < ta.next_token.size(); ++k) {
      CHECK(ta.next_token[k].id == tb.next_token[k].id);
      CHECK(ta.next_token[k].probability == Approx(tb.next_token[k].probability).margin(1e-5));
    }
  };
  // DiffLlama -> official layout (adjacent components, interleaved rotary pairs): a real permutation.
  const ModelConfig off = official_layout(hf.config());
  const std::vector<NamedTensor> permuted = convert_layout(hf.config(), hf.tensors(), off);
  const Model native = Model::from_tensors(off, permuted);
  CHECK(native.config().diff_pairing == DiffPairing::Adjacent);
  CHECK(permuted[0].data.size() == hf.tensors()[0].data.size());
  bool moved = false;
  for (size_t i = 0; i < permuted.size(); ++i)
    if (permuted[i].name.find("q_proj") != std::string::npos)
      moved |= permuted[i].data != hf.tensors()[i].data;
  CHECK(moved);
  same_maps(hf, native);
  // A DIFF model with a learned per-head norm weight (ours) -> DiffLlama on disk -> loaded back: the
  // weight is folded into o_proj, the maps and outputs are the same.
  ModelConfig ours = test::tiny_config(AttentionKind::Diff, 32, 2, 2, 1);
  std::vector<NamedTensor> t = Model::random(ours, 8).tensors();
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(1.0f, 0.3f);
  for (auto& x : t)
    if (x.name.find("subln") != std::string::npos)
      for (float& v : x.data) v = nd(rng);
  const Model mine = Model::from_tensors(ours, t);
  const std::vector<std::string> notes = save_hf(mine, dir / "exported");
  CHECK(notes.size() == 2);  // no tokenizer file; the norm weight folded
  const Model back = Model::load(dir / "exported");
  CHECK(back.config().architecture == "DiffLlamaForCausalLM");
  CHECK(back.config().diff_pairing == DiffPairing::Half);
  same_maps(mine, back);
  // A config that differs in more than the layout is refused.
  ModelConfig other = off;
  other.hidden_size = 64;
  CHECK_THROWS_WITH(convert_layout(hf.config(), hf.tensors(), other),
                    Catch::Contains("more than the layout"));
  ModelConfig eps = ours;
  eps.subln_eps = 1e-6;
  CHECK_THROWS_WITH(hf_layout(eps), Catch::Contains("would not be exact"));
}

TEST_CASE("hf: rope scaling frequencies, hand-computed", "[hf][config]") {
  ModelConfig c = test::tiny_config(AttentionKind::Baseline);
  c.head_dim = 8;
  c.rope_theta = 10000;
  std::vector<double> f = rope_inv_freq(c);
  REQUIRE(f.size() == 4);
  CHECK(f[1] == Approx(0.1));
  CHECK(f[3] == Approx(0.001));
  c.rope_scaling.kind = RopeScaling::Kind::Linear;
  c.rope_scaling.factor = 4;
  f = rope_inv_freq(c);
  CHECK(f[0] == Approx(0.25));
  CHECK(f[2] == Approx(0.0025));
  // llama3, original context 1024, factor 8, low 1, high 4: wavelengths 6.28 and 62.8 (< 256) stay;
  // 6283 (> 1024) is divided by 8; 628.3 blends with t = (1024/628.3 - 1) / 3 = 0.20992.
  c.rope_scaling.kind = RopeScaling::Kind::Llama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position_embeddings = 1024;
  f = rope_inv_freq(c);
  CHECK(f[0] == Approx(1.0));
  CHECK(f[1] == Approx(0.1));
  CHECK(f[2] == Approx(0.0030868).epsilon(1e-4));
  CHECK(f[3] == Approx(0.000125));
}

TEST_CASE("hf: what cannot be read says why", "[hf][config][checkpoint]") {
  HfSpec s;
  auto cfg_error = [&](const std::function<void(nlohmann::json&)>& edit) { return config_error(s, edit); };
  CHECK_THAT(cfg_error([](auto& j) { j["architectures"] = {"GPT2LMHeadModel"}; }),
             Catch::Contains("architecture 'GPT2LMHeadModel' is not supported"));
  CHECK_THAT(cfg_error([](auto& j) {
               j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
             }),
             Catch::Contains("rope_scaling type 'yarn' is not supported"));
  CHECK_THAT(cfg_error([](auto& j) { j["attention_bias"] = true; }), Catch::Contains("attention_bias"));
  CHECK_THAT(cfg_error([](auto& j) { j["hidden_act"] = "gelu"; }), Catch::Contains("hidden_act 'gelu'"));
  CHECK_THAT(cfg_error([](auto& j) { j.erase("hidden_size"); }),
             Catch::Contains("missing field 'hidden_size'"));
  CHECK_THAT(cfg_error([](auto& j) {
               j["architectures"] = {"DiffLlamaForCausalLM"};
               j["num_key_value_heads"] = 1;
             }),
             Catch::Contains("odd number of key/value heads"));
  CHECK(cfg_error([](auto& j) { j.erase("architectures"); }) == "(accepted)");  // model_type is enough
  // peihaowang/diff-transformer-410m-nh16-dclm-7.5b: "DiffLlamaForCausalLM" with model_type "diff_llama"
  // and attn_family "diff_attn" - its own, unpublished code, not transformers' DiffLlama: refused, not
  // guessed.
  const std::string diff_llama = cfg_error([](auto& j) {
    j["architectures"] = {"DiffLlamaForCausalLM"};
    j["model_type"] = "diff_llama";
    j["attn_family"] = "diff_attn";
  });
  CHECK_THAT(diff_llama, Catch::Contains("model_type 'diff_llama' with attn_family 'diff_attn' is not "
                                         "transformers' DiffLlama") &&
                             Catch::Contains("will not guess"));

  test::ScratchDir dir("hfbad");
  write_hf(s, dir / "m", 9);
  SECTION("a shard is missing") {
    std::filesystem::remove(dir / "m/model-00002-of-00002.safetensors");
    CHECK_THROWS_WITH(Model::load(dir / "m"),
                      Catch::Contains("shard model-00002-of-00002.safetensors is missing"));
  }
  SECTION("the index names the wrong shard") {
    auto j = nlohmann::json::parse(test::read_all(dir / "m/model.safetensors.index.json"));
    j["weight_map"]["model.norm.weight"] =
        j["weight_map"]["model.norm.weight"] == "model-00001-of-00002.safetensors"
            ? "model-00002-of-00002.safetensors"
            : "model-00001-of-00002.safetensors";
    test::write_all(dir / "m/model.safetensors.index.json", j.dump());
    CHECK_THROWS_WITH(Model::load(dir / "m"), Catch::Contains("'model.norm.weight' should be in"));
  }
  SECTION("only PyTorch pickles") {
    std::filesystem::remove(dir / "m/model.safetensors.index.json");
    test::write_all(dir / "m/pytorch_model.bin", "x");
    CHECK_THROWS_WITH(Model::load(dir / "m"), Catch::Contains("PyTorch pickles are not read"));
  }
  SECTION("more memory than the machine has") {
    auto j = hf_config_json(s);
    j["hidden_size"] = 1 << 16;
    j["intermediate_size"] = 1 << 18;
    j["num_hidden_layers"] = 400;
    j["head_dim"] = 64;
    j["num_attention_heads"] = 1024;
    j["num_key_value_heads"] = 1024;
    test::write_all(dir / "m/config.json", j.dump());
    CHECK_THROWS_WITH(Model::load(dir / "m"),
                      Catch::Contains("of memory as BF16") && Catch::Contains("is available"));
  }
}

TEST_CASE("hf: loading reports progress per tensor and stops when cancelled", "[hf][checkpoint][worker]") {
  test::ScratchDir dir("hfprogress");
  HfSpec s;
  s.arch = "DiffLlamaForCausalLM";
  write_hf(s, dir / "m", 10);
  std::vector<std::pair<int64_t, int64_t>> calls;
  const Model m = Model::load(dir / "m", DeviceChoice::Cpu, [&](int64_t done, int64_t total) {
    calls.push_back({done, total});
  });
  REQUIRE(!calls.empty());
  CHECK(calls.back().first == calls.back().second);
  CHECK(static_cast<size_t>(calls.back().second) == m.tensors().size());
  std::atomic<bool> stop{true};
  CHECK_THROWS_AS(Model::load(dir / "m", DeviceChoice::Cpu, {}, &stop), Cancelled);
  // The app's slot line says what was loaded.
  app::InferenceWorker w({}, 1);
  w.load(0, (dir / "m").string());
  w.wait_idle();
  const app::WorkerStatus st = w.status();
  INFO(st.slots[0].description << st.slots[0].error);
  CHECK(st.slots[0].description.find("diff, 2 layers x 4 heads") == 0);
  CHECK(st.slots[0].description.find(
            "DiffLlamaForCausalLM (components in halves), BF16+F32 weights (BF16 in memory") !=
        std::string::npos);
  CHECK(st.slots[0].description.find("give token ids") != std::string::npos);
  CHECK(st.load_fraction == -1);
}

TEST_CASE("hf: whole config.json files as transformers writes them give the published parameter counts",
          "[hf][config]") {
  // Every key transformers saves is present (most are ignored); the shapes must come out exactly, checked
  // through the parameter counts the model cards publish: Llama 3.2 1B 1,235,814,400 (tied embeddings,
  // llama3 rope scaling), TinyLlama 1.1B 1,100,048,384 (GQA 32/4), Mistral 7B v0.1 7,241,732,096.
  const std::string llama32 = R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";
  const ModelConfig l = config_from_json_text(llama32, "llama-3.2-1b/config.json");
  CHECK(parameter_count(l) == 1235814400LL);
  CHECK(l.rope_scaling.kind == RopeScaling::Kind::Llama3);
  CHECK(l.rope_scaling.factor == 32.0);
  CHECK(l.rope_theta == 500000.0);
  CHECK(l.bos_token_id == 128000);
  CHECK(l.max_position_embeddings == 131072);
  CHECK(l.sliding_window == 0);
  CHECK_FALSE(l.is_diff());

  const std::string tinyllama = R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632,
    "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 22, "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.35.0", "use_cache": true, "vocab_size": 32000})";
  const ModelConfig t = config_from_json_text(tinyllama, "tinyllama/config.json");
  CHECK(parameter_count(t) == 1100048384LL);
  CHECK(t.head_dim == 64);
  CHECK(t.rope_scaling.kind == RopeScaling::Kind::None);

  const std::string mistral = R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";
  ModelConfig m = config_from_json_text(mistral, "mistral-7b-v0.1/config.json");
  CHECK(parameter_count(m) == 7241732096LL);
  CHECK(m.sliding_window == 4096);
  CHECK(m.head_dim == 128);
  // v0.2 and later: "sliding_window": null means no window.
  nlohmann::json j = nlohmann::json::parse(mistral);
  j["sliding_window"] = nullptr;
  m = config_from_json_text(j.dump(), "mistral-7b-v0.3/config.json");
  CHECK(m.sliding_window == 0);

  // DiffLlama as transformers' DiffLlamaConfig saves it: components in halves, weightless group norm.
  const std::string diffllama = R"({
    "architectures": ["DiffLlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 8192, "lambda_std_dev": 0.1,
    "max_position_embeddings": 2048, "model_type": "diffllama", "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
    "transformers_version": "4.48.0", "use_cache": true, "vocab_size": 32000})";
  const ModelConfig d = config_from_json_text(diffllama, "diffllama/config.json");
  CHECK(d.is_diff());
  CHECK(d.diff_pairing == DiffPairing::Half);
  CHECK(d.rope_style == RopeStyle::Half);
  CHECK_FALSE(d.subln_weight);
  CHECK(d.map_heads() == 16);  // 32 query sub-heads pair into 16 differential heads
  // Llama's count plus the four λ vectors (head_dim each) per layer.
  nlohmann::json as_llama = nlohmann::json::parse(diffllama);
  as_llama["architectures"] = {"LlamaForCausalLM"};
  as_llama["model_type"] = "llama";
  CHECK(parameter_count(d) == parameter_count(config_from_json_text(as_llama.dump(), "llama")) + 16 * 4 * 64);
  // kajuma/DiffLlama-0.3B-handcut: despite its name, Llama 3.2 1B's shapes (tied, llama3 scaling, GQA 32/8)
  // as DiffLlama: Llama 3.2 1B's 1,235,814,400 and four λ vectors of 64 per layer.
  nlohmann::json kajuma = nlohmann::json::parse(llama32);
  kajuma["architectures"] = {"DiffLlamaForCausalLM"};
  kajuma["model_type"] = "diffllama";
  kajuma["lambda_std_dev"] = 0.1;
  const ModelConfig k = config_from_json_text(kajuma.dump(), "DiffLlama-0.3B-handcut/config.json");
  CHECK(k.is_diff());
  CHECK(k.map_heads() == 16);
  CHECK(parameter_count(k) == 1235814400LL + 16 * 4 * 64);
}

TEST_CASE("hf: DiffLlama as hub folders hold it: rope_parameters, one file or shards, a hub cache",
          "[hf][checkpoint][attention]") {
  // kajuma/DiffLlama-0.3B-handcut's config keys (Llama-3.2-1B shapes: tied embeddings, head_dim, llama3 rope
  // scaling, lambda_std_dev and no lambda_init, which follows from the layer index), at a tiny size, as
  // transformers 5 writes them (rope_parameters, dtype).
  test::ScratchDir dir("hfdiffhub");
  HfSpec s;
  s.arch = "DiffLlamaForCausalLM";
  s.tied = true;
  s.theta = 500000.0;
  s.rope_scaling = {{"rope_type", "llama3"},
                    {"factor", 32.0},
                    {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 16}};
  const std::vector<int64_t> ids = {1, 40, 41, 99, 42, 43, 250, 44, 45, 46, 47, 40, 41, 99, 42, 17, 18};
  for (const int shards : {1, 2}) {
    s.shards = shards;
    const std::filesystem::path m = dir / ("m" + std::to_string(shards));
    write_hf(s, m, 21);
    nlohmann::json j = hf_config_json(s);
    j.erase("rope_theta");
    j.erase("rope_scaling");
    j.erase("torch_dtype");
    j["dtype"] = "bfloat16";
    j["rope_parameters"] = s.rope_scaling;
    j["rope_parameters"]["rope_theta"] = 500000.0;
    CHECK_FALSE(j.contains("lambda_init"));
    test::write_all(m / "config.json", j.dump(2));
    const Model model = Model::load(m);
    CHECK(model.config().is_diff());
    CHECK(model.config().tie_word_embeddings);
    CHECK(model.config().rope_scaling.kind == RopeScaling::Kind::Llama3);
    CHECK(model.config().num_key_value_heads == 4);  // GQA: 8 query sub-heads, 4 key sub-heads
    INFO(shards << " shard(s)");
    check_against_reference(model, s, ids);
  }
  // The hub cache as huggingface-cli leaves it: snapshot files are links into blobs/, refs/main names the
  // snapshot. The model opens by the cache folder's path and is named by it.
  const std::filesystem::path cache = dir / "hub" / "models--kajuma--DiffLlama-0.3B-handcut";
  const std::filesystem::path snap = cache / "snapshots" / "5f3e2a";
  std::filesystem::create_directories(cache / "blobs");
  std::filesystem::create_directories(snap);
  std::filesystem::create_directories(cache / "refs");
  int blob = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir / "m1")) {
    const std::string b = "blob" + std::to_string(blob++);
    std::filesystem::copy_file(f.path(), cache / "blobs" / b);
    std::filesystem::create_symlink(std::filesystem::path("../../blobs") / b, snap / f.path().filename());
  }
  test::write_all(cache / "refs" / "main", "5f3e2a");
  const Model cached = Model::load(cache);
  CHECK(cached.config().name == "models--kajuma--DiffLlama-0.3B-handcut");
  s.shards = 1;
  check_against_reference(cached, s, ids);

  // Hostile caches are refused by name before anything is read through them: a file linking out of the
  // cache (to a device that never ends), and a snapshot that is a link to itself.
  const std::filesystem::path out = dir / "hub" / "models--x--out";
  std::filesystem::create_directories(out / "snapshots" / "aa");
  for (const auto& f : std::filesystem::directory_iterator(dir / "m1"))
    std::filesystem::copy_file(f.path(), out / "snapshots" / "aa" / f.path().filename());
  std::filesystem::remove(out / "snapshots" / "aa" / "config.json");
  std::filesystem::create_symlink("/dev/urandom", out / "snapshots" / "aa" / "config.json");
  CHECK_THROWS_WITH(Model::load(out), Catch::Contains("config.json: links outside the hub cache folder") &&
                                          Catch::Contains("/dev/urandom"));
  const std::filesystem::path loop = dir / "hub" / "models--x--loop";
  std::filesystem::create_directories(loop / "snapshots");
  std::filesystem::create_symlink("self", loop / "snapshots" / "self");
  CHECK_THROWS_WITH(Model::load(loop), Catch::Contains("snapshots/self: a link that cannot be followed"));
}

TEST_CASE("hf: a Trainer's output folder opens as its last checkpoint, a folder of two runs as a pair",
          "[hf][checkpoint]") {
  // reyllama/DiffLlama-375M and reyllama/Llama_375M are Hugging Face Trainer runs: checkpoint-N folders
  // (config.json, model.safetensors, optimizer.pt, trainer_state.json, ...), the tokenizer beside them.
  // Assumed, not seen (the hub is not reachable here): stock DiffLlama / Llama configs, as written below.
  test::ScratchDir dir("hftrainer");
  HfSpec diff;
  diff.arch = "DiffLlamaForCausalLM";
  diff.shards = 1;
  diff.vocab = 1536;  // the test tokenizer's 1,462 tokens fit
  HfSpec llama;
  llama.shards = 1;
  const std::filesystem::path runs = dir / "runs", diff_run = runs / "DiffLlama-375M",
                              llama_run = runs / "Llama_375M";
  for (int step : {500, 1000, 1500}) {  // 1500 is the last; "1000" sorts before "500" as text
    write_hf(diff, diff_run / ("checkpoint-" + std::to_string(step)), static_cast<uint64_t>(step));
    test::write_all(diff_run / ("checkpoint-" + std::to_string(step)) / "trainer_state.json",
                    "{\"global_step\": " + std::to_string(step) + "}");
    test::write_all(diff_run / ("checkpoint-" + std::to_string(step)) / "optimizer.pt", "not read");
  }
  write_hf(llama, llama_run / "checkpoint-800", 8);
  std::filesystem::create_directories(diff_run / "checkpoint-x");  // not a step: ignored
  test::write_all(diff_run / "tokenizer.json", test::read_all(std::filesystem::path(DIFFLENS_SOURCE_DIR) /
                                                              "tests/data/bpe/llama3-style.tokenizer.json"));

  std::string note;
  CHECK(resolve_model_folder(diff_run, &note) == diff_run / "checkpoint-1500");
  CHECK(
      note ==
      "a Trainer run: its last save, checkpoint-1500 (of 3 checkpoint-N folders: give one to open another)");
  const Model m = Model::load(diff_run);
  CHECK(m.config().is_diff());
  CHECK(m.config().name == "DiffLlama-375M checkpoint-1500");
  check_against_reference(m, diff, {1, 40, 41, 99, 42, 43, 250, 44});
  // The tokenizer from the run's folder (the checkpoints hold none): text reads.
  CHECK(m.tokenizer().can_encode());
  CHECK(m.tokenizer().encode("a DiffLens", false).ids == std::vector<int64_t>{97, 1456});
  // One run is one model; the folder of both runs is a pair, DIFF on the left.
  CHECK(models_in(diff_run) == std::vector<std::filesystem::path>{diff_run});
  const auto both = models_in(runs);
  REQUIRE(both.size() == 2);
  CHECK(both[0] == diff_run);
  CHECK(both[1] == llama_run);
  const Model l = Model::load(llama_run);
  CHECK_FALSE(l.config().is_diff());
  CHECK(l.config().name == "Llama_375M checkpoint-800");
  // A checkpoint given itself opens as itself.
  CHECK(Model::load(diff_run / "checkpoint-500").config().name == "checkpoint-500");
}
