// One attention head's computation for one query, step by step, recomputed exactly (in double) from what a
// trace kept with CaptureOptions::keep_qkv: the rotated queries and keys, the values, λ and the output
// norm's weight. These are the numbers the Explain view and its slides show; a test holds them to the
// trace's own maps and to the model's attention output. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/metrics.h"
#include "core/formats/trace.h"

namespace difflens {

struct HeadExplain {
  int layer = 0, head = 0;
  int64_t query = 0;
  bool diff = false;
  bool v2 = false;            // DIFF V2: λ per token, no per-head norm (steps 4 and 6 below)
  int64_t d = 0, dv = 0;      // query/key width and value width (DIFF V1: 2d)
  std::vector<int64_t> keys;  // the keys the query sees (j <= query, inside a sliding window), in order
  // 1. The query's rotated vectors, scaled by d^-1/2 (DIFF: both components), and each visible key's.
  std::vector<float> q1, q2;               // [d]
  std::vector<std::vector<float>> k1, k2;  // [keys][d]
  // 2. Logits q·k/√d per visible key.
  std::vector<double> logits1, logits2;
  // 3. Softmax of each logit row: A1 and A2 over the visible keys (the baseline: A1 only).
  std::vector<double> a1, a2;
  // 4. λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init(layer). DIFF V2: λ = σ(z), z = x_query · w_λ,head
  //    (lambda_logit), the parts 0.
  //    `lambda` is the λ the run used: lambda_own (the formula's) unless an intervention set another
  //    (lambda_set), which steps 5 and 6 then use.
  double lambda = 0, lambda_exp1 = 0, lambda_exp2 = 0, lambda_init = 0, lambda_logit = 0, lambda_own = 0;
  bool lambda_set = false;
  // 5. A = A1 − λ·A2 and the common mass min(A1, λ·A2) per key, which the subtraction cancels. Rows of A
  //    sum to 1 − λ (baseline: A = A1, sums to 1).
  std::vector<double> a, common;
  double a_sum = 0, common_sum = 0;
  // 6. o = Σ_j A_j v_j [dv]; DIFF V1: n = RMSNorm(o) · w, out = n · (1 − λ_init). Baseline and DIFF V2:
  //    out = o.
  std::vector<double> o, normed, out;
  std::vector<std::vector<float>> v;  // [keys][dv]: each visible key's value (for output shares)
  double o_norm = 0, normed_norm = 0, out_norm = 0;  // Euclidean lengths
};

// Whether `layer` of the trace kept what explain_head needs (queries, keys and values).
bool explain_available(const Trace& trace, int layer);

// Throws Error for a layer, head or query outside the trace, or a trace captured without keep_qkv.
HeadExplain explain_head(const Trace& trace, int layer, int head, int64_t query);

// Attention mass, output share (with e.v) and net share of one explained row (`row` over e.keys, e.g. e.a1
// or e.a), as attention_share defines them over a map row.
AttentionShare explained_share(const HeadExplain& e, const std::vector<double>& row, TokenSpan answer,
                               TokenSpan question);

}  // namespace difflens
