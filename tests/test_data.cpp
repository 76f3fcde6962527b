// Needle episodes and training rows: needles land at the requested depths, spans cover exactly the
// needle/question/answer text, lengths respect the budget, train and eval sets are disjoint.
#include <catch2/catch.hpp>

#include <cctype>
#include <map>
#include <regex>
#include <set>

#include "core/formats/data.h"
#include "core/formats/error.h"
#include "helpers.h"

using namespace difflens;

namespace {

const char* kText =
    "The river was high that spring. Farmers watched the fields. A dog barked at night. "
    "Nobody slept well in the valley. The mayor called a meeting. Children stayed home from school. "
    "Rain fell for nine days. The bridge held. Boats came up from the coast. Everyone helped.\n"
    "In the city the news was slow to arrive. Papers printed rumours. Trains ran late. "
    "A committee was formed. Its report was long. Few read it. The summer came dry and hot.\n";

// The byte tokenizer and a haystack over kText: one id per byte keeps every expected length readable.
struct Fixture {
  Tokenizer tok = Tokenizer::bytes(259);
  Haystack hay{kText, tok};
};

std::string span_text(const Tokenizer& tok, const Episode& e, Span s) {
  return tok.decode(std::vector<int64_t>(e.ids.begin() + s.begin, e.ids.begin() + s.end));
}

// kText twenty times over: enough tokens for training rows.
std::vector<int64_t> training_stream(const Tokenizer& tok) {
  std::string longer;
  for (int i = 0; i < 20; ++i) longer += kText;
  return tok.encode(longer, false).ids;
}

}  // namespace

TEST_CASE("haystack splits sentences and counts their tokens", "[data]") {
  const Tokenizer tok = Tokenizer::bytes(259);
  const Haystack h(kText, tok);
  REQUIRE(h.size() == 17);
  CHECK(h.sentence(0) == "The river was high that spring.");
  CHECK(h.tokens(0) == 31);  // bytes tokenizer: one token per byte
  CHECK(h.sentence(10) == "In the city the news was slow to arrive.");
  CHECK_THROWS_WITH(Haystack("  \n ", tok), Catch::Contains("no sentences"));
}

TEST_CASE("episode places needles at the requested depths with exact spans", "[data][needle]") {
  const Fixture f;
  const Tokenizer& tok = f.tok;
  const EpisodeBuilder b(f.hay, tok, NeedleSplit::Eval);
  std::mt19937_64 rng(4);
  EpisodeSpec s;
  s.context_tokens = 600;
  s.needles = 3;
  s.queried = 2;
  s.depths = {1.0, 0.0, 0.5};
  const Episode e = b.build(s, rng);
  CHECK(static_cast<int64_t>(e.ids.size()) <= 600);
  CHECK(static_cast<int64_t>(e.ids.size()) > 450);  // the budget is used, not wasted
  CHECK(e.ids[0] == tok.bos_id());
  REQUIRE(e.needles.size() == 3);
  // Needles are stored in haystack order: depth 0, then 0.5, then 1.
  CHECK(e.depths == std::vector<double>{0.0, 0.5, 1.0});
  CHECK(e.needle_spans[0].begin == 1);  // depth 0: right after BOS
  const int64_t hay_end = e.question_spans[0].begin;
  const double middle = static_cast<double>(e.needle_spans[1].begin) / static_cast<double>(hay_end);
  CHECK(middle > 0.3);
  CHECK(middle < 0.7);
  CHECK(e.needle_spans[2].end >= hay_end - 2);  // depth 1: last thing before the questions
  for (size_t i = 0; i < 3; ++i) {
    CHECK(span_text(tok, e, e.needle_spans[i]) == b.needle_sentence(e.needles[i]));
    CHECK(span_text(tok, e, e.needle_code_spans[i]) == e.needles[i].code);
    CHECK(code_in_split(std::stoi(e.needles[i].code), NeedleSplit::Eval));
  }
  REQUIRE(e.queried.size() == 2);
  for (size_t q = 0; q < 2; ++q) {
    const Needle& n = e.needles[static_cast<size_t>(e.queried[q])];
    CHECK(span_text(tok, e, e.question_spans[q]) == b.question(n));
    CHECK(span_text(tok, e, e.answer_spans[q]) == n.code);
    CHECK(e.answer_spans[q].begin == e.question_spans[q].end + 1);  // one space between
  }
  CHECK(e.queried[0] != e.queried[1]);
  std::set<std::string> names;
  for (const auto& n : e.needles) names.insert(n.name);
  CHECK(names.size() == 3);
}

TEST_CASE("an episode without its final answer ends where the code would start", "[data][needle]") {
  const Fixture f;
  const Tokenizer& tok = f.tok;
  const EpisodeBuilder b(f.hay, tok, NeedleSplit::Train);
  std::mt19937_64 rng(5);
  EpisodeSpec s;
  s.context_tokens = 200;
  s.final_answer = false;
  const Episode e = b.build(s, rng);
  CHECK(static_cast<int64_t>(e.ids.size()) == e.answer_spans.back().begin);
  CHECK(e.text.substr(e.text.size() - 3) == "is ");
  CHECK_FALSE(code_in_split(std::stoi(e.needles[0].code), NeedleSplit::Eval));
}

TEST_CASE("training and evaluation needles are disjoint", "[data][needle]") {
  for (const NameSet set : {NameSet::SingleToken, NameSet::Original}) {
    const auto& train = needle_names(NeedleSplit::Train, set);
    const auto& eval = needle_names(NeedleSplit::Eval, set);
    CHECK(train.size() == (set == NameSet::SingleToken ? 48 : 60));
    CHECK(eval.size() == (set == NameSet::SingleToken ? 16 : 20));
    for (const auto& n : eval) CHECK(std::find(train.begin(), train.end(), n) == train.end());
  }
  CHECK(parse_name_set("original") == NameSet::Original);
  CHECK(to_string(NameSet::SingleToken) == "single-token");
  CHECK_THROWS_WITH(parse_name_set("short"), Catch::Contains("unknown needle name set 'short'"));
  int eval_codes = 0;
  for (int c = 1000; c <= 9999; ++c) {
    CHECK(code_in_split(c, NeedleSplit::Train) != code_in_split(c, NeedleSplit::Eval));
    eval_codes += code_in_split(c, NeedleSplit::Eval);
  }
  CHECK(eval_codes == 1286);  // multiples of 7 in [1000, 9999]
}

TEST_CASE("impossible episode specs are refused with a reason", "[data][errors]") {
  const Fixture f;
  const Tokenizer& tok = f.tok;
  const EpisodeBuilder b(f.hay, tok, NeedleSplit::Train);
  std::mt19937_64 rng(6);
  EpisodeSpec s;
  s.needles = 1;
  s.queried = 2;
  CHECK_THROWS_WITH(b.build(s, rng), Catch::Contains("queried (2) <= needles (1)"));
  s.queried = 1;
  s.context_tokens = 20;
  CHECK_THROWS_WITH(b.build(s, rng), Catch::Contains("cannot hold"));
  s.context_tokens = 300;
  s.depths = {1.5};
  CHECK_THROWS_WITH(b.build(s, rng), Catch::Contains("depths must lie in [0, 1]"));
  s.depths = {0.1, 0.2};
  CHECK_THROWS_WITH(b.build(s, rng), Catch::Contains("one depth per needle"));
}

TEST_CASE("training rows have the exact length and depend only on the seed", "[data][train]") {
  const Tokenizer tok = Tokenizer::bytes(259);
  const Haystack h(kText, tok);
  const std::vector<int64_t> stream = training_stream(tok);
  const TrainingData data(stream, h, tok, DataMix{0.5, 0.0, NameSet::SingleToken});
  int with_needles = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    const TrainingRow ra = data.row(256, a), rb = data.row(256, b);
    REQUIRE(ra.ids.size() == 257);
    CHECK(ra.ids == rb.ids);
    with_needles += tok.decode(ra.ids).find("The secret code of") != std::string::npos;
  }
  CHECK(with_needles >= 4);  // about half the rows are packed episodes
  CHECK(with_needles <= 16);
}

TEST_CASE("single-token needle names are one piece in the bundled tokenizer", "[data][needle][tokenizer]") {
  const Tokenizer tok =
      Tokenizer::sentencepiece(DIFFLENS_SOURCE_DIR "/assets/models/diff-small/tokenizer.model");
  for (const NeedleSplit split : {NeedleSplit::Train, NeedleSplit::Eval})
    for (const auto& name : needle_names(split, NameSet::SingleToken)) {
      const Encoding e = tok.encode("of " + name + " is", false);
      INFO(name);
      CHECK(e.pieces.size() == 3);  // "▁of", "▁<name>", "▁is"
    }
  // The original names are longer: the reason the set was replaced.
  CHECK(tok.encode("of Dmitri is", false).pieces.size() > 3);
}

TEST_CASE("drill rows are dense and mark every answer token", "[data][train]") {
  const Tokenizer tok = Tokenizer::bytes(259);
  const Haystack h(kText, tok);
  const std::vector<int64_t> stream = training_stream(tok);
  const TrainingData data(stream, h, tok, DataMix{0.0, 1.0, NameSet::SingleToken});
  std::mt19937_64 rng(3);
  const TrainingRow r = data.row(1024, rng);
  REQUIRE(r.ids.size() == 1025);
  const std::string text = tok.decode(r.ids);
  // Bytes tokenizer: every answer position is one digit of a code right after "... is ".
  REQUIRE(r.answers.size() % 4 == 0);
  CHECK(r.answers.size() >= 4 * 6);  // at least six questions answered in 1024 bytes
  for (size_t k = 0; k < r.answers.size(); k += 4) {
    const int64_t p = r.answers[k];
    REQUIRE(p >= 4);
    CHECK(tok.decode({r.ids.begin() + p - 4, r.ids.begin() + p}) == " is ");
    for (int d = 0; d < 4; ++d) {
      const int64_t id = r.ids[static_cast<size_t>(p + d)];
      CHECK(r.answers[k + static_cast<size_t>(d)] == p + d);
      CHECK(tok.decode({id}).size() == 1);
      CHECK(std::isdigit(static_cast<unsigned char>(tok.decode({id})[0])));
    }
  }
  // Each asked code appeared earlier in a needle of the same row.
  const std::string first_code = tok.decode({r.ids.begin() + r.answers[0], r.ids.begin() + r.answers[0] + 4});
  CHECK(text.find(" is " + first_code + ".") < text.find("Q: "));
  // A text row has no answers.
  const TrainingData plain(stream, h, tok, DataMix{0.0, 0.0, NameSet::SingleToken});
  CHECK(plain.row(256, rng).answers.empty());
  CHECK_THROWS_WITH(TrainingData(stream, h, tok, DataMix{0.7, 0.5, NameSet::Original}),
                    Catch::Contains("sum to at most 1"));
}

TEST_CASE("needle templates: the default is the trained wording, a custom one keeps exact spans",
          "[data][needle]") {
  const Fixture f;
  const EpisodeBuilder standard(f.hay, f.tok, NeedleSplit::Eval);
  const Needle n{"Rachel", "4823"};
  // The bundled pair was trained on exactly these strings.
  CHECK(standard.needle_sentence(n) == "The secret code of Rachel is 4823.");
  CHECK(standard.question(n) == "Q: What is the secret code of Rachel?\nA: The secret code of Rachel is");

  NeedleTemplate t;
  t.needle = "Remember: {name}'s PIN is {code}, not 0000 ({name}).";
  t.question = "Question: what is {name}'s PIN?\nAnswer:";
  const EpisodeBuilder custom(f.hay, f.tok, NeedleSplit::Eval, NameSet::SingleToken, t);
  CHECK(custom.needle_sentence(n) == "Remember: Rachel's PIN is 4823, not 0000 (Rachel).");
  std::mt19937_64 rng(9);
  EpisodeSpec s;
  s.context_tokens = 500;
  s.needles = 2;
  s.queried = 2;
  s.depths = {0.25, 0.75};
  const Episode e = custom.build(s, rng);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(span_text(f.tok, e, e.needle_spans[i]) == custom.needle_sentence(e.needles[i]));
    CHECK(span_text(f.tok, e, e.needle_code_spans[i]) == e.needles[i].code);  // the code mid-sentence
  }
  for (size_t q = 0; q < 2; ++q) {
    const Needle& asked = e.needles[static_cast<size_t>(e.queried[q])];
    CHECK(span_text(f.tok, e, e.question_spans[q]) == custom.question(asked));
    CHECK(span_text(f.tok, e, e.answer_spans[q]) == asked.code);
  }
  CHECK(e.text.find("Remember: ") != std::string::npos);
  CHECK(e.text.find("secret code") == std::string::npos);

  const std::pair<NeedleTemplate, const char*> bad[] = {
      {{"{name} has no code.", "What of {name}?"}, "{code} exactly once"},
      {{"{name}: {code}, {code}.", "What of {name}?"}, "{code} exactly once"},
      {{"Someone's code is {code}.", "What of {name}?"}, "must name the person"},
      {{"{name}: {code}.", "What is the code?"}, "question must hold {name}"},
      {{"{name}: {code}.", "{name} is {code}"}, "must not hold {code}"},
      {{"{name}: {code} {date}.", "What of {name}?"}, "only use {name} and {code}"},
      {{"{name}: {code}.", "  \n"}, "question is empty"},
  };
  for (const auto& [tmpl, message] : bad) {
    INFO(tmpl.needle << " / " << tmpl.question);
    CHECK_THROWS_WITH(EpisodeBuilder(f.hay, f.tok, NeedleSplit::Eval, NameSet::SingleToken, tmpl),
                      Catch::Contains(message));
  }
}

namespace {
// The bundled tokenizer and the held-out haystack text: what the trainer builds rows from.
struct BundledFixture {
  Tokenizer tok = Tokenizer::sentencepiece(DIFFLENS_SOURCE_DIR "/assets/models/diff-small/tokenizer.model");
  std::string text = test::read_all(DIFFLENS_SOURCE_DIR "/assets/haystack.txt");
  Haystack hay{text, tok};
  std::vector<int64_t> stream = tok.encode(text, false).ids;
};

// Every needle sentence of a decoded row, key -> codes (an answer, "A: The secret code of ...", is not one).
std::multimap<std::string, std::string> needles_in(const std::string& text) {
  static const std::regex needle("The secret code of ([A-Za-z]+) is ([0-9]{4})\\.");
  std::multimap<std::string, std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), needle); it != std::sregex_iterator(); ++it) {
    const size_t at = static_cast<size_t>(it->position(0));
    if (at >= 3 && text.compare(at - 3, 3, "A: ") == 0) continue;
    out.emplace((*it)[1].str(), (*it)[2].str());
  }
  return out;
}
}  // namespace

TEST_CASE("vocabulary keys: one piece each, no function word, wording word or held-out name",
          "[data][train]") {
  const BundledFixture f;
  const std::vector<std::string> keys = vocabulary_keys(f.tok);
  INFO(keys.size() << " keys");
  CHECK(keys.size() >= 200);  // a wide pool: the probe counted ~340 in this tokenizer
  const std::set<std::string> unique(keys.begin(), keys.end());
  CHECK(unique.size() == keys.size());
  const auto& eval = needle_names(NeedleSplit::Eval, NameSet::SingleToken);
  for (const std::string& k : keys) {
    INFO(k);
    CHECK(f.tok.encode("of " + k + " is", false).ids.size() == 3);
    CHECK(std::find(eval.begin(), eval.end(), k) == eval.end());
    CHECK(std::isupper(static_cast<unsigned char>(k[0])));
  }
  for (const char* word : {"The", "What", "Secret", "Code", "They", "When", "There", "However", "Is", "Of"})
    CHECK(unique.count(word) == 0);
  // Training draws from the pool, evaluation keeps the held-out given names.
  const EpisodeBuilder train(f.hay, f.tok, NeedleSplit::Train, NameSet::Vocabulary, {}, 0.5);
  const EpisodeBuilder held_out(f.hay, f.tok, NeedleSplit::Eval, NameSet::Vocabulary);
  CHECK(train.keys() == keys);
  CHECK(held_out.keys() == eval);
  CHECK(parse_name_set("vocabulary") == NameSet::Vocabulary);
  CHECK(to_string(NameSet::Vocabulary) == "vocabulary");
  CHECK_THROWS_WITH(needle_names(NeedleSplit::Train, NameSet::Vocabulary),
                    Catch::Contains("EpisodeBuilder::keys()"));
  // The byte tokenizer keeps no word whole: refused with the reason.
  const Fixture bytes;
  CHECK_THROWS_WITH(EpisodeBuilder(bytes.hay, bytes.tok, NeedleSplit::Train, NameSet::Vocabulary),
                    Catch::Contains("capitalised words as one piece"));
  // Zipf-weighted draws favour the top of the ranking: over 2,000 single needles the first 10 keys are
  // drawn far more often than 10 of the 300 uniformly would be.
  std::mt19937_64 rng(1);
  int top = 0;
  const std::set<std::string> first10(keys.begin(), keys.begin() + 10);
  EpisodeSpec spec;
  spec.context_tokens = 64;
  for (int i = 0; i < 2000; ++i) top += first10.count(train.build(spec, rng).needles[0].name) > 0;
  CHECK(top > 2000 * 10 / static_cast<int>(keys.size()) * 3);
}

TEST_CASE("training rows: no key twice in a row, no held-out name or code, drills that fit every length",
          "[data][train]") {
  const BundledFixture f;
  const auto& eval = needle_names(NeedleSplit::Eval, NameSet::SingleToken);
  for (const NameSet names : {NameSet::Vocabulary, NameSet::SingleToken}) {
    DataMix mix;
    mix.names = names;
    mix.drill_fraction = 0.6;
    mix.episode_fraction = 0.25;
    const TrainingData data(f.stream, f.hay, f.tok, mix);
    // One needle, its question and answer: the smallest drill needs two of them and BOS.
    const EpisodeBuilder& b = data.episodes();
    const Needle probe{b.keys().front(), "1234"};
    const int64_t per_needle =
        static_cast<int64_t>(f.tok.encode(b.needle_sentence(probe), false).ids.size() +
                             f.tok.encode(b.question(probe) + " 1234.", false).ids.size());
    for (const int64_t L : {64, 96, 128, 200, 256, 512, 1024}) {
      INFO(to_string(names) << ", rows of " << L);
      int drills = 0, rows = L >= 512 ? 150 : 400;
      for (int i = 0; i < rows; ++i) {
        std::mt19937_64 rng(static_cast<uint64_t>(i) * 7919 + static_cast<uint64_t>(L));
        const TrainingRow r = data.row(L, rng);
        REQUIRE(r.ids.size() == static_cast<size_t>(L + 1));
        // The keys the row reports are its needles' keys, each once; the text agrees.
        const std::set<std::string> unique(r.keys.begin(), r.keys.end());
        REQUIRE(unique.size() == r.keys.size());
        const auto found =
            needles_in(f.tok.decode(std::vector<int64_t>(r.ids.begin(), r.ids.begin() + r.filled)));
        CHECK(found.size() == r.keys.size());
        for (const auto& [key, code] : found) {
          CHECK(found.count(key) == 1);
          CHECK(std::find(eval.begin(), eval.end(), key) == eval.end());
          CHECK(std::stoi(code) % 7 != 0);
        }
        for (const int d : r.drill_sizes) {
          CHECK(d >= mix.drill_needles_min);
          CHECK(d <= mix.drill_needles_max);
          CHECK(d * per_needle + 1 <= L + 1);
        }
        drills += static_cast<int>(r.drill_sizes.size());
        // Filled as far as another smallest drill would go: the text after the episodes is shorter than
        // that (or the row drew text, or a haystack episode that did not fit).
        if (!r.drill_sizes.empty() && r.episode_sizes.empty())
          CHECK(L + 1 - r.filled < 2 * per_needle + 1 + 2 * mix.drill_gap + 8);
      }
      // Where two needles fit, drill rows hold drills; where they do not, rows fall back to text.
      if (2 * per_needle + 1 <= L + 1)
        CHECK(drills > rows / 3);
      else
        CHECK(drills == 0);
    }
  }
  DataMix bad;
  bad.drill_needles_min = 3;
  bad.drill_needles_max = 2;
  CHECK_THROWS_WITH(TrainingData(f.stream, f.hay, f.tok, bad),
                    Catch::Contains("drill_needles must be [min, max]"));
  bad = DataMix{};
  bad.episode_tokens_min = 8;
  CHECK_THROWS_WITH(TrainingData(f.stream, f.hay, f.tok, bad), Catch::Contains("episode_tokens"));
}

TEST_CASE("far episodes: one needle near the start of an episode that fills the row, asked at its end",
          "[data][train]") {
  const BundledFixture f;
  DataMix mix;
  mix.episode_fraction = 1;
  mix.episode_tokens_min = 256;
  mix.episode_tokens_max = 512;
  mix.far_fraction = 1;
  mix.far_depth = 0.1;
  const TrainingData data(f.stream, f.hay, f.tok, mix);
  const int64_t L = 512;
  for (int i = 0; i < 40; ++i) {
    INFO("row " << i);
    std::mt19937_64 rng(static_cast<uint64_t>(i) * 104729 + 3);
    const TrainingRow r = data.row(L, rng);
    REQUIRE(r.episode_sizes == std::vector<int>{1});
    REQUIRE(r.keys.size() == 1);
    CHECK(r.filled > L - 32);
    const std::string text = f.tok.decode(std::vector<int64_t>(r.ids.begin(), r.ids.begin() + r.filled));
    const auto found = needles_in(text);
    REQUIRE(found.size() == 1);
    // The needle within the first tenth of the haystack (a sentence boundary: a little more in characters),
    // its question at the row's end: ~400 tokens or more between them.
    const size_t at = text.find("The secret code of " + r.keys[0] + " is");
    REQUIRE(at != std::string::npos);
    CHECK(static_cast<double>(at) < 0.2 * static_cast<double>(text.size()));
    REQUIRE(!r.answers.empty());
    CHECK(r.answers.front() > L - 40);
  }
  DataMix bad;
  bad.far_fraction = 1.5;
  CHECK_THROWS_WITH(TrainingData(f.stream, f.hay, f.tok, bad),
                    Catch::Contains("far_fraction must lie in [0, 1]"));
  bad = DataMix{};
  bad.far_depth = -0.1;
  CHECK_THROWS_WITH(TrainingData(f.stream, f.hay, f.tok, bad),
                    Catch::Contains("far_depth must lie in [0, 1]"));
}

TEST_CASE("given names and words of one to four pieces, varied wordings and codes of several lengths",
          "[data][train][needle]") {
  const BundledFixture f;
  const EpisodeBuilder train(f.hay, f.tok, NeedleSplit::Train, NameSet::GivenNames);
  EpisodeBuilder eval(f.hay, f.tok, NeedleSplit::Eval, NameSet::GivenNames);
  CHECK(parse_name_set("given-names") == NameSet::GivenNames);
  CHECK(to_string(NameSet::GivenNames) == "given-names");
  // Evaluation: held-out given names of three or four pieces only, the examples among them.
  INFO(train.keys().size() << " training keys, " << eval.keys().size() << " held-out names");
  CHECK(eval.keys().size() >= 30);
  for (const std::string& k : eval.keys()) {
    INFO(k);
    const int pieces = key_pieces(f.tok, k);
    CHECK(pieces >= 3);
    CHECK(pieces <= 4);
  }
  for (const char* name : {"Priya", "Oscar", "Clara"})
    CHECK((key_pieces(f.tok, name) < 3 ||
           std::find(eval.keys().begin(), eval.keys().end(), name) != eval.keys().end()));
  // Training: names and words of 1-4 pieces, none held out anywhere, no function or wording word.
  const std::set<std::string> train_keys(train.keys().begin(), train.keys().end());
  CHECK(train_keys.size() == train.keys().size());
  std::map<int, int> by_pieces;
  for (const std::string& k : train.keys()) {
    const int pieces = key_pieces(f.tok, k);
    by_pieces[pieces]++;
    INFO(k);
    CHECK(pieces >= 1);
    CHECK(pieces <= 4);
  }
  for (int p = 1; p <= 4; ++p) {
    INFO(p << " pieces: " << by_pieces[p]);
    CHECK(by_pieces[p] >= 30);
  }
  for (const auto* list : {&given_names(NeedleSplit::Eval), &needle_names(NeedleSplit::Eval)})
    for (const std::string& held : *list) CHECK(train_keys.count(held) == 0);
  for (const char* word : {"The", "Secret", "Code", "Number", "Remember", "Password", "Told", "Keeps", "Yes"})
    CHECK(train_keys.count(word) == 0);
  // Wordings: the first training one is the default template; the held-out ones are used by no row.
  REQUIRE(needle_wordings(NeedleSplit::Train).size() >= 4);
  CHECK(needle_wordings(NeedleSplit::Train).front().needle == NeedleTemplate{}.needle);
  CHECK(needle_wordings(NeedleSplit::Train).front().question == NeedleTemplate{}.question);
  for (const NeedleTemplate& held : needle_wordings(NeedleSplit::Eval))
    for (const NeedleTemplate& t : needle_wordings(NeedleSplit::Train)) {
      CHECK(held.needle != t.needle);
      CHECK(held.question != t.question);
    }
  // Held-out episodes: codes of 3-6 digits divisible by 7, spans that decode to the code, each needle and
  // question in one of the held-out wordings.
  eval.set_wordings(needle_wordings(NeedleSplit::Eval));
  eval.set_code_digits(3, 6);
  CHECK_THROWS_WITH(eval.set_code_digits(0, 3), Catch::Contains("1 <= MIN <= MAX <= 9"));
  std::mt19937_64 rng(5);
  std::set<size_t> lengths;
  for (int i = 0; i < 60; ++i) {
    EpisodeSpec spec;
    spec.context_tokens = 256;
    spec.needles = 2;
    spec.queried = 2;
    const Episode ep = eval.build(spec, rng);
    REQUIRE(ep.ids.size() <= 256);
    for (size_t q = 0; q < ep.queried.size(); ++q) {
      const Needle& n = ep.needles[static_cast<size_t>(ep.queried[q])];
      lengths.insert(n.code.size());
      CHECK(n.code.size() >= 3);
      CHECK(n.code.size() <= 6);
      CHECK(n.code[0] != '0');
      CHECK(std::stoll(n.code) % 7 == 0);
      const Span a = ep.answer_spans[q];
      CHECK(f.tok.decode(std::vector<int64_t>(ep.ids.begin() + a.begin, ep.ids.begin() + a.end)) == n.code);
      CHECK(ep.text.find(eval.question(n)) != std::string::npos);
      CHECK(ep.text.find(eval.needle_sentence(n)) != std::string::npos);
    }
  }
  CHECK(lengths == std::set<size_t>{3, 4, 5, 6});
  // Training rows of the varied recipe: every answer's full stop is weighted with its digits.
  DataMix mix;
  mix.names = NameSet::GivenNames;
  mix.varied_wording = true;
  mix.code_digits_min = 3;
  mix.code_digits_max = 6;
  mix.drill_fraction = 1.0;
  mix.episode_fraction = 0.0;
  const TrainingData data(f.stream, f.hay, f.tok, mix);
  int answers = 0, stops = 0;
  for (int i = 0; i < 40; ++i) {
    std::mt19937_64 r(static_cast<uint64_t>(i));
    const TrainingRow row = data.row(256, r);
    REQUIRE(row.ids.size() == 257);
    for (const int64_t at : row.answers) {
      const std::string piece = f.tok.decode({row.ids[static_cast<size_t>(at)]});
      ++answers;
      if (piece == ".") {
        ++stops;
        // A stop follows a digit.
        CHECK(std::isdigit(
            static_cast<unsigned char>(f.tok.decode({row.ids[static_cast<size_t>(at - 1)]}).back())));
      } else {
        CHECK(std::isdigit(static_cast<unsigned char>(piece.back())));
      }
    }
  }
  CHECK(stops > 40);
  CHECK((stops * 4 <= answers));  // at least three digits a code
}

namespace {

// Drills only, given names, the wide wordings (and the wider ones).
DataMix drill_mix(bool wider) {
  DataMix mix;
  mix.names = NameSet::GivenNames;
  mix.varied_wording = true;
  mix.wide_wording = true;
  mix.wider_wording = wider;
  mix.drill_fraction = 1.0;
  mix.episode_fraction = 0.0;
  return mix;
}

// How many of `parts` the first `rows` rows' texts hold (each part counted once a row).
template <typename Fixture>
int parts_in_rows(const Fixture& f, const DataMix& mix, int rows, std::initializer_list<const char*> parts) {
  const TrainingData data(f.stream, f.hay, f.tok, mix);
  int found = 0;
  for (int i = 0; i < rows; ++i) {
    std::mt19937_64 r(static_cast<uint64_t>(i));
    const std::string text = f.tok.decode(data.row(256, r).ids);
    for (const char* part : parts)
      if (text.find(part) != std::string::npos) ++found;
  }
  return found;
}

}  // namespace

TEST_CASE("the wide wordings: 24 needles and questions, none held out, none of their words a key",
          "[data][train][needle]") {
  const BundledFixture f;
  const auto& wide = wide_needle_wordings();
  REQUIRE(wide.size() == 24);
  for (size_t i = 0; i < needle_wordings(NeedleSplit::Train).size(); ++i) {
    CHECK(wide[i].needle == needle_wordings(NeedleSplit::Train)[i].needle);
    CHECK(wide[i].question == needle_wordings(NeedleSplit::Train)[i].question);
  }
  std::set<std::string> needles, questions;
  for (const NeedleTemplate& t : wide) {
    CHECK_NOTHROW(t.validate());
    needles.insert(t.needle);
    questions.insert(t.question);
    for (const NeedleTemplate& held : needle_wordings(NeedleSplit::Eval)) {
      CHECK(held.needle != t.needle);
      CHECK(held.question != t.question);
    }
  }
  CHECK(needles.size() == 24);
  CHECK(questions.size() == 24);
  // Words the wide set adds ("Keep in mind", "Someone said", "The lock of ... opens") leave the key pool;
  // the six-wording pool keeps the keys it had.
  EpisodeBuilder six(f.hay, f.tok, NeedleSplit::Train, NameSet::GivenNames);
  const std::vector<std::string> before = six.keys();
  six.set_wordings(needle_wordings(NeedleSplit::Train));
  CHECK(six.keys() == before);
  EpisodeBuilder widened(f.hay, f.tok, NeedleSplit::Train, NameSet::GivenNames);
  widened.set_wordings(wide);
  const std::set<std::string> keys(widened.keys().begin(), widened.keys().end());
  for (const char* word :
       {"Keep", "Mind", "Someone", "Lock", "Opens", "Everyone", "Digits", "Wrote", "Notes"})
    CHECK(keys.count(word) == 0);
  CHECK(widened.keys().size() < before.size());
  CHECK(widened.keys().size() > before.size() - 40);
  // Rows drawn with the wide set use its later wordings too.
  DataMix mix = drill_mix(false);
  CHECK(parts_in_rows(f, mix, 20,
                      {"Keep in mind that", "was given the code", "as a secret code", "Someone said that",
                       "opens with", "Everyone knows", "Q: Which digits make up", "Answer: The code is"}) >
        10);
  mix.varied_wording = false;
  CHECK_THROWS_WITH(mix.validate(), Catch::Contains("set varied_wording too"));
}

TEST_CASE("the wider wordings: 32 needles and questions, past tenses and reported speech, none held out",
          "[data][train][needle]") {
  const BundledFixture f;
  const auto& wide = wide_needle_wordings();
  const auto& wider = wider_needle_wordings();
  REQUIRE(wider.size() == 32);
  for (size_t i = 0; i < wide.size(); ++i) {  // the wide set first, unchanged: its rows stay as they were
    CHECK(wider[i].needle == wide[i].needle);
    CHECK(wider[i].question == wide[i].question);
  }
  std::set<std::string> needles, questions;
  int past = 0;
  for (const NeedleTemplate& t : wider) {
    CHECK_NOTHROW(t.validate());
    needles.insert(t.needle);
    questions.insert(t.question);
    if (t.needle.find(" was {code}") != std::string::npos) ++past;
    for (const NeedleTemplate& held : needle_wordings(NeedleSplit::Eval)) {
      CHECK(held.needle != t.needle);
      CHECK(held.question != t.question);
    }
  }
  CHECK(needles.size() == 32);
  CHECK(questions.size() == 32);
  CHECK(past == 3);  // the wide set has none: "... was {code}."
  // The added words leave the key pool.
  EpisodeBuilder b(f.hay, f.tok, NeedleSplit::Train, NameSet::GivenNames);
  b.set_wordings(wider);
  const std::set<std::string> keys(b.keys().begin(), b.keys().end());
  for (const char* word : {"Heard", "Years", "Friend", "Once", "Told"}) CHECK(keys.count(word) == 0);
  // Rows drawn with the wider set use its last eight wordings too.
  DataMix mix = drill_mix(true);
  CHECK(parts_in_rows(f, mix, 30,
                      {"I heard that", "They told me", "once had the secret number", "Years ago",
                       "A friend said", "It was said that", "Q: And ", "What was the code for"}) > 5);
  mix.wide_wording = false;
  CHECK_THROWS_WITH(mix.validate(), Catch::Contains("set wide_wording too"));
}

TEST_CASE("the noun wordings: 40 needles and questions, secrets by other nouns, none a password or held out",
          "[data][train][needle]") {
  const BundledFixture f;
  const auto& wider = wider_needle_wordings();
  const auto& nouns = noun_needle_wordings();
  REQUIRE(nouns.size() == 40);
  for (size_t i = 0; i < wider.size(); ++i) {  // the wider set first, unchanged
    CHECK(nouns[i].needle == wider[i].needle);
    CHECK(nouns[i].question == wider[i].question);
  }
  std::set<std::string> needles, questions;
  for (const NeedleTemplate& t : nouns) {
    CHECK_NOTHROW(t.validate());
    needles.insert(t.needle);
    questions.insert(t.question);
    CHECK(t.needle.find("password") == std::string::npos);  // the held-out noun stays held out
    CHECK(t.question.find("password") == std::string::npos);
    for (const NeedleTemplate& held : needle_wordings(NeedleSplit::Eval)) {
      CHECK(held.needle != t.needle);
      CHECK(held.question != t.question);
    }
  }
  CHECK(needles.size() == 40);
  CHECK(questions.size() == 40);
  EpisodeBuilder b(f.hay, f.tok, NeedleSplit::Train, NameSet::GivenNames);
  b.set_wordings(nouns);
  const std::set<std::string> keys(b.keys().begin(), b.keys().end());
  for (const char* word : {"Passcode", "Combination", "Access", "Login", "Safe"})
    CHECK(keys.count(word) == 0);
  DataMix mix = drill_mix(true);
  mix.noun_wording = true;
  CHECK(parts_in_rows(f, mix, 40,
                      {"'s PIN is", "The passcode of", "The combination of", "The access key for",
                       "lock opens to", "The pass number of", "The PIN for", "The login digits of"}) > 5);
  mix.wider_wording = false;
  CHECK_THROWS_WITH(mix.validate(), Catch::Contains("set wider_wording too"));
}
