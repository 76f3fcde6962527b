// Byte-level BPE as Hugging Face `tokenizer.json` files describe it (Llama 3, DiffLlama checkpoints,
// GPT-2 style): added tokens matched first, a regex pre-tokenizer (PCRE2 with Unicode properties), the
// GPT-2 byte-to-character mapping, then merges by rank. No LibTorch here; thread-safe once built.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/formats/specials.h"

namespace difflens {

// `pattern` with `\s`, `\S`, `\p{L}` and `\p{N}` spelled as the reference tokenizers (Rust's regex in
// tiktoken, Oniguruma in tokenizers) read them: `\s` as Unicode's White_Space class (PCRE2's own `\s` also
// takes U+180E), the letter and number classes with the code points PCRE2's older Unicode tables lack
// (core/formats/unicode_gap.inc, measured against both). Every pattern ByteLevelBpe compiles goes through it.
std::string with_reference_classes(const std::string& pattern);

class ByteLevelBpe {
 public:
  // Reads tokenizer.json. Throws Error naming the file and what is unsupported: a model other than BPE,
  // a normalizer, byte fallback, a pre-tokenizer other than Split(regex) / ByteLevel in a Sequence, a
  // regex PCRE2 cannot compile.
  static std::shared_ptr<const ByteLevelBpe> load(const std::filesystem::path& tokenizer_json);
  // The same from the file's text (tests build small tokenizers in memory).
  static std::shared_ptr<const ByteLevelBpe> from_json(const std::string& text, const std::string& source);
  // A tiktoken rank file (`.tiktoken`: one "BASE64-TOKEN RANK" line per token, the rank also its id) with
  // the split pattern and special tokens the file itself does not hold (tiktoken keeps them in its code).
  // Encodes as tiktoken does: a piece that is a token is that token; else the adjacent pair whose joined
  // bytes have the lowest rank merges first, the leftmost among equals. Special tokens are matched in the
  // text before the split. `ranks` > 0: every rank must be below it (the encoding's count; a larger one is
  // refused at its line). The pattern's `$` is the end of the text (PCRE2_DOLLAR_ENDONLY), as tiktoken's.
  // Throws Error naming `source` and the line at fault.
  static std::shared_ptr<const ByteLevelBpe> from_tiktoken(
      const std::string& text, const std::string& source, const std::string& pattern,
      const std::vector<std::pair<std::string, int64_t>>& specials, int64_t ranks = -1);
  ~ByteLevelBpe();

  struct Token {
    int64_t id;
    size_t begin, end;  // bytes of the input it covers
  };
  // Any byte string is accepted: invalid UTF-8 is split by the regex engine's byte-wise fallback and
  // still mapped byte by byte, so every input byte lands in exactly one token.
  std::vector<Token> encode(const std::string& text, Specials specials = Specials::match) const;
  // Concatenates the tokens' bytes (added tokens as their text).
  std::string decode(const std::vector<int64_t>& ids) const;
  // The token's bytes for display ("Ġthe" -> " the"); "" for unknown ids.
  std::string token_bytes(int64_t id) const;
  int64_t vocab_size() const { return vocab_size_; }
  int64_t id_of(const std::string& token) const;  // -1 when absent (token in byte-mapped form)

 private:
  struct Regex;
  ByteLevelBpe() = default;
  // `pattern` compiled for UTF-8 with Unicode properties (+ `extra` PCRE2 options); Error "WHAT does not
  // compile at offset N: why" when it does not.
  static std::unique_ptr<Regex> compile(const std::string& pattern, uint32_t extra, const std::string& what);
  // Both added-token lists longest first, and the bytes each can start with (after filling added_).
  void index_added();
  void encode_word(const std::string& text, size_t begin, size_t end, std::vector<Token>& out) const;
  void pretokenize(const std::string& text, size_t begin, size_t end, std::vector<Token>& out) const;

  std::unordered_map<std::string, int64_t> vocab_;  // byte-mapped token -> id
  std::vector<std::string> id_to_bytes_;            // id -> raw bytes
  static uint64_t pair_key(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
  }
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>>
      merges_;                  // (left id, right id) -> (rank, merged id)
  int64_t byte_ids_[256] = {};  // a byte's own token (-1: none)
  // Added tokens, as the Hugging Face library matches them: first those with normalized = false, then,
  // in the text between, those with normalized = true (each list longest first). `single_word` tokens
  // match only between non-word characters; `lstrip` / `rstrip` take the whitespace beside them.
  struct Added {
    std::string content;
    int64_t id;
    bool single_word, lstrip, rstrip;
    bool special;  // skipped under Specials::text
  };
  std::vector<Added> added_[2];    // [0]: not normalized, [1]: normalized
  bool added_first_[2][256] = {};  // bytes a token of each list can start with
  std::unique_ptr<Regex> word_char_, space_char_;
  struct Piece {
    int64_t id;  // -1: text to pre-tokenize
    size_t begin, end;
  };
  void split_added(const std::string& text, size_t begin, size_t end, int pass, Specials specials,
                   std::vector<Piece>& out) const;
  bool char_is(const Regex& r, const std::string& text, size_t at, size_t limit) const;
  size_t char_before(const std::string& text, size_t at, size_t floor) const;
  std::vector<std::unique_ptr<Regex>> splits_;  // applied in order (Split pre-tokenizers, ByteLevel's)
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  int64_t unk_id_ = -1;
  int64_t vocab_size_ = 0;
};

}  // namespace difflens
