// Byte tokenizer: ids, offsets, display pieces, non-UTF-8 input; token-id parsing.
#include <catch2/catch.hpp>

#include "core/formats/error.h"
#include "core/formats/tokenizer.h"

using namespace difflens;

TEST_CASE("byte tokenizer encodes bytes with offsets and decodes back", "[tokenizer]") {
  const Tokenizer t = Tokenizer::bytes(259);
  const std::string text = "Hi \xc3\xa9!";  // "Hi é!" : é is two bytes
  const Encoding e = t.encode(text, true);
  REQUIRE(e.ids.size() == 7);
  CHECK(e.ids[0] == 1);
  CHECK(e.ids[1] == 3 + 'H');
  CHECK(e.pieces[0] == "<s>");
  CHECK(e.pieces[1] == "H");
  CHECK(e.pieces[3] == " ");
  CHECK(e.pieces[4] == "<0xC3>");
  CHECK(e.offsets[0] == std::pair<size_t, size_t>{0, 0});
  CHECK(e.offsets[5] == std::pair<size_t, size_t>{4, 5});
  CHECK(t.decode(e.ids) == text);
  CHECK(t.encode("", false).ids.empty());
}

TEST_CASE("invalid UTF-8 is tokenised byte by byte without error", "[tokenizer]") {
  const Tokenizer t = Tokenizer::bytes(300);
  const std::string bad = std::string("a\xff\xfe", 3) + std::string(1, '\0') + "b";
  const Encoding e = t.encode(bad, false);
  REQUIRE(e.ids.size() == 5);
  CHECK(e.pieces[1] == "<0xFF>");
  CHECK(e.pieces[3] == "<0x00>");
  CHECK(t.decode(e.ids) == bad);
  CHECK(t.piece(280) == "<280>");
}

TEST_CASE("parse_token_ids accepts comma lists and rejects junk", "[tokenizer][errors]") {
  CHECK(parse_token_ids("1,2, 3", 10) == std::vector<int64_t>{1, 2, 3});
  CHECK(parse_token_ids("", 10).empty());
  CHECK_THROWS_WITH(parse_token_ids("1,x", 10), Catch::Contains("comma-separated"));
  CHECK_THROWS_WITH(parse_token_ids("1,-2", 10), Catch::Contains("comma-separated"));
  CHECK_THROWS_WITH(parse_token_ids("10", 10), Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(parse_token_ids("99999999999999999", 10), Catch::Contains("comma-separated"));
}

TEST_CASE("a model without tokenizer files shows ids and refuses text", "[tokenizer][errors]") {
  ModelConfig c;
  c.vocab_size = 1000;
  c.tokenizer = TokenizerKind::SentencePiece;
  const Tokenizer t = Tokenizer::without_files(c);
  CHECK(t.piece(5) == "<5>");
  CHECK_THROWS_WITH(t.encode("hi", true), Catch::Contains("no tokenizer"));
  CHECK_THROWS_WITH(Tokenizer::bytes(100), Catch::Contains("at least 259"));
}
