// Internal to core (no LibTorch): the tokenizer of a checkpoint directory, shared by Model::load and
// Model::load_tokenizer.
#pragma once

#include <filesystem>
#include <string>

#include "core/formats/config.h"
#include "core/formats/tokenizer.h"

namespace difflens {

// The tokenizer for a checkpoint directory: DiffLens's own, a Hugging Face tokenizer.model (SentencePiece)
// when present, else its tokenizer.json. `config.tokenizer` is set to the kind found. When no usable
// tokenizer is there, an ids-only tokenizer and `note` saying why text cannot be encoded.
Tokenizer directory_tokenizer(const std::filesystem::path& dir, ModelConfig& config, std::string& note);

}  // namespace difflens
