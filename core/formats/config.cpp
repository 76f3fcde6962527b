// config.json parsing, validation and the matched-pair factory.
#include "core/formats/config.h"
#include "core/formats/bounded_read.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"

namespace difflens {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw ConfigError(source + ": " + what);
}

int64_t get_int(const json& j, const char* key, const std::string& source, bool required, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) fail(source, std::string("missing field '") + key + "'");
    return fallback;
  }
  if (!it->is_number_integer()) fail(source, std::string("field '") + key + "' must be an integer");
  return it->get<int64_t>();
}

double get_double(const json& j, const char* key, const std::string& source, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail(source, std::string("field '") + key + "' must be a number");
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(source, std::string("field '") + key + "' must be true or false");
  return it->get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& source, const char* fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!fallback) fail(source, std::string("missing field '") + key + "'");
    return fallback;
  }
  if (!it->is_string()) fail(source, std::string("field '") + key + "' must be a string");
  return it->get<std::string>();
}

// The two kinds of config.json config_from_json_text reads.
enum class Dialect { DiffLens, HuggingFace };

// A key that both readers take the same way into the same field. Its type is the field's: an integer
// (get_int: required or not), a number (get_double) or a bool (get_bool), each refusing a value of another
// type with the same message in both. When the key is absent it takes `fallback` of the dialect (a Hugging
// Face config means what transformers' LlamaConfig assumes), or, with `derived`, a value computed from the
// keys read before it. The limits are ModelConfig::validate's, which both readers end with.
struct SharedKey {
  const char* name;
  std::variant<int64_t ModelConfig::*, double ModelConfig::*, bool ModelConfig::*> field;
  bool required;  // integer keys only
  struct {
    double difflens, hugging_face;  // an integer's or a bool's exactly
  } fallback;
  int64_t (*derived)(const ModelConfig& read_so_far);  // null: the fallback
};

// Without num_key_value_heads: no grouped queries, a key/value head per query head.
int64_t kv_heads_when_absent(const ModelConfig& c) {
  return c.num_attention_heads;
}
// Without head_dim: the width split among the heads.
int64_t head_dim_when_absent(const ModelConfig& c) {
  return c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
}

// The keys both readers share, in the order both read them (so that a config with several bad keys is told
// of the same one first). Each reader takes them in runs between keys of its own (read_shared_keys).
const SharedKey kSharedKeys[] = {
    {"hidden_size", &ModelConfig::hidden_size, true, {0, 0}, nullptr},
    {"num_hidden_layers", &ModelConfig::num_hidden_layers, true, {0, 0}, nullptr},
    {"num_attention_heads", &ModelConfig::num_attention_heads, true, {0, 0}, nullptr},
    {"num_key_value_heads", &ModelConfig::num_key_value_heads, false, {0, 0}, kv_heads_when_absent},
    {"head_dim", &ModelConfig::head_dim, false, {0, 0}, head_dim_when_absent},
    {"intermediate_size", &ModelConfig::intermediate_size, true, {0, 0}, nullptr},
    {"vocab_size", &ModelConfig::vocab_size, true, {0, 0}, nullptr},
    {"max_position_embeddings", &ModelConfig::max_position_embeddings, false, {4096, 2048}, nullptr},
    {"rope_theta", &ModelConfig::rope_theta, false, {10000.0, 10000.0}, nullptr},
    {"rms_norm_eps", &ModelConfig::rms_norm_eps, false, {1e-5, 1e-6}, nullptr},
    {"tie_word_embeddings", &ModelConfig::tie_word_embeddings, false, {0, 0}, nullptr},
};

// Reads kSharedKeys from `first` through `last` (`first` alone when `last` is empty) into `c`.
void read_shared_keys(const json& j, Dialect dialect, const std::string& src, ModelConfig& c,
                      std::string_view first, std::string_view last = {}) {
  if (last.empty()) last = first;
  const auto* k = std::find_if(std::begin(kSharedKeys), std::end(kSharedKeys),
                               [&](const SharedKey& key) { return key.name == first; });
  assert(k != std::end(kSharedKeys));
  for (; k != std::end(kSharedKeys); ++k) {
    const double fallback = dialect == Dialect::DiffLens ? k->fallback.difflens : k->fallback.hugging_face;
    if (const auto* f = std::get_if<int64_t ModelConfig::*>(&k->field))
      c.*(*f) =
          get_int(j, k->name, src, k->required, k->derived ? k->derived(c) : static_cast<int64_t>(fallback));
    else if (const auto* f = std::get_if<double ModelConfig::*>(&k->field))
      c.*(*f) = get_double(j, k->name, src, fallback);
    else
      c.*std::get<bool ModelConfig::*>(k->field) = get_bool(j, k->name, src, fallback != 0);
    if (k->name == last) return;
  }
  assert(false && "read_shared_keys: `last` is not after `first` in kSharedKeys");
}

// The scaling a rope object declares: `rope_scaling` (transformers < 5) or `rope_parameters` (>= 5, which
// also holds rope_theta). A key DiffLens does not compute is refused by name, never ignored: each one
// changes the rotary angles.
RopeScaling read_rope_object(const json& o, const std::string& where, const std::string& src) {
  std::string type = get_string(o, "rope_type", src, "");
  if (type.empty()) type = get_string(o, "type", src, "default");
  if (type != "default" && type != "linear" && type != "llama3")
    fail(src, where + " type '" + type +
                  "' is not supported (DiffLens computes 'default', 'linear' and 'llama3')");
  static const char* const kKnown[] = {"rope_type",
                                       "type",
                                       "rope_theta",
                                       "factor",
                                       "low_freq_factor",
                                       "high_freq_factor",
                                       "original_max_position_embeddings"};
  for (const auto& item : o.items()) {
    const std::string& k = item.key();
    if (k == "partial_rotary_factor") {
      if (!item.value().is_number() || item.value().get<double>() != 1.0)
        fail(src, where + ".partial_rotary_factor other than 1 is not supported");
      continue;
    }
    if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown))
      fail(src, where + " has '" + k + "', which DiffLens does not compute for rope_type '" + type +
                    "': refused rather than ignored, since it changes the rotary angles");
  }
  // The numbers a scaling kind needs are required: a default would silently change the angles.
  auto number = [&](const char* key) {
    if (!o.contains(key) || !o[key].is_number())
      fail(src, where + " (rope_type '" + type + "') needs a number '" + key + "'");
    return o[key].get<double>();
  };
  RopeScaling r;
  if (type == "default") return r;
  r.kind = type == "linear" ? RopeScaling::Kind::Linear : RopeScaling::Kind::Llama3;
  r.factor = number("factor");
  if (r.kind == RopeScaling::Kind::Llama3) {
    r.low_freq_factor = number("low_freq_factor");
    r.high_freq_factor = number("high_freq_factor");
    const double original = number("original_max_position_embeddings");
    if (!(original >= 1 && original <= 1e9))  // before the cast: a double beyond int64 is undefined behaviour
      fail(src, where + ": 'original_max_position_embeddings' is " + std::to_string(original) +
                    "; expected a positive number of positions");
    r.original_max_position_embeddings = static_cast<int64_t>(original);
  }
  return r;
}

RopeScaling read_rope_scaling(const json& j, const std::string& src) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_object()) fail(src, "'rope_scaling' must be an object or null");
  return read_rope_object(*it, "rope_scaling", src);
}

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  return a.kind == b.kind && (a.kind == RopeScaling::Kind::None ||
                              (a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
                               a.high_freq_factor == b.high_freq_factor &&
                               a.original_max_position_embeddings == b.original_max_position_embeddings));
}

// θ and scaling of a Hugging Face config in either style: top-level rope_theta + rope_scaling
// (transformers < 5) or one rope_parameters object (>= 5). Both present must agree.
void read_hf_rope(const json& j, const std::string& src, ModelConfig& c) {
  read_shared_keys(j, Dialect::HuggingFace, src, c, "rope_theta");
  c.rope_scaling = read_rope_scaling(j, src);
  auto it = j.find("rope_parameters");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) fail(src, "'rope_parameters' must be an object or null");
  auto theta = it->find("rope_theta");
  if (theta == it->end() || !theta->is_number())
    fail(src, "rope_parameters has no numeric rope_theta (transformers 5 writes it there)");
  const RopeScaling scaling = read_rope_object(*it, "rope_parameters", src);
  if (j.contains("rope_theta") && !j["rope_theta"].is_null() &&
      get_double(j, "rope_theta", src, 0) != theta->get<double>())
    fail(src, "rope_theta " + j["rope_theta"].dump() + " and rope_parameters.rope_theta " + theta->dump() +
                  " disagree");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null() && !same_scaling(c.rope_scaling, scaling))
    fail(src, "rope_scaling and rope_parameters declare different rotary scalings");
  c.rope_theta = theta->get<double>();
  c.rope_scaling = scaling;
}

// Top-level keys that name rotary or attention settings and that DiffLens knows (reads, or knows to be
// irrelevant to the maps): any other such key is refused rather than ignored.
void refuse_unknown_attention_keys(const json& j, const std::string& src) {
  static const char* const kKnown[] = {"rope_theta",         "rope_scaling",      "rope_parameters",
                                       "attention_bias",     "attention_dropout", "num_attention_heads",
                                       "num_key_value_heads"};
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (k.empty() || k[0] == '_') continue;  // transformers' private bookkeeping
    const bool about_attention = k.find("rope") != std::string::npos || k.find("attn") != std::string::npos ||
                                 k.find("attention") != std::string::npos;
    if (about_attention && std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown))
      fail(src, "'" + k +
                    "' is a rotary/attention setting DiffLens does not compute: refused rather than "
                    "ignored, since it may change the maps");
  }
}

void write_rope_scaling(json& j, const RopeScaling& r) {
  if (r.kind == RopeScaling::Kind::None) return;
  json s;
  s["rope_type"] = r.kind == RopeScaling::Kind::Linear ? "linear" : "llama3";
  s["factor"] = r.factor;
  if (r.kind == RopeScaling::Kind::Llama3) {
    s["low_freq_factor"] = r.low_freq_factor;
    s["high_freq_factor"] = r.high_freq_factor;
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  j["rope_scaling"] = s;
}

// A token id that Hugging Face configs give as an integer, a list (first one counts) or null (absent).
int64_t token_id(const json& j, const char* key, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  if (it->is_array()) {
    if (it->empty()) return -1;
    if (!(*it)[0].is_number_integer()) fail(src, std::string("'") + key + "' must hold integers");
    return (*it)[0].get<int64_t>();
  }
  if (!it->is_number_integer()) fail(src, std::string("'") + key + "' must be an integer, a list or null");
  return it->get<int64_t>();
}

// A Hugging Face config.json (Llama family or DiffLlama) in DiffLens terms.
ModelConfig config_from_hf(const json& j, const std::string& src) {
  std::string arch;
  if (auto it = j.find("architectures");
      it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    arch = (*it)[0].get<std::string>();
  const std::string model_type = get_string(j, "model_type", src, "");
  // peihaowang/diff-transformer-410m-nh16-dclm-7.5b and its kin: "DiffLlamaForCausalLM" by name, but
  // model_type "diff_llama" and an attn_family of their own code, which is not published; transformers'
  // DiffLlama is "diffllama". Reading it as that would guess the layout of q, k, λ and the norm.
  if (model_type == "diff_llama" || j.contains("attn_family"))
    fail(src, "model_type '" + model_type + "'" +
                  (j.contains("attn_family")
                       ? " with attn_family " + (j["attn_family"].is_string()
                                                     ? "'" + j["attn_family"].get<std::string>() + "'"
                                                     : j["attn_family"].dump())
                       : std::string()) +
                  " is not transformers' DiffLlama (model_type 'diffllama'): its modelling code is not "
                  "published, so how it splits q and k into the two components, parameterises lambda and "
                  "normalises the heads is unknown, and DiffLens will not guess it");
  if (arch.empty())
    arch = model_type == "llama"       ? "LlamaForCausalLM"
           : model_type == "mistral"   ? "MistralForCausalLM"
           : model_type == "diffllama" ? "DiffLlamaForCausalLM"
                                       : model_type;
  if (arch != "LlamaForCausalLM" && arch != "MistralForCausalLM" && arch != "DiffLlamaForCausalLM")
    fail(src, "architecture '" + arch +
                  "' is not supported: DiffLens reads LlamaForCausalLM, MistralForCausalLM and "
                  "DiffLlamaForCausalLM checkpoints (and its own format)");
  const std::string act = get_string(j, "hidden_act", src, "silu");
  if (act != "silu") fail(src, "hidden_act '" + act + "' is not supported (SwiGLU with silu only)");
  if (get_bool(j, "attention_bias", src, false))
    fail(src, "attention_bias: biases in the attention projections are not supported");
  if (get_bool(j, "mlp_bias", src, false)) fail(src, "mlp_bias: biases in the MLP are not supported");
  if (get_double(j, "partial_rotary_factor", src, 1.0) != 1.0)
    fail(src, "partial_rotary_factor other than 1 is not supported");
  ModelConfig c;
  c.architecture = arch;
  c.attention = arch == "DiffLlamaForCausalLM" ? AttentionKind::Diff : AttentionKind::Baseline;
  read_shared_keys(j, Dialect::HuggingFace, src, c, "hidden_size", "max_position_embeddings");
  refuse_unknown_attention_keys(j, src);
  read_hf_rope(j, src, c);
  c.rope_style = RopeStyle::Half;  // transformers' rotate_half
  read_shared_keys(j, Dialect::HuggingFace, src, c, "rms_norm_eps", "tie_word_embeddings");
  c.bos_token_id = token_id(j, "bos_token_id", src);
  c.eos_token_id = token_id(j, "eos_token_id", src);
  if (arch == "MistralForCausalLM") {
    auto it = j.find("sliding_window");
    if (it != j.end() && !it->is_null()) {
      if (!it->is_number_integer()) fail(src, "'sliding_window' must be an integer or null");
      c.sliding_window = it->get<int64_t>();
    }
  }
  if (c.is_diff()) {  // DiffLlama: components in halves, weightless per-head norm with the model's eps
    c.diff_pairing = DiffPairing::Half;
    c.subln_weight = false;
    c.subln_eps = c.rms_norm_eps;
    if (c.num_key_value_heads % 2 != 0)
      fail(src, "DiffLlama with an odd number of key/value heads (" + std::to_string(c.num_key_value_heads) +
                    ") is not supported: both components of a head would share one key head");
  }
  c.tokenizer = TokenizerKind::SentencePiece;  // refined by the files in the directory when loading
  c.name = get_string(j, "_name_or_path", src, "");
  c.validate(src);
  return c;
}

}  // namespace

const char* to_string(AttentionKind kind) {
  return kind == AttentionKind::Diff ? "diff" : kind == AttentionKind::DiffV2 ? "diff-v2" : "baseline";
}

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  const int64_t d = c.head_dim;
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    f[static_cast<size_t>(i)] =
        std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  const RopeScaling& s = c.rope_scaling;
  if (s.kind == RopeScaling::Kind::Linear) {
    for (double& x : f) x /= s.factor;
  } else if (s.kind == RopeScaling::Kind::Llama3) {
    // Wavelengths longer than the original context / low_freq_factor are slowed by `factor`, shorter than
    // original / high_freq_factor kept; in between, a linear blend in (original / wavelength).
    const double pi = std::acos(-1.0);
    const double original = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = original / s.low_freq_factor, high_wavelen = original / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * pi / x;
      if (wavelen > low_wavelen) {
        x /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double t = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - t) * x / s.factor + t * x;
      }
    }
  }
  return f;
}

double lambda_init(int64_t layer) {
  return 0.8 - 0.6 * std::exp(-0.3 * static_cast<double>(layer));
}

void ModelConfig::validate(const std::string& src) const {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) fail(src, std::string("'") + name + "' must be positive, got " + std::to_string(v));
  };
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(intermediate_size, "intermediate_size");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  // Bounds far above any published model, so that parameter counts and memory estimates cannot overflow
  // (a config that claims more is refused before anything is allocated).
  auto at_most = [&](int64_t v, int64_t limit, const char* name) {
    if (v > limit)
      fail(src, std::string("'") + name + "' is " + std::to_string(v) +
                    "; DiffLens reads models with at most " + std::to_string(limit));
  };
  at_most(hidden_size, int64_t{1} << 20, "hidden_size");
  at_most(intermediate_size, int64_t{1} << 22, "intermediate_size");
  at_most(num_hidden_layers, int64_t{1} << 12, "num_hidden_layers");
  at_most(num_attention_heads, int64_t{1} << 12, "num_attention_heads");
  at_most(num_key_value_heads, int64_t{1} << 12, "num_key_value_heads");
  at_most(head_dim, int64_t{1} << 12, "head_dim");
  at_most(vocab_size, int64_t{1} << 24, "vocab_size");
  at_most(max_position_embeddings, int64_t{1} << 27, "max_position_embeddings");
  if (head_dim % 2 != 0)
    fail(src, "'head_dim' must be even for rotary embeddings, got " + std::to_string(head_dim));
  if (num_attention_heads % num_key_value_heads != 0)
    fail(src, "'num_attention_heads' (" + std::to_string(num_attention_heads) +
                  ") must be a multiple of 'num_key_value_heads' (" + std::to_string(num_key_value_heads) +
                  ")");
  if (is_diff_v2()) {
    // Query sub-head j reads key/value head j / (2H / Hkv) (FlashAttention's grouping); a head's two
    // components (sub-heads 2h, 2h + 1) must read the same one, so that A = A1 − σ(λ)·A2 meets one V.
    if (num_attention_heads % 2 != 0 || (num_attention_heads / num_key_value_heads) % 2 != 0)
      fail(src, "a DIFF V2 model needs 'num_attention_heads' (" + std::to_string(num_attention_heads) +
                    ", two query sub-heads per head) to be an even multiple of 'num_key_value_heads' (" +
                    std::to_string(num_key_value_heads) +
                    "), so that both components of a head share its key "
                    "and value head");
  } else if (is_diff()) {
    if (num_attention_heads % 2 != 0 || num_key_value_heads % 2 != 0)
      fail(src,
           "a DIFF model needs even 'num_attention_heads' and 'num_key_value_heads' (two components per "
           "head)");
    if ((num_attention_heads / 2) % (num_key_value_heads / 2) != 0)
      fail(src, "DIFF heads must be a multiple of DIFF key/value heads");
  }
  if (!(rope_theta > 0)) fail(src, "'rope_theta' must be positive");
  if (rope_scaling.kind != RopeScaling::Kind::None && !(rope_scaling.factor > 0))
    fail(src, "'rope_scaling.factor' must be positive");
  if (rope_scaling.kind == RopeScaling::Kind::Llama3 &&
      (!(rope_scaling.low_freq_factor > 0) ||
       !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
       rope_scaling.original_max_position_embeddings <= 0))
    fail(src,
         "llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor and a positive "
         "original_max_position_embeddings");
  if (sliding_window < 0) fail(src, "'sliding_window' must be 0 (off) or positive");
  if (!(rms_norm_eps > 0) || !(subln_eps > 0)) fail(src, "norm epsilons must be positive");
  if (tokenizer == TokenizerKind::Bytes && vocab_size < 259)
    fail(src, "a byte-tokenizer model needs vocab_size >= 259 (3 specials + 256 bytes), got " +
                  std::to_string(vocab_size));
  if (bos_token_id < -1 || bos_token_id >= vocab_size || eos_token_id < -1 || eos_token_id >= vocab_size)
    fail(src, "bos/eos token ids must lie inside the vocabulary (or be absent)");
}

int64_t parameter_count(const ModelConfig& c) {
  const int64_t E = c.hidden_size, d = c.head_dim;
  const int64_t q = c.num_attention_heads * d, kv = c.num_key_value_heads * d;
  int64_t layer = q * E + 2 * kv * E + E * q     // q, k, v, o projections
                  + 3 * E * c.intermediate_size  // gate, up, down
                  + 2 * E;                       // two RMSNorm weights
  if (c.is_diff_v2())
    layer += -E * q / 2 + E * c.map_heads();  // o_proj reads H·d (not 2H·d); lambda_proj [H, E]
  else if (c.is_diff())
    layer += 4 * d + (c.subln_weight ? 2 * d : 0);
  int64_t total = c.num_hidden_layers * layer + c.vocab_size * E + E;
  if (!c.tie_word_embeddings) total += c.vocab_size * E;
  return total;
}

std::string positions_note(const ModelConfig& c, int64_t tokens) {
  if (c.trained_positions <= 0 || tokens <= c.trained_positions) return "";
  const std::string trained = std::to_string(c.trained_positions);
  return "the prompt's " + std::to_string(tokens) + " tokens pass the " + trained +
         " this model was trained to (block_size): it runs (its RoPE reads any position), but attention beyond " +
         trained + " is what the model never saw in training";
}

ModelConfig config_from_json_text(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(src, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) fail(src, "top level must be a JSON object");
  if (!j.contains("difflens_format") && (j.contains("architectures") || j.contains("model_type")))
    return config_from_hf(j, src);
  ModelConfig c;
  const std::string attention = get_string(j, "attention", src, "baseline");
  if (attention == "diff")
    c.attention = AttentionKind::Diff;
  else if (attention == "diff-v2")
    c.attention = AttentionKind::DiffV2;
  else if (attention == "baseline")
    c.attention = AttentionKind::Baseline;
  else
    fail(src, "'attention' must be \"diff\", \"diff-v2\" or \"baseline\", got \"" + attention + "\"");
  read_shared_keys(j, Dialect::DiffLens, src, c, "hidden_size", "max_position_embeddings");
  read_shared_keys(j, Dialect::DiffLens, src, c, "rope_theta");
  c.rope_scaling = read_rope_scaling(j, src);
  c.sliding_window = get_int(j, "sliding_window", src, false, 0);
  c.trained_positions = get_int(j, "trained_positions", src, false, 0);
  const std::string rope = get_string(j, "rope_style", src, "interleaved");
  if (rope == "interleaved")
    c.rope_style = RopeStyle::Interleaved;
  else if (rope == "half")
    c.rope_style = RopeStyle::Half;
  else
    fail(src, "'rope_style' must be \"interleaved\" or \"half\", got \"" + rope + "\"");
  const std::string pairing = get_string(j, "diff_pairing", src, "adjacent");
  if (pairing == "adjacent")
    c.diff_pairing = DiffPairing::Adjacent;
  else if (pairing == "half")
    c.diff_pairing = DiffPairing::Half;
  else
    fail(src, "'diff_pairing' must be \"adjacent\" or \"half\", got \"" + pairing + "\"");
  if (c.is_diff_v2() && c.diff_pairing != DiffPairing::Adjacent)
    fail(src,
         "a DIFF V2 model's components are always adjacent query sub-heads: 'diff_pairing' must be "
         "\"adjacent\" or absent");
  c.subln_weight = !c.is_diff_v2() && get_bool(j, "subln_weight", src, true);  // V2 has no per-head norm
  read_shared_keys(j, Dialect::DiffLens, src, c, "rms_norm_eps");
  c.subln_eps = get_double(j, "subln_eps", src, 1e-5);
  read_shared_keys(j, Dialect::DiffLens, src, c, "tie_word_embeddings");
  c.bos_token_id = get_int(j, "bos_token_id", src, false, 1);
  c.eos_token_id = get_int(j, "eos_token_id", src, false, 2);
  const std::string tok = get_string(j, "tokenizer", src, "bytes");
  if (tok == "bytes")
    c.tokenizer = TokenizerKind::Bytes;
  else if (tok == "sentencepiece")
    c.tokenizer = TokenizerKind::SentencePiece;
  else if (tok == "byte-level-bpe")
    c.tokenizer = TokenizerKind::ByteLevelBpe;
  else if (tok == "tiktoken-cl100k")
    c.tokenizer = TokenizerKind::Tiktoken;
  else
    fail(
        src,
        "'tokenizer' must be \"bytes\", \"sentencepiece\", \"byte-level-bpe\" or \"tiktoken-cl100k\", got \"" +
            tok + "\"");
  c.name = get_string(j, "name", src, "");
  c.validate(src);
  return c;
}

std::string config_to_json_text(const ModelConfig& c) {
  json j;
  j["difflens_format"] = 1;
  j["name"] = c.name;
  j["attention"] = to_string(c.attention);
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  write_rope_scaling(j, c.rope_scaling);
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.trained_positions > 0) j["trained_positions"] = c.trained_positions;
  j["rope_style"] = c.rope_style == RopeStyle::Interleaved ? "interleaved" : "half";
  if (c.is_diff() && !c.is_diff_v2()) {  // V2: components always adjacent, no per-head norm
    j["diff_pairing"] = c.diff_pairing == DiffPairing::Adjacent ? "adjacent" : "half";
    j["subln_weight"] = c.subln_weight;
    j["subln_eps"] = c.subln_eps;
  }
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["tokenizer"] = c.tokenizer == TokenizerKind::Bytes           ? "bytes"
                   : c.tokenizer == TokenizerKind::SentencePiece ? "sentencepiece"
                   : c.tokenizer == TokenizerKind::Tiktoken      ? "tiktoken-cl100k"
                                                                 : "byte-level-bpe";
  return j.dump(2) + "\n";
}

ModelConfig load_config(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec) && !ec)
    throw ConfigError(file.string() + ": cannot open (does the model directory contain config.json?)");
  std::string text;
  try {
    text = read_bounded(file, "config", kMetadataLimit);
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
  return config_from_json_text(text, file.string());
}

void save_config(const ModelConfig& config, const std::filesystem::path& file) {
  write_file_atomically(file, config_to_json_text(config));
}

std::pair<ModelConfig, ModelConfig> make_matched_pair(const PairSpec& s) {
  if (s.diff_heads <= 0 || s.hidden_size % (2 * s.diff_heads) != 0)
    throw ConfigError("pair: hidden_size " + std::to_string(s.hidden_size) + " is not divisible by 2 x " +
                      std::to_string(s.diff_heads) + " DIFF heads");
  ModelConfig diff;
  diff.attention = AttentionKind::Diff;
  diff.hidden_size = s.hidden_size;
  diff.num_hidden_layers = s.num_layers;
  diff.num_attention_heads = 2 * s.diff_heads;
  diff.num_key_value_heads = 2 * s.diff_kv_heads;
  diff.head_dim = s.hidden_size / (2 * s.diff_heads);
  // SwiGLU width 8/3·E rounded to a multiple of 8, as in the paper's LLaMA-style recipe.
  diff.intermediate_size = ((s.hidden_size * 8 / 3 + 4) / 8) * 8;
  diff.vocab_size = s.vocab_size;
  diff.max_position_embeddings = s.max_position_embeddings;
  diff.rope_theta = s.rope_theta;
  diff.rope_style = RopeStyle::Interleaved;
  diff.tokenizer = s.tokenizer;
  ModelConfig base = diff;
  base.attention = AttentionKind::Baseline;
  diff.name = "diff";
  base.name = "baseline";
  diff.validate();
  base.validate();
  return {diff, base};
}

ModelConfig make_matched_diff_v2(const PairSpec& s) {
  ModelConfig v2 = make_matched_pair(s).second;  // the baseline's width, depth, heads and MLP
  v2.attention = AttentionKind::DiffV2;
  v2.num_attention_heads *= 2;  // two query sub-heads per head, sharing the baseline's key/value heads
  v2.subln_weight = false;
  v2.name = "diff-v2";
  v2.validate();
  return v2;
}

}  // namespace difflens
