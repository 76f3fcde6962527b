// The weights that shade a prompt's text (the app's Text view and the exported page): for one query token,
// the attention it gives each token it sees (its row), or the attention each later token gives it (its
// column), of one head, the mean over a layer's heads, or the mean over every layer and head. DIFF gives
// A1 − λA2 (signed), the baseline A. Exact for long prompts too (rows and columns are recomputed through
// attention_tile, not read from pooled maps). No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/trace.h"

namespace difflens {

// FromQuery: w[j] = A[q, j] for the keys j ≤ q the query sees. ToToken: w[i] = A[i, q] for the queries
// i ≥ q that see token q (who reads it).
enum class WeightDirection { FromQuery, ToToken };
// One head; the mean over the layer's heads; the mean over every layer's heads (all weighted equally).
enum class HeadPool { Head, LayerMean, AllLayers };

struct TokenWeights {
  std::vector<float> w;        // one per token of the trace; 0 outside [first, end)
  int64_t first = 0, end = 0;  // the tokens that carry a weight (FromQuery: [0, q + 1); ToToken: [q, T))
  int heads = 0;               // the (layer, head) pairs averaged
  std::string what;            // "A1 − λ A2" or "A"
};

// Throws Error for a query outside the trace, a layer or head that does not exist, or (Head, LayerMean) a
// layer whose maps the trace did not keep; AllLayers averages the kept layers and heads and throws only when
// there are none.
TokenWeights token_weights(const Trace& trace, int layer, int head, HeadPool pool, WeightDirection direction,
                           int64_t query);

// The heads of `layer` whose rows and columns token_weights can give (their maps, or for a long prompt the
// queries and keys that recompute them, were kept), ascending; empty for a layer not in the trace.
std::vector<int> kept_heads(const Trace& trace, int layer);

// "head 2", "mean of layer 3's 8 heads", "mean of 32 heads over 4 layers": what `weights` averaged.
std::string describe_pool(const TokenWeights& weights, HeadPool pool, int layer, int head);

}  // namespace difflens
