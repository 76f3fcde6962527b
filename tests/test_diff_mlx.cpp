// diff-mlx checkpoints (github.com/guygrigsby/diff-mlx; the hub's guygrigsby/diff-mlx pair): tiny random
// models written here as its checkpoint.py saves them (MLX parameter names under "model.", the optimizer's
// state under "opt.", run metadata {"model": {...}, "train": {...}} as config.json, latest.safetensors), read
// by Model::load and checked against a reference forward written out below in plain loops from its
// model.py's semantics — adjacent components (q heads 2h, 2h+1), MLX's traditional rope (pairs x[2i],
// x[2i+1]), out1 − λ·out2 through the per-head RMSNorm with its scale and (1 − λ_init(layer_idx − 1)),
// tied logits — not our tensor code. Also: the same weights in DiffLens's own layout, the paired-init
// relation between its two models, pair folders and hub cache folders, and what is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/formats/safetensors.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

struct MlxSpec {
  int64_t dim = 32, layers = 2, heads = 4, d = 8, vocab = 300, inter = 40, block = 128;
  double base = 500.0;  // small, so positions rotate visibly within a short prompt
  bool diff = true;
};

using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

// The model's parameters under MLX's names (diff-mlx's model.py), seeded. The shared ones (embedding,
// projections, norms, MLP) depend on the seed alone, so a DIFF and a plain model of one seed share them
// byte for byte, as diff-mlx's paired init makes them.
Tensors mlx_weights(const MlxSpec& s, uint32_t seed) {
  Tensors t;
  std::mt19937 rng(seed);
  std::normal_distribution<float> w(0.0f, 0.35f), scale(1.0f, 0.25f), lam(0.0f, 0.1f);
  auto add = [&](const std::string& n, std::vector<int64_t> shape, std::normal_distribution<float>& dist) {
    int64_t numel = 1;
    for (int64_t x : shape) numel *= x;
    std::vector<float> v(static_cast<size_t>(numel));
    for (float& x : v) x = dist(rng);
    t[n] = {shape, v};
  };
  add("tok_embed.weight", {s.vocab, s.dim}, w);
  std::mt19937 lam_rng(seed + 1000);  // λ and subln from their own stream: the shared weights stay paired
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    add(p + "norm_attn.scale", {s.dim}, scale);
    for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"})
      add(p + "attn." + m + ".weight", {s.dim, s.dim}, w);
    add(p + "norm_mlp.scale", {s.dim}, scale);
    add(p + "mlp.gate.weight", {s.inter, s.dim}, w);
    add(p + "mlp.up.weight", {s.inter, s.dim}, w);
    add(p + "mlp.down.weight", {s.dim, s.inter}, w);
    if (s.diff) {
      std::swap(rng, lam_rng);
      for (const char* m : {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"})
        add(p + "attn." + m, {s.d}, lam);
      add(p + "attn.subln.scale", {2 * s.d}, scale);
      std::swap(rng, lam_rng);
    }
  }
  add("final_norm.scale", {s.dim}, scale);
  return t;
}

nlohmann::json mlx_config(const MlxSpec& s) {
  nlohmann::json m = {{"dim", s.dim},           {"n_layers", s.layers},   {"n_heads_vanilla", s.heads},
                      {"qk_head_dim", s.d},     {"vocab_size", s.vocab},  {"mlp_intermediate", s.inter},
                      {"block_size", s.block},  {"rope_base", s.base},    {"rms_eps", 1e-5},
                      {"tie_embeddings", true}, {"amp_dtype", "bfloat16"}};
  return {{"model", m}, {"train", {{"peak_lr", 4e-4}, {"warmup_steps", 1000}, {"micro_batch", 8}}}};
}

// One safetensors entry as raw bytes in any dtype (TensorToWrite writes float dtypes only).
struct RawEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A safetensors file as the format defines it: 8-byte header length, the JSON header, the data.
void write_raw_safetensors(const std::filesystem::path& path, const std::vector<RawEntry>& entries,
                           const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = {{"__metadata__", metadata}};
  std::string data;
  for (const RawEntry& e : entries) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';
  const uint64_t n = h.size();
  test::write_all(path, std::string(reinterpret_cast<const char*>(&n), 8) + h + data);
}

// As diff-mlx's checkpoint.py saves a training checkpoint: the parameters under "model.", and the AdamW
// state MLX keeps under "opt.": its step as a 0-d U64, its learning rate as a 0-d F32, and each parameter's
// first and second moments under the parameter's own name (tree_flatten of the optimizer's state).
void write_mlx(const MlxSpec& s, const Tensors& t, const std::filesystem::path& dir,
               const std::string& file = "latest.safetensors") {
  std::filesystem::create_directories(dir);
  test::write_all(dir / "config.json", mlx_config(s).dump(2));
  test::write_all(dir / "metrics.jsonl", "{\"step\": 30000, \"loss\": 3.04}\n");
  std::vector<RawEntry> w;
  w.push_back({"opt.step", "U64", {}, bytes_of(std::vector<uint64_t>{30000})});
  w.push_back({"opt.learning_rate", "F32", {}, bytes_of(std::vector<float>{4e-4f})});
  for (const auto& [name, st] : t) {
    w.push_back({"model." + name, "F32", st.first, bytes_of(st.second)});
    for (const char* m : {".m", ".v"})
      w.push_back(
          {"opt." + name + m, "F32", st.first, bytes_of(std::vector<float>(st.second.size(), 0.01f))});
  }
  write_raw_safetensors(dir / file, w, {{"step", "30000"}, {"has_opt", "1"}});
}

// --- the reference forward (double), diff-mlx's model.py in loops --------------------------------------

using Mat = std::vector<std::vector<double>>;

Mat matmul_t(const Mat& x, const std::vector<float>& w, int64_t out, int64_t in) {
  Mat y(x.size(), std::vector<double>(static_cast<size_t>(out), 0.0));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += x[t][static_cast<size_t>(i)] * w[static_cast<size_t>(o * in + i)];
      y[t][static_cast<size_t>(o)] = acc;
    }
  return y;
}

std::vector<double> rms(const std::vector<double>& x, const std::vector<float>& scale, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  ms /= static_cast<double>(x.size());
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + eps) * scale[i];
  return y;
}

struct Ref {
  std::vector<std::vector<Mat>>
      maps;  // [layer][head] T x T: DIFF A1 of head h at 2h, A2 at 2h+1; plain: heads
  std::vector<double> last_logits;
};

Ref reference(const Tensors& W, const MlxSpec& s, const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), E = s.dim, D = s.d, n = s.heads;
  auto w = [&](const std::string& k) -> const std::vector<float>& { return W.at(k).second; };
  Mat x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e)
      x[t].push_back(w("tok_embed.weight")[static_cast<size_t>(ids[t] * E + e)]);
  // mx.fast.rope(traditional=True, dims=D): pair (x[2i], x[2i+1]) of each D-wide sub-head turned by
  // t · base^(-2i/D).
  auto rope = [&](Mat& m) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < n; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = static_cast<double>(t) *
                           std::pow(s.base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
          double& x0 = m[t][static_cast<size_t>(h * D + 2 * i)];
          double& x1 = m[t][static_cast<size_t>(h * D + 2 * i + 1)];
          const double n0 = x0 * std::cos(a) - x1 * std::sin(a), n1 = x0 * std::sin(a) + x1 * std::cos(a);
          x0 = n0;
          x1 = n1;
        }
  };
  Ref out;
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    Mat hn;
    for (const auto& row : x) hn.push_back(rms(row, w(p + "norm_attn.scale"), 1e-5));
    Mat q = matmul_t(hn, w(p + "attn.q_proj.weight"), E, E),
        k = matmul_t(hn, w(p + "attn.k_proj.weight"), E, E);
    const Mat v = matmul_t(hn, w(p + "attn.v_proj.weight"), E, E);
    rope(q);
    rope(k);
    std::vector<Mat> P(static_cast<size_t>(n));  // softmax of every D-wide sub-head (scale D^-0.5), causal
    for (int64_t h = 0; h < n; ++h) {
      P[h].assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(T), 0.0));
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> sc(static_cast<size_t>(i + 1));
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < D; ++e)
            dot += q[i][static_cast<size_t>(h * D + e)] * k[j][static_cast<size_t>(h * D + e)];
          sc[j] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, sc[j]);
        }
        for (int64_t j = 0; j <= i; ++j) z += std::exp(sc[j] - mx);
        for (int64_t j = 0; j <= i; ++j) P[h][i][j] = std::exp(sc[j] - mx) / z;
      }
    }
    out.maps.push_back(P);
    Mat attn(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(E), 0.0));
    if (!s.diff) {
      for (int64_t h = 0; h < n; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t e = 0; e < D; ++e) {
            double acc = 0;
            for (int64_t j = 0; j <= i; ++j) acc += P[h][i][j] * v[j][static_cast<size_t>(h * D + e)];
            attn[i][static_cast<size_t>(h * D + e)] = acc;
          }
    } else {
      auto dotv = [&](const char* a, const char* b) {
        double acc = 0;
        for (int64_t e = 0; e < D; ++e) acc += w(p + "attn." + a)[e] * w(p + "attn." + b)[e];
        return acc;
      };
      const double linit =
          0.8 - 0.6 * std::exp(-0.3 * static_cast<double>((l + 1) - 1));  // layer_idx = l + 1
      const double lambda =
          std::exp(dotv("lambda_q1", "lambda_k1")) - std::exp(dotv("lambda_q2", "lambda_k2")) + linit;
      for (int64_t h = 0; h < n / 2; ++h)  // v viewed (H, 2D): head h's V is columns [2hD, 2hD + 2D)
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> o(static_cast<size_t>(2 * D));
          for (int64_t e = 0; e < 2 * D; ++e) {
            double a1 = 0, a2 = 0;
            for (int64_t j = 0; j <= i; ++j) {
              a1 += P[2 * h][i][j] * v[j][static_cast<size_t>(h * 2 * D + e)];
              a2 += P[2 * h + 1][i][j] * v[j][static_cast<size_t>(h * 2 * D + e)];
            }
            o[e] = a1 - lambda * a2;
          }
          const std::vector<double> on = rms(o, w(p + "attn.subln.scale"), 1e-5);
          for (int64_t e = 0; e < 2 * D; ++e)
            attn[i][static_cast<size_t>(h * 2 * D + e)] = (1 - linit) * on[e];
        }
    }
    const Mat ao = matmul_t(attn, w(p + "attn.o_proj.weight"), E, E);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) x[t][e] += ao[t][e];
    Mat h2;
    for (const auto& row : x) h2.push_back(rms(row, w(p + "norm_mlp.scale"), 1e-5));
    const Mat g = matmul_t(h2, w(p + "mlp.gate.weight"), s.inter, E),
              u = matmul_t(h2, w(p + "mlp.up.weight"), s.inter, E);
    Mat act = g;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < s.inter; ++f) act[t][f] = g[t][f] / (1 + std::exp(-g[t][f])) * u[t][f];
    const Mat down = matmul_t(act, w(p + "mlp.down.weight"), E, s.inter);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) x[t][e] += down[t][e];
  }
  const std::vector<double> fin = rms(x.back(), w("final_norm.scale"), 1e-5);
  out.last_logits = matmul_t(Mat{fin}, w("tok_embed.weight"), s.vocab, E)[0];  // tied
  return out;
}

// The largest difference between the capture's maps and the reference's, and between next-token
// probabilities (top 5).
std::pair<double, double> against_reference(const Model& m, const Tensors& W, const MlxSpec& s,
                                            const std::vector<int64_t>& ids) {
  const Ref ref = reference(W, s, ids);
  CaptureOptions opt;
  opt.next_token_top_k = 5;
  const Trace t = m.capture(ids, opt);
  const int64_t T = static_cast<int64_t>(ids.size());
  double worst = 0;
  for (size_t l = 0; l < t.layers.size(); ++l)
    for (int64_t h = 0; h < (s.diff ? s.heads / 2 : s.heads); ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const size_t at = static_cast<size_t>((h * T + i) * T + j);
          if (s.diff) {
            worst = std::max(worst, std::fabs(t.layers[l].a1.data[at] - ref.maps[l][2 * h][i][j]));
            worst = std::max(worst, std::fabs(t.layers[l].a2.data[at] - ref.maps[l][2 * h + 1][i][j]));
          } else {
            worst = std::max(worst, std::fabs(t.layers[l].a.data[at] - ref.maps[l][h][i][j]));
          }
        }
  double mx = -INFINITY, z = 0, worst_p = 0;
  for (double v : ref.last_logits) mx = std::max(mx, v);
  for (double v : ref.last_logits) z += std::exp(v - mx);
  for (const auto& tp : t.next_token)
    worst_p = std::max(worst_p, std::fabs(tp.probability - std::exp(ref.last_logits[tp.id] - mx) / z));
  return {worst, t.next_token.size() == 5 ? worst_p : 1.0};
}

// A rank file of cl100k_base's shape (the real one is not shipped): the 256 bytes, then 100,000 made-up
// tokens "w0", "w1", ...
void write_fake_cl100k(const std::filesystem::path& file) {
  const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto b64 = [&](const std::string& b) {
    std::string out;
    for (size_t i = 0; i < b.size(); i += 3) {
      uint32_t v = 0;
      const size_t n = std::min<size_t>(3, b.size() - i);
      for (size_t j = 0; j < 3; ++j) v = (v << 8) | (j < n ? static_cast<uint8_t>(b[i + j]) : 0);
      for (size_t j = 0; j < 4; ++j) out += j <= n ? k[(v >> (18 - 6 * j)) & 63] : '=';
    }
    return out;
  };
  std::string ranks;
  for (int b = 0; b < 256; ++b)
    ranks += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (int i = 0; i < 100000; ++i)
    ranks += b64("w" + std::to_string(i)) + " " + std::to_string(256 + i) + "\n";
  test::write_all(file, ranks);
}

using test::run_cli;

const std::vector<int64_t> kIds = {5, 17, 200, 45, 45, 9, 280, 3, 77, 120, 121, 122, 17, 200};

std::string load_error(const std::filesystem::path& dir) {
  try {
    (void)Model::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("diff-mlx: both models as its checkpoints save them equal diff-mlx's own math",
          "[diffmlx][checkpoint][attention]") {
  test::ScratchDir dir("diffmlx");
  for (const bool diff : {true, false}) {
    MlxSpec s;
    s.diff = diff;
    const Tensors W = mlx_weights(s, 11);
    const std::filesystem::path folder = dir / (diff ? "diff" : "vanilla");
    write_mlx(s, W, folder);
    const Model m = Model::load(folder);
    const ModelConfig& c = m.config();
    CHECK(c.architecture == "diff-mlx");
    CHECK(c.attention == (diff ? AttentionKind::Diff : AttentionKind::Baseline));
    CHECK(c.map_heads() == (diff ? 2 : 4));
    CHECK(c.head_dim == 8);
    CHECK(c.tie_word_embeddings);
    CHECK(c.rope_style == RopeStyle::Interleaved);
    CHECK(c.trained_positions == 128);  // block_size: the length trained to, not a limit (its RoPE has none)
    CHECK(c.max_position_embeddings >= (1 << 20));
    CHECK(c.name == (diff ? "diff-mlx diff" : "diff-mlx vanilla"));
    // The optimizer's state is not the model's: only the parameters are read and counted; the file holds
    // MLX's U64 step and 0-d learning rate beside them, which are never read.
    const SafetensorsFile file(folder / "latest.safetensors");
    CHECK(file.at("opt.step").other_dtype == "U64");
    CHECK(file.at("opt.step").shape.empty());
    CHECK(file.at("opt.learning_rate").shape.empty());
    CHECK(file.tensors().size() == 2 + 3 * W.size());
    CHECK(m.tensors().size() == W.size());
    CHECK(m.parameter_count() == parameter_count(c));
    // No cl100k_base.tiktoken anywhere it is looked for: token ids, and the message says which file and
    // where.
    CHECK_FALSE(m.tokenizer().can_encode());
    CHECK_THAT(m.tokenizer_note(), Catch::Contains("no cl100k_base.tiktoken") &&
                                       Catch::Contains((folder / "cl100k_base.tiktoken").string()) &&
                                       Catch::Contains(kCl100kUrl));
    const auto [maps, probs] = against_reference(m, W, s, kIds);
    INFO((diff ? "diff" : "vanilla") << ": largest map difference " << maps << ", probability " << probs);
    CHECK(maps < 1e-5);
    CHECK(probs < 1e-5);
  }
}

TEST_CASE("diff-mlx: the published stage-1 config's shape, at a small width, with MLX's optimizer state",
          "[diffmlx][checkpoint][attention]") {
  // docs/paper/data/stage1/diff-config.json in diff-mlx's repository: dim 768, 12 layers, 12 vanilla heads,
  // qk_head_dim 64, vocab 100277, mlp_intermediate 2048, block_size 2048, bfloat16 amp - here at width 48
  // (12 heads of 4; the MLP at the same 8/3 ratio), every other number as published, the train section
  // included; the file holds MLX's AdamW state (opt.step U64, 0-d opt.learning_rate, opt.NAME.m / .v).
  test::ScratchDir dir("diffmlx-stage1");
  for (const bool diff : {true, false}) {
    MlxSpec s;
    s.dim = 48;
    s.layers = 12;
    s.heads = 12;
    s.d = 4;
    s.vocab = 100277;
    s.inter = 128;
    s.block = 2048;
    s.base = 10000.0;
    s.diff = diff;
    const Tensors W = mlx_weights(s, 23);
    const std::filesystem::path folder = dir / (diff ? "diff" : "vanilla");
    write_mlx(s, W, folder);
    nlohmann::json config = mlx_config(s);
    config["train"] = {{"peak_lr", 0.0004},
                       {"warmup_steps", 1000},
                       {"total_tokens", 2000000000},
                       {"micro_batch", 8},
                       {"grad_accum", 4},
                       {"weight_decay", 0.1},
                       {"adam_beta1", 0.9},
                       {"adam_beta2", 0.95},
                       {"adam_eps", 1e-08},
                       {"grad_clip", 1.0},
                       {"eval_every", 1000},
                       {"full_eval_every", 5000},
                       {"monitoring_tokens", 2000000},
                       {"full_eval_tokens", 75000000},
                       {"save_every", 500}};
    test::write_all(folder / "config.json", config.dump(2));
    const Model m = Model::load(folder);
    const ModelConfig& c = m.config();
    CHECK(c.num_hidden_layers == 12);
    CHECK(c.map_heads() == (diff ? 6 : 12));
    CHECK(c.head_dim == 4);
    CHECK(c.vocab_size == 100277);
    CHECK(c.intermediate_size == 128);
    CHECK(c.trained_positions == 2048);
    CHECK(c.tie_word_embeddings);
    CHECK(m.tensors().size() == W.size());
    const auto [maps, probs] = against_reference(m, W, s, kIds);
    // Twelve layers of these random weights (std 0.35, no training to tame them) amplify float32 rounding:
    // measured 2.7e-5 at most in a map, 2.2e-5 in a next-token probability (the two-layer fixtures: under
    // 1e-5).
    std::printf("diff-mlx stage-1 shape, %s: largest map difference %.2g, probability %.2g\n",
                diff ? "diff" : "vanilla", maps, probs);
    CHECK(maps < 1e-4);
    CHECK(probs < 1e-4);
  }
}

TEST_CASE("diff-mlx: a prompt longer than block_size runs, equal to its math, with a note that says so",
          "[diffmlx][checkpoint][attention]") {
  // diff-mlx's model has no length limit (its RoPE is computed, not a table): 14 tokens through a model
  // trained to 8 are what its own forward gives, and every surface says the model never saw that length.
  test::ScratchDir dir("diffmlx-long");
  MlxSpec s;
  s.block = 8;
  const Tensors W = mlx_weights(s, 5);
  write_mlx(s, W, dir / "diff");
  const Model m = Model::load(dir / "diff");
  CHECK(m.config().trained_positions == 8);
  const auto [maps, probs] = against_reference(m, W, s, kIds);
  CHECK(maps < 1e-5);
  CHECK(probs < 1e-5);
  CHECK(positions_note(m.config(), 8).empty());
  CHECK_THAT(positions_note(m.config(), 14),
             Catch::Contains("the prompt's 14 tokens pass the 8 this model was trained to (block_size)"));
  test::CliRun r = run_cli("info --model " + (dir / "diff").string(), dir);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("positions: trained to 8 tokens (block_size); longer prompts run"));
  r = run_cli("capture --model " + (dir / "diff").string() +
                  " --token-ids 5,17,200,45,45,9,280,3,77,120,121,122,17,200 --out " +
                  (dir / "bundle").string(),
              dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("difflens: note: the prompt's 14 tokens pass the 8"));
  CHECK_THAT(r.out, Catch::Contains("tokens    14"));
}

TEST_CASE("diff-mlx: the same weights in DiffLens's own layout give the same maps",
          "[diffmlx][checkpoint][convert]") {
  test::ScratchDir dir("diffmlxconv");
  MlxSpec s;
  const Tensors W = mlx_weights(s, 12);
  write_mlx(s, W, dir / "diff");
  const Model m = Model::load(dir / "diff");
  ModelConfig own = m.config();
  own.architecture = "difflens";
  Model::from_tensors(own, m.tensors()).save(dir / "native");
  const Model n = Model::load(dir / "native");
  CHECK(n.config().architecture == "difflens");
  CHECK(n.config().tokenizer == TokenizerKind::Tiktoken);  // its config names the tokenizer it lacks here
  const Trace a = m.capture(kIds), b = n.capture(kIds);
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    CHECK(a.layers[l].a1.data == b.layers[l].a1.data);
    CHECK(a.layers[l].a2.data == b.layers[l].a2.data);
    CHECK(a.layers[l].lambda == b.layers[l].lambda);
  }
  // λ_init follows diff-mlx's 1-indexed layer_idx: 0.2 in its first layer, as in DiffLens's 0-indexed rule.
  CHECK(lambda_init(0) == Approx(0.2));
}

TEST_CASE("diff-mlx: its plain model's heads 2h and 2h+1 are the DIFF model's head h components, paired",
          "[diffmlx][checkpoint]") {
  // diff-mlx initialises both models from byte-identical weights: the same q/k projections give the plain
  // model's head 2h the DIFF model's A1 of head h, and head 2h+1 its A2 — exactly, in the first layer
  // (whose input is the same embedding and norm).
  test::ScratchDir dir("diffmlxpair");
  MlxSpec s;
  write_mlx(s, mlx_weights(s, 13), dir / "diff");
  s.diff = false;
  write_mlx(s, mlx_weights(s, 13), dir / "vanilla");
  const Model d = Model::load(dir / "diff"), v = Model::load(dir / "vanilla");
  const Trace td = d.capture(kIds), tv = v.capture(kIds);
  const size_t TT = kIds.size() * kIds.size();
  for (size_t h = 0; h < 2; ++h)
    for (size_t k = 0; k < TT; ++k) {
      REQUIRE(tv.layers[0].a.data[(2 * h) * TT + k] == Approx(td.layers[0].a1.data[h * TT + k]).margin(1e-6));
      REQUIRE(tv.layers[0].a.data[(2 * h + 1) * TT + k] ==
              Approx(td.layers[0].a2.data[h * TT + k]).margin(1e-6));
    }
}

TEST_CASE("diff-mlx: the pair's folder, or its hub cache folder, holds both models, DIFF first",
          "[diffmlx][checkpoint]") {
  test::ScratchDir dir("diffmlxhub");
  MlxSpec s;
  // The hub's layout: models--guygrigsby--diff-mlx/{refs/main, snapshots/HASH/{diff,vanilla}, blobs}.
  const std::filesystem::path cache = dir / "hub" / "models--guygrigsby--diff-mlx";
  const std::filesystem::path snap = cache / "snapshots" / "0123abcd";
  write_mlx(s, mlx_weights(s, 14), snap / "diff");
  s.diff = false;
  write_mlx(s, mlx_weights(s, 14), snap / "vanilla");
  test::write_all(snap / "README.md", "# diff-mlx\n");
  std::filesystem::create_directories(cache / "refs");
  test::write_all(cache / "refs" / "main", "0123abcd\n");
  CHECK(models_in(snap) == std::vector<std::filesystem::path>{snap / "diff", snap / "vanilla"});
  CHECK(models_in(cache) == std::vector<std::filesystem::path>{snap / "diff", snap / "vanilla"});
  CHECK(models_in(snap / "vanilla") == std::vector<std::filesystem::path>{snap / "vanilla"});
  // One model is asked for, the folder holds two: it says which.
  CHECK_THAT(load_error(cache), Catch::Contains("holds 2 models in sub-folders (diff, vanilla)"));
  // Typed with a trailing slash (tab completion): the same folders, the same names.
  CHECK(models_in(cache.string() + "/") ==
        std::vector<std::filesystem::path>{snap / "diff", snap / "vanilla"});
  CHECK(Model::load(snap.string() + "/diff/").config().name == "diff-mlx diff");
  // A folder of hub cache folders (the hub's own cache): each model by its cache folder, a broken one left
  // out; the pair is the first DIFF model and the first that is not one, by their configs.
  const std::filesystem::path hub = dir / "hub2";
  for (const auto& [name, diff] : std::vector<std::pair<std::string, bool>>{
           {"models--a--one", true}, {"models--b--two", true}, {"models--c--plain", false}}) {
    MlxSpec t;
    t.diff = diff;
    write_mlx(t, mlx_weights(t, 19), hub / name / "snapshots" / "aa");  // one model: the snapshot is it
  }
  std::filesystem::create_directories(hub / "models--d--cut" / "snapshots" / "bb");  // nothing downloaded
  std::filesystem::create_directories(hub / "models--d--cut" / "refs");
  test::write_all(hub / "models--d--cut" / "refs" / "main", "cc\n");  // names a snapshot not there
  const std::vector<std::filesystem::path> cached = models_in(hub);
  CHECK(cached == std::vector<std::filesystem::path>{hub / "models--a--one", hub / "models--b--two",
                                                     hub / "models--c--plain"});
  CHECK(pair_of(cached) == std::make_pair(hub / "models--a--one", hub / "models--c--plain"));
  CHECK(Model::load(hub / "models--c--plain").config().name == "diff-mlx models--c--plain");
  // One model in a sub-folder: that folder is named.
  std::filesystem::create_directories(dir / "one");
  std::filesystem::rename(hub / "models--c--plain", dir / "one" / "models--c--plain");
  CHECK_THAT(load_error(dir / "one"),
             Catch::Contains("the model is in its sub-folder models--c--plain: give that folder"));
  // A cache folder whose refs/main names a snapshot that is not there, or several snapshots and no ref.
  test::write_all(cache / "refs" / "main", "ffff\n");
  CHECK_THROWS_WITH(models_in(cache), Catch::Contains("names the snapshot ffff, which is not in"));
  std::filesystem::remove(cache / "refs" / "main");
  std::filesystem::create_directories(cache / "snapshots" / "99");
  CHECK_THROWS_WITH(models_in(cache), Catch::Contains("several snapshots (0123abcd, 99) and no refs/main"));
  // A folder in no layout DiffLens reads: the layouts, and what it holds.
  std::filesystem::create_directories(dir / "stuff" / "notes");
  test::write_all(dir / "stuff" / "weights.bin", "x");
  CHECK_THROWS_WITH(models_in(dir / "stuff"),
                    Catch::Contains("not a model folder (no config.json) and no model in its sub-folders") &&
                        Catch::Contains("a diff-mlx folder (config.json with n_heads_vanilla") &&
                        Catch::Contains("It holds: notes/, weights.bin"));
}

TEST_CASE("diff-mlx: cl100k_base.tiktoken beside the pair reads text for both, or in tiktoken's cache",
          "[diffmlx][tokenizer][tiktoken]") {
  test::ScratchDir dir("diffmlxtok");
  MlxSpec s;
  s.vocab = 100277;  // cl100k_base's
  s.layers = 1;
  write_mlx(s, mlx_weights(s, 16), dir / "pair" / "diff");
  write_fake_cl100k(dir / "pair" / "cl100k_base.tiktoken");
  const Model m = Model::load(dir / "pair" / "diff");
  INFO(m.tokenizer_note());
  REQUIRE(m.tokenizer().can_encode());
  CHECK(m.tokenizer_note().empty());
  const Encoding e = m.tokenizer().encode("w42 w7", true);
  CHECK(e.ids.front() == 100257);  // a prompt starts after <|endoftext|>, as documents do in its training
  CHECK(m.tokenizer().decode(e.ids) == "<|endoftext|>w42 w7");
  // In tiktoken's cache instead (named by the SHA-1 of its download address).
  std::filesystem::create_directories(dir / "cache");
  std::filesystem::rename(dir / "pair" / "cl100k_base.tiktoken",
                          dir / "cache" / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4");
  setenv("TIKTOKEN_CACHE_DIR", (dir / "cache").c_str(), 1);
  const bool cached = Model::load(dir / "pair" / "diff").tokenizer().can_encode();
  unsetenv("TIKTOKEN_CACHE_DIR");
  CHECK(cached);
}

TEST_CASE("diff-mlx: hostile folders are refused with what is wrong", "[diffmlx][checkpoint][errors]") {
  test::ScratchDir dir("diffmlxbad");
  MlxSpec s;
  Tensors W = mlx_weights(s, 15);
  SECTION("a tensor is missing") {
    W.erase("blocks.1.attn.lambda_k2");
    write_mlx(s, W, dir / "m");
    CHECK_THAT(load_error(dir / "m"),
               Catch::Contains("tensor 'model.layers.1.self_attn.lambda_k2' is missing"));
  }
  SECTION("a tensor has the wrong shape") {
    W["blocks.0.mlp.up.weight"].first = {s.dim, s.inter};
    write_mlx(s, W, dir / "m");
    CHECK_THAT(load_error(dir / "m"),
               Catch::Contains("tensor 'model.blocks.0.mlp.up.weight' is [32,40], config expects [40,32]"));
  }
  SECTION("a tensor diff-mlx does not have") {
    W["blocks.0.attn.q_norm.scale"] = {{s.d}, std::vector<float>(static_cast<size_t>(s.d), 1.0f)};
    write_mlx(s, W, dir / "m");
    CHECK_THAT(load_error(dir / "m"),
               Catch::Contains("unexpected tensor 'model.blocks.0.attn.q_norm.scale'"));
  }
  SECTION("config values and fields diff-mlx does not have") {
    write_mlx(s, W, dir / "m");
    auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
      nlohmann::json j = mlx_config(s);
      edit(j["model"]);
      test::write_all(dir / "m" / "config.json", j.dump());
      return load_error(dir / "m");
    };
    CHECK_THAT(with([](auto& m) { m["amp_dtype"] = "float16"; }),
               Catch::Contains("amp_dtype 'float16' is not one diff-mlx has (float32, bfloat16)"));
    CHECK_THAT(with([](auto& m) { m["qk_norm"] = true; }),
               Catch::Contains("'qk_norm' is not a field of diff-mlx's model config"));
    // diff-mlx's model ties the embeddings whatever the flag says: false opens, tied.
    CHECK(with([](auto& m) { m["tie_embeddings"] = false; }) == "(loaded)");
    CHECK_THAT(with([](auto& m) { m["tie_embeddings"] = "no"; }),
               Catch::Contains("'tie_embeddings' must be true or false"));
    CHECK_THAT(with([](auto& m) { m["n_heads_vanilla"] = 3; }),
               Catch::Contains("dim 32 is not n_heads_vanilla x qk_head_dim (3 x 8)"));
    CHECK_THAT(with([](auto& m) { m.erase("block_size"); }), Catch::Contains("missing field 'block_size'"));
  }
  SECTION("a parameter in a dtype DiffLens does not read is refused by name; the optimizer's are skipped") {
    write_mlx(s, W, dir / "m");
    std::vector<RawEntry> w = {{"opt.step", "U64", {}, bytes_of(std::vector<uint64_t>{7})}};
    for (const auto& [name, st] : W)
      w.push_back({"model." + name, name == "final_norm.scale" ? "I32" : "F32", st.first,
                   bytes_of(st.second)});  // I32 and F32 have the same size: the header holds
    write_raw_safetensors(dir / "m" / "latest.safetensors", w, {});
    CHECK_THAT(
        load_error(dir / "m"),
        Catch::Contains("tensor 'model.final_norm.scale': dtype I32 is not supported (F32, F16, BF16 are)"));
  }
  SECTION("two checkpoints and no latest.safetensors") {
    write_mlx(s, W, dir / "m", "step-1000.safetensors");
    write_mlx(s, W, dir / "m", "step-2000.safetensors");
    CHECK_THAT(load_error(dir / "m"),
               Catch::Contains("several checkpoints (step-1000.safetensors, step-2000.safetensors)"));
  }
  SECTION("no weights at all") {
    std::filesystem::create_directories(dir / "m");
    test::write_all(dir / "m" / "config.json", mlx_config(s).dump());
    CHECK_THAT(load_error(dir / "m"),
               Catch::Contains("a diff-mlx folder without weights (no latest.safetensors)"));
  }
}

TEST_CASE("diff-mlx: the CLI takes the pair's folder for --models, converts and captures it as it is",
          "[diffmlx][cli][convert]") {
  test::ScratchDir dir("diffmlxcli");
  MlxSpec s;
  s.vocab = 100277;
  s.layers = 1;
  const std::filesystem::path pair = dir / "diff-mlx";
  write_mlx(s, mlx_weights(s, 17), pair / "diff");
  s.diff = false;
  write_mlx(s, mlx_weights(s, 17), pair / "vanilla");
  write_fake_cl100k(pair / "cl100k_base.tiktoken");
  const std::string p = "'" + pair.string() + "'";
  test::CliRun r =
      run_cli("lens --models " + p + " --prompt 'w1 w2 w3' --out '" + (dir / "lens.csv").string() + "'", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string lens = test::read_all(dir / "lens.csv");
  CHECK(lens.find("\ndiff-mlx diff,") != std::string::npos);
  CHECK(lens.find("\ndiff-mlx vanilla,") != std::string::npos);
  r = run_cli("info --model " + p, dir);
  CHECK(r.status == 1);
  CHECK(r.out.find("holds 2 models in sub-folders (diff, vanilla)") != std::string::npos);
  r = run_cli("info --model " + p + "/diff", dir);
  CHECK(r.out.find("architecture: diff-mlx") != std::string::npos);
  CHECK(r.out.find("(official layout: adjacent components)") != std::string::npos);
  // Into DiffLens's own format (the tokenizer file goes along) and into DiffLlama: the same maps.
  r = run_cli("convert --from " + p + "/diff --to '" + (dir / "native").string() + "'", dir);
  REQUIRE(r.status == 0);
  CHECK(std::filesystem::file_size(dir / "native/cl100k_base.tiktoken") ==
        std::filesystem::file_size(pair / "cl100k_base.tiktoken"));
  r = run_cli("convert --from " + p + "/diff --format hf --to '" + (dir / "hf").string() + "'", dir);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("DiffLlamaForCausalLM") != std::string::npos);
  const Model mlx = Model::load(pair / "diff"), native = Model::load(dir / "native"),
              hf = Model::load(dir / "hf");
  CHECK(native.tokenizer().can_encode());
  const std::vector<int64_t> ids = mlx.tokenizer().encode("w1 w2 w3 w1 w2", true).ids;
  const Trace a = mlx.capture(ids), b = native.capture(ids), c = hf.capture(ids);
  float worst = 0;
  for (size_t k = 0; k < a.layers[0].a1.data.size(); ++k) {
    CHECK(a.layers[0].a1.data[k] == b.layers[0].a1.data[k]);
    worst = std::max({worst, std::fabs(a.layers[0].a1.data[k] - c.layers[0].a1.data[k]),
                      std::fabs(a.layers[0].a2.data[k] - c.layers[0].a2.data[k])});
  }
  CHECK(worst < 1e-5f);
}

TEST_CASE("diff-mlx: File > Open model on the pair's folder fills both slots, DIFF on the left",
          "[diffmlx][gui][play]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  test::ScratchDir dir("diffmlxgui");
  MlxSpec s;
  s.vocab = 100277;
  s.layers = 1;
  const std::filesystem::path pair = dir / "models--guygrigsby--diff-mlx" / "snapshots" / "abc";
  write_mlx(s, mlx_weights(s, 18), pair / "diff");
  s.diff = false;
  write_mlx(s, mlx_weights(s, 18), pair / "vanilla");
  write_fake_cl100k(pair / "cl100k_base.tiktoken");
  // The hub cache folder as downloaded (one snapshot, its refs/main missing: the only snapshot is taken),
  // opened into the right slot: the pair still goes DIFF left, plain right.
  test::write_all(dir / "s.play", "size 800x600\nopen right model " +
                                      (dir / "models--guygrigsby--diff-mlx").string() +
                                      "\nwait\nprompt w1 w2 w3 w4 w1 w2\nwait\nexport page " +
                                      (dir / "p.html").string() + "\nquit\n");
  test::CliRun r;
  for (int attempt = 0; attempt < 2; ++attempt) {
    r = run_cli("--play '" + (dir / "s.play").string() + "' --threads 1", dir);
    if (r.status == 0 || !test::display_refused(r.out)) break;
  }
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("play: done: 7 of 7 actions") != std::string::npos);
  CHECK(r.out.find("opened " + (dir / "models--guygrigsby--diff-mlx").string() +
                   ": diff on the left, vanilla on the right") != std::string::npos);
  const std::string page = test::read_all(dir / "p.html");  // the page names the models it shows
  const size_t left = page.find("diff-mlx diff"), right = page.find("diff-mlx vanilla");
  CHECK(left != std::string::npos);
  CHECK(right != std::string::npos);
  CHECK(left < right);
}
