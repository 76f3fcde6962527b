// Attention to answer / attention noise.
#include "core/formats/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "core/formats/error.h"
#include "core/formats/head_scores.h"
#include "core/formats/intervention.h"
#include "core/formats/tiles.h"

namespace difflens {

const char* const kAttentionShareDefinition =
    "for one row i of a head's map A (A1 - lambda*A2 for DIFF, signed, summing to 1 - lambda; the softmax "
    "map for the baseline), keys split into the answer, the measured rows' own keys (the question) and the "
    "rest (noise): attention mass of a set = sum of |A[i,j]| over it / sum of |A[i,j]| over all keys j <= i "
    "(in [0, 1], the three sum to 1); output share = <o_S, o> / |o|^2 with o_S = sum of A[i,j] v_j over the set "
    "(what reaches the head's output; unchanged when the row is scaled; the three sum to 1; negative when a "
    "set pushes against the rest); net share = sum of A[i,j] over the set / sum of |A[i,j]| (signed; the "
    "three sum to the row's budget sum A / sum |A|, (1 - lambda)/sum|A| for DIFF). Attention noise is the "
    "noise's attention mass. Averaged over the measured rows i, then over heads and layers";

const char* const kHeadSummaryDefinition =
    "per head, averaged over the query rows i: answer and noise as attention mass (sum of |A[i,j]| over the "
    "answer, or over the keys outside the answer and the rows, / sum of |A[i,j]|); "
    "entropy = -sum of p_j ln p_j (nats), p_j = |A[i,j]| / sum of |A[i,j]| over keys j <= i (DIFF's negative "
    "weights count by magnitude); normalised entropy = entropy / ln(keys row i sees): 0 one key, 1 uniform; "
    "sink = A[i,0] / the same denominator; A = A1 - lambda*A2 for DIFF, the softmax map for the baseline; "
    "previous-token, duplicate-token and induction scores (TransformerLens's head detector, over every row): "
    "sum of A[i,j] over the pattern's cells / sum of |A[i,j]|; patterns: j = i-1; j < i with the same token; "
    "the key after an earlier copy of the query's token";

namespace {

// `row_of(i)` returns query row i (at least i + 1 keys long); `values` ([T, dv], or nullptr) the head's value
// vectors for the output shares.
template <typename RowOf>
AttentionShare share_of_rows(RowOf&& row_of, int64_t T, const std::vector<int64_t>& rows, TokenSpan answer,
                             TokenSpan question, const float* values = nullptr, int64_t dv = 0) {
  auto valid = [T](TokenSpan s) { return s.begin >= 0 && s.begin <= s.end && s.end <= T; };
  if (!valid(answer) || !valid(question))
    throw Error("attention metrics: a span lies outside the " + std::to_string(T) + " tokens");
  if (rows.empty()) throw Error("attention metrics: no query rows");
  AttentionShare mean;
  for (int64_t i : rows) {
    if (i < 0 || i >= T)
      throw Error("attention metrics: query row " + std::to_string(i) + " is outside the map");
    const float* row = row_of(i);
    RowMeasures m(answer, question, values ? dv : 0);
    for (int64_t j = 0; j <= i; ++j)
      m.add(j, row[j], values ? values + j * dv : static_cast<const float*>(nullptr));
    const AttentionShare r = m.finish();
    mean.add(r, 1.0 / static_cast<double>(rows.size()));
  }
  return mean;
}

// Adds row i's entropy, normalised entropy and sink to `s` (keys 0..i; `visible` of them unmasked).
void add_row_spread(const float* row, int64_t i, int64_t visible, HeadSummary& s) {
  double total = 0;
  for (int64_t j = 0; j <= i; ++j) total += std::fabs(row[j]);
  if (total <= 0) return;
  double h = 0;
  for (int64_t j = 0; j <= i; ++j) {
    const double p = std::fabs(row[j]) / total;
    if (p > 0) h -= p * std::log(p);
  }
  s.entropy += h;
  if (visible > 1) s.entropy_norm += h / std::log(static_cast<double>(visible));
  s.sink += row[0] / total;
}

template <typename RowOf>
HeadSummary summary_of_rows(RowOf&& row_of, int64_t T, int64_t window, const std::vector<int64_t>& rows,
                            TokenSpan answer, TokenSpan question, bool has_answer) {
  const AttentionShare share = share_of_rows(row_of, T, rows, answer, question);
  HeadSummary s;
  for (int64_t i : rows) add_row_spread(row_of(i), i, window > 0 ? std::min(i + 1, window) : i + 1, s);
  const double n = static_cast<double>(rows.size());
  s.entropy /= n;
  s.entropy_norm /= n;
  s.sink /= n;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.answer = has_answer ? share.answer_mass : nan;
  s.noise = has_answer ? share.noise_mass : nan;
  return s;
}

}  // namespace

void AttentionShare::add(const AttentionShare& o, double w) {
  answer += w * o.answer;
  noise += w * o.noise;
  budget += w * o.budget;
  answer_mass += w * o.answer_mass;
  question_mass += w * o.question_mass;
  noise_mass += w * o.noise_mass;
  answer_output += w * o.answer_output;
  question_output += w * o.question_output;
  noise_output += w * o.noise_output;
  a1_noise_mass += w * o.a1_noise_mass;
  a1_noise_output += w * o.a1_noise_output;
}

RowMeasures::RowMeasures(TokenSpan answer, TokenSpan question, int64_t dv)
    : answer_(answer), question_(question), values_(dv > 0) {
  for (auto& x : o_) x.assign(static_cast<size_t>(std::max<int64_t>(dv, 0)), 0.0);
}

AttentionShare RowMeasures::finish() const {
  AttentionShare r;
  if (total_ > 0) {
    r.answer = net_[0] / total_;
    r.noise = net_[2] / total_;
    r.budget = sum_ / total_;
    r.answer_mass = mass_[0] / total_;
    r.question_mass = mass_[1] / total_;
    r.noise_mass = mass_[2] / total_;
  }
  if (!values_) {
    r.answer_output = r.question_output = r.noise_output = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  double norm2 = 0, dots[3] = {0, 0, 0};
  for (size_t x = 0; x < o_[0].size(); ++x) {
    const double full = o_[0][x] + o_[1][x] + o_[2][x];
    norm2 += full * full;
    for (int k = 0; k < 3; ++k) dots[k] += o_[k][x] * full;
  }
  if (norm2 > 0) {  // a row whose output is zero counts as 0, as a row of zero mass does
    r.answer_output = dots[0] / norm2;
    r.question_output = dots[1] / norm2;
    r.noise_output = dots[2] / norm2;
  }
  return r;
}

AttentionShare query_row_share(const float* row, int64_t q, TokenSpan answer) {
  const TokenSpan seen{std::clamp<int64_t>(answer.begin, 0, q + 1),
                       std::clamp<int64_t>(answer.end, 0, q + 1)};
  return share_of_rows([row](int64_t) { return row; }, q + 1, {q}, seen, {q, q + 1});
}

AttentionShare attention_share(const float* map, int64_t T, const std::vector<int64_t>& rows,
                               TokenSpan answer, TokenSpan question, const float* values, int64_t dv) {
  return share_of_rows([&](int64_t i) { return map + i * T; }, T, rows, answer, question, values, dv);
}

NoiseReadout attention_noise(const Trace& trace, TokenSpan answer, TokenSpan question, TokenSpan row_span) {
  const int64_t T = trace.length();
  if (row_span.end <= row_span.begin) row_span = question;
  std::vector<int64_t> rows;
  for (int64_t i = row_span.begin; i < row_span.end; ++i) rows.push_back(i);
  // The heads the run ablated, from its interventions as run ("ablate:L:H" or its mean form), parsed once.
  std::vector<std::pair<int64_t, int64_t>> ablations;
  for (const auto& entry : trace.interventions) {
    const InterventionSpec spec = parse_intervention(entry.second);
    if (spec.kind == InterventionKind::Ablate) ablations.emplace_back(spec.layer, spec.head);
  }
  NoiseReadout r;
  for (const LayerTrace& l : trace.layers) {
    const bool from_tiles = l.pooled > 0;  // a long-prompt trace: the question's rows, recomputed exactly
    if (!from_tiles && (l.heads.empty() || l.a.empty())) continue;
    std::vector<int> which = l.heads;
    if (from_tiles && which.empty())
      for (int h = 0; h < trace.config.map_heads(); ++h) which.push_back(h);
    std::vector<AttentionShare> heads;
    AttentionShare layer_mean;
    // The head's values (kept with CaptureOptions::keep_qkv): its key/value group's [T, dv] rows.
    auto values_of = [&](int head) -> const float* {
      if (l.v.empty() || l.v.shape.size() != 3 || l.v.shape[1] != T) return nullptr;
      const int64_t groups = l.v.shape[0], H = trace.config.map_heads();
      if (groups <= 0 || H % groups != 0) return nullptr;
      return l.v.data.data() + (head / (H / groups)) * T * l.v.shape[2];
    };
    const int64_t dv = l.v.shape.size() == 3 ? l.v.shape[2] : 0;
    const bool diff = trace.config.is_diff();
    for (size_t h = 0; h < which.size(); ++h) {
      if (from_tiles) {
        if (row_span.begin < 0 || row_span.end > T || row_span.begin >= row_span.end)
          throw Error("attention metrics: a span lies outside the " + std::to_string(T) + " tokens");
        // The tile holds the rows [row_span.begin, row_span.end) of a map whose other rows are never read.
        const AttentionTile tile =
            attention_tile(trace, l.index, which[h], row_span.begin, row_span.end - row_span.begin, 0, T);
        heads.push_back(share_of_rows([&](int64_t i) { return tile.a.data() + (i - row_span.begin) * T; }, T,
                                      rows, answer, question, values_of(which[h]), dv));
        if (diff && !tile.a1.empty()) {
          const AttentionShare first =
              share_of_rows([&](int64_t i) { return tile.a1.data() + (i - row_span.begin) * T; }, T, rows,
                            answer, question, values_of(which[h]), dv);
          heads.back().a1_noise_mass = first.noise_mass;
          heads.back().a1_noise_output = first.noise_output;
        }
      } else {
        heads.push_back(attention_share(l.a.data.data() + static_cast<int64_t>(h) * T * T, T, rows, answer,
                                        question, values_of(which[h]), dv));
        if (diff && !l.a1.empty()) {
          const AttentionShare first = attention_share(l.a1.data.data() + static_cast<int64_t>(h) * T * T, T,
                                                       rows, answer, question, values_of(which[h]), dv);
          heads.back().a1_noise_mass = first.noise_mass;
          heads.back().a1_noise_output = first.noise_output;
        }
      }
      if (!diff)
        heads.back().a1_noise_mass = heads.back().a1_noise_output = std::numeric_limits<double>::quiet_NaN();
      layer_mean.add(heads.back(), 1.0 / static_cast<double>(which.size()));
    }
    std::vector<bool> ablated(which.size(), false);
    for (size_t h = 0; h < which.size(); ++h)
      ablated[h] = std::find(ablations.begin(), ablations.end(),
                             std::make_pair<int64_t, int64_t>(l.index, which[h])) != ablations.end();
    r.layers.push_back(l.index);
    r.per_head.push_back(std::move(heads));
    r.heads.push_back(which);
    r.per_layer.push_back(layer_mean);
    r.ablated.push_back(std::move(ablated));
  }
  if (r.layers.empty()) throw Error("attention metrics: the trace kept no attention maps");
  for (const auto& s : r.per_layer) r.mean.add(s, 1.0 / static_cast<double>(r.per_layer.size()));
  return r;
}

HeadSummaries head_summaries(const Trace& trace, const std::vector<int64_t>& rows, TokenSpan answer,
                             TokenSpan question) {
  const int64_t T = trace.length(), window = trace.config.sliding_window;
  // Checked up front: a long-prompt layer recomputes these rows before share_of_rows would look at them.
  for (TokenSpan s : {answer, question})
    if (s.begin < 0 || s.begin > s.end || s.end > T)
      throw Error("attention metrics: a span lies outside the " + std::to_string(T) + " tokens");
  if (rows.empty()) throw Error("attention metrics: no query rows");
  for (int64_t i : rows)
    if (i < 0 || i >= T)
      throw Error("attention metrics: query row " + std::to_string(i) + " is outside the map");
  HeadSummaries r;
  r.has_answer = answer.end > answer.begin;
  std::vector<std::vector<uint8_t>> patterns;  // previous-token, duplicate-token, induction: made once
  for (HeadPattern p : {HeadPattern::PreviousToken, HeadPattern::DuplicateToken, HeadPattern::Induction})
    patterns.push_back(trace.token_ids.size() == static_cast<size_t>(T)
                           ? detection_pattern(p, trace.token_ids)
                           : std::vector<uint8_t>{});
  for (const LayerTrace& l : trace.layers) {
    std::vector<int> which = l.heads;
    if (l.pooled > 0 && which.empty())  // as attention_noise: a long-prompt layer can recompute every head
      for (int h = 0; h < trace.config.map_heads(); ++h) which.push_back(h);
    if (l.pooled == 0 && l.a.empty()) continue;
    std::vector<HeadSummary> summaries;
    for (size_t h = 0; h < which.size(); ++h) {
      if (l.pooled == 0) {
        const float* map = l.a.data.data() + static_cast<int64_t>(h) * T * T;
        summaries.push_back(summary_of_rows([&](int64_t i) { return map + i * T; }, T, window, rows, answer,
                                            question, r.has_answer));
        HeadSummary& s = summaries.back();
        const double nan = std::numeric_limits<double>::quiet_NaN();
        s.previous_token = patterns[0].empty() ? nan : head_score(map, T, patterns[0]);
        s.duplicate_token = patterns[1].empty() ? nan : head_score(map, T, patterns[1]);
        s.induction = patterns[2].empty() ? nan : head_score(map, T, patterns[2]);
        continue;
      }
      if (!tile_available(trace, l.index, which[h]))
        throw Error(
            "long-prompt traces keep pooled maps: per-head summaries need exact maps, or the queries, "
            "keys and row log-sum-exps of layer " +
            std::to_string(l.index) + ", which this trace lacks");
      std::map<int64_t, AttentionTile> exact_rows;  // query row i -> A[i, 0..i], recomputed
      for (int64_t i : rows)
        if (!exact_rows.count(i))
          exact_rows.emplace(i, attention_tile(trace, l.index, which[h], i, 1, 0, i + 1));
      summaries.push_back(summary_of_rows([&](int64_t i) { return exact_rows.at(i).a.data(); }, T, window,
                                          rows, answer, question, r.has_answer));
      summaries.back().previous_token = summaries.back().duplicate_token = summaries.back().induction =
          std::numeric_limits<double>::quiet_NaN();
    }
    r.layers.push_back(l.index);
    r.heads.push_back(std::move(which));
    r.per_head.push_back(std::move(summaries));
  }
  if (r.layers.empty()) throw Error("attention metrics: the trace kept no attention maps");
  return r;
}

std::optional<HeadShare> strongest_answer_head(const NoiseReadout& r, int layer) {
  std::optional<HeadShare> best;
  for (size_t l = 0; l < r.per_head.size(); ++l) {
    if (layer >= 0 && r.layers[l] != layer) continue;
    for (size_t h = 0; h < r.per_head[l].size(); ++h)
      if (!(l < r.ablated.size() && h < r.ablated[l].size() && r.ablated[l][h]) &&
          (!best || r.per_head[l][h].answer_mass > best->share.answer_mass))
        best = HeadShare{r.layers[l], r.heads[l][h], r.per_head[l][h]};
  }
  return best;
}

MapDrift map_drift(const Trace& ref, const Trace& other) {
  const int64_t T = ref.length();
  if (other.length() != T || other.layers.size() != ref.layers.size())
    throw Error("map drift: the traces have different lengths or layers");
  MapDrift d;
  double sum = 0;
  int64_t entries = 0, agree = 0;
  for (size_t l = 0; l < ref.layers.size(); ++l) {
    const LayerTrace &a = ref.layers[l], &b = other.layers[l];
    if (a.heads != b.heads) throw Error("map drift: the traces kept different heads");
    if (a.a.empty() || b.a.empty()) continue;
    for (size_t h = 0; h < a.heads.size(); ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* ra = a.a.data.data() + (static_cast<int64_t>(h) * T + i) * T;
        const float* rb = b.a.data.data() + (static_cast<int64_t>(h) * T + i) * T;
        int64_t arg_a = 0, arg_b = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double diff = std::fabs(static_cast<double>(ra[j]) - rb[j]);
          d.max_abs = std::max(d.max_abs, diff);
          sum += diff;
          ++entries;
          if (ra[j] > ra[arg_a]) arg_a = j;
          if (rb[j] > rb[arg_b]) arg_b = j;
        }
        agree += arg_a == arg_b;
        ++d.rows;
      }
  }
  if (d.rows == 0) throw Error("map drift: the traces kept no attention maps");
  d.mean_abs = sum / static_cast<double>(entries);
  d.top1_agreement = static_cast<double>(agree) / static_cast<double>(d.rows);
  return d;
}

std::string signed3(double v) {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return std::strcmp(b, "-0.000") == 0 ? std::string("0.000") : std::string(b);
}

const std::vector<ShareColumn>& share_columns() {
  static const std::vector<ShareColumn> columns = {
      {"answer", "attention mass on the answer",
       [](const AttentionShare& a) { return signed3(a.answer_mass); }},
      {"noise", "attention mass on the noise (attention noise)",
       [](const AttentionShare& a) { return signed3(a.noise_mass); }},
      {"noise out", "the noise's share of the heads' output",
       [](const AttentionShare& a) { return signed3(a.noise_output); }},
      {"net / budget",
       "net (signed) noise share of the row's |A|, and the budget the three net shares sum to",
       [](const AttentionShare& a) { return signed3(a.noise) + " / " + signed3(a.budget); }},
  };
  return columns;
}

}  // namespace difflens
