// Byte-level tokenizer and token-id parsing.
#include "core/tokenizer.h"

#include <cstdio>

#include "core/error.h"

namespace difflens {

namespace {
constexpr int64_t kByteOffset = 3;
}

Tokenizer Tokenizer::bytes(int64_t vocab_size) {
  if (vocab_size < kByteOffset + 256)
    throw Error("byte tokenizer needs a vocabulary of at least 259 ids, the model has " +
                std::to_string(vocab_size));
  Tokenizer t;
  t.vocab_size_ = vocab_size;
  return t;
}

Tokenizer Tokenizer::without_files(const ModelConfig& config) {
  if (config.tokenizer == TokenizerKind::Bytes) return bytes(config.vocab_size);
  Tokenizer t;
  t.vocab_size_ = config.vocab_size;
  t.can_encode_ = false;
  return t;
}

Tokenizer Tokenizer::for_model(const std::filesystem::path& dir, const ModelConfig& config) {
  switch (config.tokenizer) {
    case TokenizerKind::Bytes:
      return bytes(config.vocab_size);
    case TokenizerKind::SentencePiece:
      throw Error((dir / "tokenizer.model").string() +
                  ": SentencePiece tokenizers are not supported by this build yet; use --token-ids");
  }
  throw Error("unknown tokenizer kind");
}

Encoding Tokenizer::encode(const std::string& text, bool add_bos) const {
  if (!can_encode_) throw Error("this model has no tokenizer: pass token ids instead of text");
  Encoding e;
  e.ids.reserve(text.size() + 1);
  if (add_bos) {
    e.ids.push_back(bos_id());
    e.pieces.push_back(piece(bos_id()));
    e.offsets.push_back({0, 0});
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const int64_t id = kByteOffset + static_cast<unsigned char>(text[i]);
    e.ids.push_back(id);
    e.pieces.push_back(piece(id));
    e.offsets.push_back({i, i + 1});
  }
  return e;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  if (!can_encode_) return out;
  for (int64_t id : ids)
    if (id >= kByteOffset && id < kByteOffset + 256) out.push_back(static_cast<char>(id - kByteOffset));
  return out;
}

std::string Tokenizer::piece(int64_t id) const {
  if (!can_encode_) return "<" + std::to_string(id) + ">";
  if (id == 0) return "<unk>";
  if (id == 1) return "<s>";
  if (id == 2) return "</s>";
  if (id >= kByteOffset && id < kByteOffset + 256) {
    const int b = static_cast<int>(id - kByteOffset);
    if (b >= 0x20 && b < 0x7f) return std::string(1, static_cast<char>(b));
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    return buf;
  }
  return "<" + std::to_string(id) + ">";
}

std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab_size) {
  std::vector<int64_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == i || j - i > 12)
      throw Error("--token-ids: expected comma-separated non-negative integers near '" + text.substr(i, 16) +
                  "'");
    const int64_t id = std::stoll(text.substr(i, j - i));
    if (id >= vocab_size)
      throw Error("--token-ids: id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(vocab_size) + ")");
    ids.push_back(id);
    i = j;
  }
  return ids;
}

}  // namespace difflens
