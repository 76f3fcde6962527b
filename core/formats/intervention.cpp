// Interventions: the grammar, its canonical text and resolution against a model and a prompt.
#include "core/formats/intervention.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/formats/error.h"

namespace difflens {

namespace {

const char* kGrammar =
    "lambda=V (every layer) | lambda:L=V | lambda:L:H=V (V a number or init) | ablate:L:H | ablate:L:H=mean | "
    "knockout[:L[:H]]=WHAT[@ROWS] with WHAT not-answer, only-answer, not-noise, drop:B-E[+B-E...] or "
    "keep:B-E[+B-E...], ROWS B-E, B- or query- (tokens [B, E))";

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw Error("--intervene '" + text + "': " + why + " (the forms: " + kGrammar + ")");
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

// The shortest of %.9g .. %.17g that reads back as the same double, so that a spec's text parses to the
// same spec ("0.2147483647" printed as "0.214748365" did not: found by the intervention fuzz target).
std::string number_text(double v) {
  char buf[64];
  for (int digits = 9; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string range_text(const TokenRange& r) {
  return std::to_string(r.first) + "-" + (r.second == kToEnd ? "" : std::to_string(r.second));
}

// "B-E", or "B-": B to the end.
TokenRange parse_range(const std::string& text, const std::string& part) {
  const size_t dash = part.find('-');
  int64_t b = 0, e = 0;
  if (dash == std::string::npos || !parse_int(part.substr(0, dash), b))
    refuse(text, "'" + part + "' is not a token range B-E");
  const std::string end = part.substr(dash + 1);
  if (end.empty()) return {b, kToEnd};
  if (!parse_int(end, e)) refuse(text, "'" + part + "' is not a token range B-E");
  if (e <= b) refuse(text, "'" + part + "' is empty: E must be greater than B (tokens [B, E))");
  return {b, e};
}

std::vector<TokenRange> sorted_union(std::vector<TokenRange> r) {
  std::sort(r.begin(), r.end());
  std::vector<TokenRange> out;
  for (const TokenRange& x : r) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

const char* keys_word(KnockoutKeys k) {
  switch (k) {
    case KnockoutKeys::NotAnswer:
      return "not-answer";
    case KnockoutKeys::OnlyAnswer:
      return "only-answer";
    case KnockoutKeys::NotNoise:
      return "not-noise";
    case KnockoutKeys::Drop:
      return "drop";
    case KnockoutKeys::Keep:
      return "keep";
  }
  return "";
}

}  // namespace

const char* intervention_grammar() {
  return kGrammar;
}

std::string InterventionSpec::text() const {
  std::string where =
      layer >= 0 ? ":" + std::to_string(layer) + (head >= 0 ? ":" + std::to_string(head) : "") : "";
  switch (kind) {
    case InterventionKind::Lambda:
      return "lambda" + where + "=" + (lambda_init ? std::string("init") : number_text(value));
    case InterventionKind::Ablate:
      return "ablate" + where + (mean ? "=mean" : "");
    case InterventionKind::Knockout: {
      std::string t = "knockout" + where + "=" + keys_word(keys);
      if (keys == KnockoutKeys::Drop || keys == KnockoutKeys::Keep) {
        t += ":";
        for (size_t i = 0; i < key_ranges.size(); ++i) t += (i ? "+" : "") + range_text(key_ranges[i]);
      }
      if (!rows_from_query) t += "@" + range_text(rows);
      return t;
    }
  }
  return "";
}

bool InterventionSpec::operator==(const InterventionSpec& o) const {
  return kind == o.kind && layer == o.layer && head == o.head && lambda_init == o.lambda_init &&
         value == o.value && mean == o.mean && keys == o.keys && key_ranges == o.key_ranges &&
         rows_from_query == o.rows_from_query && rows == o.rows;
}

InterventionSpec parse_intervention(const std::string& text) {
  InterventionSpec s;
  if (text.empty()) refuse(text, "empty");
  if (text.size() > 4096) refuse(text.substr(0, 40) + "...", "over 4096 characters");
  const size_t eq = text.find('=');
  const std::string head = text.substr(0, eq), value = eq == std::string::npos ? "" : text.substr(eq + 1);
  // KIND[:L[:H]]
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = head.find(':', at);
    parts.push_back(head.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  const std::string& kind = parts[0];
  if (kind == "lambda")
    s.kind = InterventionKind::Lambda;
  else if (kind == "ablate")
    s.kind = InterventionKind::Ablate;
  else if (kind == "knockout")
    s.kind = InterventionKind::Knockout;
  else
    refuse(text, "unknown kind '" + kind + "' (lambda, ablate or knockout)");
  if (parts.size() > 3) refuse(text, "too many ':' parts before '=' (KIND:LAYER:HEAD at most)");
  if (parts.size() > 1 && !parse_int(parts[1], s.layer))
    refuse(text, "the layer '" + parts[1] + "' is not a number");
  if (parts.size() > 2 && !parse_int(parts[2], s.head))
    refuse(text, "the head '" + parts[2] + "' is not a number");

  switch (s.kind) {
    case InterventionKind::Lambda: {
      if (s.head >= 0 && s.layer < 0) refuse(text, "a head needs its layer");
      if (eq == std::string::npos || value.empty()) refuse(text, "lambda needs a value: lambda:L=V");
      if (value == "init") {
        s.lambda_init = true;
        break;
      }
      char* end = nullptr;
      errno = 0;
      s.value = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(s.value))
        refuse(text, "the value '" + value + "' is not a finite number (or init)");
      // A λ far beyond any a model learns overflows the maps and the residual stream in float32 (3.4e38 gave
      // NaN maps and predictions): refused, with the range taken.
      if (std::fabs(s.value) > kLambdaLimit)
        refuse(text, "the value '" + value + "' lies outside the range accepted, -" +
                         number_text(kLambdaLimit) + " to " + number_text(kLambdaLimit));
      break;
    }
    case InterventionKind::Ablate:
      if (s.layer < 0 || s.head < 0) refuse(text, "ablate needs a layer and a head: ablate:L:H");
      if (eq != std::string::npos) {
        if (value == "mean")
          s.mean = true;
        else if (value != "zero")
          refuse(text, "an ablation is zero (ablate:L:H) or mean (ablate:L:H=mean), not '" + value + "'");
      }
      break;
    case InterventionKind::Knockout: {
      if (s.head >= 0 && s.layer < 0) refuse(text, "a head needs its layer");
      if (eq == std::string::npos || value.empty())
        refuse(text, "knockout needs what it removes: knockout=WHAT");
      const size_t at = value.find('@');
      const std::string what = value.substr(0, at);
      if (at != std::string::npos) {
        const std::string rows = value.substr(at + 1);
        if (rows == "query-" || rows == "query") {
          s.rows_from_query = true;
        } else {
          s.rows_from_query = false;
          s.rows = parse_range(text, rows);
        }
      }
      if (what == "not-answer") {
        s.keys = KnockoutKeys::NotAnswer;
      } else if (what == "only-answer") {
        s.keys = KnockoutKeys::OnlyAnswer;
      } else if (what == "not-noise") {
        s.keys = KnockoutKeys::NotNoise;
      } else if (what.rfind("drop:", 0) == 0 || what.rfind("keep:", 0) == 0) {
        s.keys = what[0] == 'd' ? KnockoutKeys::Drop : KnockoutKeys::Keep;
        const std::string list = what.substr(5);
        for (size_t p = 0;;) {
          const size_t plus = list.find('+', p);
          s.key_ranges.push_back(
              parse_range(text, list.substr(p, plus == std::string::npos ? std::string::npos : plus - p)));
          if (plus == std::string::npos) break;
          p = plus + 1;
        }
        s.key_ranges = sorted_union(s.key_ranges);
      } else {
        refuse(text, "unknown keys '" + what + "' (not-answer, only-answer, not-noise, drop:B-E, keep:B-E)");
      }
      break;
    }
  }
  return s;
}

bool KeyKnockout::removes(int64_t h, int64_t i, int64_t j) const {
  if (!applies(h, i)) return false;
  bool in = false;
  for (const TokenRange& r : ranges)
    if (j >= r.first && j < r.second) in = true;
  return keep ? !in : in;
}

double LayerEdit::lambda_of(int64_t h, double own) const {
  for (const auto& [head, v] : head_lambda)
    if (head == h) return v;
  return lambda ? *lambda : own;
}

bool LayerEdit::lambda_changed(int64_t h) const {
  if (lambda) return true;
  for (const auto& p : head_lambda)
    if (p.first == h) return true;
  return false;
}

Interventions resolve_interventions(const std::vector<InterventionSpec>& specs, const ModelConfig& c,
                                    const PromptMarks& marks, int64_t tokens) {
  Interventions out;
  const int64_t L = c.num_hidden_layers, H = c.map_heads();
  out.layers.resize(static_cast<size_t>(L));
  for (const InterventionSpec& s : specs) {
    const std::string text = s.text();
    auto fail = [&](const std::string& why) { throw Error("--intervene '" + text + "': " + why); };
    if (s.layer >= L)
      fail("layer " + std::to_string(s.layer) + " is out of range: this model has " + std::to_string(L) +
           " layers (0-" + std::to_string(L - 1) + ")");
    if (s.head >= H)
      fail("head " + std::to_string(s.head) + " is out of range: this model has " + std::to_string(H) +
           " heads per layer (0-" + std::to_string(H - 1) + ")");
    InterventionSpec as_run = s;
    switch (s.kind) {
      case InterventionKind::Lambda: {
        if (!c.is_diff())
          fail((s.layer >= 0 ? "layer " + std::to_string(s.layer) : std::string("a layer")) + " of this " +
               std::string(to_string(c.attention)) + " model has no λ (only DIFF layers do)");
        if (s.lambda_init && c.is_diff_v2())
          fail("DIFF V2 has no λ_init (its λ is σ of a projection per token): give a number");
        if (s.layer < 0 && s.lambda_init) {  // every layer its own λ_init (a fixed rule: as run as written)
          for (int64_t l = 0; l < L; ++l) {
            out.layers[static_cast<size_t>(l)].lambda = lambda_init(l);
            out.layers[static_cast<size_t>(l)].head_lambda.clear();
          }
          out.applied.emplace_back(text, text);
          continue;
        }
        const double v = s.lambda_init ? lambda_init(s.layer) : s.value;
        as_run.lambda_init = false;
        as_run.value = v;
        for (int64_t l = s.layer < 0 ? 0 : s.layer; l < (s.layer < 0 ? L : s.layer + 1); ++l) {
          LayerEdit& e = out.layers[static_cast<size_t>(l)];
          if (s.head < 0) {
            e.lambda = v;
            e.head_lambda.clear();  // a later layer-wide value wins over earlier per-head ones
          } else {
            e.head_lambda.erase(std::remove_if(e.head_lambda.begin(), e.head_lambda.end(),
                                               [&](const auto& p) { return p.first == s.head; }),
                                e.head_lambda.end());
            e.head_lambda.emplace_back(s.head, v);
          }
        }
        break;
      }
      case InterventionKind::Ablate: {
        LayerEdit& e = out.layers[static_cast<size_t>(s.layer)];
        e.ablate.erase(std::remove_if(e.ablate.begin(), e.ablate.end(),
                                      [&](const auto& p) { return p.first == s.head; }),
                       e.ablate.end());
        e.ablate.emplace_back(s.head, s.mean);
        break;
      }
      case InterventionKind::Knockout: {
        KeyKnockout k;
        k.head = s.head;
        if (s.rows_from_query) {
          if (marks.query < 0 || marks.query >= tokens)
            fail("the rows start at the query, and this prompt has no query row");
          k.rows = {marks.query, kToEnd};
        } else {
          if (s.rows.first >= tokens)
            fail("the rows " + range_text(s.rows) + " start beyond the " + std::to_string(tokens) +
                 "-token prompt");
          k.rows = s.rows;
        }
        const bool answer = marks.answer.first >= 0 && marks.answer.first < marks.answer.second;
        const bool needs_answer = s.keys == KnockoutKeys::NotAnswer || s.keys == KnockoutKeys::OnlyAnswer ||
                                  s.keys == KnockoutKeys::NotNoise;
        if (needs_answer && !answer)
          fail(std::string(keys_word(s.keys)) +
               " needs the answer's tokens (--answer BEGIN,END, or a needle prompt)");
        if (needs_answer && marks.answer.second > tokens)
          fail("the answer [" + std::to_string(marks.answer.first) + ", " +
               std::to_string(marks.answer.second) + ") lies beyond the " + std::to_string(tokens) +
               "-token prompt");
        switch (s.keys) {
          case KnockoutKeys::NotAnswer:
            k.ranges = {marks.answer};
            break;
          case KnockoutKeys::OnlyAnswer:
            k.ranges = {marks.answer};
            k.keep = true;
            break;
          case KnockoutKeys::NotNoise: {
            if (marks.query < 0)
              fail(
                  "not-noise needs the query row (the noise is outside the answer and the query to the end)");
            k.ranges = sorted_union({marks.answer, {marks.query, kToEnd}});
            k.keep = true;
            break;
          }
          case KnockoutKeys::Drop:
          case KnockoutKeys::Keep:
            for (const TokenRange& r : s.key_ranges)
              if (r.first >= tokens)
                fail("the keys " + range_text(r) + " start beyond the " + std::to_string(tokens) +
                     "-token prompt");
            k.ranges = s.key_ranges;
            k.keep = s.keys == KnockoutKeys::Keep;
            break;
        }
        // As run: the keys and rows as numbers.
        as_run.keys = k.keep ? KnockoutKeys::Keep : KnockoutKeys::Drop;
        as_run.key_ranges = k.ranges;
        as_run.rows_from_query = false;
        as_run.rows = k.rows;
        for (int64_t l = s.layer < 0 ? 0 : s.layer; l < (s.layer < 0 ? L : s.layer + 1); ++l)
          out.layers[static_cast<size_t>(l)].knockouts.push_back(k);
        break;
      }
    }
    out.applied.emplace_back(text, as_run.text());
  }
  return out;
}

std::vector<KeyKnockout> knockouts_in_layer(const std::vector<std::pair<std::string, std::string>>& applied,
                                            int64_t layer) {
  std::vector<KeyKnockout> out;
  for (const auto& entry : applied) {
    const InterventionSpec s = parse_intervention(entry.second);
    if (s.kind != InterventionKind::Knockout || (s.layer >= 0 && s.layer != layer)) continue;
    if (s.rows_from_query || (s.keys != KnockoutKeys::Drop && s.keys != KnockoutKeys::Keep))
      throw Error("intervention '" + entry.second + "' is not resolved (its rows and keys must be numbers)");
    KeyKnockout k;
    k.head = s.head;
    k.rows = s.rows;
    k.ranges = s.key_ranges;
    k.keep = s.keys == KnockoutKeys::Keep;
    out.push_back(std::move(k));
  }
  return out;
}

Interventions resolve_interventions(const std::vector<std::string>& specs, const ModelConfig& config,
                                    const PromptMarks& marks, int64_t tokens) {
  std::vector<InterventionSpec> parsed;
  for (const std::string& s : specs) parsed.push_back(parse_intervention(s));
  return resolve_interventions(parsed, config, marks, tokens);
}

std::vector<std::string> takeable_interventions(const std::vector<std::string>& specs,
                                                const ModelConfig& config, const PromptMarks& marks,
                                                int64_t tokens, std::vector<std::string>& refused) {
  std::vector<std::string> kept;
  for (const std::string& spec : specs) {
    try {
      (void)resolve_interventions(std::vector<std::string>{spec}, config, marks, tokens);
      kept.push_back(spec);
    } catch (const Error& e) {
      refused.push_back(e.what());
    }
  }
  return kept;
}

std::string under_interventions(const std::vector<std::string>& specs) {
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) out += (i == 0 ? " under " : ", ") + specs[i];
  return out;
}

}  // namespace difflens
