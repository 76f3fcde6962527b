// Tiles recomputed from queries, keys and row log-sum-exps.
#include "core/formats/tiles.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/formats/error.h"
#include "core/formats/intervention.h"

namespace difflens {
namespace {

const LayerTrace& layer_of(const Trace& t, int layer) {
  for (const LayerTrace& l : t.layers)
    if (l.index == layer) return l;
  throw Error("attention tile: layer " + std::to_string(layer) + " is not in the trace");
}

}  // namespace

bool tile_available(const Trace& t, int layer, int head) {
  for (const LayerTrace& l : t.layers)
    if (l.index == layer) {
      if (l.pooled > 0 && !l.q1.empty() && !l.lse1.empty()) return head >= 0 && head < t.config.map_heads();
      return std::find(l.heads.begin(), l.heads.end(), head) != l.heads.end() && !l.a.empty();
    }
  return false;
}

AttentionTile attention_tile(const Trace& t, int layer, int head, int64_t row0, int64_t rows, int64_t col0,
                             int64_t cols) {
  const int64_t T = t.length();
  if (row0 < 0 || col0 < 0 || rows <= 0 || cols <= 0 || row0 + rows > T || col0 + cols > T)
    throw Error("attention tile: rows " + std::to_string(row0) + "+" + std::to_string(rows) + ", keys " +
                std::to_string(col0) + "+" + std::to_string(cols) + " lie outside the " + std::to_string(T) +
                "-token map");
  const LayerTrace& l = layer_of(t, layer);
  const bool diff = t.config.is_diff();
  const int64_t H = t.config.map_heads();
  if (head < 0 || head >= H) throw Error("attention tile: head " + std::to_string(head) + " does not exist");
  AttentionTile tile{row0, col0, rows, cols, {}, {}, {}};
  const size_t n = static_cast<size_t>(rows * cols);
  if (l.pooled == 0 || l.lse1.empty()) {  // an exact trace (queries and keys kept or not): copy from its maps
    auto it = std::find(l.heads.begin(), l.heads.end(), head);
    if (it == l.heads.end() || l.a.empty())
      throw Error("attention tile: layer " + std::to_string(layer) + " head " + std::to_string(head) +
                  " was not kept in this trace");
    const int64_t k = it - l.heads.begin();
    auto copy = [&](const FloatArray& m, std::vector<float>& out) {
      out.resize(n);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          out[static_cast<size_t>(i * cols + j)] =
              m.data[static_cast<size_t>((k * T + row0 + i) * T + col0 + j)];
    };
    copy(l.a, tile.a);
    if (diff) {
      copy(l.a1, tile.a1);
      copy(l.a2, tile.a2);
    }
    return tile;
  }
  // Everything a recomputation reads (the bundle reader insists on it; a trace built in memory might not).
  if (l.k1.empty() || (diff && (l.q2.empty() || l.k2.empty() || l.lse2.empty())))
    throw Error("attention tile: layer " + std::to_string(layer) +
                " lacks the queries, keys or row log-sum-exps "
                "that recompute its tiles");
  const int64_t d = l.q1.shape.back(), Hkv = l.k1.shape.front(), kv = head / (H / Hkv);
  const int64_t W = t.config.sliding_window;
  // The run's knockouts in this layer: keys they removed are 0 (the row log-sum-exps are over the keys left;
  // a row left with none has -inf and is 0 throughout).
  const std::vector<KeyKnockout> knocked = knockouts_in_layer(t.interventions, layer);
  // softmax entry: exp(q_i · k_j − lse_i) for keys the query sees, else 0.
  auto component = [&](const FloatArray& q, const FloatArray& k, const FloatArray& lse,
                       std::vector<float>& out) {
    out.assign(n, 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t qi = row0 + i;
      const float* qv = q.data.data() + (head * T + qi) * d;
      const double norm = lse.data[static_cast<size_t>(head * T + qi)];
      if (!std::isfinite(norm)) continue;
      const int64_t last = std::min(col0 + cols - 1, qi);
      const int64_t first = W > 0 ? std::max(col0, qi - W + 1) : col0;
      for (int64_t j = first; j <= last; ++j) {
        bool removed = false;
        for (const KeyKnockout& kk : knocked) removed = removed || kk.removes(head, qi, j);
        if (removed) continue;
        const float* kvv = k.data.data() + (kv * T + j) * d;
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(qv[e]) * kvv[e];
        out[static_cast<size_t>(i * cols + (j - col0))] = static_cast<float>(std::exp(dot - norm));
      }
    }
  };
  if (!diff) {
    component(l.q1, l.k1, l.lse1, tile.a);
    return tile;
  }
  component(l.q1, l.k1, l.lse1, tile.a1);
  component(l.q2, l.k2, l.lse2, tile.a2);
  tile.a.resize(n);
  for (size_t x = 0; x < n; ++x)  // λ of the row (DIFF V2: per head and token)
    tile.a[x] = static_cast<float>(tile.a1[x] -
                                   l.lambda_at(head, row0 + static_cast<int64_t>(x) / cols) * tile.a2[x]);
  return tile;
}

}  // namespace difflens
