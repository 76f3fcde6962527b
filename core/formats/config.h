// Model configuration (config.json of a DiffLens checkpoint) and the DIFF/baseline pair factory.
// Plain data, no LibTorch: the app and viz may include it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace difflens {

// Diff: Differential Attention V1 (one learned λ per layer, per-head RMSNorm). DiffV2: Differential
// Attention V2 (a λ per token and head, σ(x_t · w_λ,h); the two components of a head share its key and value
// head; no per-head norm). Both have two softmax maps per head; see core/FORMATS.md.
enum class AttentionKind { Diff, Baseline, DiffV2 };
// Rotary embedding pairing: Interleaved rotates (x[2i], x[2i+1]) (official DIFF code); Half rotates
// (x[i], x[i + d/2]) (Hugging Face "rotate_half", Llama/DiffLlama).
enum class RopeStyle { Interleaved, Half };
// How a DIFF head's two components are laid out among the d-wide sub-heads of q_proj/k_proj/v_proj.
// Adjacent: sub-head 2h is component 1 of head h, 2h+1 is component 2, v_proj is [Hkv, 2d] (official).
// Half: sub-head h is component 1, h + H is component 2, V_h = concat(v_h, v_{h+Hkv}) (DiffLlama).
enum class DiffPairing { Adjacent, Half };
// Tiktoken: tiktoken's cl100k_base rank file (cl100k_base.tiktoken; the diff-mlx models).
enum class TokenizerKind { Bytes, SentencePiece, ByteLevelBpe, Tiktoken };

// Rotary frequency scaling as Hugging Face configs declare it ("rope_scaling"): none, "linear" (every
// frequency divided by factor) or "llama3" (long wavelengths divided by factor, short ones kept, a smooth
// blend between). Other kinds are refused when the config is read.
struct RopeScaling {
  enum class Kind { None, Linear, Llama3 } kind = Kind::None;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

// Dimensions follow the Hugging Face Llama convention: `num_attention_heads` counts d-wide query
// sub-heads, so a DIFF model with H differential heads has num_attention_heads = 2H, and its matched
// baseline has the same number: 2H ordinary heads of width d.
struct ModelConfig {
  AttentionKind attention = AttentionKind::Baseline;
  int64_t hidden_size = 0;          // E
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // d-wide query sub-heads (2H for DIFF V1 and V2)
  int64_t num_key_value_heads = 0;  // d-wide key sub-heads (2Hkv for DIFF V1; V2: Hkv, shared by a pair)
  int64_t head_dim = 0;             // d: width of one sub-head / one DIFF component
  int64_t intermediate_size = 0;    // SwiGLU hidden width
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 4096;
  // > 0: the length the model was trained to, where its code reads any length (diff-mlx's block_size: its
  // RoPE has no table); prompts beyond it run, with positions_note() saying so. 0: max_position_embeddings
  // is the limit.
  int64_t trained_positions = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::Interleaved;
  DiffPairing diff_pairing = DiffPairing::Adjacent;
  bool subln_weight = true;  // DIFF per-head RMSNorm has a learned [2d] weight (DiffLlama: false)
  double rms_norm_eps = 1e-5;
  double subln_eps = 1e-5;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 1;
  int64_t eos_token_id = 2;
  TokenizerKind tokenizer = TokenizerKind::Bytes;
  int64_t sliding_window = 0;  // > 0: a query sees only the last `sliding_window` keys (Mistral); 0: all
  std::string name;            // free text shown in the UI
  // Where the checkpoint came from: "difflens" for the native format, else the Hugging Face
  // architecture (LlamaForCausalLM, MistralForCausalLM, DiffLlamaForCausalLM).
  std::string architecture = "difflens";

  // Two softmax maps per head (DIFF V1 or V2).
  bool is_diff() const { return attention == AttentionKind::Diff || attention == AttentionKind::DiffV2; }
  bool is_diff_v2() const { return attention == AttentionKind::DiffV2; }
  // Number of heads whose maps are shown: H for DIFF, 2H for the baseline.
  int64_t map_heads() const { return is_diff() ? num_attention_heads / 2 : num_attention_heads; }
  // Key/value heads as the attention reads them (a DIFF V1 head's two components are one group).
  int64_t kv_groups() const {
    return attention == AttentionKind::Diff ? num_key_value_heads / 2 : num_key_value_heads;
  }

  // Throws ConfigError naming `source` and the first inconsistent field.
  void validate(const std::string& source = "config") const;
};

// The d/2 rotary inverse frequencies θ^(-2i/d), scaled as config.rope_scaling says.
std::vector<double> rope_inv_freq(const ModelConfig& config);

// lambda_init(l) = 0.8 - 0.6 * exp(-0.3 * l), l counted from 0.
double lambda_init(int64_t layer);

// Exact parameter count a model with this config has (embeddings, lm_head unless tied, all layers).
int64_t parameter_count(const ModelConfig& config);
// "" when `tokens` is within what the model was trained to; else the note a prompt that long gets: "the
// prompt's 3000 tokens pass the 2048 this model was trained to (block_size): it runs (its RoPE reads any
// position), but attention beyond 2048 is what the model never saw in training".
std::string positions_note(const ModelConfig& config, int64_t tokens);

// Reads a DiffLens config.json, or a Hugging Face one (LlamaForCausalLM, MistralForCausalLM,
// DiffLlamaForCausalLM) translated into the same fields; anything else gets a ConfigError saying what
// is unsupported.
ModelConfig config_from_json_text(const std::string& text, const std::string& source_name);
std::string config_to_json_text(const ModelConfig& config);
ModelConfig load_config(const std::filesystem::path& file);
void save_config(const ModelConfig& config, const std::filesystem::path& file);

const char* to_string(AttentionKind kind);

// One width/depth → a DIFF model and a baseline with equal parameters except the DIFF-only λ vectors
// (4d per layer) and subln weight (2d per layer).
struct PairSpec {
  int64_t hidden_size = 256;
  int64_t num_layers = 4;
  int64_t diff_heads = 4;     // H; the baseline gets 2H heads
  int64_t diff_kv_heads = 4;  // Hkv (GQA when < H)
  int64_t vocab_size = 4096;
  int64_t max_position_embeddings = 4096;
  double rope_theta = 10000.0;
  TokenizerKind tokenizer = TokenizerKind::Bytes;
};
std::pair<ModelConfig, ModelConfig> make_matched_pair(const PairSpec& spec);
// A DIFF V2 model matched to that pair's baseline: its 2H heads (width d) as V2's output heads, with twice
// the query sub-heads and the same key/value heads; parameters: the baseline's plus q_proj's extra 2H·d·E
// and lambda_proj's 2H·E per layer.
ModelConfig make_matched_diff_v2(const PairSpec& spec);

}  // namespace difflens
