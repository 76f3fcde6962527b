// DiffLens's tokenizers on three real vocabularies against the reference tokenizers: cl100k_base (tiktoken),
// GPT-2 (tiktoken and Hugging Face tokenizers, which agree) and Llama 3 (tokenizers, and tiktoken with
// Llama 3's ranks, which agree), on tests/data/bpe's corpora - every line, then each file whole - with
// special tokens matched and read as text. The vocabularies are rebuilt from npm packages by
// scripts/tokenizer-reference/real-vocab DIR (scripts/test does it into build/real-vocab and points
// DIFFLENS_REAL_VOCAB there; the files are the packages', not committed); the references' ids are
// committed in tests/data/bpe/real/ (scripts/tokenizer-reference/regenerate), and real-vocab checks that the
// references, run again, still give them. Without the vocabularies the test is skipped, saying why.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/formats/tokenizer.h"
#include "helpers.h"

using namespace difflens;
using nlohmann::json;

namespace {

const std::filesystem::path kData = std::filesystem::path(DIFFLENS_SOURCE_DIR) / "tests" / "data" / "bpe";

// As real-reference.js reads them: each file's lines (a final newline ends the last), then each file whole.
std::vector<std::string> texts() {
  std::vector<std::string> out;
  const char* files[] = {"corpus.txt", "fuzz.txt", "edges.txt"};
  for (const char* f : files)
    for (std::string& line : test::lines_of(test::read_all(kData / f))) out.push_back(std::move(line));
  for (const char* f : files) out.push_back(test::read_all(kData / f));
  return out;
}

std::string shown(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, 60)) {
    if (c >= 0x20 && c != 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out + (text.size() > 60 ? "..." : "");
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 24; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + (ids.size() > 24 ? ",..." : "");
}

}  // namespace

TEST_CASE("Real vocabularies: cl100k_base, GPT-2 and Llama 3 tokenize as tiktoken and tokenizers do",
          "[tokenizer][bpe][real-vocab]") {
  const char* env = std::getenv("DIFFLENS_REAL_VOCAB");
  if (!env || !*env)
    test::skip(
        "DIFFLENS_REAL_VOCAB is not set: the real vocabularies come from the npm registry "
        "(scripts/tokenizer-reference/real-vocab DIR makes them; scripts/test does, into build/real-vocab)");
  const std::filesystem::path dir = env;
  for (const char* f : {"cl100k_base.tiktoken", "gpt2.tokenizer.json", "llama3.tokenizer.json"})
    if (!std::filesystem::exists(dir / f))
      test::skip((dir / f).string() + " is missing (scripts/tokenizer-reference/real-vocab " + dir.string() +
                 " did not finish: is the npm registry reachable?)");
  const std::vector<std::string> all = texts();
  struct Vocab {
    const char* name;
    Tokenizer tok;
  };
  const std::vector<Vocab> vocabs = {
      {"cl100k_base", Tokenizer::tiktoken(dir / "cl100k_base.tiktoken", "cl100k_base", -1, -1)},
      {"gpt2", Tokenizer::byte_level_bpe(dir / "gpt2.tokenizer.json", -1, -1)},
      {"llama3", Tokenizer::byte_level_bpe(dir / "llama3.tokenizer.json", -1, -1)},
  };
  for (const Vocab& v : vocabs) {
    for (const Specials mode : {Specials::match, Specials::text}) {
      const std::string mode_name = mode == Specials::match ? "special" : "text";
      INFO(v.name << ", special tokens " << (mode == Specials::match ? "matched" : "read as text"));
      // special: one line per text; text: only the texts whose ids change, {"text": index, "ids": [...]}.
      std::vector<std::vector<int64_t>> want(all.size());
      size_t changed = 0;
      {
        std::istringstream in(test::read_all(kData / "real" / (std::string(v.name) + ".special.jsonl")));
        std::string line;
        size_t i = 0;
        while (std::getline(in, line))
          if (!line.empty()) {
            REQUIRE(i < all.size());
            want[i++] = json::parse(line)["ids"].get<std::vector<int64_t>>();
          }
        REQUIRE(i == all.size());
      }
      if (mode == Specials::text) {
        std::istringstream in(test::read_all(kData / "real" / (std::string(v.name) + ".text.jsonl")));
        std::string line;
        while (std::getline(in, line))
          if (!line.empty()) {
            const json j = json::parse(line);
            const size_t i = j["text"].get<size_t>();
            REQUIRE(i < all.size());
            want[i] = j["ids"].get<std::vector<int64_t>>();
            ++changed;
          }
        CHECK(changed > 0);  // the corpora write special tokens: reading them as text must change something
      }
      size_t differ = 0;
      std::string first;
      for (size_t i = 0; i < all.size(); ++i) {
        const std::vector<int64_t> got = v.tok.encode(all[i], false, mode).ids;
        if (got == want[i]) continue;
        if (++differ <= 3)
          first += "\n  text " + std::to_string(i) + " \"" + shown(all[i]) + "\"\n    DiffLens  " +
                   ids_text(got) + "\n    reference " + ids_text(want[i]);
      }
      INFO(differ << " of " << all.size() << " texts differ" << first);
      CHECK(differ == 0);
      std::printf(
          "real vocabulary %-11s specials %-7s: %zu texts, %zu differ from the references%s\n", v.name,
          mode_name.c_str(), all.size(), differ,
          mode == Specials::text ? (" (" + std::to_string(changed) + " change as text)").c_str() : "");
    }
  }
}
