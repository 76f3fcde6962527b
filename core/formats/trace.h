// Trace: everything one forward pass captured, as plain data (no tensors). This is what crosses from
// core to viz/app and what a trace bundle stores. Maps are row-major [heads, T, T]: query rows, key columns.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/config.h"

namespace difflens {

// An allocator whose resize() leaves new floats unset: a capture writes every entry of a map itself, and
// zero-filling hundreds of MB first costs a tenth of a capture (measured at 1K tokens).
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using FloatBuffer = std::vector<float, UninitAllocator<float>>;

// A dense float array with an explicit shape (row-major). Empty `data` means "not kept". resize() leaves new
// entries unset (FloatBuffer); assign() or resize(n, 0.0f) zero them.
struct FloatArray {
  std::vector<int64_t> shape;
  FloatBuffer data;
  bool empty() const { return data.empty(); }
  size_t bytes() const { return data.size() * sizeof(float); }
};

// Counts of |value| on a fixed log10 grid shared by every trace, so histograms of different models,
// layers and prompts can be compared and merged exactly. Bin b covers
// [10^(kLogMin + b/kBinsPerDecade), 10^(kLogMin + (b+1)/kBinsPerDecade)); `below` counts |v| < 10^kLogMin
// (zeros included) and `above` counts |v| ≥ 10^kLogMax.
struct LogHistogram {
  static constexpr int kLogMin = -8;
  static constexpr int kLogMax = 8;
  static constexpr int kBinsPerDecade = 64;
  static constexpr int kBins = (kLogMax - kLogMin) * kBinsPerDecade;
  std::vector<uint64_t> counts = std::vector<uint64_t>(kBins, 0);
  uint64_t below = 0;
  uint64_t above = 0;

  void add(float abs_value);
  void merge(const LogHistogram& other);
  uint64_t total() const;
  static double bin_lower(int bin);  // |value| at the bin's lower edge
  // The value below which `fraction` of the pooled mass lies, interpolated in log space inside its bin
  // (relative error under 10^(1/kBinsPerDecade) - 1 ≈ 3.7 %).
  double quantile(double fraction) const;
};

// Summary of the absolute values of a pool of activations (the paper's Table 5 readout).
struct ValueStats {
  uint64_t count = 0;
  std::vector<float> top;  // the largest |values|, descending (up to kTopK); top[k-1] is the top-k value
  float median = 0;        // exact median |value| of this pool (lower median for even counts)
  float mean = 0;          // mean |value|
  LogHistogram histogram;
  static constexpr int kTopK = 100;

  // Merge pools: `top` and `mean` stay exact; `median` becomes the histogram estimate.
  void merge(const ValueStats& other);
  float top_k(int k) const { return k >= 1 && k <= static_cast<int>(top.size()) ? top[k - 1] : 0.0f; }
};

struct LayerTrace {
  int index = 0;
  std::vector<int> heads;  // which heads' maps are kept (indices into 0..map_heads-1); empty = none
  // DIFF: a1, a2 = component softmax maps, a = a1 - lambda*a2. Baseline: only `a` (its softmax map).
  FloatArray a1, a2, a;  // each [heads.size(), T, T]
  // λ of this layer (DIFF only): lambda = exp1 - exp2 + lambda_init. DIFF V2: the mean of lambda_rows (the
  // parts stay 0).
  double lambda = 0, lambda_exp1 = 0, lambda_exp2 = 0, lambda_init = 0;
  // DIFF V2: λ per head and query token, σ(z) with z = x_t · w_λ,h: lambda_rows [map_heads, T] and its
  // pre-sigmoid z, lambda_logits [map_heads, T]. Row t of head h's A is A1 − lambda_rows[h, t] · A2.
  FloatArray lambda_rows, lambda_logits;
  // λ that row `row` of head `head` subtracts A2 with (V1: the layer's λ).
  double lambda_at(int64_t head, int64_t row) const {
    return lambda_rows.empty() ? lambda
                               : lambda_rows.data[static_cast<size_t>(head * lambda_rows.shape[1] + row)];
  }
  // |scaled QKᵀ| over causal entries (DIFF: both components pooled), all heads.
  ValueStats logit_stats;
  FloatArray logits1, logits2;  // optional full pre-softmax logits [map_heads, T, T] (masked = -inf)
  // |hidden state| at this layer's output (after attention + FFN and residuals).
  ValueStats hidden_stats;
  FloatArray hidden;  // optional [T, E]

  // Long prompts (CaptureOptions::pooled_budget_bytes): instead of a1/a2/a, pooled maps of `pooled` x
  // `pooled` cells per kept head, [heads.size(), P, P]; cell (r, c) covers query rows
  // [r·T/P, (r+1)·T/P) and key columns [c·T/P, (c+1)·T/P) (integer division, as viz::pool_region) and
  // holds the causal entries' mean, or the entry of largest magnitude (max). Cells with no causal entry
  // are NaN. Exact tiles at full resolution come back from attention_tile() (core/formats/tiles.h), which
  // needs the queries, keys and each row's log-sum-exp kept below.
  int64_t pooled = 0;  // P; 0: the maps above are exact
  FloatArray a1_mean, a1_max, a2_mean, a2_max, a_mean, a_max;
  FloatArray q1, k1, q2, k2;  // rotated, q scaled by d^-1/2: q [map_heads, T, d], k [kv heads, T, d]
  // CaptureOptions::keep_qkv (exact traces keep q and k above too): the values [kv heads, T, dv] (DIFF:
  // dv = 2d, both halves) and the per-head output norm's weight [dv] (DIFF; ones when the model has none):
  // with λ, what recomputes a head's output (A1 − λA2)·V → RMSNorm → × (1 − λ_init) exactly.
  FloatArray v, subln_weight;
  FloatArray lse1, lse2;  // log-sum-exp of each row's logits [map_heads, T]

  // Every buffer above, once: what byte counts and copies walk (a new buffer is added here too).
  std::vector<const FloatArray*> arrays() const {
    return {&a1,      &a2,           &a,      &logits1, &logits2,     &hidden,       &a1_mean, &a1_max,
            &a2_mean, &a2_max,       &a_mean, &a_max,   &q1,          &k1,           &q2,      &k2,
            &v,       &subln_weight, &lse1,   &lse2,    &lambda_rows, &lambda_logits};
  }
};

struct TokenProbability {
  int64_t id = 0;
  std::string text;
  float probability = 0;
};

// Every position's prediction (CaptureOptions::position_top_k): after position t, the k likeliest next tokens
// and how likely the token that stands at t + 1 was. Rows before `from` (a long prompt keeps its last
// positions) and the last row's `actual` are NaN. 8k + 8 bytes a token.
struct Predictions {
  int64_t k = 0;      // candidates per position (0: none kept)
  int64_t from = 0;   // the first position kept
  FloatArray ids;     // [T, k] token ids (whole numbers), the likeliest first
  FloatArray probs;   // [T, k] their probabilities
  FloatArray actual;  // [T, 2] the probability of token t + 1 after position t, and its rank (1: likeliest)
  std::map<int64_t, std::string> pieces;  // display text of every id in `ids` (the tokenizer's pieces)
  int64_t length() const { return ids.shape.empty() ? 0 : ids.shape[0]; }
  // Whether position t's prediction is kept (a row past `from` is empty where the logits were not finite).
  bool has(int64_t t) const {
    return k > 0 && t >= from && t < length() && !std::isnan(ids.data[static_cast<size_t>(t * k)]);
  }
  int64_t id(int64_t t, int64_t j) const {
    return static_cast<int64_t>(ids.data[static_cast<size_t>(t * k + j)]);
  }
  float prob(int64_t t, int64_t j) const { return probs.data[static_cast<size_t>(t * k + j)]; }
  // Token t + 1's probability and rank after position t (t < T − 1 and has(t)).
  float actual_prob(int64_t t) const { return actual.data[static_cast<size_t>(2 * t)]; }
  int64_t actual_rank(int64_t t) const {
    return static_cast<int64_t>(actual.data[static_cast<size_t>(2 * t + 1)]);
  }
};

struct Trace {
  ModelConfig config;
  std::string model_path;
  std::vector<int64_t> token_ids;
  std::vector<std::string> tokens;  // display text of each token
  std::vector<LayerTrace> layers;
  std::vector<TokenProbability> next_token;  // top-k of the distribution after the last token
  Predictions predictions;                   // every position's top-k (CaptureOptions::position_top_k)
  double elapsed_ms = 0;                     // wall time of the capture
  int logit_bits = 0;                        // attention logits quantized to this many bits (0: exact)
  size_t pooled_budget = 0;                  // the budget pooled maps were sized for (0: exact maps)
  // What the run changed inside the model (core/formats/intervention.h): each spec as written and as run
  // (presets resolved to token ranges); empty: the model as trained.
  std::vector<std::pair<std::string, std::string>> interventions;

  int64_t length() const { return static_cast<int64_t>(token_ids.size()); }
  // Bytes held by this trace (buffers, histograms, strings).
  size_t byte_size() const;
  // The interventions as written, joined: "lambda=0, knockout=not-noise" ("" : the model as trained).
  std::string written_interventions() const;
  // "" when every value the trace holds is finite; else what is not ("layer 2's maps: 12 NaN or inf values;
  // the next-token probabilities"), for a warning: no run writes NaN or inf without saying so.
  std::string nonfinite_summary() const;
  // A long prompt's kept data: its pooled maps (sized to the budget), the rotated queries, keys and row
  // log-sum-exps exact tiles are recomputed from (these grow with T, outside the budget), and the values
  // and output-norm weights a head's output is recomputed from (CaptureOptions::keep_qkv, the Explain view).
  struct KeptBytes {
    size_t pooled_maps = 0, tile_inputs = 0, values = 0;
  };
  KeptBytes kept_bytes() const;
};

// Pooled over all layers (exact top-k and mean; histogram median), as the paper pools Table 5.
ValueStats pooled_logit_stats(const Trace& trace);
ValueStats pooled_hidden_stats(const Trace& trace);

}  // namespace difflens
