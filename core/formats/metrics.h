// Attention metrics over captured maps (no LibTorch). For one row i of one head's map A (DIFF: A1 − λA2,
// signed, its rows summing to 1 − λ; the baseline: the softmax map), the keys j <= i fall into three sets:
// the answer span, the measured rows' own keys ("the question") and the rest ("noise"). Three measures:
//   attention mass  of a set S = Σ_{j∈S} |A[i,j]| / Σ_j |A[i,j]|   in [0, 1]; the three sets sum to 1.
//   output share    of a set S = ⟨o_S, o⟩ / ‖o‖²,  o_S = Σ_{j∈S} A[i,j]·v_j,  o = Σ_S o_S  (v_j the head's
//                   value, 2d wide for DIFF; before DIFF's per-head norm). The three sum to 1; unchanged when
//                   the row is scaled (λ's budget 1 − λ drops out, as the per-head norm drops it); negative
//                   for a set that pushes against the rest. NaN when the trace kept no values.
//   net share       of a set S = Σ_{j∈S} A[i,j] / Σ_j |A[i,j]|  (signed), the measure DiffLens showed first;
//                   the three sum to the row's budget Σ_j A[i,j] / Σ_j |A[i,j]| ((1 − λ)/Σ|A| for DIFF, 1
//                   for the baseline), so it is reported only with that budget beside it.
// "Attention noise" is the noise's attention mass (core/FORMATS.md says why). For the baseline the mass and
// the net share are the same number. Averaged over the measured rows, then over heads and layers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/formats/trace.h"

namespace difflens {

struct TokenSpan {
  int64_t begin = 0;  // [begin, end) token positions
  int64_t end = 0;
};

// The measures above for one row, or their mean over rows, heads or layers.
struct AttentionShare {
  double answer = 0, noise = 0;  // net shares (signed, over Σ|A|)
  double budget = 0;             // Σ A / Σ|A|: what the net shares of the three sets sum to
  double answer_mass = 0, question_mass = 0, noise_mass = 0;
  double answer_output = 0, question_output = 0, noise_output = 0;  // NaN without the values
  // DIFF: the same rows of A1 alone (the first softmax, before λ·A2 is subtracted, in the same run): the
  // noise's attention mass and output share, so that what the subtraction cancels shows as A1 -> A. NaN for
  // a softmax map.
  double a1_noise_mass = 0, a1_noise_output = 0;
  // this += w · other, field by field
  void add(const AttentionShare& other, double w);
};

// The measures of one row, accumulated key by key: the one place that sorts keys into the three sets and sums
// them (attention_share over a map and explained_share over an explained row both use it).
class RowMeasures {
 public:
  // dv > 0: each key's value vector comes with it (output shares); 0: none (they are NaN).
  RowMeasures(TokenSpan answer, TokenSpan question, int64_t dv);
  // Key j with weight a and, when dv > 0, its value vector v[0..dv).
  template <typename V>
  void add(int64_t j, double a, const V* v) {
    const int set = j >= answer_.begin && j < answer_.end         ? 0
                    : (j >= question_.begin && j < question_.end) ? 1
                                                                  : 2;
    total_ += a < 0 ? -a : a;
    sum_ += a;
    net_[set] += a;
    mass_[set] += a < 0 ? -a : a;
    if (v && a != 0)
      for (size_t x = 0; x < o_[set].size(); ++x) o_[set][x] += a * static_cast<double>(v[x]);
  }
  AttentionShare finish() const;

 private:
  TokenSpan answer_, question_;
  double total_ = 0, sum_ = 0, net_[3] = {0, 0, 0}, mass_[3] = {0, 0, 0};
  std::vector<double> o_[3];
  bool values_ = false;
};

// One query row q (keys 0..q): the answer span's share and the noise (keys outside the answer and q itself),
// as attention_share defines them; the answer is cut to the keys the row sees. Output shares are NaN.
AttentionShare query_row_share(const float* row, int64_t q, TokenSpan answer);

// One [T, T] row-major map, averaged over `query_rows`. `values` ([T, dv] row-major, the head's value
// vectors; nullptr: none) gives the output shares, else they are NaN. Throws Error on rows or spans outside
// the map.
AttentionShare attention_share(const float* map, int64_t T, const std::vector<int64_t>& query_rows,
                               TokenSpan answer, TokenSpan question, const float* values = nullptr,
                               int64_t dv = 0);

struct NoiseReadout {
  std::vector<int> layers;                            // layers whose maps the trace kept
  std::vector<std::vector<AttentionShare>> per_head;  // [layer][kept head]
  std::vector<std::vector<int>> heads;                // [layer][kept head]: the head index it measured
  std::vector<AttentionShare> per_layer;              // mean over that layer's kept heads
  std::vector<std::vector<bool>> ablated;  // [layer][kept head]: ablated in the run (its output zero)
  AttentionShare mean;                     // mean over layers (and heads)
};

// Query rows are the question's tokens (question.begin .. question.end − 1), or `rows` when it is not
// empty (e.g. the tokens that produce an answer, while the keys of the whole question stay out of the
// noise). Throws Error when the trace kept no maps or a span lies outside it.
NoiseReadout attention_noise(const Trace& trace, TokenSpan answer, TokenSpan question, TokenSpan rows = {});

// The head whose attention mass on the answer is largest in a readout, leaving out heads the run ablated
// (their maps are computed, their output is not used) (restricted to `layer` when >= 0), e.g. the retrieval
// head of a needle prompt. nullopt when the readout has no such head.
struct HeadShare {
  int layer = -1, head = -1;
  AttentionShare share;
};
std::optional<HeadShare> strongest_answer_head(const NoiseReadout& readout, int layer = -1);

// How far the maps of one capture moved from another's of the same prompt (e.g. quantized logits vs
// exact): over every kept layer, head and causal entry of A (DIFF: A1 − λA2), the largest and mean |ΔA|,
// and the fraction of query rows whose most-attended key is the same. Throws Error when the traces do
// not match (length, layers or kept heads) or kept no maps.
struct MapDrift {
  double max_abs = 0, mean_abs = 0;
  double top1_agreement = 0;
  int64_t rows = 0;
};
MapDrift map_drift(const Trace& reference, const Trace& other);

// A per-head summary of one layer x head's map A (DIFF: A1 − λA2; baseline: the softmax map), each field
// averaged over the query rows i (a row whose Σ_{j ≤ i} |A[i,j]| is 0 counts as 0):
//   answer, noise: attention mass (attention_share's answer_mass and noise_mass: Σ|A| over the set over
//                  Σ_{j ≤ i} |A[i,j]|); NaN when no answer span is given (HeadSummaries::has_answer false).
//   entropy:       Shannon entropy in nats of p_j = |A[i,j]| / Σ_{j ≤ i} |A[i,j]|. For the baseline p is the
//                  softmax row itself; for DIFF the magnitudes stand in for the signed weights (a key pushed
//                  away with negative weight still takes a share of the row's attention mass).
//   entropy_norm:  entropy / log(n_i), n_i = the keys row i can see (i + 1, or the sliding window): 0 = all
//                  mass on one key, 1 = uniform over the visible keys. Row 0 (one key) counts as 0.
//   sink:          attention to the first token, A[i,0] / Σ_{j ≤ i} |A[i,j]| (signed, like answer).
// and, over the whole map (every row, not the query rows), TransformerLens's head scores
// (core/formats/head_scores.h):
//   previous_token, duplicate_token, induction: Σ A·D / Σ |A| for the prompt's detection pattern D; NaN for a
//                  long-prompt layer (pooled maps: the whole map is not kept).
struct HeadSummary {
  double answer = 0, noise = 0;
  double entropy = 0, entropy_norm = 0;
  double sink = 0;
  double previous_token = 0, duplicate_token = 0, induction = 0;
};

struct HeadSummaries {
  std::vector<int> layers;                         // layers whose maps the trace kept
  std::vector<std::vector<int>> heads;             // [layer][kept head]: the head index it measured
  std::vector<std::vector<HeadSummary>> per_head;  // [layer][kept head]
  bool has_answer = false;                         // false: answer and noise are NaN
};

// Every kept layer and head of `trace` over `query_rows`. An empty `answer` span means none; `question` may
// be empty. Long-prompt traces (pooled maps) are summarised exactly from recomputed rows (attention_tile:
// O(rows · T · d) per head). Throws Error on an empty row set, a row or span outside the trace, a trace that
// kept no maps, or a long-prompt layer without the queries and keys that recompute its rows.
HeadSummaries head_summaries(const Trace& trace, const std::vector<int64_t>& query_rows, TokenSpan answer,
                             TokenSpan question = {});

extern const char* const kAttentionShareDefinition;  // the definition above, for the UI and exports

// The measures of a readout as a table shows them (the Noise view: a column each per model, a row per
// layer and the mean), in order: a short header, what it is (the header's tooltip) and the cell's text.
// A measure added to AttentionShare and here shows in the view with no change there.
struct ShareColumn {
  const char* header;
  const char* meaning;
  std::string (*cell)(const AttentionShare& share);
};
const std::vector<ShareColumn>& share_columns();
std::string signed3(double v);                    // to 3 decimals, never "-0.000"; "-" for NaN
extern const char* const kHeadSummaryDefinition;  // HeadSummary's fields, for the UI and exports

}  // namespace difflens
