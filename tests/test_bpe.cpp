// Byte-level BPE (tokenizer.json): a small tokenizer written here, with ids derived by hand from the GPT-2
// byte table, the pre-tokenizer regexes and the merge ranks; round trips over arbitrary bytes; the
// Llama-3 style Split + ByteLevel sequence; what is refused; a Hugging Face model directory using it.
#include <catch2/catch.hpp>

#include <random>

#include <nlohmann/json.hpp>

#include "core/formats/bpe.h"
#include "core/formats/error.h"
#include "core/formats/tokenizer.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;
using nlohmann::json;

namespace {

// The GPT-2 stand-in character of a byte, as UTF-8 (the table every byte-level BPE uses).
std::string mapped(int b) {
  int next = 256, cp = -1;
  for (int x = 0; x < 256; ++x) {
    const bool self = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    const int c = self ? x : next++;
    if (x == b) cp = c;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

const std::string G = mapped(' ');  // "Ġ"

// Vocabulary: every byte's stand-in with id = byte value, then merged tokens 256.. in merge order.
json small_tokenizer(json pre_tokenizer, bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[mapped(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {{G, "t"},   {"h", "e"}, {G + "t", "he"},
                                                                   {"a", "t"}, {G, "c"},   {G + "c", "at"}};
  json m = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    m.push_back(a + " " + b);
    vocab[a + b] = id++;
  }
  vocab[G + "xyz"] = 262;  // reachable only through ignore_merges
  json j;
  j["model"] = {
      {"type", "BPE"},          {"vocab", vocab},      {"merges", m}, {"ignore_merges", ignore_merges},
      {"byte_fallback", false}, {"unk_token", nullptr}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_tokenizer;
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}}});
  return j;
}

json gpt2_pre(bool prefix_space = false) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"use_regex", true}};
}

// The Llama 3 pre-tokenizer: its published split regex, then the byte mapping without a regex.
json llama3_pre() {
  const std::string re =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array(
           {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
}

std::vector<int64_t> ids(const ByteLevelBpe& t, const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& tok : t.encode(text)) out.push_back(tok.id);
  return out;
}

}  // namespace

TEST_CASE("bpe: merges by rank, GPT-2 pre-tokenization, offsets, added tokens", "[tokenizer][bpe]") {
  const auto t = ByteLevelBpe::from_json(small_tokenizer(gpt2_pre()).dump(), "test");
  CHECK(t->vocab_size() == 301);
  // "the" -> t + he (rank 2); " cat" -> at (4), then Ġc (5), then Ġcat (6).
  const auto toks = t->encode("the cat");
  REQUIRE(toks.size() == 3);
  CHECK(toks[0].id == 't');
  CHECK(toks[1].id == 257);
  CHECK(toks[2].id == 261);
  CHECK(toks[1].begin == 1);
  CHECK(toks[1].end == 3);
  CHECK(toks[2].begin == 3);
  CHECK(toks[2].end == 7);
  CHECK(ids(*t, " the") == std::vector<int64_t>{258});  // Ġt (1), he (2), Ġthe (3)
  CHECK(ids(*t, "it's") == std::vector<int64_t>{'i', 't', '\'', 's'});
  CHECK(ids(*t, "1234") == std::vector<int64_t>{'1', '2', '3', '4'});
  // Two spaces before a word: "\s+(?!\S)" takes one, the word takes the other.
  const auto sp = t->encode("a  b");
  REQUIRE(sp.size() == 4);
  CHECK(sp[1].id == ' ');
  CHECK(sp[1].begin == 1);
  CHECK(sp[2].id == ' ');
  CHECK(sp[3].id == 'b');
  // UTF-8 "é" is two byte tokens; decode restores it.
  CHECK(ids(*t, "\xc3\xa9") == std::vector<int64_t>{0xc3, 0xa9});
  CHECK(t->decode({0xc3, 0xa9}) == "\xc3\xa9");
  // Added tokens are matched before anything else and keep their text.
  CHECK(ids(*t, "hi<|end|>there") == std::vector<int64_t>{'h', 'i', 300, 't', 257, 'r', 'e'});
  CHECK(t->decode({'h', 'i', 300}) == "hi<|end|>");
  CHECK(t->token_bytes(258) == " the");
  CHECK(ids(*t, " xyz") == std::vector<int64_t>{' ', 'x', 'y', 'z'});
  const auto ignore = ByteLevelBpe::from_json(small_tokenizer(gpt2_pre(), true).dump(), "test");
  CHECK(ids(*ignore, " xyz") == std::vector<int64_t>{262});  // a whole word in the vocabulary wins
  const auto prefix = ByteLevelBpe::from_json(small_tokenizer(gpt2_pre(true)).dump(), "test");
  const auto p = prefix->encode("the");
  REQUIRE(p.size() == 1);
  CHECK(p[0].id == 258);  // " the" with the added space, covering the 3 input bytes
  CHECK(p[0].begin == 0);
  CHECK(p[0].end == 3);
}

TEST_CASE("bpe: the Llama 3 pre-tokenizer splits numbers by three and contractions case-blind",
          "[tokenizer][bpe]") {
  const auto t = ByteLevelBpe::from_json(small_tokenizer(llama3_pre()).dump(), "test");
  const auto n = t->encode("12345");
  REQUIRE(n.size() == 5);
  CHECK(n[2].end == 3);  // "123" | "45": no merges among digits, so the split shows in the offsets only
  // Merges never cross a piece boundary: " cat" still merges to Ġcat after the piece "x".
  CHECK(ids(*t, "x cat") == std::vector<int64_t>{'x', 261});
  CHECK(ids(*t, "HE'S") == std::vector<int64_t>{'H', 'E', '\'', 'S'});
  CHECK(ids(*t, "the\n\ncat") == std::vector<int64_t>{'t', 257, '\n', '\n', 'c', 259});
}

TEST_CASE("bpe: any bytes round-trip and every byte lands in exactly one token", "[tokenizer][bpe]") {
  for (const json& pre : {gpt2_pre(), llama3_pre(), gpt2_pre(true)}) {
    const auto t = ByteLevelBpe::from_json(small_tokenizer(pre).dump(), "test");
    std::mt19937 rng(11);
    for (int round = 0; round < 300; ++round) {
      std::string s;
      const int len = static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) {
        const unsigned r = rng() % 10;
        s += r < 5   ? "the cat "[rng() % 8]
             : r < 7 ? static_cast<char>(rng() % 256)
             : r < 8 ? '\n'
             : r < 9 ? '1'
                     : '\'';
      }
      const auto toks = t->encode(s);
      std::vector<int64_t> id_list;
      size_t pos = 0;
      for (const auto& k : toks) {
        id_list.push_back(k.id);
        CHECK(k.begin == pos);  // contiguous, in order
        pos = k.end;
      }
      CHECK(pos == s.size());
      // With the prefix space the decoded text has one more leading space.
      const std::string back = t->decode(id_list);
      if (pre.value("add_prefix_space", false) && !s.empty() && s[0] != ' ')
        CHECK(back == " " + s);
      else
        CHECK(back == s);
    }
  }
}

TEST_CASE("bpe: unsupported tokenizers are refused with the reason", "[tokenizer][bpe]") {
  auto refuse = [](json j) {
    try {
      ByteLevelBpe::from_json(j.dump(), "tok.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  json j = small_tokenizer(gpt2_pre());
  j["model"]["type"] = "Unigram";
  CHECK_THAT(refuse(j), Catch::Contains("tokenizer model 'Unigram' is not supported"));
  j = small_tokenizer(gpt2_pre());
  j["normalizer"] = {{"type", "NFC"}};
  CHECK_THAT(refuse(j), Catch::Contains("a normalizer (NFC) is not supported"));
  j = small_tokenizer(gpt2_pre());
  j["model"]["byte_fallback"] = true;
  CHECK_THAT(refuse(j), Catch::Contains("byte_fallback"));
  CHECK_THAT(refuse(small_tokenizer({{"type", "Whitespace"}})),
             Catch::Contains("pre-tokenizer 'Whitespace'"));
  CHECK_THAT(refuse(small_tokenizer(json())), Catch::Contains("not a byte-level BPE"));
  CHECK_THAT(refuse(small_tokenizer(
                 {{"type", "Sequence"},
                  {"pretokenizers",
                   json::array({{{"type", "Split"}, {"pattern", {{"Regex", "(["}}}}, gpt2_pre()})}})),
             Catch::Contains("does not compile"));
  CHECK_THAT(refuse(json::parse("{\"model\": 3}")), Catch::Contains("no \"model\" object"));
  j = small_tokenizer(gpt2_pre());
  j["model"]["merges"].push_back("q z");  // "qz" is no token: the reference library refuses this file too
  CHECK_THAT(refuse(j), Catch::Contains("merge 'q z' uses or makes a token that is not in the vocabulary"));
  j = small_tokenizer(gpt2_pre());
  j["added_tokens"] = json::array({{{"content", "<x>"}}});
  CHECK_THAT(refuse(j), Catch::Contains("an added token lacks a valid id"));
  // An empty normalizer Sequence (DeepSeek's files have one) changes nothing and is accepted.
  j = small_tokenizer(gpt2_pre());
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  CHECK(refuse(j) == "(accepted)");
  j["normalizer"]["normalizers"].push_back({{"type", "NFC"}});
  CHECK_THAT(refuse(j), Catch::Contains("a normalizer (Sequence) is not supported"));
  CHECK_THROWS_WITH(ByteLevelBpe::load("/nonexistent/tokenizer.json"), Catch::Contains("cannot open"));
  // Found by tests/fuzz: a vocabulary missing a byte (and without an unknown token) once loaded and then
  // failed on the first prompt holding that byte; ids far beyond the vocabulary would size a table by them.
  j = small_tokenizer(gpt2_pre());
  j["model"]["vocab"].erase(mapped(0xC3));
  CHECK_THAT(refuse(j),
             Catch::Contains("the vocabulary has no token for the byte 0xC3 and no unknown token"));
  j = small_tokenizer(gpt2_pre());
  j["model"]["vocab"]["zz"] = int64_t{1} << 40;
  CHECK_THAT(refuse(j), Catch::Contains("token id 1099511627776 is beyond 16777216"));
}

TEST_CASE("bpe: a Hugging Face model with tokenizer.json reads text", "[tokenizer][bpe][hf]") {
  test::ScratchDir dir("bpemodel");
  json cfg = {{"architectures", {"LlamaForCausalLM"}},
              {"hidden_size", 16},
              {"num_hidden_layers", 1},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 2},
              {"intermediate_size", 24},
              {"vocab_size", 320},
              {"bos_token_id", 300},
              {"eos_token_id", 300},
              {"tie_word_embeddings", true}};
  test::write_all(dir / "config.json", cfg.dump());
  const ModelConfig c = config_from_json_text(cfg.dump(), "cfg");
  Model::random(c, 3).save(dir.path());
  test::write_all(dir / "config.json", cfg.dump());  // the Hugging Face form, not ours
  test::write_all(dir / "tokenizer.json", small_tokenizer(llama3_pre()).dump());
  const Model m = Model::load(dir.path());
  REQUIRE(m.tokenizer().is_byte_level_bpe());
  CHECK(m.tokenizer_note().empty());
  const Encoding e = m.tokenizer().encode("the cat", true);
  CHECK(e.ids == std::vector<int64_t>{300, 't', 257, 261});
  CHECK(e.pieces[3] ==
        "\xe2\x96\x81"
        "cat");  // the space shown as ▁
  CHECK(e.offsets[3] == std::pair<size_t, size_t>{3, 7});
  CHECK(m.tokenizer().piece(0xc3) == "<0xC3>");  // half a character
  const Trace t = m.capture(e.ids);
  CHECK(t.tokens[2] == "he");
  // A broken tokenizer.json leaves the model usable with token ids, and says why.
  test::write_all(dir / "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  const Model ids_only = Model::load(dir.path());
  CHECK_FALSE(ids_only.tokenizer().can_encode());
  CHECK(ids_only.tokenizer_note().find("WordPiece") != std::string::npos);
}

TEST_CASE("bpe: an lstrip added token takes only whitespace, also before invalid UTF-8", "[tokenizer][bpe]") {
  // Found by tests/fuzz (prompt): with invalid UTF-8 later in the text, the whitespace test once took the
  // letter before "<|end|>" for a space, and the added token swallowed it.
  json j = small_tokenizer(gpt2_pre());
  j["added_tokens"] =
      json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"lstrip", true}}});
  const auto t = ByteLevelBpe::from_json(j.dump(), "test");
  for (const std::string& tail : {std::string(""), std::string("\xff "), std::string(" \xc3(")}) {
    INFO("tail of " << tail.size() << " bytes");
    const std::string text = "s <|end|>" + tail;
    const auto toks = t->encode(text);
    REQUIRE(toks.size() >= 2);
    CHECK(toks[0].id == 's');  // the letter stays text
    CHECK(toks[0].begin == 0);
    CHECK(toks[0].end == 1);
    CHECK(toks[1].id == 300);  // the added token covers the space before it (lstrip) and itself
    CHECK(toks[1].begin == 1);
    CHECK(toks[1].end == 9);
    const auto glued = t->encode("s<|end|>" + tail);
    REQUIRE(glued.size() >= 2);
    CHECK(glued[0].end == 1);
    CHECK(glued[1].begin == 1);
  }
}

TEST_CASE("bpe: an rstrip added token takes whole whitespace characters, not a stray byte after them",
          "[tokenizer][bpe]") {
  // Found by tests/fuzz (prompt): "<|end|> \x80" once let the added token cover the continuation byte too.
  json j = small_tokenizer(gpt2_pre());
  j["added_tokens"] =
      json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"rstrip", true}}});
  const auto t = ByteLevelBpe::from_json(j.dump(), "test");
  const std::string nbsp = "\xc2\xa0";  // U+00A0, whitespace of two bytes: taken whole
  for (const auto& [text, covered] : std::vector<std::pair<std::string, size_t>>{
           {"<|end|> \x80", 8}, {"<|end|>  x", 9}, {"<|end|>" + nbsp + "\x80", 9}, {"<|end|>\x80", 7}}) {
    INFO(text.size() << " bytes");
    const auto toks = t->encode(text);
    REQUIRE(toks.size() >= 2);
    CHECK(toks[0].id == 300);
    CHECK(toks[0].begin == 0);
    CHECK(toks[0].end == covered);
    CHECK(toks[1].begin == covered);  // the rest is ordinary text
  }
}

TEST_CASE("bpe: a stray UTF-8 byte before an lstrip added token is text, not part of the space before it",
          "[tokenizer][bpe]") {
  // Found by tests/fuzz (prompt): " \xA0<|end|>" let the added token take the space and the stray byte.
  json j = small_tokenizer(gpt2_pre());
  j["added_tokens"] =
      json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"lstrip", true}}});
  const auto t = ByteLevelBpe::from_json(j.dump(), "test");
  const auto toks = t->encode(" \xa0<|end|>");
  REQUIRE(toks.size() >= 2);
  CHECK(toks.back().id == 300);
  CHECK(toks.back().begin == 2);  // the added token starts at itself: the byte before it is no whitespace
  CHECK(toks.back().end == 9);
}
