// Layout conversions and the Hugging Face writer.
#include "core/model/checkpoint_layout.h"

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/safetensors.h"

namespace difflens {
namespace {

// The sub-head holding component `comp` (0 or 1) of head `head` among n heads.
int64_t sub_head(DiffPairing p, int64_t n, int64_t head, int64_t comp) {
  return p == DiffPairing::Adjacent ? 2 * head + comp : comp * n + head;
}

// The dimension holding member `m` (0 or 1) of rotary pair `i` in a d-wide sub-head.
int64_t rope_dim(RopeStyle s, int64_t d, int64_t i, int64_t m) {
  return s == RopeStyle::Interleaved ? 2 * i + m : i + m * (d / 2);
}

// Rows of a projection [subs * d, cols]: new row (sub', dim') takes old row (sub, dim) where both name the
// same (head, component, rotary pair, member).
std::vector<float> permute_rows(const std::vector<float>& w, int64_t cols, int64_t heads, int64_t d,
                                bool diff, DiffPairing p_from, DiffPairing p_to, bool rotary,
                                RopeStyle r_from, RopeStyle r_to) {
  std::vector<float> out(w.size());
  const int64_t comps = diff ? 2 : 1;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t c = 0; c < comps; ++c) {
      const int64_t s_from = diff ? sub_head(p_from, heads, h, c) : h;
      const int64_t s_to = diff ? sub_head(p_to, heads, h, c) : h;
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t m = 0; m < 2; ++m) {
          const int64_t d_from = rotary ? rope_dim(r_from, d, i, m) : 2 * i + m;
          const int64_t d_to = rotary ? rope_dim(r_to, d, i, m) : 2 * i + m;
          const float* src = w.data() + (s_from * d + d_from) * cols;
          std::copy(src, src + cols, out.data() + (s_to * d + d_to) * cols);
        }
    }
  return out;
}

}  // namespace

std::vector<NamedTensor> convert_layout(const ModelConfig& from, const std::vector<NamedTensor>& tensors,
                                        const ModelConfig& to) {
  ModelConfig a = from, b = to;
  a.diff_pairing = b.diff_pairing;
  a.rope_style = b.rope_style;
  a.subln_weight = b.subln_weight;
  a.name = b.name;
  a.architecture = b.architecture;
  a.tokenizer = b.tokenizer;
  if (config_to_json_text(a) != config_to_json_text(b))
    throw Error("layout conversion: the two configs differ in more than the layout");
  const int64_t E = from.hidden_size, d = from.head_dim;
  // DIFF V2 permutes like the baseline: every query sub-head and key head is one d-wide rotary head, its
  // components adjacent whatever the rotary style; lambda_proj passes through.
  const bool diff = from.attention == AttentionKind::Diff;
  const int64_t H = diff ? from.num_attention_heads / 2 : from.num_attention_heads;
  const int64_t Hkv = diff ? from.num_key_value_heads / 2 : from.num_key_value_heads;
  std::map<std::string, std::vector<float>> subln;  // layer prefix -> learned norm weight
  for (const auto& t : tensors) {
    const std::string suffix = ".self_attn.subln.weight";
    if (t.name.size() > suffix.size() &&
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      subln[t.name.substr(0, t.name.size() - suffix.size())] = t.data;
  }
  std::vector<NamedTensor> out;
  for (const auto& t : tensors) {
    auto ends = [&](const std::string& s) {
      return t.name.size() > s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
    };
    NamedTensor n = t;
    if (ends(".self_attn.q_proj.weight")) {
      n.data = permute_rows(t.data, E, H, d, diff, from.diff_pairing, to.diff_pairing, true, from.rope_style,
                            to.rope_style);
    } else if (ends(".self_attn.k_proj.weight")) {
      n.data = permute_rows(t.data, E, Hkv, d, diff, from.diff_pairing, to.diff_pairing, true,
                            from.rope_style, to.rope_style);
    } else if (ends(".self_attn.v_proj.weight")) {
      n.data = permute_rows(t.data, E, Hkv, d, diff, from.diff_pairing, to.diff_pairing, false,
                            from.rope_style, to.rope_style);
    } else if (ends(".self_attn.subln.weight")) {
      if (!to.subln_weight) continue;  // folded into o_proj below
    } else if (ends(".self_attn.o_proj.weight") && diff && from.subln_weight && !to.subln_weight) {
      // o_proj · (w ⊙ norm(o)) = (o_proj · diag(w per head)) · norm(o): scale each head's 2d columns.
      const std::string layer =
          t.name.substr(0, t.name.size() - std::string(".self_attn.o_proj.weight").size());
      const std::vector<float>& w = subln.at(layer);
      const int64_t cols = H * 2 * d;
      for (int64_t r = 0; r < E; ++r)
        for (int64_t col = 0; col < cols; ++col)
          n.data[static_cast<size_t>(r * cols + col)] *= w[static_cast<size_t>(col % (2 * d))];
    }
    out.push_back(std::move(n));
    if (diff && !from.subln_weight && to.subln_weight && ends(".self_attn.lambda_k2")) {
      const std::string layer = t.name.substr(0, t.name.size() - std::string(".self_attn.lambda_k2").size());
      out.push_back(
          {layer + ".self_attn.subln.weight", {2 * d}, std::vector<float>(static_cast<size_t>(2 * d), 1.0f)});
    }
  }
  return out;
}

ModelConfig official_layout(const ModelConfig& from) {
  ModelConfig c = from;
  c.rope_style = RopeStyle::Interleaved;
  if (c.is_diff()) c.diff_pairing = DiffPairing::Adjacent;
  c.architecture = "difflens";
  return c;
}

ModelConfig hf_layout(const ModelConfig& from) {
  if (from.is_diff_v2())
    throw Error(
        "DIFF V2 has no Hugging Face architecture (transformers has none for it): keep it in "
        "DiffLens's format, whose tensor names are the official module's");
  ModelConfig c = from;
  c.rope_style = RopeStyle::Half;
  if (c.is_diff()) {
    if (c.subln_eps != c.rms_norm_eps)
      throw Error("DiffLlama normalises each head with rms_norm_eps; this model uses " +
                  std::to_string(c.subln_eps) + " there and " + std::to_string(c.rms_norm_eps) +
                  " elsewhere, so its DiffLlama form would not be exact");
    c.diff_pairing = DiffPairing::Half;
    c.subln_weight = false;
    c.architecture = "DiffLlamaForCausalLM";
  } else {
    c.architecture = "LlamaForCausalLM";
  }
  return c;
}

std::vector<std::string> save_hf(const Model& model, const std::filesystem::path& dir, DType dtype) {
  const ModelConfig& from = model.config();
  const ModelConfig to = hf_layout(from);
  const std::vector<NamedTensor> tensors = convert_layout(from, model.tensors(), to);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create directory (" + ec.message() + ")");
  std::vector<TensorToWrite> w;
  for (const auto& t : tensors) w.push_back({t.name, t.shape, t.data.data(), dtype});
  write_safetensors(dir / "model.safetensors", w, {{"format", "pt"}, {"producer", "difflens convert"}});
  nlohmann::json j;
  const bool diff = to.is_diff();
  j["architectures"] = {to.architecture};
  j["model_type"] = diff ? "diffllama" : "llama";
  j["hidden_size"] = to.hidden_size;
  j["intermediate_size"] = to.intermediate_size;
  j["num_hidden_layers"] = to.num_hidden_layers;
  j["num_attention_heads"] = to.num_attention_heads;
  j["num_key_value_heads"] = to.num_key_value_heads;
  j["head_dim"] = to.head_dim;
  j["vocab_size"] = to.vocab_size;
  // A diff-mlx model reads any length (max_position_embeddings is then a formality): the length it was
  // trained to is what a Hugging Face config states.
  j["max_position_embeddings"] = to.trained_positions > 0 ? to.trained_positions : to.max_position_embeddings;
  j["rms_norm_eps"] = to.rms_norm_eps;
  j["rope_theta"] = to.rope_theta;
  j["rope_scaling"] = nullptr;
  if (to.rope_scaling.kind == RopeScaling::Kind::Linear)
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", to.rope_scaling.factor}};
  else if (to.rope_scaling.kind == RopeScaling::Kind::Llama3)
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", to.rope_scaling.factor},
        {"low_freq_factor", to.rope_scaling.low_freq_factor},
        {"high_freq_factor", to.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", to.rope_scaling.original_max_position_embeddings}};
  j["tie_word_embeddings"] = to.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (!diff) j["mlp_bias"] = false;
  if (diff) j["lambda_std_dev"] = 0.1;
  if (to.bos_token_id >= 0) j["bos_token_id"] = to.bos_token_id;
  if (to.eos_token_id >= 0) j["eos_token_id"] = to.eos_token_id;
  j["torch_dtype"] = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  j["_name_or_path"] = from.name;
  write_file_atomically(dir / "config.json", j.dump(2) + "\n");
  std::vector<std::string> notes;
  const char* file = model.tokenizer().is_sentencepiece()    ? "tokenizer.model"
                     : model.tokenizer().is_byte_level_bpe() ? "tokenizer.json"
                                                             : nullptr;
  if (file && std::filesystem::exists(model.path() / file)) {
    std::filesystem::copy_file(model.path() / file, dir / file,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) throw Error((dir / file).string() + ": cannot copy (" + ec.message() + ")");
  } else {
    notes.push_back("no tokenizer file written: this model's tokenizer has no Hugging Face form");
  }
  if (diff && from.subln_weight) notes.push_back("the per-head norm weight was folded into o_proj (exact)");
  return notes;
}

}  // namespace difflens
