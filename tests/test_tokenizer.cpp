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

TEST_CASE("encode_prompt: the one prompt-to-ids rule (text, ids, typed ids, refusals)",
          "[tokenizer][errors]") {
  const Tokenizer bytes = Tokenizer::bytes(259);
  const NoTextTokenizer cli{"this model", "", "give --token-ids"};
  // Text: the tokenizer's encoding, BOS first unless asked not.
  PromptInput in;
  in.text = "Hi";
  CHECK(encode_prompt(&bytes, 259, in, cli).ids == std::vector<int64_t>{1, 3 + 'H', 3 + 'i'});
  in.bos = false;
  CHECK(encode_prompt(&bytes, 259, in, cli).ids == std::vector<int64_t>{3 + 'H', 3 + 'i'});
  // Ids: as given, no BOS added, whatever the text; pieces from the tokenizer, offsets {0, 0}.
  in.ids = std::vector<int64_t>{3 + 'H', 7};
  const Encoding ids = encode_prompt(&bytes, 259, in, cli);
  CHECK(ids.ids == std::vector<int64_t>{3 + 'H', 7});
  CHECK(ids.pieces == std::vector<std::string>{"H", "<0x04>"});
  CHECK(ids.offsets == std::vector<std::pair<size_t, size_t>>{{0, 0}, {0, 0}});
  // No text tokenizer: text is refused, the surface's way of giving ids named ...
  ModelConfig c;
  c.vocab_size = 1000;
  c.tokenizer = TokenizerKind::SentencePiece;
  const Tokenizer none = Tokenizer::without_files(c);
  PromptInput text;
  text.text = "1, 450, 3";
  CHECK_THROWS_WITH(
      encode_prompt(&none, 1000, text, {"model 2", "tokenizer.model not found", "send 'token_ids'"}),
      "model 2 has no text tokenizer (tokenizer.model not found): send 'token_ids'");
  CHECK_THROWS_WITH(encode_prompt(nullptr, 1000, text, {"model 0", "", ""}), "model 0 has no text tokenizer");
  // ... unless the surface reads typed ids (the app's prompt box): then they are the prompt, checked.
  text.ids_from_text = true;
  const NoTextTokenizer box{"this model", "no tokenizer file", "type token ids"};
  CHECK(encode_prompt(&none, 1000, text, box).ids == std::vector<int64_t>{1, 450, 3});
  CHECK(encode_prompt(nullptr, 1000, text, box).pieces == std::vector<std::string>{"", "", ""});
  text.text = "1, 4500";
  CHECK_THROWS_WITH(
      encode_prompt(&none, 1000, text, box),
      "this model has no text tokenizer (no tokenizer file): type token ids (id 4500 is outside the "
      "vocabulary (size 1000))");
  text.text = "  ";
  CHECK_THROWS_WITH(encode_prompt(&none, 1000, text, box),
                    "this model has no text tokenizer (no tokenizer file): type token ids");
}
