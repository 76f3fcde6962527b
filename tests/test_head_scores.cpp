// Head scores (core/formats/head_scores): TransformerLens's detection patterns and "mul" score, checked on
// hand-built maps and token sequences.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/formats/head_scores.h"
#include "core/formats/tokenizer.h"
#include "core/model/model.h"
#include "helpers.h"

using namespace difflens;

namespace {

const std::filesystem::path kModels = DIFFLENS_SOURCE_DIR "/assets/models";

// A causal T x T map whose row i is `row(i)` (keys 0..i).
template <typename Row>
std::vector<float> causal_map(int64_t T, Row row) {
  std::vector<float> m(static_cast<size_t>(T * T), 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) m[static_cast<size_t>(i * T + j)] = row(i, j);
  return m;
}

std::vector<std::pair<int, int>> cells(const std::vector<uint8_t>& d, int T) {
  std::vector<std::pair<int, int>> on;
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j)
      if (d[static_cast<size_t>(i * T + j)]) on.push_back({i, j});
  return on;
}

}  // namespace

TEST_CASE("head scores: the detection patterns are TransformerLens's, cell by cell", "[metrics][heads]") {
  const std::vector<int64_t> t = {7, 3, 7, 3, 3};
  using P = std::vector<std::pair<int, int>>;
  CHECK(cells(detection_pattern(HeadPattern::PreviousToken, t), 5) == P{{1, 0}, {2, 1}, {3, 2}, {4, 3}});
  // Earlier copies of the same token: 7 at 0 and 2; 3 at 1, 3 and 4.
  CHECK(cells(detection_pattern(HeadPattern::DuplicateToken, t), 5) == P{{2, 0}, {3, 1}, {4, 1}, {4, 3}});
  // The token after an earlier copy: row 2 (7) -> key 1 (after the 7 at 0); row 3 (3) -> key 2 (after the 3
  // at 1); row 4 (3) -> keys 2 and 4 (after the 3s at 1 and 3: the key may be the query itself).
  CHECK(cells(detection_pattern(HeadPattern::Induction, t), 5) == P{{2, 1}, {3, 2}, {4, 2}, {4, 4}});
  CHECK(std::string(head_pattern_name(HeadPattern::Induction)) == "induction");
}

TEST_CASE("head scores: a perfect previous-token head, a uniform head and a DIFF map, by hand",
          "[metrics][heads]") {
  const std::vector<int64_t> t = {1, 2, 3, 4, 5};
  const auto prev = detection_pattern(HeadPattern::PreviousToken, t);
  // Perfect: every row on its previous token (row 0 can only attend to itself).
  const auto perfect =
      causal_map(5, [](int64_t i, int64_t j) { return (i == 0 || j == i - 1) ? 1.0f : 0.0f; });
  CHECK(head_score(perfect.data(), 5, prev) == Approx(4.0 / 5));
  // Without BOS (key 0): rows 0 and 1 drop out, the other three are all on the pattern.
  CHECK(head_score(perfect.data(), 5, prev, true) == Approx(1.0));
  // Uniform over the keys it sees: row i gives 1/(i+1) to its previous token; T = 5 rows of mass 1.
  const auto uniform = causal_map(5, [](int64_t i, int64_t) { return 1.0f / static_cast<float>(i + 1); });
  CHECK(head_score(uniform.data(), 5, prev) == Approx((1.0 / 2 + 1.0 / 3 + 1.0 / 4 + 1.0 / 5) / 5));
  // Leaving out the current token: row i's mass is i/(i+1), row 0 none.
  CHECK(head_score(uniform.data(), 5, prev, false, true) ==
        Approx((1.0 / 2 + 1.0 / 3 + 1.0 / 4 + 1.0 / 5) / (1.0 / 2 + 2.0 / 3 + 3.0 / 4 + 4.0 / 5)));
  // DIFF: A = A1 − 0.5 A2 with A1 the perfect head and A2 uniform, T = 3. Rows: [0.5], [0.75, −0.25],
  // [−1/6, 5/6, −1/6]. On the pattern 0.75 + 5/6 = 19/12; absolute mass 0.5 + 1 + 7/6 = 8/3: 19/32.
  const auto diff = causal_map(3, [](int64_t i, int64_t j) {
    const float a1 = (i == 0 || j == i - 1) ? 1.0f : 0.0f, a2 = 1.0f / static_cast<float>(i + 1);
    return a1 - 0.5f * a2;
  });
  CHECK(head_score(diff.data(), 3, detection_pattern(HeadPattern::PreviousToken, {1, 2, 3})) ==
        Approx(19.0 / 32));
  // Weight taken away from the pattern counts against it: a map negative on the pattern scores below 0.
  const auto away = causal_map(2, [](int64_t i, int64_t j) { return i == 1 && j == 0 ? -0.25f : 0.75f; });
  CHECK(head_score(away.data(), 2, detection_pattern(HeadPattern::PreviousToken, {1, 2})) ==
        Approx(-0.25 / 1.75));
  std::vector<float> empty(4, 0.0f);
  CHECK(head_score(empty.data(), 2, detection_pattern(HeadPattern::PreviousToken, {1, 2})) == 0.0);
  CHECK_THROWS_WITH(head_score(empty.data(), 3, prev), Catch::Contains("not T x T for T = 3"));
}

TEST_CASE("head scores: a perfect induction head on repeated random tokens scores 1 on the second copy",
          "[metrics][heads]") {
  const std::vector<int64_t> t = repeated_random_tokens(6, 42, 100, 4096, 1);
  REQUIRE(t.size() == 13);
  CHECK(t[0] == 1);
  for (int i = 1; i <= 6; ++i) {
    CHECK(t[static_cast<size_t>(i)] == t[static_cast<size_t>(i + 6)]);
    CHECK(t[static_cast<size_t>(i)] >= 100);
    CHECK(t[static_cast<size_t>(i)] < 4096);
  }
  CHECK(repeated_random_tokens(6, 42, 100, 4096, 1) == t);  // seeded
  CHECK(repeated_random_tokens(6, 43, 100, 4096, 1) != t);
  CHECK(repeated_random_tokens(3, 1, 5, 6, -1) == std::vector<int64_t>{5, 5, 5, 5, 5, 5});
  CHECK_THROWS_WITH(repeated_random_tokens(0, 1, 5, 9, -1), Catch::Contains("at least 1"));
  CHECK_THROWS_WITH(repeated_random_tokens(3, 1, 9, 9, -1), Catch::Contains("no token ids in [9, 9)"));
  // Second copy (rows 7..12): attend to the token after the first copy's occurrence, i - 6 + 1. First copy
  // and BOS: attend to themselves. Ids drawn from 3,996 values rarely repeat within 6 (seed 42: they do not).
  const int64_t T = 13;
  const auto induction =
      causal_map(T, [](int64_t i, int64_t j) { return (i >= 7 ? j == i - 5 : j == i) ? 1.0f : 0.0f; });
  const auto d = detection_pattern(HeadPattern::Induction, t);
  CHECK(head_score(induction.data(), T, d) == Approx(6.0 / 13));          // 6 rows of 13 on the pattern
  CHECK(head_score(induction.data(), T, d, false, true) == Approx(1.0));  // the rest attended to themselves
  // A previous-token head is no induction head here, and the induction head no previous-token head.
  const auto prev = causal_map(T, [](int64_t i, int64_t j) { return (i == 0 || j == i - 1) ? 1.0f : 0.0f; });
  CHECK(head_score(prev.data(), T, d) == 0.0);
  CHECK(head_score(induction.data(), T, detection_pattern(HeadPattern::PreviousToken, t)) == 0.0);
}

TEST_CASE("head scores: the repeated random prompt is text that reads back as the same tokens twice",
          "[metrics][heads]") {
  const Tokenizer spm = Tokenizer::sentencepiece(kModels / "diff-small/tokenizer.model");
  const RepeatedPrompt p = repeated_random_prompt(spm, 50, 7);
  REQUIRE(p.ids.size() == 101);
  CHECK(p.ids[0] == spm.bos_id());
  CHECK(spm.encode(p.text, true).ids == p.ids);  // what the prompt box holds is the sequence, token for token
  std::set<int64_t> distinct;
  for (int i = 1; i <= 50; ++i) {
    const int64_t id = p.ids[static_cast<size_t>(i)];
    CHECK(id == p.ids[static_cast<size_t>(i + 50)]);
    CHECK(id != spm.bos_id());
    CHECK(id != spm.eos_id());
    CHECK(id >= 0);
    CHECK(id < spm.vocab_size());
    distinct.insert(id);
  }
  CHECK(distinct.size() >= 45);  // drawn from 4,000 pieces: hardly a repeat
  CHECK(repeated_random_prompt(spm, 50, 7).text == p.text);
  CHECK(repeated_random_prompt(spm, 50, 8).text != p.text);
  // One byte per token: every byte but the three specials' ids reads back.
  const Tokenizer bytes = Tokenizer::bytes(259);
  const RepeatedPrompt b = repeated_random_prompt(bytes, 20, 3);
  CHECK(b.text.size() == 40);
  CHECK(bytes.encode(b.text, true).ids == b.ids);
  CHECK(b.text.substr(0, 20) == b.text.substr(20));
  // A model without a text tokenizer reads ids: the prompt lists them, BOS first.
  ModelConfig c = test::tiny_config(AttentionKind::Baseline);
  c.tokenizer = TokenizerKind::SentencePiece;  // no tokenizer.model here: ids only
  const Tokenizer ids_only = Tokenizer::without_files(c);
  REQUIRE_FALSE(ids_only.can_encode());
  const RepeatedPrompt n = repeated_random_prompt(ids_only, 4, 1);
  CHECK(parse_token_ids(n.text, c.vocab_size) == n.ids);
  REQUIRE(n.ids.size() == 9);
  CHECK(n.ids[0] == ids_only.bos_id());
  for (size_t i = 1; i < n.ids.size(); ++i) {
    CHECK(n.ids[i] != ids_only.bos_id());
    CHECK(n.ids[i] != ids_only.eos_id());
  }
  CHECK(std::vector<int64_t>(n.ids.begin() + 1, n.ids.begin() + 5) ==
        std::vector<int64_t>(n.ids.begin() + 5, n.ids.end()));
  CHECK_THROWS_WITH(repeated_random_prompt(spm, 0, 1), Catch::Contains("at least 1"));
}

TEST_CASE("difflens heads writes every head's scores, equal to the scores of a capture of the same tokens",
          "[metrics][heads][cli]") {
  test::ScratchDir dir("heads-cli");
  const std::string models = (dir / "m").string(), csv = (dir / "heads.csv").string(),
                    log = (dir / "log").string();
  auto run = [&](const std::string& args) {
    const int raw = std::system((std::string(DIFFLENS_EXE) + " " + args + " > '" + log + "' 2>&1").c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  };
  REQUIRE(run("init-pair --out " + models + " --hidden 32 --layers 2 --heads 2 --vocab 300 --seed 5") == 0);
  REQUIRE(run("heads --models " + models + "/diff," + models + "/baseline --repeated 12 --seed 4 --out " +
              csv) == 0);
  const std::string printed = test::read_all(log);
  INFO(printed);
  CHECK(printed.find("(25 tokens, 12 random tokens twice): previous-token L") != std::string::npos);
  std::istringstream in(test::read_all(csv));
  std::string line;
  std::getline(in, line);
  CHECK(line == "model,layer,head,previous_token,duplicate_token,induction,entropy_norm,sink");
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> f(1);  // RFC 4180 fields: a quoted one may hold commas and doubled quotes
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char ch = line[i];
      if (ch == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') {
        f.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = !quoted;
      } else if (ch == ',' && !quoted) {
        f.emplace_back();
      } else {
        f.back() += ch;
      }
    }
    REQUIRE(f.size() == 8);
    rows.push_back(f);
  }
  size_t row = 0;
  for (const std::string name : {"diff", "baseline"}) {
    Model m = Model::load(models + "/" + name);
    const std::vector<int64_t> ids = repeated_random_prompt(m.tokenizer(), 12, 4).ids;
    const Trace t = m.capture(ids);
    for (int64_t l = 0; l < 2; ++l)
      for (int64_t h = 0; h < t.config.map_heads(); ++h, ++row) {
        REQUIRE(row < rows.size());
        const std::vector<std::string>& f = rows[row];
        CHECK(f[0] == m.config().name);  // "diff (untrained, seed 5)": quoted in the file
        CHECK(std::stoi(f[1]) == l);
        CHECK(std::stoi(f[2]) == h);
        const float* map = t.layers[static_cast<size_t>(l)].a.data.data() + h * 25 * 25;
        const HeadPattern patterns[] = {HeadPattern::PreviousToken, HeadPattern::DuplicateToken,
                                        HeadPattern::Induction};
        for (int k = 0; k < 3; ++k)
          CHECK(std::stod(f[static_cast<size_t>(3 + k)]) ==
                Approx(head_score(map, 25, detection_pattern(patterns[k], ids))).margin(1e-6));
      }
  }
  CHECK(row == rows.size());  // a row per head of each layer of each model, no more
  CHECK(rows.size() == 12);   // DIFF: 2 layers x 2 maps (A1 - lambda A2 of its 2 heads); baseline: 2 x 4
  // Bad requests: a message, no file.
  std::filesystem::remove(csv);
  CHECK(run("heads --models " + models + "/diff --out " + csv) == 1);
  CHECK(test::read_all(log).find("give exactly one of --prompt, --prompt-file, --repeated N") !=
        std::string::npos);
  CHECK(run("heads --models " + models + "/diff --repeated 4 --out " + (dir / "x.txt").string()) == 1);
  CHECK_FALSE(std::filesystem::exists(csv));
}
