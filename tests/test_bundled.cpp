// The bundled pair in assets/models and the SentencePiece tokenizer it ships.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/metrics.h"
#include "core/model.h"
#include "core/needle.h"
#include "core/tokenizer.h"
#include "helpers.h"

using namespace difflens;

namespace {
const std::filesystem::path kModels = DIFFLENS_SOURCE_DIR "/assets/models";
}

TEST_CASE("bundled models load, are parameter-matched and share one tokenizer", "[bundled]") {
  const Model diff = Model::load(kModels / "diff-small", DeviceChoice::Cpu);
  const Model base = Model::load(kModels / "baseline-small", DeviceChoice::Cpu);  // strict: config = tensors
  CHECK(diff.config().attention == AttentionKind::Diff);
  CHECK(base.config().attention == AttentionKind::Baseline);
  CHECK(diff.config().hidden_size == base.config().hidden_size);
  CHECK(diff.parameter_count() == parameter_count(diff.config()));
  const double ratio =
      static_cast<double>(diff.parameter_count()) / static_cast<double>(base.parameter_count());
  CHECK(ratio > 0.99);
  CHECK(ratio < 1.01);
  CHECK(test::read_all(kModels / "diff-small/tokenizer.model") ==
        test::read_all(kModels / "baseline-small/tokenizer.model"));
  const auto ids = diff.tokenizer().encode("The secret code of Mira is 4821.", true).ids;
  const Trace t = diff.capture(ids);
  CHECK(t.tokens[1] == "\xe2\x96\x81The");  // "▁The"
  CHECK(t.layers.size() == static_cast<size_t>(diff.config().num_hidden_layers));
}

TEST_CASE("bundled pair: DIFF retrieves held-out needles and attends to the code, the baseline does not",
          "[bundled][needle]") {
  const Model diff = Model::load(kModels / "diff-small", DeviceChoice::Cpu);
  const Model base = Model::load(kModels / "baseline-small", DeviceChoice::Cpu);
  const std::string text = test::read_all(std::filesystem::path(DIFFLENS_SOURCE_DIR) / "assets/haystack.txt");
  const Haystack hay(text, diff.tokenizer());
  const EpisodeBuilder builder(hay, diff.tokenizer(), NeedleSplit::Eval);
  int answered[2] = {0, 0};
  double strongest[2] = {0, 0};  // the largest answer share of any head, over the episodes
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const Episode ep = needle_episode(builder, {256, 0.5, 1, 1}, seed);
    // The rows that produce the code: from the token before its first digit to its last-but-one digit.
    const Span code = ep.answer_spans.back(),
               needle = ep.needle_code_spans[static_cast<size_t>(ep.queried[0])];
    const std::vector<int64_t> ids(ep.ids.begin(), ep.ids.begin() + code.end - 1);
    for (int k = 0; k < 2; ++k) {
      const Model& m = k == 0 ? diff : base;
      answered[k] += run_needle(m, builder, {256, 0.5, 1, 1}, seed).answered;
      const NoiseReadout r = attention_noise(m.capture(ids), {needle.begin, needle.end},
                                             {code.begin - 1, static_cast<int64_t>(ids.size())});
      strongest[k] = std::max(strongest[k], strongest_answer_head(r)->share.answer);
    }
  }
  CHECK(answered[0] >= 3);  // the needle lab: 1.00 at 256 tokens over 25 episodes
  CHECK(answered[1] == 0);
  CHECK(strongest[0] > 0.3);
  CHECK(strongest[1] < 0.1);
}

TEST_CASE("SentencePiece tokenizer: round trip, byte offsets, specials", "[tokenizer][sentencepiece]") {
  const Tokenizer tok = Tokenizer::sentencepiece(kModels / "diff-small/tokenizer.model");
  CHECK(tok.is_sentencepiece());
  CHECK(tok.vocab_size() == 4096);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_id() == 2);
  const std::string text = "The secret code of Mira is 4821. Caf\xc3\xa9 au lait!";
  const Encoding e = tok.encode(text, true);
  CHECK(e.ids[0] == 1);
  CHECK(e.pieces[0] == "<s>");
  CHECK(tok.decode(e.ids) == text);
  // Offsets cover the text in order, and each piece's bytes are its text (the ▁ stands for a space).
  size_t pos = 0;
  for (size_t i = 1; i < e.ids.size(); ++i) {
    const auto [b, en] = e.offsets[i];
    CHECK(b >= pos);
    CHECK(en > b);
    pos = en;
  }
  CHECK(pos == text.size());
  // Digits are split: the code is four single-digit pieces.
  int digits = 0;
  for (const auto& p : e.pieces)
    digits += (p == "4" || p == "8" || p == "2" || p == "1" ||
               p == "\xe2\x96\x81"
                    "4");
  CHECK(digits == 4);
  CHECK(tok.encode("", false).ids.empty());
  CHECK(tok.encode("", true).ids == std::vector<int64_t>{1});
}

TEST_CASE("SentencePiece tokenizer: non-UTF-8 and odd input never crash",
          "[tokenizer][sentencepiece][errors]") {
  const Tokenizer tok = Tokenizer::sentencepiece(kModels / "diff-small/tokenizer.model");
  const std::string bad = std::string("ok \xff\xfe\xc3 end", 10) + std::string(1, '\0') + "x";
  const Encoding e = tok.encode(bad, false);
  CHECK_FALSE(e.ids.empty());
  for (int64_t id : e.ids) CHECK((id >= 0 && id < 4096));
  CHECK_NOTHROW(tok.decode(e.ids));
  const std::string big(200000, 'a');
  CHECK(tok.encode(big, false).ids.size() > 0);
  CHECK_THROWS_WITH(tok.decode({5000}), Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(Tokenizer::sentencepiece("/nonexistent/tokenizer.model"), Catch::Contains("not found"));
  test::ScratchDir dir("badspm");
  test::write_all(dir / "tokenizer.model", "this is not a protobuf");
  CHECK_THROWS_WITH(Tokenizer::sentencepiece(dir / "tokenizer.model"),
                    Catch::Contains("not a SentencePiece model"));
}
