// Why a model answers: the logit lens (the residual stream after each layer read through the final norm and
// the unembedding, at every position) and direct logit attribution (each head's and each MLP's direct share
// of a target token's logit at the query, the final norm's scale frozen at its value in the run, as
// TransformerLens does; a DIFF head's share split into its A1 part and its −λ·A2 part, its per-head norm's
// scale frozen likewise). Shares plus the embedding's add up to the target's logit. Plain data, no LibTorch;
// Model::explain_answer (core/model/lens.cpp) computes them under the run's interventions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/intervention.h"
#include "core/formats/trace.h"

namespace difflens {

struct LensOptions {
  int top_k = 5;        // candidates kept per position and layer
  int64_t query = -1;   // the position attributed (default: the last)
  int64_t target = -1;  // the token attributed and followed by the lens (default: the model's own top-1
                        // after the query); the lens follows the actual next token at other positions
  Interventions interventions;  // resolved for this prompt (core/formats/intervention.h)
  // The lens at the query alone (the app's Why view): every other position's top is empty, its target's
  // probability NaN and rank 0, and the unembedding runs once per layer for one row instead of T.
  bool lens_at_query_only = false;
};

// The lens after one layer (after the last: the model's own prediction).
struct LensLayer {
  std::vector<std::vector<TokenProbability>> top;  // [position][k], likeliest first
  std::vector<float> target_probability;           // [position] of that position's target (NaN: none)
  std::vector<int64_t> target_rank;                // [position] 1 = likeliest (0: none)
};

struct LogitAttribution {
  int64_t query = 0, target = 0;
  std::string target_text;
  double logit = 0;                        // the model's logit of the target at the query
  double norm_scale = 0;                   // the final norm's 1 / rms at the query, frozen
  double embedding = 0;                    // the token embedding's direct share
  std::vector<std::vector<double>> heads;  // [layer][head]
  std::vector<std::vector<double>> heads_a1,
      heads_a2;              // DIFF: each head's A1 part and −λA2 part (sum: heads)
  std::vector<double> mlps;  // [layer]
  double total() const;      // embedding + heads + MLPs: the logit
};

struct AnswerExplanation {
  std::vector<int64_t> targets;   // [position]: what the lens follows there (-1: none, the last position
                                  // without a target)
  std::vector<LensLayer> layers;  // [layer]: after layer l
  LogitAttribution attribution;
  std::vector<std::pair<std::string, std::string>> interventions;  // what it ran under (as Trace records)
};

}  // namespace difflens
