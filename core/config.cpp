// config.json parsing, validation and the matched-pair factory.
#include "core/config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

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

}  // namespace

const char* to_string(AttentionKind kind) {
  return kind == AttentionKind::Diff ? "diff" : "baseline";
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
  if (head_dim % 2 != 0)
    fail(src, "'head_dim' must be even for rotary embeddings, got " + std::to_string(head_dim));
  if (num_attention_heads % num_key_value_heads != 0)
    fail(src, "'num_attention_heads' (" + std::to_string(num_attention_heads) +
                  ") must be a multiple of 'num_key_value_heads' (" + std::to_string(num_key_value_heads) +
                  ")");
  if (is_diff()) {
    if (num_attention_heads % 2 != 0 || num_key_value_heads % 2 != 0)
      fail(src,
           "a DIFF model needs even 'num_attention_heads' and 'num_key_value_heads' (two components per "
           "head)");
    if ((num_attention_heads / 2) % (num_key_value_heads / 2) != 0)
      fail(src, "DIFF heads must be a multiple of DIFF key/value heads");
  }
  if (!(rope_theta > 0)) fail(src, "'rope_theta' must be positive");
  if (!(rms_norm_eps > 0) || !(subln_eps > 0)) fail(src, "norm epsilons must be positive");
  if (tokenizer == TokenizerKind::Bytes && vocab_size < 259)
    fail(src, "a byte-tokenizer model needs vocab_size >= 259 (3 specials + 256 bytes), got " +
                  std::to_string(vocab_size));
  if (bos_token_id < 0 || bos_token_id >= vocab_size || eos_token_id < 0 || eos_token_id >= vocab_size)
    fail(src, "bos/eos token ids must lie inside the vocabulary");
}

int64_t parameter_count(const ModelConfig& c) {
  const int64_t E = c.hidden_size, d = c.head_dim;
  const int64_t q = c.num_attention_heads * d, kv = c.num_key_value_heads * d;
  int64_t layer = q * E + 2 * kv * E + E * q     // q, k, v, o projections
                  + 3 * E * c.intermediate_size  // gate, up, down
                  + 2 * E;                       // two RMSNorm weights
  if (c.is_diff()) layer += 4 * d + (c.subln_weight ? 2 * d : 0);
  int64_t total = c.num_hidden_layers * layer + c.vocab_size * E + E;
  if (!c.tie_word_embeddings) total += c.vocab_size * E;
  return total;
}

ModelConfig config_from_json_text(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(src, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) fail(src, "top level must be a JSON object");
  ModelConfig c;
  const std::string attention = get_string(j, "attention", src, "baseline");
  if (attention == "diff")
    c.attention = AttentionKind::Diff;
  else if (attention == "baseline")
    c.attention = AttentionKind::Baseline;
  else
    fail(src, "'attention' must be \"diff\" or \"baseline\", got \"" + attention + "\"");
  c.hidden_size = get_int(j, "hidden_size", src, true, 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", src, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", src, true, 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", src, false, c.num_attention_heads);
  c.head_dim = get_int(j, "head_dim", src, false,
                       c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.intermediate_size = get_int(j, "intermediate_size", src, true, 0);
  c.vocab_size = get_int(j, "vocab_size", src, true, 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", src, false, 4096);
  c.rope_theta = get_double(j, "rope_theta", src, 10000.0);
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
  c.subln_weight = get_bool(j, "subln_weight", src, true);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", src, 1e-5);
  c.subln_eps = get_double(j, "subln_eps", src, 1e-5);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", src, false);
  c.bos_token_id = get_int(j, "bos_token_id", src, false, 1);
  c.eos_token_id = get_int(j, "eos_token_id", src, false, 2);
  const std::string tok = get_string(j, "tokenizer", src, "bytes");
  if (tok == "bytes")
    c.tokenizer = TokenizerKind::Bytes;
  else if (tok == "sentencepiece")
    c.tokenizer = TokenizerKind::SentencePiece;
  else
    fail(src, "'tokenizer' must be \"bytes\" or \"sentencepiece\", got \"" + tok + "\"");
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
  j["rope_style"] = c.rope_style == RopeStyle::Interleaved ? "interleaved" : "half";
  if (c.is_diff()) {
    j["diff_pairing"] = c.diff_pairing == DiffPairing::Adjacent ? "adjacent" : "half";
    j["subln_weight"] = c.subln_weight;
    j["subln_eps"] = c.subln_eps;
  }
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["tokenizer"] = c.tokenizer == TokenizerKind::Bytes ? "bytes" : "sentencepiece";
  return j.dump(2) + "\n";
}

ModelConfig load_config(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file.string() + ": cannot open (does the model directory contain config.json?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return config_from_json_text(ss.str(), file.string());
}

void save_config(const ModelConfig& config, const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(file.string() + ": cannot write");
  out << config_to_json_text(config);
  if (!out) throw Error(file.string() + ": write failed");
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

}  // namespace difflens
