// What a model predicted at each position, as the app words it (see prediction_text.h).
#include "app/reports/prediction_text.h"

#include <cmath>
#include <cstdio>

#include "viz/token_text.h"

namespace difflens::app {

namespace {

std::string shown(const std::string& piece) {
  return viz::display_token(piece, viz::Spaces::Visible);
}

std::string percent(float p) {
  char b[32];
  std::snprintf(b, sizeof b, p >= 0.001f || p == 0 ? "%.1f %%" : "%.2g %%", 100.0 * p);
  return b;
}

}  // namespace

std::string candidate_text(const Candidate& c) {
  char b[200];
  std::snprintf(b, sizeof b, "%.1f %% ", 100.0 * c.probability);
  return b + c.text;
}

std::vector<Candidate> candidates_after(const Trace& t, int64_t pos, size_t n) {
  std::vector<Candidate> out;
  const Predictions& p = t.predictions;
  if (p.has(pos)) {
    for (int64_t j = 0; j < p.k && out.size() < n; ++j) {
      const auto piece = p.pieces.find(p.id(pos, j));
      out.push_back({p.prob(pos, j), shown(piece == p.pieces.end() ? "<" + std::to_string(p.id(pos, j)) + ">"
                                                                   : piece->second)});
    }
  } else if (pos == t.length() - 1) {
    for (size_t j = 0; j < t.next_token.size() && out.size() < n; ++j)
      out.push_back({t.next_token[j].probability, shown(t.next_token[j].text)});
  }
  return out;
}

std::string next_after_line(const Trace& t, int64_t pos, size_t n,
                            const std::function<bool(const std::string&)>& fits) {
  const std::vector<Candidate> c = candidates_after(t, pos, n);
  if (c.empty()) return "";
  std::string line = "next after " + std::to_string(pos) + ":";
  for (const Candidate& k : c) {
    const std::string longer = line + "   " + candidate_text(k);
    if (fits && !fits(longer)) break;
    line = longer;
  }
  return line;
}

std::string expected_here(const Trace& t, int64_t pos, size_t n) {
  if (pos < 1 || pos >= t.length() || !t.predictions.has(pos - 1)) return "";
  std::string s = "expected here:";
  const std::vector<Candidate> c = candidates_after(t, pos - 1, n);
  for (size_t j = 0; j < c.size(); ++j)
    s += (j ? ", '" : " '") + c[j].text + "' " + percent(c[j].probability);
  const float p = t.predictions.actual_prob(pos - 1);
  s += "\nhere: '" + shown(t.tokens[static_cast<size_t>(pos)]) + "' " + percent(p) + ", rank " +
       std::to_string(t.predictions.actual_rank(pos - 1));
  return s;
}

}  // namespace difflens::app
