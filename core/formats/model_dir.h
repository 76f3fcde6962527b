// Which folder holds a model, and in which layout: DiffLens's own, a Hugging Face folder (Llama, Mistral,
// DiffLlama), a diff-mlx folder (github.com/guygrigsby/diff-mlx: an MLX model's config.json and
// latest.safetensors), a Hugging Face hub cache folder (models--ORG--NAME, whose refs/main names the
// snapshot), or a folder holding two models in sub-folders (the diff-mlx pair's diff/ and vanilla/). Plain
// C++, no LibTorch: the CLI and the app expand what the user gave before anything loads.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/checkpoint.h"
#include "core/formats/config.h"

namespace difflens {

enum class ModelLayout { DiffLens, HuggingFace, DiffMlx };

// "a/b/" and "a/./b" as "a/b": a trailing slash (tab completion's) would leave filename() empty.
std::filesystem::path tidy(const std::filesystem::path& path);

// A hub cache folder (`.../models--ORG--NAME`) as the snapshot refs/main names (or its only snapshot);
// any other path as it is. Throws Error when the cache folder is broken (refs/main names a snapshot that
// is not there, several snapshots and no refs/main).
std::filesystem::path resolve_hub_cache(const std::filesystem::path& path);

// The folder a model is read from: a hub cache folder's snapshot (resolve_hub_cache), and a Hugging Face
// Trainer's output folder - no config.json of its own, its saves in checkpoint-N sub-folders, each a model
// folder - as its checkpoint with the largest N. `note` (optional) says which was taken and how many
// there were; "" when the path is taken as it is.
std::filesystem::path resolve_model_folder(const std::filesystem::path& path, std::string* note = nullptr);

// The models a path holds, in the order the slots take them: the path itself when it is a model folder
// (also a hub cache folder of one model, kept as given: Model::load resolves it and names the model by
// it), else its sub-folders that are model folders, a DIFF model first (a folder
// whose name has "diff", then the others by name). Throws Error when there is none: the message lists
// the layouts DiffLens reads and what the folder holds.
std::vector<std::filesystem::path> models_in(const std::filesystem::path& path);

// The two of `models` (from models_in) that make a pair for the slots: the first DIFF model (by its config)
// and the first model that is not one; without such a split, the first two. Throws Error for fewer than two.
std::pair<std::filesystem::path, std::filesystem::path> pair_of(
    const std::vector<std::filesystem::path>& models);

// A training run's kept steps (`train --keep-every`): the model folder of the run (MODEL, holding
// checkpoints/step-N) and each kept step's folder by step, in order; a step counts once its step.json is
// there (written last). `folder`: the model folder or one of its kept steps. No steps when it is neither.
struct KeptSteps {
  std::filesystem::path model;
  std::vector<std::pair<int64_t, std::filesystem::path>> steps;
  int64_t step_of(const std::filesystem::path& folder) const;  // the step `folder` is, -1: none of them
};
KeptSteps kept_steps(const std::filesystem::path& folder);

// The layout of a model folder's config.json text (DiffLens's own, Hugging Face's, diff-mlx's).
ModelLayout layout_of_config(const std::string& config_text);
// The config of one model folder in any layout DiffLens reads (a diff-mlx model's kind from its weights:
// λ vectors or not). A folder holding models in sub-folders is refused, naming them. Throws ConfigError /
// FormatError naming the file.
ModelConfig read_model_config(const std::filesystem::path& dir);
// The weights of one model folder under DiffLens's tensor names (diff-mlx's renamed, its optimizer state
// left out), for the config read_model_config gives.
CheckpointFiles open_model_weights(const std::filesystem::path& dir, const ModelConfig& config);

// --- diff-mlx --------------------------------------------------------------------------------------------
// Its config.json (run metadata {"model": {...}, "train": {...}}, or the model's fields alone) in DiffLens
// terms: the official DIFF layout (adjacent components, interleaved rotary pairs: MLX's rope with
// traditional=True, a learned per-head norm), tied embeddings, λ_init from the layer index. `diff`: the
// weights hold λ vectors (diff-mlx writes no variant into the config). Throws ConfigError naming `source`
// and the field.
ModelConfig diff_mlx_config(const std::string& config_text, const std::string& source, bool diff);
// A diff-mlx tensor name as DiffLens names it ("model.blocks.3.attn.q_proj.weight" ->
// "model.layers.3.self_attn.q_proj.weight"), with or without checkpoint.py's "model." namespace (older files
// have none); "" for the optimizer's state ("opt.*"). A name DiffLens does not know comes back as it is, so
// the loader reports it as unexpected.
std::string diff_mlx_tensor_name(const std::string& name);
// The weights file of a diff-mlx folder: model.safetensors, else latest.safetensors, else the only
// .safetensors file. Throws Error naming the folder and what it found.
std::filesystem::path diff_mlx_weights(const std::filesystem::path& dir);
// Where tiktoken's cl100k_base rank file is for a model folder: cl100k_base.tiktoken in the folder or the
// one above it (the pair's root), else tiktoken's own cache ($TIKTOKEN_CACHE_DIR, $DATA_GYM_CACHE_DIR or
// the system temp folder's data-gym-cache, under the SHA-1 of its download address). "" when none is there;
// `looked` gets the places tried.
std::filesystem::path find_cl100k(const std::filesystem::path& dir,
                                  std::vector<std::string>* looked = nullptr);
// Where cl100k_base.tiktoken can be downloaded from (tiktoken's own address).
extern const char* const kCl100kUrl;

}  // namespace difflens
