// Head scores (core/head_scores): TransformerLens's detection patterns and "mul" score, checked on
// hand-built maps and token sequences.
#include <catch2/catch.hpp>

#include "core/head_scores.h"

using namespace difflens;

namespace {

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
