// Byte-level BPE against the reference: the ids the Hugging Face `tokenizers` library (0.23.2, its Rust
// core) gives three small tokenizer.json files on a hand-written multilingual corpus and a seeded fuzz
// corpus, written by scripts/tokenizer-reference/regenerate and committed under tests/data/bpe/. The
// tokenizers are ours (merges learned from the bundled haystack text); they differ in what is applied:
// Llama 3's Split regex + ByteLevel with ignore_merges, GPT-2's ByteLevel regex, add_prefix_space with
// lstrip / rstrip / single_word added tokens.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bpe.h"

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

// The corpus's lines as the reference script splits them (a final newline ends the last line).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

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
