// The bundled trio in assets/models and the SentencePiece tokenizer it ships.
#include <catch2/catch.hpp>

#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/formats/tokenizer.h"
#include "core/model/model.h"
#include "core/model/needle.h"
#include "helpers.h"

using namespace difflens;

namespace {
const std::filesystem::path kModels = DIFFLENS_SOURCE_DIR "/assets/models";
}

TEST_CASE("bundled models load, are parameter-matched and share one tokenizer", "[bundled]") {
  const Model diff = Model::load(kModels / "diff-small", DeviceChoice::Cpu);
  const Model v2 = Model::load(kModels / "diff-v2-small", DeviceChoice::Cpu);
  const Model base = Model::load(kModels / "baseline-small", DeviceChoice::Cpu);  // strict: config = tensors
  CHECK(diff.config().attention == AttentionKind::Diff);
  CHECK(v2.config().attention == AttentionKind::DiffV2);
  CHECK(base.config().attention == AttentionKind::Baseline);
  CHECK(diff.config().hidden_size == base.config().hidden_size);
  CHECK(v2.config().hidden_size == base.config().hidden_size);
  CHECK(diff.parameter_count() == parameter_count(diff.config()));
  const auto ratio = [&](const Model& m) {
    return static_cast<double>(m.parameter_count()) / static_cast<double>(base.parameter_count());
  };
  CHECK(ratio(diff) > 0.99);
  CHECK(ratio(diff) < 1.01);
  // V2's extra query sub-heads and lambda_proj: 4 x (16,384 + 1,024) = 69,632 parameters, 3.8 %.
  CHECK(v2.parameter_count() - base.parameter_count() == 69632);
  for (const char* other : {"diff-v2-small", "baseline-small"})
    CHECK(test::read_all(kModels / "diff-small/tokenizer.model") ==
          test::read_all(kModels / other / "tokenizer.model"));
  const auto ids = diff.tokenizer().encode("The secret code of Mira is 4821.", true).ids;
  const Trace t = diff.capture(ids);
  CHECK(t.tokens[1] == "\xe2\x96\x81The");  // "▁The"
  CHECK(t.layers.size() == static_cast<size_t>(diff.config().num_hidden_layers));
}

TEST_CASE(
    "bundled trio: all retrieve held-out needles and DIFF's noise mass on the question is below the baseline's",
    "[bundled][needle]") {
  const Model models[3] = {Model::load(kModels / "diff-small", DeviceChoice::Cpu),
                           Model::load(kModels / "diff-v2-small", DeviceChoice::Cpu),
                           Model::load(kModels / "baseline-small", DeviceChoice::Cpu)};
  const std::string text = test::read_all(std::filesystem::path(DIFFLENS_SOURCE_DIR) / "assets/haystack.txt");
  const Haystack hay(text, models[0].tokenizer());
  const EpisodeBuilder builder(hay, models[0].tokenizer(), NeedleSplit::Eval);
  int answered[3] = {0, 0, 0};
  // Means over heads, layers and episodes of the attention mass (what the app and the card show): on the
  // noise while the question is read, on the noise while the code is written, and on the answer (the needle's
  // code) by the strongest head while it is written.
  double question_noise[3] = {0, 0, 0}, answering_noise[3] = {0, 0, 0}, strongest[3] = {0, 0, 0};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const Episode ep = needle_episode(builder, {256, 0.5, 1, 1}, seed);
    // The rows that produce the code: from the token before its first digit to its last-but-one digit.
    const Span code = ep.answer_spans.back(), question = ep.question_spans.back(),
               needle = ep.needle_code_spans[static_cast<size_t>(ep.queried[0])];
    const std::vector<int64_t> ids(ep.ids.begin(), ep.ids.begin() + code.end - 1);
    for (int k = 0; k < 3; ++k) {
      answered[k] += run_needle(models[k], builder, {256, 0.5, 1, 1}, seed).answered;
      const Trace t = models[k].capture(ids);
      const NoiseReadout asking =
          attention_noise(t, {needle.begin, needle.end}, {question.begin, question.end});
      const NoiseReadout answering =
          attention_noise(t, {needle.begin, needle.end}, {code.begin - 1, static_cast<int64_t>(ids.size())});
      question_noise[k] += asking.mean.noise_mass / 4;
      answering_noise[k] += answering.mean.noise_mass / 4;
      strongest[k] = std::max(strongest[k], strongest_answer_head(answering)->share.answer_mass);
    }
  }
  INFO("noise mass on the question " << question_noise[0] << " " << question_noise[1] << " "
                                     << question_noise[2] << "; while answering " << answering_noise[0] << " "
                                     << answering_noise[1] << " " << answering_noise[2]
                                     << "; strongest head on the code " << strongest[0] << " " << strongest[1]
                                     << " " << strongest[2]);
  // The model card's ship criterion: 0.94-0.98 of 200 fresh held-out episodes a length for all three.
  for (int k = 0; k < 3; ++k) CHECK(answered[k] >= 3);
  // On the question's rows (the paper's measure) the card has DIFF 0.40, DIFF V2 0.55, baseline 0.61 at 256
  // tokens (200 episodes): DIFF's noise a third below the baseline's, V2's below it.
  CHECK(question_noise[0] < 0.8 * question_noise[2]);
  CHECK(question_noise[1] < question_noise[2]);
  // While the code is written, not so: V2's noise is above the baseline's (here, where the question's keys
  // count as noise: 0.72, 0.78, 0.60 over these four episodes; the card, which sets the question apart,
  // 0.28, 0.43, 0.30 over 200). The card and the app say so rather than show the paper's picture.
  CHECK(answering_noise[1] > answering_noise[2]);
  // And, unlike the paper's 3B models, the baseline's strongest head gives the code more than DIFF's.
  CHECK(strongest[2] > strongest[0]);
  CHECK(strongest[2] > strongest[1]);
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
