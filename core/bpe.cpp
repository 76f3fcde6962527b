// Byte-level BPE from tokenizer.json.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/bpe.h"

#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace difflens {
namespace {

using nlohmann::json;

// GPT-2's byte <-> character table: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, 0x7F-0xA0, 0xAD) for the code points 256, 257, ... in byte order.
struct ByteMap {
  std::string to_char[256];           // byte -> UTF-8 of its stand-in character
  std::unordered_map<uint32_t, uint8_t> to_byte;  // stand-in code point -> byte
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = self ? static_cast<uint32_t>(b) : next++;
      to_char[b] = utf8(cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
  static std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// A byte-mapped token back to raw bytes; characters outside the table keep their UTF-8.
std::string unmap(const std::string& token) {
  std::string out;
  const ByteMap& m = byte_map();
  for (size_t i = 0; i < token.size();) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (len == 1 || i + len > token.size()) {
      auto it = m.to_byte.find(c);
      out += it != m.to_byte.end() && len == 1 ? static_cast<char>(it->second) : static_cast<char>(c);
      ++i;
      continue;
    }
    uint32_t cp = c & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3F);
    auto it = m.to_byte.find(cp);
    if (it != m.to_byte.end())
      out += static_cast<char>(it->second);
    else
      out += token.substr(i, len);  // not a stand-in (e.g. an added token's text): kept as is
    i += len;
  }
  return out;
}

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

struct ByteLevelBpe::Regex {
  pcre2_code* code = nullptr;  // immutable once compiled; match data is made per call (thread-safe)
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

ByteLevelBpe::~ByteLevelBpe() = default;

std::shared_ptr<const ByteLevelBpe> ByteLevelBpe::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open the tokenizer");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), path.string());
}

std::shared_ptr<const ByteLevelBpe> ByteLevelBpe::from_json(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(src + ": not valid JSON (" + e.what() + ")");
  }
  auto fail = [&](const std::string& what) -> void { throw Error(src + ": " + what); };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("no \"model\" object");
  const json& m = j["model"];
  if (m.value("type", std::string("BPE")) != "BPE")
    fail("tokenizer model '" + m.value("type", std::string()) + "' is not supported (byte-level BPE only)");
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    fail("a normalizer (" + j["normalizer"].value("type", std::string("?")) + ") is not supported");
  if (m.value("byte_fallback", false)) fail("BPE with byte_fallback (SentencePiece-style) is not supported; use tokenizer.model");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      fail(std::string(k) + " is not supported");
  auto bpe = std::shared_ptr<ByteLevelBpe>(new ByteLevelBpe());
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab is missing");
  int64_t max_id = -1;
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) fail("vocab entry '" + tok + "' has no valid id");
    bpe->vocab_[tok] = id.get<int64_t>();
    max_id = std::max(max_id, id.get<int64_t>());
  }
  if (m.contains("merges") && m["merges"].is_array()) {
    int64_t rank = 0;
    for (const auto& mg : m["merges"]) {
      std::pair<std::string, std::string> p;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size()) fail("merge '" + s + "' is not 'a b'");
        p = {s.substr(0, sp), s.substr(sp + 1)};
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        p = {mg[0].get<std::string>(), mg[1].get<std::string>()};
      } else {
        fail("merges must be \"a b\" strings or [a, b] pairs");
      }
      bpe->ranks_.emplace(p, rank++);
    }
  }
  bpe->ignore_merges_ = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = bpe->vocab_.find(m["unk_token"].get<std::string>());
    if (it != bpe->vocab_.end()) bpe->unk_id_ = it->second;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) {
      if (!a.contains("id") || !a.contains("content") || !a["content"].is_string()) fail("an added token lacks id or content");
      const std::string c = a["content"].get<std::string>();
      if (c.empty()) continue;
      bpe->added_.push_back({c, a["id"].get<int64_t>()});
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
  std::stable_sort(bpe->added_.begin(), bpe->added_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [c, id] : bpe->added_) bpe->added_first_[static_cast<unsigned char>(c[0])] = true;
  bpe->vocab_size_ = max_id + 1;
  bpe->id_to_bytes_.assign(static_cast<size_t>(bpe->vocab_size_), "");
  for (const auto& [tok, id] : bpe->vocab_) bpe->id_to_bytes_[static_cast<size_t>(id)] = unmap(tok);
  for (const auto& [c, id] : bpe->added_) bpe->id_to_bytes_[static_cast<size_t>(id)] = c;

  // Pre-tokenizers: Split (regex, Isolated) and ByteLevel, alone or in a Sequence.
  auto add_regex = [&](const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE at = 0;
    auto r = std::make_unique<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("the pre-tokenizer regex does not compile at offset " + std::to_string(at) + ": " +
           reinterpret_cast<const char*>(msg));
    }
    bpe->splits_.push_back(std::move(r));
  };
  bool byte_level = false;
  std::function<void(const json&)> pre = [&](const json& p) {
    if (p.is_null()) return;
    const std::string type = p.value("type", std::string());
    if (type == "Sequence") {
      for (const auto& q : p.value("pretokenizers", json::array())) pre(q);
    } else if (type == "ByteLevel") {
      byte_level = true;
      bpe->add_prefix_space_ = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) add_regex(kGpt2Pattern);
    } else if (type == "Split") {
      if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false))
        fail("Split pre-tokenizers other than behavior Isolated (not inverted) are not supported");
      const json& pat = p.value("pattern", json::object());
      if (pat.contains("Regex") && pat["Regex"].is_string()) {
        add_regex(pat["Regex"].get<std::string>());
      } else if (pat.contains("String") && pat["String"].is_string()) {
        std::string quoted;  // a literal string as a regex
        for (char c : pat["String"].get<std::string>()) {
          if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) quoted += '\\';
          quoted += c;
        }
        add_regex(quoted);
      } else {
        fail("a Split pre-tokenizer without a pattern");
      }
    } else {
      fail("pre-tokenizer '" + type + "' is not supported (Split, ByteLevel, Sequence)");
    }
  };
  pre(j.value("pre_tokenizer", json()));
  if (!byte_level) fail("not a byte-level BPE (no ByteLevel pre-tokenizer)");
  return bpe;
}

int64_t ByteLevelBpe::id_of(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

// Splits [begin, end) of `text` by every regex in turn (matches and the gaps between them both become
// pieces), then byte-pair-encodes each piece.
void ByteLevelBpe::pretokenize(const std::string& text, size_t begin, size_t end, std::vector<Token>& out) const {
  std::vector<std::pair<size_t, size_t>> pieces{{begin, end}};
  for (const auto& r : splits_) {
    std::vector<std::pair<size_t, size_t>> next;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(r->code, nullptr);
    for (const auto& [b, e] : pieces) {
      const PCRE2_SPTR subject = reinterpret_cast<PCRE2_SPTR>(text.data() + b);
      const size_t len = e - b;
      size_t pos = 0, gap = 0;
      while (pos < len) {
        const int rc = pcre2_match(r->code, subject, len, pos, 0, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // an empty match: step over one byte and look again
          pos = ms + 1;
          continue;
        }
        if (ms > gap) next.push_back({b + gap, b + ms});
        next.push_back({b + ms, b + me});
        gap = pos = me;
      }
      if (gap < len) next.push_back({b + gap, b + len});
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  for (const auto& [b, e] : pieces) encode_word(text, b, e, out);
}

void ByteLevelBpe::encode_word(const std::string& text, size_t begin, size_t end, std::vector<Token>& out) const {
  if (begin >= end) return;
  const ByteMap& bm = byte_map();
  struct Sym {
    std::string s;
    size_t b, e;
  };
  std::vector<Sym> syms;
  std::string whole;
  for (size_t i = begin; i < end; ++i) {
    syms.push_back({bm.to_char[static_cast<unsigned char>(text[i])], i, i + 1});
    whole += syms.back().s;
  }
  if (ignore_merges_) {
    auto it = vocab_.find(whole);
    if (it != vocab_.end()) {
      out.push_back({it->second, begin, end});
      return;
    }
  }
  for (;;) {  // merge every occurrence of the best-ranked pair, left to right
    int64_t best = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = ranks_.find({syms[i].s, syms[i + 1].s});
      if (it != ranks_.end()) best = std::min(best, it->second);
    }
    if (best == std::numeric_limits<int64_t>::max()) break;
    std::vector<Sym> merged;
    for (size_t i = 0; i < syms.size(); ++i) {
      if (i + 1 < syms.size()) {
        auto it = ranks_.find({syms[i].s, syms[i + 1].s});
        if (it != ranks_.end() && it->second == best) {
          merged.push_back({syms[i].s + syms[i + 1].s, syms[i].b, syms[i + 1].e});
          ++i;
          continue;
        }
      }
      merged.push_back(syms[i]);
    }
    syms = std::move(merged);
  }
  for (const Sym& s : syms) {
    auto it = vocab_.find(s.s);
    if (it != vocab_.end()) {
      out.push_back({it->second, s.b, s.e});
    } else if (unk_id_ >= 0) {
      out.push_back({unk_id_, s.b, s.e});
    } else {
      throw Error("tokenizer: '" + unmap(s.s) + "' is not in the vocabulary and there is no unknown token");
    }
  }
}

std::vector<ByteLevelBpe::Token> ByteLevelBpe::encode(const std::string& text) const {
  std::vector<Token> out;
  size_t seg = 0, i = 0;
  auto flush = [&](size_t upto) {
    if (upto <= seg) return;
    if (add_prefix_space_ && text[seg] != ' ') {  // a space before the text, covering no input bytes
      const std::string spaced = " " + text.substr(seg, upto - seg);
      std::vector<Token> part;
      pretokenize(spaced, 0, spaced.size(), part);
      for (Token t : part) {
        t.begin = t.begin == 0 ? seg : seg + t.begin - 1;
        t.end = seg + t.end - 1;
        out.push_back(t);
      }
    } else {
      pretokenize(text, seg, upto, out);
    }
  };
  while (i < text.size()) {
    bool hit = false;
    if (added_first_[static_cast<unsigned char>(text[i])])
      for (const auto& [content, id] : added_)
      if (text.compare(i, content.size(), content) == 0) {
        flush(i);
        out.push_back({id, i, i + content.size()});
        i += content.size();
        seg = i;
        hit = true;
        break;
      }
    if (!hit) ++i;
  }
  flush(text.size());
  return out;
}

std::string ByteLevelBpe::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) throw Error("decode: id " + std::to_string(id) + " is outside the vocabulary");
    out += id_to_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

std::string ByteLevelBpe::token_bytes(int64_t id) const {
  return id >= 0 && id < vocab_size_ ? id_to_bytes_[static_cast<size_t>(id)] : "";
}

}  // namespace difflens
