// Exact layout conversions between the checkpoint layouts DiffLens reads: DIFF component pairing
// (adjacent sub-heads as in the official code, or halves as in DiffLlama), rotary pairing (interleaved
// or rotate-half) and the DIFF per-head norm weight (learned, or folded into o_proj). Every conversion
// is a permutation of projection rows (or a per-column scaling of o_proj), so the converted model has
// the same attention maps and outputs. No LibTorch here.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/safetensors.h"
#include "core/model/model.h"

namespace difflens {

// The tensors of a model with config `from`, rearranged for config `to`, which may differ from `from`
// only in diff_pairing, rope_style and subln_weight (learned -> weightless folds the weight into
// o_proj; weightless -> learned writes ones). Throws Error for any other difference.
std::vector<NamedTensor> convert_layout(const ModelConfig& from, const std::vector<NamedTensor>& tensors,
                                        const ModelConfig& to);

// `from` with the official DIFF layout (adjacent components, interleaved rotary pairs, learned norm
// weight kept as is); baselines get interleaved rotary pairs.
ModelConfig official_layout(const ModelConfig& from);
// `from` in the Hugging Face layout (DiffLlama: halves, rotate-half, weightless norm; Llama: rotate-half).
// Throws Error when that cannot be exact (DIFF per-head norm epsilon different from rms_norm_eps).
ModelConfig hf_layout(const ModelConfig& from);

// Writes `model` as a Hugging Face checkpoint (config.json for DiffLlamaForCausalLM or LlamaForCausalLM,
// model.safetensors in `dtype`, and the SentencePiece tokenizer.model when the model has one).
// Returns notes for the user (e.g. "no tokenizer file: the byte tokenizer has no Hugging Face form").
std::vector<std::string> save_hf(const Model& model, const std::filesystem::path& dir,
                                 DType dtype = DType::F32);

}  // namespace difflens
