// The tokenizer of a checkpoint directory: DiffLens's own (config.json says which), or a Hugging Face
// directory's tokenizer.model (SentencePiece) or tokenizer.json (byte-level BPE). No LibTorch.
#include "core/model/model_tokenizer.h"

#include "core/formats/config.h"
#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/model/model.h"

namespace difflens {
namespace {

// A Hugging Face directory's tokenizer: SentencePiece (tokenizer.model) when present, else what the
// directory offers; `note` says why text cannot be encoded when no usable tokenizer is there.
Tokenizer hf_tokenizer(const std::filesystem::path& folder, ModelConfig& config, std::string& note) {
  // A Trainer's checkpoint-N folder holds the tokenizer only when the Trainer was given one; else it is in
  // the run's folder above, beside the checkpoints.
  auto has_tokenizer = [](const std::filesystem::path& d) {
    return std::filesystem::exists(d / "tokenizer.model") || std::filesystem::exists(d / "tokenizer.json");
  };
  const std::filesystem::path whole = tidy(std::filesystem::absolute(folder));  // "run/checkpoint-5/", "."
  const bool from_run = !has_tokenizer(folder) && whole.filename().string().rfind("checkpoint-", 0) == 0 &&
                        has_tokenizer(whole.parent_path());
  const std::filesystem::path dir = from_run ? whole.parent_path() : folder;
  if (std::filesystem::exists(dir / "tokenizer.model")) {
    Tokenizer t = Tokenizer::sentencepiece(dir / "tokenizer.model");
    if (t.vocab_size() > config.vocab_size)
      throw Error((dir / "tokenizer.model").string() + ": has " + std::to_string(t.vocab_size()) +
                  " pieces, more than the model's vocab_size " + std::to_string(config.vocab_size));
    config.tokenizer = TokenizerKind::SentencePiece;
    return t;
  }
  config.tokenizer = TokenizerKind::ByteLevelBpe;
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    try {
      Tokenizer t =
          Tokenizer::byte_level_bpe(dir / "tokenizer.json", config.bos_token_id, config.eos_token_id);
      if (t.vocab_size() > config.vocab_size)
        throw Error("it has " + std::to_string(t.vocab_size()) +
                    " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size));
      return t;
    } catch (const std::exception& e) {  // the weights are still worth exploring with token ids
      note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
      return Tokenizer::without_files(config);
    }
  }
  note = "no tokenizer.model or tokenizer.json in the directory: give token ids";
  return Tokenizer::without_files(config);
}

// A diff-mlx folder's tokenizer: tiktoken's cl100k_base, which its folders do not hold (tiktoken fetches
// it into its cache); `note` says where it was looked for and where to get it when it is not there.
Tokenizer diff_mlx_tokenizer(const std::filesystem::path& dir, const ModelConfig& config, std::string& note) {
  std::vector<std::string> looked;
  const std::filesystem::path file = find_cl100k(dir, &looked);
  if (file.empty()) {
    std::string where;
    for (const auto& p : looked) where += (where.empty() ? "" : ", ") + p;
    note = "no cl100k_base.tiktoken (the diff-mlx models read text with tiktoken's cl100k_base; looked for " +
           where + "): download " + kCl100kUrl +
           " into this folder or the one above it; meanwhile give token ids";
    return Tokenizer::without_files(config);
  }
  try {
    Tokenizer t = Tokenizer::tiktoken(file, "cl100k_base", config.bos_token_id, config.eos_token_id);
    if (t.vocab_size() > config.vocab_size)
      throw Error(file.string() + ": has " + std::to_string(t.vocab_size()) +
                  " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size));
    return t;
  } catch (const std::exception& e) {
    note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
    return Tokenizer::without_files(config);
  }
}

}  // namespace

// The directory's config may be updated with the tokenizer kind found.

Tokenizer directory_tokenizer(const std::filesystem::path& dir, ModelConfig& config, std::string& note) {
  if (config.architecture == "diff-mlx") return diff_mlx_tokenizer(dir, config, note);
  if (config.architecture != "difflens") return hf_tokenizer(dir, config, note);
  if (config.tokenizer == TokenizerKind::ByteLevelBpe || config.tokenizer == TokenizerKind::Tiktoken) {
    try {  // as for Hugging Face directories: an unusable tokenizer.json leaves token ids
      return Tokenizer::for_model(dir, config);
    } catch (const std::exception& e) {
      note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
      return Tokenizer::without_files(config);
    }
  }
  if (config.tokenizer == TokenizerKind::SentencePiece) {
    try {  // the weights are usable without it: token ids instead of text
      return Tokenizer::for_model(dir, config);
    } catch (const std::exception& e) {
      note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
      return Tokenizer::without_files(config);
    }
  }
  return Tokenizer::for_model(dir, config);
}

Tokenizer Model::load_tokenizer(const std::filesystem::path& given, std::string& note) {
  const std::filesystem::path dir = resolve_model_folder(given);
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": not a model directory");
  ModelConfig config = read_model_config(dir);
  return directory_tokenizer(dir, config, note);
}

Encoding encode_prompt(const Model& model, const PromptInput& in, const std::string& ids_hint,
                       const std::string& subject) {
  return encode_prompt(&model.tokenizer(), model.config().vocab_size, in,
                       {subject, model.tokenizer_note(), ids_hint});
}

}  // namespace difflens
