// Byte-level BPE against the reference: the ids the Hugging Face `tokenizers` library (0.23.2, its Rust
// core) gives three small tokenizer.json files on a hand-written multilingual corpus and a seeded fuzz
// corpus, written by scripts/tokenizer-reference/regenerate and committed under tests/data/bpe/. The
// tokenizers are ours (merges learned from the bundled haystack text); they differ in what is applied:
// Llama 3's Split regex + ByteLevel with ignore_merges, GPT-2's ByteLevel regex, add_prefix_space with
// lstrip / rstrip / single_word added tokens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/formats/bpe.h"
#include "helpers.h"

using namespace difflens;
using nlohmann::json;

namespace {

const std::filesystem::path kData = std::filesystem::path(DIFFLENS_SOURCE_DIR) / "tests" / "data" / "bpe";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using test::lines_of;

std::vector<json> expected(const std::string& name) {
  std::vector<json> out;
  for (const std::string& line : lines_of(slurp(kData / "expected" / name)))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

struct Result {
  size_t texts = 0, tokens = 0, same_ids = 0, offsets_checked = 0, offsets_agree = 0;
};

// Our ids must equal the reference's; where the reference has offsets (converted to bytes), ours must
// equal them or nest with them (the library gives each byte of a split character the whole character).
Result compare(const ByteLevelBpe& bpe, const std::vector<std::string>& texts, const std::vector<json>& ref) {
  REQUIRE(ref.size() == texts.size());
  Result r;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto toks = bpe.encode(texts[i]);
    std::vector<int64_t> ids;
    for (const auto& t : toks) ids.push_back(t.id);
    const auto want = ref[i]["ids"].get<std::vector<int64_t>>();
    ++r.texts;
    r.tokens += want.size();
    if (ids != want) {
      INFO("text " << i + 1 << ": " << texts[i].substr(0, 120));
      CHECK(ids == want);
      continue;
    }
    ++r.same_ids;
    if (!ref[i].contains("offsets")) continue;
    const auto offs = ref[i]["offsets"].get<std::vector<std::vector<size_t>>>();
    for (size_t t = 0; t < toks.size(); ++t) {
      const size_t rb = offs[t][0], re = offs[t][1], b = toks[t].begin, e = toks[t].end;
      ++r.offsets_checked;
      if ((rb <= b && e <= re) || (b <= rb && re <= e)) ++r.offsets_agree;
    }
  }
  return r;
}

}  // namespace

TEST_CASE("Byte-level BPE gives the Hugging Face tokenizers library's ids on the test corpora",
          "[tokenizer][bpe]") {
  const auto corpus_text = slurp(kData / "corpus.txt");
  const auto fuzz_text = slurp(kData / "fuzz.txt");
  const auto corpus = lines_of(corpus_text), fuzz = lines_of(fuzz_text);
  REQUIRE(corpus.size() >= 40);
  REQUIRE(fuzz.size() == 200);
  for (const char* name : {"llama3-style", "gpt2-style", "prefix-space"}) {
    SECTION(name) {
      const auto bpe = ByteLevelBpe::load(kData / (std::string(name) + ".tokenizer.json"));
      const Result lines = compare(*bpe, corpus, expected(std::string(name) + ".corpus.jsonl"));
      const Result whole = compare(*bpe, {corpus_text}, expected(std::string(name) + ".corpus-whole.jsonl"));
      const Result random = compare(*bpe, fuzz, expected(std::string(name) + ".fuzz.jsonl"));
      CHECK(lines.same_ids == lines.texts);
      CHECK(whole.same_ids == 1);
      CHECK(random.same_ids == random.texts);
      CHECK(lines.offsets_agree == lines.offsets_checked);
      CHECK(whole.offsets_agree == whole.offsets_checked);
      // The files are not trivial: thousands of reference tokens, offsets compared for every corpus token.
      CHECK(lines.tokens > 2000);
      CHECK(random.tokens > 10000);
      CHECK(lines.offsets_checked == lines.tokens);
    }
  }
}

TEST_CASE("The reference corpora exercise what differs between the test tokenizers", "[tokenizer][bpe]") {
  // If the tokenizers were applied alike, the comparison above would prove less: the same text must come
  // out differently under ignore_merges, add_prefix_space and the stripping / single-word added tokens.
  const auto llama = ByteLevelBpe::load(kData / "llama3-style.tokenizer.json");
  const auto gpt2 = ByteLevelBpe::load(kData / "gpt2-style.tokenizer.json");
  const auto prefix = ByteLevelBpe::load(kData / "prefix-space.tokenizer.json");
  auto ids = [](const ByteLevelBpe& b, const std::string& s) {
    std::vector<int64_t> out;
    for (const auto& t : b.encode(s)) out.push_back(t.id);
    return out;
  };
  // " DiffLens" is a whole vocabulary entry no merge sequence builds: only ignore_merges finds it.
  const int64_t whole_word = llama->id_of(
      "\xC4\xA0"
      "DiffLens");  // "ĠDiffLens"
  REQUIRE(whole_word >= 0);
  CHECK(ids(*llama, "a DiffLens") == std::vector<int64_t>{llama->id_of("a"), whole_word});
  CHECK(ids(*gpt2, "a DiffLens").size() > 2);
  // lstrip takes the spaces before <|eot_id|>, rstrip the ones after <|end_of_text|>.
  const auto eot = prefix->encode("x  <|eot_id|>y");
  REQUIRE(eot.size() >= 2);
  bool found = false;
  for (const auto& t : eot)
    if (prefix->token_bytes(t.id) == "<|eot_id|>") {
      found = true;
      CHECK(t.begin == 1);
      CHECK(t.end == 13);
    }
  CHECK(found);
  found = false;
  for (const auto& t : prefix->encode("x<|end_of_text|> \t y"))
    if (prefix->token_bytes(t.id) == "<|end_of_text|>") {
      found = true;
      CHECK(t.begin == 1);
      CHECK(t.end == 19);
    }
  CHECK(found);
  // single_word: "DiffLens" as an added token only between non-word characters.
  const int64_t added = prefix->encode("DiffLens").at(0).id;
  CHECK(prefix->encode("(DiffLens)").at(1).id == added);
  for (const auto& t : prefix->encode("xDiffLens DiffLens2 DiffLens\xCC\x81")) CHECK(t.id != added);
}

TEST_CASE("Byte-level BPE without JIT gives the same ids on the test corpora", "[tokenizer][bpe]") {
  // Where PCRE2 has no JIT, pretokenize checks the UTF-8 once and matches its valid runs with a second
  // compilation of each pattern: the same tokens, invalid bytes included (fuzz.txt is random bytes).
  const auto corpus = lines_of(slurp(kData / "corpus.txt")), fuzz = lines_of(slurp(kData / "fuzz.txt"));
  for (const char* name : {"llama3-style", "gpt2-style", "prefix-space"}) {
    INFO(name);
    const auto path = kData / (std::string(name) + ".tokenizer.json");
    const auto jit = ByteLevelBpe::load(path);
    ::setenv("DIFFLENS_NO_JIT", "1", 1);
    const auto interpreted = ByteLevelBpe::load(path);
    ::unsetenv("DIFFLENS_NO_JIT");
    const Result random = compare(*interpreted, fuzz, expected(std::string(name) + ".fuzz.jsonl"));
    CHECK(random.same_ids == random.texts);
    const Result lines = compare(*interpreted, corpus, expected(std::string(name) + ".corpus.jsonl"));
    CHECK(lines.same_ids == lines.texts);
    for (const std::string& text : fuzz) {
      const auto a = jit->encode(text), b = interpreted->encode(text);
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK((a[i].begin == b[i].begin && a[i].end == b[i].end));
    }
  }
}

TEST_CASE("Byte-level BPE reads \\s as Unicode's White_Space, as the references do: U+180E is not a space",
          "[tokenizer][bpe]") {
  const std::string ws =
      R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  CHECK(with_reference_classes(R"(\s+(?!\S)|\s+)") == "[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+");
  CHECK(with_reference_classes(R"( ?[^\s]+)") == " ?[^" + ws + "]+");
  CHECK(with_reference_classes(R"([]\s])") == "[]" + ws + "]");             // a ']' first is a member
  CHECK(with_reference_classes(R"(\\s\Q\s\E[\S])") == R"(\\s\Q\s\E[\S])");  // escaped, quoted, \S in a class
  CHECK(with_reference_classes(R"([[:alpha:]\s]x)") == "[[:alpha:]" + ws + "]x");
  CHECK(with_reference_classes(R"(\p{Lu}\pM\p{Nd})") == R"(\p{Lu}\pM\p{Nd})");  // not L or N: PCRE2's
  // In the GPT-2 pattern: U+180E (Mongolian vowel separator, Cf) joins the punctuation after it, so "'s"
  // is cut ("'" then "s", as tiktoken and tokenizers cut it); after U+3000, a space, "'s" stays one token.
  const auto gpt2 = ByteLevelBpe::load(kData / "gpt2-style.tokenizer.json");
  const int64_t apostrophe_s = gpt2->id_of("'s");
  REQUIRE(apostrophe_s >= 0);
  const auto after_180e = gpt2->encode("x\xE1\xA0\x8E's");
  REQUIRE(!after_180e.empty());
  CHECK(after_180e.back().id == gpt2->id_of("s"));
  CHECK(after_180e.back().begin == after_180e.back().end - 1);
  const auto after_3000 = gpt2->encode("x\xE3\x80\x80's");
  REQUIRE(!after_3000.empty());
  CHECK(after_3000.back().id == apostrophe_s);
}

TEST_CASE("Byte-level BPE takes time linear in the text's length", "[tokenizer][bpe]") {
  // Four times the text, about four times the CPU time (not 16, as when every match checked the UTF-8 to
  // the end of the text); the best of three runs, CPU time of this process.
  const std::string corpus = slurp(kData / "corpus.txt");
  std::string text;
  while (text.size() < (1u << 20)) text += corpus;
  const auto bpe = ByteLevelBpe::load(kData / "llama3-style.tokenizer.json");
  auto best_of_three = [&](size_t bytes) {
    double best = 1e9;
    for (int i = 0; i < 3; ++i) {
      const std::clock_t t0 = std::clock();
      const auto toks = bpe->encode(text.substr(0, bytes));
      best = std::min(best, static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC);
      CHECK(toks.back().end == bytes);
    }
    return best;
  };
  const double quarter = best_of_three(text.size() / 4), whole = best_of_three(text.size());
  INFO(text.size() / 4 << " bytes: " << quarter << " s; " << text.size() << " bytes: " << whole << " s");
  CHECK(whole < 6 * std::max(quarter, 0.01));
}
