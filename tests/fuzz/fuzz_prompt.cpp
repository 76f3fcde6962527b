// Fuzz target: the prompt -> token path with arbitrary bytes (any script, control characters, invalid
// UTF-8), through the byte-level BPE tokenizers of tests/data/bpe (GPT-2, Llama 3 and prefix-space
// pre-tokenizer regexes) and the "ids:" prompt syntax. Every byte lands in exactly one token, in order, and
// each token's bytes are the bytes it covers (with the space a prefix-space tokenizer adds).
#include "core/formats/bpe.h"
#include "core/formats/error.h"
#include "core/formats/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

#ifndef DIFFLENS_SOURCE_DIR
#error "DIFFLENS_SOURCE_DIR must name the source tree (tests/data/bpe)"
#endif

namespace {

// Whether `s` is UTF-8 of whitespace only, as lstrip / rstrip see it (Unicode White_Space: ASCII blanks,
// U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool whitespace_only(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    uint32_t cp = 0;
    size_t n = 0;
    if (b(i) < 0x80) {
      cp = b(i), n = 1;
    } else if ((b(i) & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((b(i) & 0x1Fu) << 6) | (b(i + 1) & 0x3Fu), n = 2;
    } else if ((b(i) & 0xF0) == 0xE0 && i + 2 < s.size()) {
      cp = ((b(i) & 0x0Fu) << 12) | ((b(i + 1) & 0x3Fu) << 6) | (b(i + 2) & 0x3Fu), n = 3;
    } else {
      return false;
    }
    const bool space = (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
                       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                       cp == 0x205F || cp == 0x3000;
    if (!space) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  static const std::vector<std::shared_ptr<const ByteLevelBpe>> tokenizers = [] {
    std::vector<std::shared_ptr<const ByteLevelBpe>> t;
    for (const char* name : {"gpt2-style", "llama3-style", "prefix-space"})
      t.push_back(
          ByteLevelBpe::load(std::string(DIFFLENS_SOURCE_DIR "/tests/data/bpe/") + name + ".tokenizer.json"));
    return t;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto& bpe : tokenizers) {
    const std::vector<ByteLevelBpe::Token> tokens = bpe->encode(text);
    size_t at = 0;
    for (const auto& t : tokens) {
      FUZZ_CHECK(t.begin == at && t.end >= t.begin && t.end <= text.size());
      FUZZ_CHECK(t.id >= 0 && t.id < bpe->vocab_size());
      at = t.end;
      // A token's bytes are the bytes it covers, after the space a prefix-space tokenizer puts in front of
      // each piece of text (the whole prompt, and each run between added tokens): merged into the piece's
      // first token, or a token of its own that covers no byte. An added token with lstrip/rstrip also
      // covers the whitespace beside it.
      const std::string bytes = bpe->token_bytes(t.id), covered = text.substr(t.begin, t.end - t.begin);
      const size_t inside = bytes.empty() ? std::string::npos : covered.find(bytes);
      const bool stripped =
          inside != std::string::npos &&
          whitespace_only(covered.substr(0, inside) + covered.substr(inside + bytes.size()));
      FUZZ_CHECK(bytes == covered || bytes == " " + covered || stripped);
    }
    FUZZ_CHECK(at == text.size());
  }
  try {
    for (int64_t id : parse_token_ids(text, 4096)) FUZZ_CHECK(id >= 0 && id < 4096);
  } catch (const Error&) {
  }
  return 0;
}
