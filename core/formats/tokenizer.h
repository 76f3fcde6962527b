// Text <-> token ids, with byte offsets into the prompt so the UI can map tokens back to text.
// Kinds: SentencePiece (tokenizer.model, run in a dlmopen-isolated module, see spm_module.h) and
// "bytes" (id = 3 + byte value; 0 <unk>, 1 <s>, 2 </s>) for models that ship no tokenizer.model.
// No LibTorch here. A Tokenizer is cheap to copy (shared, immutable state) and safe to use from
// several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/specials.h"

namespace difflens {

class ByteLevelBpe;

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> pieces;                 // display text of each token
  std::vector<std::pair<size_t, size_t>> offsets;  // [begin, end) bytes in the input; BOS is {0, 0}
};

class Tokenizer {
 public:
  static Tokenizer bytes(int64_t vocab_size);
  // For models built in memory: the byte tokenizer when the config says "bytes", otherwise an
  // ids-only tokenizer (pieces shown as <id>; encode() throws).
  static Tokenizer without_files(const ModelConfig& config);
  // Loads a SentencePiece model file. Throws Error when the file or the SentencePiece module is missing.
  static Tokenizer sentencepiece(const std::filesystem::path& model_file);
  // A Hugging Face byte-level BPE tokenizer.json (Llama 3, DiffLlama). BOS/EOS come from the model's
  // config (-1: none). Throws Error naming the file and what it does not support.
  static Tokenizer byte_level_bpe(const std::filesystem::path& tokenizer_json, int64_t bos_id,
                                  int64_t eos_id);
  // A tiktoken rank file of a known encoding (only "cl100k_base": its split pattern and special tokens live
  // in tiktoken's code, not in the file), BOS/EOS as given (-1: none). Throws Error naming the file when it
  // is not that encoding's (another token count) or not a rank file.
  // The split pattern of cl100k_base (tiktoken keeps it in its code, not in the rank file).
  static const std::string& cl100k_split_pattern();
  static Tokenizer tiktoken(const std::filesystem::path& rank_file, const std::string& encoding,
                            int64_t bos_id, int64_t eos_id);
  // The tokenizer a checkpoint directory declares in its config. Throws Error when it cannot be loaded.
  static Tokenizer for_model(const std::filesystem::path& dir, const ModelConfig& config);

  // Any byte sequence is accepted. Bytes: one id per byte. SentencePiece: invalid UTF-8 bytes become
  // U+FFFD / byte pieces as SentencePiece decides; never an error or a crash. `specials`: whether special
  // tokens written in the text (byte-level BPE: "<|endoftext|>") are matched or read as text; SentencePiece
  // and the byte tokenizer always read "<s>" as text.
  Encoding encode(const std::string& text, bool add_bos, Specials specials = Specials::match) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // Display text for one id: the SentencePiece piece ("▁the", "<0xE2>"); bytes: printable ASCII as
  // itself, other bytes as <0xNN>; specials by name.
  std::string piece(int64_t id) const;
  int64_t vocab_size() const { return vocab_size_; }
  int64_t bos_id() const { return bos_id_; }
  int64_t eos_id() const { return eos_id_; }
  bool is_sentencepiece() const { return spm_ != nullptr; }
  bool is_byte_level_bpe() const { return bpe_ != nullptr; }
  bool can_encode() const { return can_encode_; }  // false for ids-only tokenizers
  bool is_tiktoken() const { return tiktoken_; }   // read from a .tiktoken rank file (also byte-level BPE)
  // The file it was read from ("" for the byte tokenizer and ids-only ones): what `convert` copies along.
  const std::filesystem::path& source_file() const { return file_; }

 private:
  struct Spm;
  std::shared_ptr<const Spm> spm_;
  std::shared_ptr<const ByteLevelBpe> bpe_;
  bool can_encode_ = true;
  bool tiktoken_ = false;
  std::filesystem::path file_;
  int64_t vocab_size_ = 0;
  int64_t bos_id_ = 1;
  int64_t eos_id_ = 2;
};

// Where the SentencePiece module was found (for diagnostics); throws Error when it cannot be loaded.
std::string sentencepiece_module_path();

// Parses "1,2,3" into ids; throws Error on anything else or an id outside [0, vocab).
std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab_size);

// A prompt as a surface (the app's worker, the command line, serve) receives it: text, or token ids.
struct PromptInput {
  std::string text;
  std::optional<std::vector<int64_t>> ids;  // given: these ids (no BOS is added), and `text` is not read
  bool bos = true;                          // text: BOS first (where the tokenizer has one)
  Specials specials = Specials::match;      // text: special tokens written in it matched, or read as text
  bool ids_from_text = false;  // without a text tokenizer, read `text` as token ids typed "1, 450, 3"
};

// What a refusal says when the model has no text tokenizer: "<subject> has no text tokenizer (<note>):
// <ids_hint>" (the parts left empty are left out).
struct NoTextTokenizer {
  std::string subject = "this model";
  std::string note;      // why (Model::tokenizer_note())
  std::string ids_hint;  // how this surface takes token ids ("give --token-ids", "send 'token_ids'" ...)
};

// The one rule that turns a prompt into token ids, for every surface: text goes through `tokenizer` (BOS
// and specials as `in` says); ids are taken as they are (the capture checks them against the vocabulary).
// A model without a text tokenizer (`tokenizer` null, or one that cannot encode) reads text only as typed ids
// (in.ids_from_text); otherwise, or when none are typed, Error says what to give (`no`). Pieces: the
// tokenizer's for each id (empty without one); offsets {0, 0} for ids.
Encoding encode_prompt(const Tokenizer* tokenizer, int64_t vocab_size, const PromptInput& in,
                       const NoTextTokenizer& no);

}  // namespace difflens
