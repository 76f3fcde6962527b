// Byte-level BPE from tokenizer.json.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/formats/bpe.h"
#include "core/formats/bounded_read.h"

#include <pcre2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/error.h"

namespace difflens {
namespace {

using nlohmann::json;

// GPT-2's byte <-> character table: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, 0x7F-0xA0, 0xAD) for the code points 256, 257, ... in byte order.
struct ByteMap {
  std::string to_char[256];                       // byte -> UTF-8 of its stand-in character
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

// Unicode's White_Space property (PropList.txt, unchanged since Unicode 6.3): what `\s` means to Rust's
// regex (tiktoken) and to Oniguruma (tokenizers). PCRE2's `\s` under PCRE2_UCP is Z plus its own \h and \v
// lists, which keep U+180E (Mongolian vowel separator, no longer a space since Unicode 6.3): "\u180e'm"
// split as "'m" here and as "'", "m" by both references.
const char* kWhiteSpaceMembers =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

#include "core/formats/unicode_gap.inc"  // kGapLetters, kGapNumbers

}  // namespace

// `pattern` with the classes spelled as the references read them. `\s` -> [members] (inside a class: the
// members), `\S` -> [^members]; `\p{L}` / `\pL` -> [\p{L}gap] (inside a class: \p{L}gap), `\P{L}` / `\PL` ->
// [^\p{L}gap], the same for N. A negated class escape inside a class (`[\S]`, `[\P{L}]`) has no such
// spelling and is left to PCRE2 (no published pre-tokenizer pattern has one), as are the other properties
// (`\p{Lu}`, `\p{Nd}`: PCRE2's tables). Escaped backslashes and \Q...\E stay as they are.
std::string with_reference_classes(const std::string& pattern) {
  const std::string space = kWhiteSpaceMembers;
  const std::string letters = std::string(R"(\p{L})") + kGapLetters;
  const std::string numbers = std::string(R"(\p{N})") + kGapNumbers;
  std::string out;
  bool in_class = false;
  // Outside a class a set becomes a class of its own; inside one its members join the class.
  auto put = [&](const std::string& members, bool negated) {
    if (in_class)
      out += members;
    else
      out += (negated ? "[^" : "[") + members + "]";
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // quoted up to \E (or the end)
        const size_t stop = pattern.find("\\E", i + 2);
        const size_t to = stop == std::string::npos ? pattern.size() : stop + 2;
        out.append(pattern, i, to - i);
        i = to - 1;
        continue;
      }
      if (e == 's' || (e == 'S' && !in_class)) {
        put(space, e == 'S');
        ++i;
        continue;
      }
      if (e == 'p' || (e == 'P' && !in_class)) {
        // \pL, \p{L}, \pN, \p{N} (the one-letter general categories the gap tables cover)
        size_t len = 0;
        char cat = 0;
        if (i + 2 < pattern.size() && (pattern[i + 2] == 'L' || pattern[i + 2] == 'N')) {
          cat = pattern[i + 2];
          len = 3;
        } else if (i + 4 < pattern.size() && pattern[i + 2] == '{' &&
                   (pattern[i + 3] == 'L' || pattern[i + 3] == 'N') && pattern[i + 4] == '}') {
          cat = pattern[i + 3];
          len = 5;
        }
        if (cat) {
          put(cat == 'L' ? letters : numbers, e == 'P');
          i += len - 1;
          continue;
        }
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t stop = pattern.find(":]", i + 2);
      const size_t to = stop == std::string::npos ? pattern.size() : stop + 2;
      out.append(pattern, i, to - i);
      i = to - 1;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct ByteLevelBpe::Regex {
  pcre2_code* code = nullptr;  // immutable once compiled; match data is made per call (thread-safe)
  bool jit = false;            // JIT-compiled (pcre2_match then uses it)
  // Without JIT: the same pattern compiled without PCRE2_MATCH_INVALID_UTF, matched with
  // PCRE2_NO_UTF_CHECK on the text's runs of valid UTF-8 (each checked once, by pretokenize).
  pcre2_code* plain = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
    if (plain) pcre2_code_free(plain);
  }
};

ByteLevelBpe::~ByteLevelBpe() = default;

std::shared_ptr<const ByteLevelBpe> ByteLevelBpe::load(const std::filesystem::path& path) {
  return from_json(read_bounded(path, "tokenizer", kTokenizerLimit), path.string());
}

std::shared_ptr<const ByteLevelBpe> ByteLevelBpe::from_json(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(src + ": not valid JSON (" + e.what() + ")");
  }
  auto fail = [&](const std::string& what) -> void { throw Error(src + ": " + what); };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("no \"model\" object");
  const json& m = j["model"];
  if (m.value("type", std::string("BPE")) != "BPE")
    fail("tokenizer model '" + m.value("type", std::string()) + "' is not supported (byte-level BPE only)");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    const bool empty_sequence = n.is_object() && n.value("type", std::string()) == "Sequence" &&
                                n.contains("normalizers") && n["normalizers"].is_array() &&
                                n["normalizers"].empty();
    if (!empty_sequence)  // an empty Sequence changes nothing
      fail("a normalizer (" + (n.is_object() ? n.value("type", std::string("?")) : std::string("?")) +
           ") is not supported");
  }
  if (m.value("byte_fallback", false))
    fail("BPE with byte_fallback (SentencePiece-style) is not supported; use tokenizer.model");
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
      const auto a = bpe->vocab_.find(p.first), b = bpe->vocab_.find(p.second),
                 ab = bpe->vocab_.find(p.first + p.second);
      if (a == bpe->vocab_.end() || b == bpe->vocab_.end() || ab == bpe->vocab_.end())
        fail("merge '" + p.first + " " + p.second + "' uses or makes a token that is not in the vocabulary");
      // As in the reference library, a pair listed twice keeps its last rank.
      bpe->merges_[pair_key(a->second, b->second)] = {rank++, ab->second};
    }
  }
  bpe->ignore_merges_ = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = bpe->vocab_.find(m["unk_token"].get<std::string>());
    if (it != bpe->vocab_.end()) bpe->unk_id_ = it->second;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          !a.contains("content") || !a["content"].is_string())
        fail("an added token lacks a valid id or content");
      const std::string c = a["content"].get<std::string>();
      if (c.empty()) continue;
      auto flag = [&](const char* k, bool fallback) {
        return a.contains(k) && a[k].is_boolean() ? a[k].get<bool>() : fallback;
      };
      // The library's default: special tokens are matched in the raw text, others after normalization.
      const bool normalized = flag("normalized", !flag("special", false));
      bpe->added_[normalized].push_back({c, a["id"].get<int64_t>(), flag("single_word", false),
                                         flag("lstrip", false), flag("rstrip", false),
                                         flag("special", false)});
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
  bpe->index_added();
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->vocab_.find(byte_map().to_char[b]);
    bpe->byte_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
    // Every byte must have a token (or fall back to the unknown one), or some text could not be encoded:
    // refused here rather than on the first prompt that has the byte (found by tests/fuzz).
    if (bpe->byte_ids_[b] < 0 && bpe->unk_id_ < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail(std::string("the vocabulary has no token for the byte ") + hex +
           " and no unknown token: text containing it could not be encoded");
    }
  }
  // Ids index a table: far beyond the entries there are, they are a broken file (or one that would take
  // gigabytes for nothing).
  constexpr int64_t kMaxId = int64_t{1} << 24;
  if (max_id >= kMaxId)
    fail("token id " + std::to_string(max_id) + " is beyond " + std::to_string(kMaxId) +
         " (vocabularies are numbered from 0)");
  bpe->vocab_size_ = max_id + 1;
  bpe->id_to_bytes_.assign(static_cast<size_t>(bpe->vocab_size_), "");
  for (const auto& [tok, id] : bpe->vocab_) bpe->id_to_bytes_[static_cast<size_t>(id)] = unmap(tok);
  for (const auto& list : bpe->added_)
    for (const Added& a : list) bpe->id_to_bytes_[static_cast<size_t>(a.id)] = a.content;

  // Pre-tokenizers: Split (regex, Isolated) and ByteLevel, alone or in a Sequence.
  auto compile = [&](const std::string& pattern) {
    return ByteLevelBpe::compile(pattern, 0, src + ": the pre-tokenizer regex");
  };
  auto add_regex = [&](const std::string& pattern) { bpe->splits_.push_back(compile(pattern)); };
  // What the library's `\w` and `\s` (Rust regex, Unicode) mean for single_word / lstrip / rstrip.
  bpe->word_char_ = compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])");
  bpe->space_char_ = compile(R"(\s)");  // White_Space (with_reference_classes)
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

namespace {

// Standard base64 (RFC 4648, '=' padding); false on any other character or a bad length.
bool base64_decode(const std::string& in, std::string& out) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') {
      if (i + 2 < in.size()) return false;  // padding only in the last two places
      ++pad;
      continue;
    }
    if (pad) return false;
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return !out.empty();
}

}  // namespace

std::shared_ptr<const ByteLevelBpe> ByteLevelBpe::from_tiktoken(
    const std::string& text, const std::string& src, const std::string& pattern,
    const std::vector<std::pair<std::string, int64_t>>& specials, int64_t ranks) {
  auto bpe = std::shared_ptr<ByteLevelBpe>(new ByteLevelBpe());
  const ByteMap& bm = byte_map();
  constexpr int64_t kMaxId = int64_t{1} << 24;
  std::unordered_map<std::string, int64_t> rank_of;  // raw bytes -> rank
  int64_t max_id = -1;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    at = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto fail = [&](const std::string& what) {
      throw Error(src + ":" + std::to_string(line_no) + ": " + what +
                  " (a .tiktoken file has one \"BASE64-TOKEN RANK\" line per token)");
    };
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || line.find(' ', sp + 1) != std::string::npos)
      fail("not two fields");
    std::string bytes;
    if (!base64_decode(line.substr(0, sp), bytes)) fail("'" + line.substr(0, sp) + "' is not base64");
    const std::string r = line.substr(sp + 1);
    if (r.empty() || r.size() > 9 || r.find_first_not_of("0123456789") != std::string::npos)
      fail("rank '" + r + "' is not a whole number below 10^9");
    const int64_t rank = std::stoll(r);
    if (rank >= kMaxId) fail("rank " + r + " is beyond " + std::to_string(kMaxId));
    if (ranks > 0 && rank >= ranks)
      fail("rank " + r + " is beyond this encoding's " + std::to_string(ranks) + " tokens (0-" +
           std::to_string(ranks - 1) + ")");
    if (!rank_of.emplace(bytes, rank).second) fail("the token is listed twice");
    max_id = std::max(max_id, rank);
  }
  if (rank_of.empty()) throw Error(src + ": no tokens (is this a .tiktoken rank file?)");
  for (const auto& [name, id] : specials) max_id = std::max(max_id, id);
  bpe->vocab_size_ = max_id + 1;
  bpe->id_to_bytes_.assign(static_cast<size_t>(bpe->vocab_size_), "");
  std::vector<bool> taken(static_cast<size_t>(bpe->vocab_size_), false);
  for (const auto& [bytes, rank] : rank_of) {
    if (taken[static_cast<size_t>(rank)])
      throw Error(src + ": rank " + std::to_string(rank) + " is given to two tokens");
    taken[static_cast<size_t>(rank)] = true;
    std::string mapped;
    for (unsigned char c : bytes) mapped += bm.to_char[c];
    bpe->vocab_[mapped] = rank;
    bpe->id_to_bytes_[static_cast<size_t>(rank)] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = rank_of.find(std::string(1, static_cast<char>(b)));
    if (it == rank_of.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error(src + ": no token for the byte " + std::string(hex) +
                  ": text containing it could not be encoded");
    }
    bpe->byte_ids_[b] = it->second;
  }
  // tiktoken merges the adjacent pair whose joined bytes rank lowest: every way of cutting a token into
  // two tokens is such a pair, ranked by the whole (the heap then takes the leftmost among equals).
  for (const auto& [bytes, rank] : rank_of)
    for (size_t k = 1; k < bytes.size(); ++k) {
      const auto a = rank_of.find(bytes.substr(0, k)), b = rank_of.find(bytes.substr(k));
      if (a != rank_of.end() && b != rank_of.end())
        bpe->merges_[pair_key(a->second, b->second)] = {rank, rank};
    }
  bpe->ignore_merges_ = true;  // a piece that is a token is that token (tiktoken's first look-up)
  for (const auto& [name, id] : specials) {
    if (id < static_cast<int64_t>(taken.size()) && taken[static_cast<size_t>(id)])
      throw Error(src + ": special token " + name + " has id " + std::to_string(id) +
                  ", which the file gives to an ordinary token");
    bpe->added_[0].push_back({name, id, false, false, false, true});  // tiktoken's are all special
    bpe->id_to_bytes_[static_cast<size_t>(id)] = name;
  }
  bpe->index_added();
  bpe->splits_.push_back(compile(pattern, PCRE2_DOLLAR_ENDONLY, src + ": the split pattern"));
  return bpe;
}

std::unique_ptr<ByteLevelBpe::Regex> ByteLevelBpe::compile(const std::string& pattern, uint32_t extra,
                                                           const std::string& what) {
  int err = 0;
  PCRE2_SIZE at = 0;
  auto r = std::make_unique<Regex>();
  const std::string spelled = with_reference_classes(pattern);
  r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.c_str()), spelled.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | extra, &err, &at, nullptr);
  if (!r->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(what + " does not compile at offset " + std::to_string(at) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  // JIT-compiled, a match costs what it reads: the interpreter, for a pattern compiled with
  // PCRE2_MATCH_INVALID_UTF, checks the subject's UTF-8 from the start offset to its end on every call, so
  // splitting a text took time quadratic in its length (300 KB of haystack through the GPT-2-style test
  // tokenizer: 20.2 s for `difflens tokenize`, now 0.9 s; 1 MB encodes in 0.055 s). Where JIT is not
  // available (another CPU, a library built without it) pretokenize() checks the UTF-8 once itself.
  const char* no_jit = std::getenv("DIFFLENS_NO_JIT");  // tests and benchmarks of the fallback
  r->jit = !(no_jit && *no_jit && std::string(no_jit) != "0") &&
           pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
  if (!r->jit)
    r->plain = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.c_str()), spelled.size(),
                             PCRE2_UTF | PCRE2_UCP | extra, &err, &at, nullptr);
  return r;
}

void ByteLevelBpe::index_added() {
  for (int pass = 0; pass < 2; ++pass) {
    std::stable_sort(added_[pass].begin(), added_[pass].end(),
                     [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
    for (const Added& a : added_[pass]) added_first_[pass][static_cast<unsigned char>(a.content[0])] = true;
  }
}

int64_t ByteLevelBpe::id_of(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

namespace {

// Bytes of the UTF-8 character that starts at `at` (before `limit`): 1 to 4, or 0 when the bytes there are
// not the start of one whole character (a stray continuation byte, a cut sequence, an invalid lead byte).
size_t utf8_char_length(const std::string& text, size_t at, size_t limit) {
  if (at >= limit) return 0;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  const size_t n = lead < 0x80                    ? 1
                   : lead >= 0xC2 && lead <= 0xDF ? 2
                   : lead >= 0xE0 && lead <= 0xEF ? 3
                   : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                  : 0;
  if (n == 0 || n > limit - at) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(at + k) & 0xC0) != 0x80) return 0;
  // RFC 3629, as PCRE2 checks it: no overlong forms, no surrogates, nothing above U+10FFFF.
  const unsigned char second = byte(at + 1 < limit ? at + 1 : at);
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) || (lead == 0xF0 && second < 0x90) ||
      (lead == 0xF4 && second > 0x8F))
    return 0;
  return n;
}

}  // namespace

// Splits [begin, end) of `text` by every regex in turn (matches and the gaps between them both become
// pieces), then byte-pair-encodes each piece. Linear in the text's length: JIT-compiled patterns read
// invalid UTF-8 as characters that match nothing; without JIT the valid runs are found once here and
// matched without a further check (an invalid byte matches nothing either way, and is left in a gap).
void ByteLevelBpe::pretokenize(const std::string& text, size_t begin, size_t end,
                               std::vector<Token>& out) const {
  std::vector<std::pair<size_t, size_t>> pieces{{begin, end}};
  for (const auto& r : splits_) {
    std::vector<std::pair<size_t, size_t>> next;
    const bool by_runs = !r->jit && r->plain;  // the fallback: valid runs, matched unchecked
    pcre2_code* code = by_runs ? r->plain : r->code;
    const uint32_t options = by_runs ? PCRE2_NO_UTF_CHECK : 0;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    for (const auto& [b, e] : pieces) {
      size_t gap = b;  // where the text not yet given to a piece starts
      // Every match in [from, to) (absolute offsets), each followed by the gap before it.
      auto split = [&](size_t from, size_t to) {
        const PCRE2_SPTR subject = reinterpret_cast<PCRE2_SPTR>(text.data() + from);
        const size_t len = to - from;
        size_t pos = 0;
        while (pos < len) {
          const int rc = pcre2_match(code, subject, len, pos, options, md, nullptr);
          if (rc < 0) break;
          const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
          const size_t ms = from + ov[0], me = from + ov[1];
          if (me == ms) {  // an empty match: step over one byte (a character on a valid run) and look again
            pos = ov[0] + (by_runs ? std::max<size_t>(1, utf8_char_length(text, ms, to)) : 1);
            continue;
          }
          if (ms > gap) next.push_back({gap, ms});
          next.push_back({ms, me});
          gap = me;
          pos = ov[1];
        }
      };
      if (!by_runs) {
        split(b, e);
      } else {
        for (size_t at = b; at < e;) {
          size_t run = at;
          for (size_t n; run < e && (n = utf8_char_length(text, run, e)) > 0;) run += n;
          if (run > at) split(at, run);
          at = run;
          while (at < e && utf8_char_length(text, at, e) == 0) ++at;  // invalid bytes: in no match
        }
      }
      if (gap < e) next.push_back({gap, e});
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  for (const auto& [b, e] : pieces) encode_word(text, b, e, out);
}

// Applies the merges to one pre-tokenized word. Like the reference library: the lowest-ranked pair
// anywhere in the word merges first (the leftmost among equals), using a heap of candidate pairs over a
// linked list of symbols, so a long word (a run of CJK text, a base64 blob) costs O(n log n).
void ByteLevelBpe::encode_word(const std::string& text, size_t begin, size_t end,
                               std::vector<Token>& out) const {
  if (begin >= end) return;
  const ByteMap& bm = byte_map();
  if (ignore_merges_) {
    std::string whole;
    for (size_t i = begin; i < end; ++i) whole += bm.to_char[static_cast<unsigned char>(text[i])];
    auto it = vocab_.find(whole);
    if (it != vocab_.end()) {
      out.push_back({it->second, begin, end});
      return;
    }
  }
  struct Sym {
    int64_t id;  // -1: a byte the vocabulary lacks
    int64_t prev, next;
    size_t b, e;
  };
  std::vector<Sym> syms;
  syms.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    const int64_t n = static_cast<int64_t>(syms.size());
    syms.push_back({byte_ids_[static_cast<unsigned char>(text[i])], n - 1, n + 1, i, i + 1});
  }
  syms.back().next = -1;
  struct Candidate {
    int64_t rank, pos, new_id;
    bool operator<(
        const Candidate& o) const {  // std::priority_queue pops the largest: lowest rank, then leftmost
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int64_t left) {
    const int64_t right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int64_t a = syms[static_cast<size_t>(left)].id, b = syms[static_cast<size_t>(right)].id;
    if (a < 0 || b < 0) return;
    auto it = merges_.find(pair_key(a, b));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(syms.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Sym& left = syms[static_cast<size_t>(top.pos)];
    if (left.e == left.b || left.next < 0) continue;  // merged away, or now the last symbol
    const Sym right = syms[static_cast<size_t>(left.next)];
    if (left.id < 0 || right.id < 0) continue;
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;             // a stale candidate
    syms[static_cast<size_t>(left.next)].e = syms[static_cast<size_t>(left.next)].b;  // removed
    left.id = top.new_id;
    left.e = right.e;
    left.next = right.next;
    if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int64_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    if (s.id >= 0) {
      out.push_back({s.id, s.b, s.e});
    } else if (unk_id_ >= 0) {
      out.push_back({unk_id_, s.b, s.e});
    } else {
      throw Error("tokenizer: the byte " + std::to_string(static_cast<unsigned char>(text[s.b])) +
                  " is not in the vocabulary and there is no unknown token");
    }
  }
}

// Whether the character starting at byte `at` (before `limit`) is in the class `r`. Only that character is
// shown to PCRE2: matched inside a longer subject with invalid UTF-8 further on, an anchored class once
// matched a letter ("s<|eot_id|>\xff": lstrip took the "s" for whitespace; found by tests/fuzz). Bytes that
// do not start one whole UTF-8 character are in no class.
bool ByteLevelBpe::char_is(const Regex& r, const std::string& text, size_t at, size_t limit) const {
  const size_t n = utf8_char_length(text, at, limit);
  if (n == 0) return false;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(r.code, nullptr);
  const int rc = pcre2_match(r.code, reinterpret_cast<PCRE2_SPTR>(text.data() + at), n, 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, nullptr);
  pcre2_match_data_free(md);
  return rc > 0;
}

// Start of the UTF-8 character that ends at byte `at` (not before `floor`).
// A stray byte (a continuation byte not completing the character before it) is a character of its own, in
// no class: " \xA0<|eot_id|>" once let lstrip take the space together with the byte after it (tests/fuzz).
size_t ByteLevelBpe::char_before(const std::string& text, size_t at, size_t floor) const {
  size_t b = at - 1;
  while (b > floor && at - b < 4 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  return utf8_char_length(text, b, at) == at - b ? b : at - 1;
}

// Splits [begin, end) at the added tokens of one list: leftmost-longest, non-overlapping matches; a
// single_word match next to a word character is dropped (its text stays ordinary text); lstrip / rstrip
// widen a match over the whitespace beside it. Unmatched stretches come out with id -1.
void ByteLevelBpe::split_added(const std::string& text, size_t begin, size_t end, int pass, Specials specials,
                               std::vector<Piece>& out) const {
  const auto& list = added_[pass];
  size_t done = begin;  // end of the last piece written
  size_t i = begin;
  while (i < end) {
    const Added* hit = nullptr;
    if (added_first_[pass][static_cast<unsigned char>(text[i])])
      for (const Added& a : list)
        if (!(a.special && specials == Specials::text) && a.content.size() <= end - i &&
            text.compare(i, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->content.size();
    i = stop;  // the next match starts after this one, whether it is kept or not
    if (hit->single_word) {
      const bool word_before =
          start > begin && char_is(*word_char_, text, char_before(text, start, begin), end);
      const bool word_after = stop < end && char_is(*word_char_, text, stop, end);
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      while (start > done) {
        const size_t c = char_before(text, start, done);
        if (!char_is(*space_char_, text, c, end)) break;
        start = c;
      }
    }
    if (hit->rstrip)  // whole whitespace characters only (a stray byte after a space is not part of it)
      while (stop < end && char_is(*space_char_, text, stop, end)) stop += utf8_char_length(text, stop, end);
    start = std::max(start, done);
    if (start > done) out.push_back({-1, done, start});
    out.push_back({hit->id, start, stop});
    done = stop;
    i = std::max(i, stop);
  }
  if (done < end) out.push_back({-1, done, end});
}

std::vector<ByteLevelBpe::Token> ByteLevelBpe::encode(const std::string& text, Specials specials) const {
  std::vector<Piece> raw, pieces;
  split_added(text, 0, text.size(), 0, specials, raw);
  for (const Piece& p : raw) {
    if (p.id >= 0)
      pieces.push_back(p);
    else
      split_added(text, p.begin, p.end, 1, specials, pieces);
  }
  std::vector<Token> out;
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back({p.id, p.begin, p.end});
    } else if (add_prefix_space_ &&
               text[p.begin] != ' ') {  // a space before the text, covering no input bytes
      const std::string spaced = " " + text.substr(p.begin, p.end - p.begin);
      std::vector<Token> part;
      pretokenize(spaced, 0, spaced.size(), part);
      for (Token t : part) {
        t.begin = t.begin == 0 ? p.begin : p.begin + t.begin - 1;
        t.end = p.begin + t.end - 1;
        out.push_back(t);
      }
    } else {
      pretokenize(text, p.begin, p.end, out);
    }
  }
  return out;
}

std::string ByteLevelBpe::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_)
      throw Error("decode: id " + std::to_string(id) + " is outside the vocabulary");
    out += id_to_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

std::string ByteLevelBpe::token_bytes(int64_t id) const {
  return id >= 0 && id < vocab_size_ ? id_to_bytes_[static_cast<size_t>(id)] : "";
}

}  // namespace difflens
