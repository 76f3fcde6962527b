// Byte-level and SentencePiece tokenizers, and token-id parsing.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // dlmopen, LM_ID_NEWLM
#endif
#include "core/formats/tokenizer.h"
#include "core/formats/bounded_read.h"

#include <dlfcn.h>
#include <unistd.h>
#include <algorithm>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/formats/bpe.h"
#include "core/formats/error.h"
#include "core/formats/spm_module.h"

namespace difflens {

namespace {
constexpr int64_t kByteOffset = 3;

// The module's entry points, resolved once per process: each dlmopen(LM_ID_NEWLM) creates a new link
// namespace and glibc has only a handful, so the module is loaded exactly once and kept.
struct SpmApi {
  std::string path;
  decltype(&difflens_spm_open) open = nullptr;
  decltype(&difflens_spm_close) close = nullptr;
  decltype(&difflens_spm_vocab_size) vocab_size = nullptr;
  decltype(&difflens_spm_special_id) special_id = nullptr;
  decltype(&difflens_spm_encode) encode = nullptr;
  decltype(&difflens_spm_piece) piece = nullptr;
  decltype(&difflens_spm_decode) decode = nullptr;
};

std::vector<std::filesystem::path> module_candidates() {
  std::vector<std::filesystem::path> c;
  if (const char* env = std::getenv("DIFFLENS_SPM_MODULE")) c.emplace_back(env);
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    const std::filesystem::path dir =
        std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path();
    // Beside the main program (PREFIX/lib/difflens/difflens), or PREFIX/lib/difflens for the launcher or a
    // test in PREFIX/bin, build/app or build/tests: a build tree is laid out as an installed one.
    c.push_back(dir / "libdifflens_spm.so");
    c.push_back(dir.parent_path() / "lib" / "difflens" / "libdifflens_spm.so");
  }
#ifdef DIFFLENS_SPM_MODULE_PATH
  c.emplace_back(DIFFLENS_SPM_MODULE_PATH);  // where this build put it
#endif
  return c;
}

const SpmApi& spm_api() {
  static std::once_flag once;
  static SpmApi api;
  static std::string failure;
  std::call_once(once, [] {
    std::string tried;
    for (const auto& p : module_candidates()) {
      if (!std::filesystem::exists(p)) {
        tried += "\n  " + p.string() + " (absent)";
        continue;
      }
      void* h = dlmopen(LM_ID_NEWLM, p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried += "\n  " + p.string() + " (" + dlerror() + ")";
        continue;
      }
      auto sym = [&](const char* name) {
        void* f = dlsym(h, name);
        if (!f) throw Error(p.string() + ": symbol " + name + " missing");
        return f;
      };
      api.path = p.string();
      api.open = reinterpret_cast<decltype(api.open)>(sym("difflens_spm_open"));
      api.close = reinterpret_cast<decltype(api.close)>(sym("difflens_spm_close"));
      api.vocab_size = reinterpret_cast<decltype(api.vocab_size)>(sym("difflens_spm_vocab_size"));
      api.special_id = reinterpret_cast<decltype(api.special_id)>(sym("difflens_spm_special_id"));
      api.encode = reinterpret_cast<decltype(api.encode)>(sym("difflens_spm_encode"));
      api.piece = reinterpret_cast<decltype(api.piece)>(sym("difflens_spm_piece"));
      api.decode = reinterpret_cast<decltype(api.decode)>(sym("difflens_spm_decode"));
      return;
    }
    failure = "the SentencePiece module libdifflens_spm.so could not be loaded; tried:" + tried +
              "\n(rebuild DiffLens, or set DIFFLENS_SPM_MODULE to its path)";
  });
  if (!api.open) throw Error(failure);
  return api;
}

}  // namespace

struct Tokenizer::Spm {
  const SpmApi* api = nullptr;
  void* handle = nullptr;
  std::vector<std::string> pieces;  // id → piece text, cached at load
  ~Spm() {
    if (handle) api->close(handle);
  }
};

std::string sentencepiece_module_path() {
  return spm_api().path;
}

Tokenizer Tokenizer::sentencepiece(const std::filesystem::path& model_file) {
  if (!std::filesystem::exists(model_file)) throw Error(model_file.string() + ": tokenizer file not found");
  const SpmApi& api = spm_api();
  char err[512] = {0};
  auto spm = std::make_shared<Spm>();
  spm->api = &api;
  spm->handle = api.open(model_file.c_str(), err, sizeof err);
  if (!spm->handle) throw Error(model_file.string() + ": not a SentencePiece model (" + err + ")");
  const int n = api.vocab_size(spm->handle);
  spm->pieces.resize(static_cast<size_t>(n));
  std::string buf(256, '\0');
  for (int id = 0; id < n; ++id) {
    int len = api.piece(spm->handle, id, buf.data(), static_cast<int>(buf.size()));
    if (len > static_cast<int>(buf.size())) {
      buf.resize(static_cast<size_t>(len));
      len = api.piece(spm->handle, id, buf.data(), static_cast<int>(buf.size()));
    }
    spm->pieces[static_cast<size_t>(id)] = buf.substr(0, static_cast<size_t>(std::max(len, 0)));
  }
  Tokenizer t;
  t.vocab_size_ = n;
  t.bos_id_ = api.special_id(spm->handle, 1);
  t.eos_id_ = api.special_id(spm->handle, 2);
  t.spm_ = std::move(spm);
  t.file_ = model_file;
  return t;
}

Tokenizer Tokenizer::byte_level_bpe(const std::filesystem::path& file, int64_t bos_id, int64_t eos_id) {
  if (!std::filesystem::exists(file)) throw Error(file.string() + ": tokenizer file not found");
  Tokenizer t;
  t.bpe_ = ByteLevelBpe::load(file);
  t.file_ = file;
  t.vocab_size_ = t.bpe_->vocab_size();
  t.bos_id_ = bos_id < t.vocab_size_ ? bos_id : -1;
  t.eos_id_ = eos_id < t.vocab_size_ ? eos_id : -1;
  return t;
}

const std::string& Tokenizer::cl100k_split_pattern() {
  // tiktoken's cl100k_base pat_str as its current releases write it (0.7 and later, possessive quantifiers;
  // diff-mlx pins 0.13). Its `$` is the end of the text only: compiled with PCRE2_DOLLAR_ENDONLY.
  static const std::string p =
      R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
  return p;
}

Tokenizer Tokenizer::tiktoken(const std::filesystem::path& file, const std::string& encoding, int64_t bos_id,
                              int64_t eos_id) {
  // What tiktoken's code holds for the encoding (the .tiktoken file has only the ranks): its special tokens
  // and the number of ranks the file must have; the split pattern: cl100k_split_pattern().
  if (encoding != "cl100k_base")
    throw Error(file.string() + ": the tiktoken encoding '" + encoding +
                "' is not one DiffLens knows (cl100k_base is; the others' split patterns are not in their "
                "files)");
  static const std::vector<std::pair<std::string, int64_t>> kSpecials = {{"<|endoftext|>", 100257},
                                                                         {"<|fim_prefix|>", 100258},
                                                                         {"<|fim_middle|>", 100259},
                                                                         {"<|fim_suffix|>", 100260},
                                                                         {"<|endofprompt|>", 100276}};
  constexpr int64_t kRanks = 100256;
  const std::string ranks = read_bounded(file, "tiktoken file", kTokenizerLimit);
  Tokenizer t;
  t.bpe_ = ByteLevelBpe::from_tiktoken(ranks, file.string(), cl100k_split_pattern(), kSpecials, kRanks);
  t.tiktoken_ = true;
  t.file_ = file;
  // Every rank from 0 to 100255 is an ordinary token; the specials follow.
  int64_t ordinary = 0;
  for (int64_t id = 0; id < t.bpe_->vocab_size(); ++id)
    if (!t.bpe_->token_bytes(id).empty() && id < kRanks) ++ordinary;
  if (ordinary != kRanks || t.bpe_->vocab_size() != 100277)
    throw Error(file.string() + ": not cl100k_base's rank file (it has " + std::to_string(ordinary) +
                " tokens numbered below " + std::to_string(kRanks) + " and ids up to " +
                std::to_string(t.bpe_->vocab_size() - 1) + "; cl100k_base has 100256 and 100276)");
  t.vocab_size_ = t.bpe_->vocab_size();
  t.bos_id_ = bos_id < t.vocab_size_ ? bos_id : -1;
  t.eos_id_ = eos_id < t.vocab_size_ ? eos_id : -1;
  return t;
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
    case TokenizerKind::SentencePiece: {
      Tokenizer t = sentencepiece(dir / "tokenizer.model");
      if (t.vocab_size() != config.vocab_size)
        throw Error((dir / "tokenizer.model").string() + ": has " + std::to_string(t.vocab_size()) +
                    " pieces but config.json says vocab_size " + std::to_string(config.vocab_size));
      return t;
    }
    case TokenizerKind::Tiktoken: {
      Tokenizer t =
          tiktoken(dir / "cl100k_base.tiktoken", "cl100k_base", config.bos_token_id, config.eos_token_id);
      if (t.vocab_size() > config.vocab_size)
        throw Error((dir / "cl100k_base.tiktoken").string() + ": has " + std::to_string(t.vocab_size()) +
                    " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size));
      return t;
    }
    case TokenizerKind::ByteLevelBpe: {
      Tokenizer t = byte_level_bpe(dir / "tokenizer.json", config.bos_token_id, config.eos_token_id);
      if (t.vocab_size() > config.vocab_size)
        throw Error((dir / "tokenizer.json").string() + ": has " + std::to_string(t.vocab_size()) +
                    " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size));
      return t;
    }
  }
  throw Error("unknown tokenizer kind");
}

Encoding Tokenizer::encode(const std::string& text, bool add_bos, Specials specials) const {
  if (!can_encode_) throw Error("this model has no tokenizer: pass token ids instead of text");
  Encoding e;
  if (add_bos && bos_id_ >= 0) {
    e.ids.push_back(bos_id_);
    e.pieces.push_back(piece(bos_id_));
    e.offsets.push_back({0, 0});
  }
  if (spm_) {
    if (text.size() > static_cast<size_t>(INT32_MAX / 2))
      throw Error("the text is too long to tokenize (over 1 GB)");
    int cap = static_cast<int>(text.size()) + 16;  // pieces never outnumber bytes (+ a few markers)
    std::vector<int32_t> ids(static_cast<size_t>(cap)), begins(ids.size()), ends(ids.size());
    char err[512] = {0};
    int n = spm_->api->encode(spm_->handle, text.data(), static_cast<int>(text.size()), ids.data(),
                              begins.data(), ends.data(), cap, err, sizeof err);
    if (n > cap) {
      cap = n;
      ids.resize(static_cast<size_t>(cap));
      begins.resize(ids.size());
      ends.resize(ids.size());
      n = spm_->api->encode(spm_->handle, text.data(), static_cast<int>(text.size()), ids.data(),
                            begins.data(), ends.data(), cap, err, sizeof err);
    }
    if (n < 0) throw Error(std::string("tokenizer: ") + err);
    for (int i = 0; i < n; ++i) {
      e.ids.push_back(ids[static_cast<size_t>(i)]);
      e.pieces.push_back(piece(ids[static_cast<size_t>(i)]));
      e.offsets.push_back({static_cast<size_t>(begins[static_cast<size_t>(i)]),
                           static_cast<size_t>(ends[static_cast<size_t>(i)])});
    }
    // SentencePiece gives a character spelled by byte-fallback pieces (<0xC3><0xA9>) to one of them and
    // an empty span to the rest; give each byte piece its own byte, so every token maps to its text.
    auto is_byte = [&](size_t k) {
      const std::string& p = e.pieces[k];
      return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>';
    };
    for (size_t k = 0; k < e.ids.size();) {
      if (!is_byte(k)) {
        ++k;
        continue;
      }
      size_t j = k;
      size_t lo = e.offsets[k].first, hi = e.offsets[k].second;
      while (j < e.ids.size() && is_byte(j)) {
        lo = std::min(lo, e.offsets[j].first);
        hi = std::max(hi, e.offsets[j].second);
        ++j;
      }
      if (hi - lo == j - k)
        for (size_t m = k; m < j; ++m) e.offsets[m] = {lo + (m - k), lo + (m - k) + 1};
      k = j;
    }
    return e;
  }
  if (bpe_) {
    for (const ByteLevelBpe::Token& t : bpe_->encode(text, specials)) {
      e.ids.push_back(t.id);
      e.pieces.push_back(piece(t.id));
      e.offsets.push_back({t.begin, t.end});
    }
    return e;
  }
  e.ids.reserve(text.size() + 1);
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
  if (spm_) {
    std::vector<int32_t> v;
    for (int64_t id : ids) {
      if (id < 0 || id >= vocab_size_)
        throw Error("decode: id " + std::to_string(id) + " is outside the vocabulary");
      v.push_back(static_cast<int32_t>(id));
    }
    std::string buf(ids.size() * 8 + 16, '\0');
    int len = spm_->api->decode(spm_->handle, v.data(), static_cast<int>(v.size()), buf.data(),
                                static_cast<int>(buf.size()));
    if (len > static_cast<int>(buf.size())) {
      buf.resize(static_cast<size_t>(len));
      len = spm_->api->decode(spm_->handle, v.data(), static_cast<int>(v.size()), buf.data(),
                              static_cast<int>(buf.size()));
    }
    if (len < 0) throw Error("decode failed");
    return buf.substr(0, static_cast<size_t>(len));
  }
  if (bpe_) return bpe_->decode(ids);
  for (int64_t id : ids)
    if (id >= kByteOffset && id < kByteOffset + 256) out.push_back(static_cast<char>(id - kByteOffset));
  return out;
}

std::string Tokenizer::piece(int64_t id) const {
  if (spm_)
    return id >= 0 && id < vocab_size_ ? spm_->pieces[static_cast<size_t>(id)]
                                       : "<" + std::to_string(id) + ">";
  if (bpe_) {  // the token's bytes, spaces as "▁" (like SentencePiece pieces), broken UTF-8 as <0xNN>
    const std::string b = bpe_->token_bytes(id);
    if (b.empty()) return "<" + std::to_string(id) + ">";
    std::string out;
    for (size_t i = 0; i < b.size();) {
      const unsigned char c = static_cast<unsigned char>(b[i]);
      const size_t len = c < 0x80                ? 1
                         : c >= 0xF0 && c < 0xF8 ? 4
                         : c >= 0xE0             ? 3
                         : c >= 0xC2 && c < 0xE0 ? 2
                                                 : 0;
      bool ok = len > 0 && i + len <= b.size();
      for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(b[i + k]) & 0xC0) == 0x80;
      if (ok && c == ' ') {
        out += "\xe2\x96\x81";
      } else if (ok && c >= 0x20 && c != 0x7f) {
        out += b.substr(i, len);
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "<0x%02X>", c);
        out += hex;
        i += 1;
        continue;
      }
      i += len;
    }
    return out;
  }
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
    int commas = 0;
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) commas += text[i++] == ',';
    if (commas > 1)
      throw Error("--token-ids: an empty item between commas near '" + text.substr(i > 3 ? i - 3 : 0, 16) +
                  "'");
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

Encoding encode_prompt(const Tokenizer* tokenizer, int64_t vocab_size, const PromptInput& in,
                       const NoTextTokenizer& no) {
  const bool reads_text = tokenizer && tokenizer->can_encode();
  if (!in.ids && reads_text) return tokenizer->encode(in.text, in.bos, in.specials);
  Encoding enc;
  if (in.ids) {
    enc.ids = *in.ids;
  } else {
    std::string why = no.subject + " has no text tokenizer";
    if (!no.note.empty()) why += " (" + no.note + ")";
    if (!no.ids_hint.empty()) why += ": " + no.ids_hint;
    if (!in.ids_from_text) throw Error(why);
    try {
      enc.ids = parse_token_ids(in.text, vocab_size);
    } catch (const Error& e) {
      std::string detail = e.what();
      if (detail.rfind("--token-ids: ", 0) == 0) detail.erase(0, 13);
      throw Error(why + " (" + detail + ")");
    }
    if (enc.ids.empty()) throw Error(why);
  }
  for (const int64_t id : enc.ids) {
    enc.pieces.push_back(tokenizer ? tokenizer->piece(id) : std::string());
    enc.offsets.push_back({0, 0});
  }
  return enc;
}

}  // namespace difflens
