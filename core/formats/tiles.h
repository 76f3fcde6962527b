// Exact attention tiles of a trace at full resolution. A long-prompt trace keeps pooled maps plus, per
// layer, the rotated queries and keys and each row's log-sum-exp; a tile recomputes A1, A2 and
// A1 − λA2 (or the baseline's A) for any block of rows and keys from those, with the right softmax
// normaliser per row, without the rest of the row. Exact traces answer from their maps. No LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/formats/trace.h"

namespace difflens {

struct AttentionTile {
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
  std::vector<float> a1, a2, a;  // [rows, cols] each (baseline: only a); keys a query cannot see are 0
};

// Throws Error for a layer or head that does not exist, a region outside the T x T map, or a trace that
// kept neither the maps nor the queries and keys of that layer/head.
AttentionTile attention_tile(const Trace& trace, int layer, int head, int64_t row0, int64_t rows,
                             int64_t col0, int64_t cols);

// Whether attention_tile can answer for this layer and head.
bool tile_available(const Trace& trace, int layer, int head);

}  // namespace difflens
