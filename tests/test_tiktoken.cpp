// tiktoken rank files (`.tiktoken`, the cl100k_base tokenizer of the diff-mlx models): small files written
// here, encoded by DiffLens and by an independent transcription of tiktoken's merge loop below (the
// lowest-ranked adjacent pair merges first, the leftmost among equals; a piece that is a token stays one),
// special tokens, what is refused, and a file of cl100k_base's shape read as that encoding.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <tuple>
#include <utility>

#include "core/formats/bpe.h"
#include "core/formats/error.h"
#include "core/formats/tokenizer.h"
#include "helpers.h"

using namespace difflens;

namespace {

std::string b64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (bytes.size() - i == 2) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// Ranks: the 256 bytes first (in a shuffled order, as real files have them), then `words` in order.
std::map<std::string, int64_t> ranks_for(const std::vector<std::string>& words, uint32_t seed) {
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = b;
  std::mt19937 rng(seed);
  std::shuffle(bytes.begin(), bytes.end(), rng);
  std::map<std::string, int64_t> r;
  int64_t next = 0;
  for (int b : bytes) r[std::string(1, static_cast<char>(b))] = next++;
  for (const auto& w : words) r.emplace(w, next++);
  return r;
}

std::string rank_file(const std::map<std::string, int64_t>& ranks) {
  std::string out;
  for (const auto& [bytes, rank] : ranks) out += b64(bytes) + " " + std::to_string(rank) + "\n";
  return out;
}

// tiktoken's byte-pair merge of one piece, transcribed from its description: while some adjacent pair's
// joined bytes are a token, merge the pair of lowest rank (the first such pair when several tie).
std::vector<int64_t> reference_merge(const std::string& piece, const std::map<std::string, int64_t>& ranks) {
  if (ranks.count(piece)) return {ranks.at(piece)};
  std::vector<std::string> parts;
  for (char c : piece) parts.push_back(std::string(1, c));
  for (;;) {
    int64_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && (best < 0 || it->second < best)) best = it->second, at = i;
    }
    if (best < 0) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int64_t> ids;
  for (const auto& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

const std::string& kCl100kPattern = Tokenizer::cl100k_split_pattern();

std::vector<int64_t> ids_of(const ByteLevelBpe& bpe, const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& t : bpe.encode(text)) out.push_back(t.id);
  return out;
}

}  // namespace

TEST_CASE("tiktoken: a rank file encodes as tiktoken does, hand-computed and against its merge loop",
          "[tokenizer][tiktoken]") {
  const auto ranks = ranks_for({"ab", "bc", "abc", "ca", " a", " ab", "cab", "xyz"}, 1);
  const auto bpe =
      ByteLevelBpe::from_tiktoken(rank_file(ranks), "t.tiktoken", kCl100kPattern, {{"<|end|>", 300}});
  const int64_t ab = ranks.at("ab"), abc = ranks.at("abc"), cab = ranks.at("cab"), sp_ab = ranks.at(" ab");
  // A piece that is a token is that token, even one no merge leads to ("xy" and "yz" are not tokens).
  CHECK(ids_of(*bpe, "xyz") == std::vector<int64_t>{ranks.at("xyz")});
  CHECK(ids_of(*bpe, "xyzxyz") == std::vector<int64_t>{ranks.at("x"), ranks.at("y"), ranks.at("z"),
                                                       ranks.at("x"), ranks.at("y"), ranks.at("z")});
  // "cab": a-b ranks below c-a, so [c, ab], then c-ab makes "cab".
  CHECK(ids_of(*bpe, "cab") == std::vector<int64_t>{cab});
  // "abcab": a-b (rank of "ab") at 0 and 3, the leftmost first; then ab-c makes "abc"; then a-b.
  CHECK(ids_of(*bpe, "abcab") == std::vector<int64_t>{abc, ab});
  // The regex keeps a leading space with the word: " ab" is one piece and one token.
  CHECK(ids_of(*bpe, "abc ab") == std::vector<int64_t>{abc, sp_ab});
  // The special token is matched before the split, as one id.
  CHECK(ids_of(*bpe, "ab<|end|>ab") == std::vector<int64_t>{ab, 300, ab});
  CHECK(bpe->vocab_size() == 301);
  CHECK(bpe->decode({abc, 300, sp_ab}) == "abc<|end|> ab");
  // Random words against the transcription of tiktoken's loop (letters only: each " word" is one piece).
  std::mt19937 rng(7);
  int checked = 0;
  for (int n = 0; n < 300; ++n) {
    std::string word = n % 2 ? " " : "";
    const size_t len = 1 + rng() % 9;
    for (size_t i = 0; i < len; ++i) word += "abc"[rng() % 3];
    INFO(word);
    CHECK(ids_of(*bpe, word) == reference_merge(word, ranks));
    ++checked;
  }
  CHECK(checked == 300);
}

TEST_CASE("tiktoken: cl100k_base's split keeps a newline with the spaces after it at the end of the text",
          "[tokenizer][tiktoken]") {
  // tiktoken's current pattern: `\s++$` takes trailing whitespace whole and `\s*[\r\n]` a newline with
  // what precedes it, so "x\n " splits as x | "\n " (the classic pattern gave x | "\n" | " "), "a \n " as
  // a | " \n ", and inside the text a newline goes alone before " y".
  const auto ranks = ranks_for({"\n ", " \n ", " y"}, 4);
  const auto bpe = ByteLevelBpe::from_tiktoken(rank_file(ranks), "t.tiktoken", kCl100kPattern, {});
  auto id = [&](const std::string& t) { return ranks.at(t); };
  CHECK(ids_of(*bpe, "x\n ") == std::vector<int64_t>{id("x"), id("\n ")});
  CHECK(ids_of(*bpe, "a \n ") == std::vector<int64_t>{id("a"), id(" \n ")});
  CHECK(ids_of(*bpe, "x\n y") == std::vector<int64_t>{id("x"), id("\n"), id(" y")});
  // Numbers in threes, contractions case-blind, as cl100k_base.
  CHECK(ids_of(*bpe, "12345").size() == 5);  // "123" and "45" are not tokens here: five bytes
  CHECK(ids_of(*bpe, "I'M") == std::vector<int64_t>{id("I"), id("'"), id("M")});
}

TEST_CASE("tiktoken: broken rank files are refused with the line at fault", "[tokenizer][tiktoken][errors]") {
  auto refusal = [](const std::string& text) {
    try {
      ByteLevelBpe::from_tiktoken(text, "t.tiktoken", kCl100kPattern, {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string good = rank_file(ranks_for({}, 2));
  CHECK(refusal(good) == "(accepted)");
  CHECK_THAT(refusal(good + "YWI= x\n"), Catch::StartsWith("t.tiktoken:257: rank 'x' is not a whole number"));
  CHECK_THAT(refusal(good + "!!!! 300\n"), Catch::StartsWith("t.tiktoken:257: '!!!!' is not base64"));
  CHECK_THAT(refusal(good + "YWI= 1 2\n"), Catch::StartsWith("t.tiktoken:257: not two fields"));
  CHECK_THAT(refusal(good + b64("a") + " 400\n"), Catch::Contains("the token is listed twice"));
  CHECK_THAT(refusal(good + "YWI= 5\n"), Catch::Contains("rank 5 is given to two tokens"));
  // A byte without a token: text holding it could not be encoded.
  std::string no_z;
  for (const auto& [bytes, rank] : ranks_for({}, 2))
    if (bytes != "z") no_z += b64(bytes) + " " + std::to_string(rank) + "\n";
  CHECK_THAT(refusal(no_z), Catch::Contains("no token for the byte 0x7A"));
  CHECK_THAT(refusal(""), Catch::Contains("no tokens (is this a .tiktoken rank file?)"));
  // A rank beyond the encoding's count is refused at its line, before a table is sized for it.
  CHECK_THROWS_WITH(
      ByteLevelBpe::from_tiktoken(good + "YWI= 16000000\n", "t.tiktoken", kCl100kPattern, {}, 300),
      Catch::StartsWith("t.tiktoken:257: rank 16000000 is beyond this encoding's 300 tokens"));
}

TEST_CASE("tiktoken: a file of cl100k_base's shape reads as that encoding, another is refused",
          "[tokenizer][tiktoken]") {
  test::ScratchDir dir("tiktoken");
  // 256 bytes and 100,000 made-up tokens: cl100k_base's 100,256 ranks (the real file is not shipped).
  std::vector<std::string> words;
  for (int i = 0; words.size() < 100000; ++i) words.push_back("w" + std::to_string(i));
  test::write_all(dir / "cl100k_base.tiktoken", rank_file(ranks_for(words, 3)));
  const Tokenizer t = Tokenizer::tiktoken(dir / "cl100k_base.tiktoken", "cl100k_base", 100257, 100257);
  CHECK(t.vocab_size() == 100277);
  CHECK(t.is_byte_level_bpe());
  const Encoding e = t.encode("<|endoftext|>w42 w7", true);
  REQUIRE(e.ids.size() >= 3);
  CHECK(e.ids[0] == 100257);  // BOS
  CHECK(e.ids[1] == 100257);  // typed: the special token itself
  CHECK(t.decode(e.ids) == "<|endoftext|><|endoftext|>w42 w7");
  CHECK(t.piece(100276) == "<|endofprompt|>");
  // Too few tokens for cl100k_base, or an encoding DiffLens does not know.
  words.resize(1000);
  test::write_all(dir / "small.tiktoken", rank_file(ranks_for(words, 3)));
  CHECK_THROWS_WITH(Tokenizer::tiktoken(dir / "small.tiktoken", "cl100k_base", -1, -1),
                    Catch::Contains("not cl100k_base's rank file (it has 1256 tokens"));
  CHECK_THROWS_WITH(Tokenizer::tiktoken(dir / "small.tiktoken", "o200k_base", -1, -1),
                    Catch::Contains("the tiktoken encoding 'o200k_base' is not one DiffLens knows"));
  CHECK_THROWS_WITH(Tokenizer::tiktoken(dir / "missing.tiktoken", "cl100k_base", -1, -1),
                    Catch::Contains("cannot open the tiktoken file"));
}

TEST_CASE("tiktoken: tokenize takes a rank file named by its encoding", "[tokenizer][tiktoken][cli]") {
  test::ScratchDir dir("tiktoken-cli");
  std::vector<std::string> words;
  for (int i = 0; words.size() < 100000; ++i) words.push_back("w" + std::to_string(i));
  test::write_all(dir / "cl100k_base.tiktoken", rank_file(ranks_for(words, 3)));
  const Tokenizer t = Tokenizer::tiktoken(dir / "cl100k_base.tiktoken", "cl100k_base", -1, -1);
  std::string want;
  for (const int64_t id : t.encode("w42 w7", false).ids)
    want += (want.empty() ? "" : ",") + std::to_string(id);
  auto run = [&](const std::string& args) {
    const std::string log = (dir / "out.txt").string();
    const int raw =
        std::system((std::string(DIFFLENS_EXE) + " tokenize " + args + " > '" + log + "' 2>&1").c_str());
    return std::make_pair(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log));
  };
  const std::string file = "'" + (dir / "cl100k_base.tiktoken").string() + "'";
  auto [status, out] = run("--tokenizer " + file + " --text 'w42 w7' --format ids");
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find(want) != std::string::npos);
  std::tie(status, out) = run("--tokenizer " + file + " --bos 100257 --text 'w42 w7' --format ids");
  CHECK(out.find("100257," + want) != std::string::npos);
  // The file's name says the encoding: another is refused with what DiffLens knows.
  std::filesystem::copy_file(dir / "cl100k_base.tiktoken", dir / "o200k_base.tiktoken");
  std::tie(status, out) = run("--tokenizer '" + (dir / "o200k_base.tiktoken").string() + "' --text x");
  CHECK(status == 1);
  CHECK(out.find("the tiktoken encoding 'o200k_base' is not one DiffLens knows") != std::string::npos);
}

TEST_CASE("Letters and numbers newer than PCRE2's tables split as tiktoken and tokenizers split them",
          "[tokenizer][bpe]") {
  // The spelling: \p{L} and \p{N} gain the gap's ranges (core/formats/unicode_gap.inc); outside a class they
  // become a class of their own, inside one their members join it; \P{L} outside a class is its complement.
  const std::string letters = with_reference_classes(R"(\p{L})"), numbers = with_reference_classes(R"(\pN)");
  CHECK_THAT(letters,
             Catch::StartsWith(R"([\p{L}\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD})") && Catch::EndsWith("]"));
  CHECK_THAT(numbers, Catch::StartsWith(R"([\p{N}\x{10D40}-\x{10D49})") && Catch::EndsWith("]"));
  const std::string l = letters.substr(1, letters.size() - 2), n = numbers.substr(1, numbers.size() - 2);
  CHECK(with_reference_classes(R"(\p{L}+|\p{N}{1,3})") == "[" + l + "]+|[" + n + "]{1,3}");
  CHECK(with_reference_classes(R"([^\r\n\p{L}\p{N}]?)") == R"([^\r\n)" + l + n + "]?");
  CHECK(with_reference_classes(R"(\P{L}\PN)") == "[^" + l + "][^" + n + "]");
  CHECK(with_reference_classes(R"([\P{L}]\p{Lu}\p{Nd})") == R"([\P{L}]\p{Lu}\p{Nd})");  // left to PCRE2

  // Encoded: a rank file whose only long tokens are "a" + X + "b" and "0" + D + "0"; a piece that is a
  // token is that token, so each comes back as ONE id exactly when the pattern keeps it one piece, i.e.
  // when X is a letter (cl100k's [^\r\n\p{L}\p{N}]?\p{L}+) and D a number (\p{N}{1,3}).
  struct Case {
    const char* what;
    std::string utf8;
    bool letter, number;
  };
  const std::vector<Case> cases = {
      {"U+00E9 (Latin small e acute, Unicode 1.1)", "\xC3\xA9", true, false},
      {"U+1E4D0 (Nag Mundari letter O, Unicode 15.0)", "\xF0\x9E\x93\x90", true, false},
      {"U+31350 (CJK Extension H, Unicode 15.0)", "\xF0\xB1\x8D\x90", true, false},
      {"U+2EBF0 (CJK Extension I, Unicode 15.1)", "\xF0\xAE\xAF\xB0", true, false},
      {"U+A7CB (Latin capital letter ramshorn, Unicode 16.0)", "\xEA\x9F\x8B", true, false},
      {"U+088F (an Arabic letter of Unicode 17.0: a letter to neither)", "\xE0\xA2\x8F", false, false},
      {"U+1E4F1 (Nag Mundari digit one, Unicode 15.0)", "\xF0\x9E\x93\xB1", false, true},
      {"U+1CCF1 (outlined digit one, Unicode 16.0)", "\xF0\x9C\xB3\xB1", false, true},
      {"U+11DE1 (a digit of Unicode 17.0: a number to neither)", "\xF0\x91\xB7\xA1", false, false},
  };
  std::vector<std::string> words;
  for (const Case& c : cases) {
    words.push_back("a" + c.utf8 + "b");
    words.push_back("0" + c.utf8 + "0");
  }
  const auto bpe =
      ByteLevelBpe::from_tiktoken(rank_file(ranks_for(words, 5)), "gap.tiktoken", kCl100kPattern, {});
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK((bpe->encode("a" + c.utf8 + "b").size() == 1) == c.letter);
    CHECK((bpe->encode("0" + c.utf8 + "0").size() == 1) == c.number);
  }
}
