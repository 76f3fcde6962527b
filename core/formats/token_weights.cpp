// Weights of one query's row or column (see token_weights.h).
#include "core/formats/token_weights.h"

#include <algorithm>

#include "core/formats/error.h"
#include "core/formats/tiles.h"

namespace difflens {
namespace {

const LayerTrace* find_layer(const Trace& t, int layer) {
  for (const LayerTrace& l : t.layers)
    if (l.index == layer) return &l;
  return nullptr;
}

// Adds one head's row or column into `sum` (length T, indexed by token).
void add_head(const Trace& t, int layer, int head, WeightDirection d, int64_t q, std::vector<double>& sum) {
  const int64_t T = t.length();
  if (d == WeightDirection::FromQuery) {
    const AttentionTile tile = attention_tile(t, layer, head, q, 1, 0, q + 1);
    for (int64_t j = 0; j <= q; ++j) sum[static_cast<size_t>(j)] += tile.a[static_cast<size_t>(j)];
  } else {
    const AttentionTile tile = attention_tile(t, layer, head, q, T - q, q, 1);
    for (int64_t i = q; i < T; ++i) sum[static_cast<size_t>(i)] += tile.a[static_cast<size_t>(i - q)];
  }
}

}  // namespace

std::vector<int> kept_heads(const Trace& t, int layer) {
  std::vector<int> out;
  for (int h = 0; h < static_cast<int>(t.config.map_heads()); ++h)
    if (tile_available(t, layer, h)) out.push_back(h);
  return out;
}

TokenWeights token_weights(const Trace& t, int layer, int head, HeadPool pool, WeightDirection direction,
                           int64_t q) {
  const int64_t T = t.length();
  if (q < 0 || q >= T)
    throw Error("query token " + std::to_string(q) + " is outside the " + std::to_string(T) +
                "-token prompt");
  std::vector<std::pair<int, int>> pairs;  // (layer, head)
  if (pool == HeadPool::AllLayers) {
    for (const LayerTrace& l : t.layers)
      for (int h : kept_heads(t, l.index)) pairs.push_back({l.index, h});
    if (pairs.empty()) throw Error("this trace kept no attention maps");
  } else {
    if (!find_layer(t, layer))
      throw Error("layer " + std::to_string(layer) + " is not in this trace (it holds " +
                  std::to_string(t.layers.size()) + " layers)");
    if (pool == HeadPool::Head) {
      if (head < 0 || head >= t.config.map_heads())
        throw Error("head " + std::to_string(head) + " does not exist (the model has " +
                    std::to_string(t.config.map_heads()) + " heads)");
      if (!tile_available(t, layer, head))
        throw Error("this trace kept no map of layer " + std::to_string(layer) + " head " +
                    std::to_string(head));
      pairs.push_back({layer, head});
    } else {
      for (int h : kept_heads(t, layer)) pairs.push_back({layer, h});
      if (pairs.empty()) throw Error("this trace kept no map of layer " + std::to_string(layer));
    }
  }
  std::vector<double> sum(static_cast<size_t>(T), 0.0);
  for (const auto& [l, h] : pairs) add_head(t, l, h, direction, q, sum);
  TokenWeights out;
  out.w.resize(static_cast<size_t>(T));
  for (size_t i = 0; i < sum.size(); ++i) out.w[i] = static_cast<float>(sum[i] / pairs.size());
  out.first = direction == WeightDirection::FromQuery ? 0 : q;
  out.end = direction == WeightDirection::FromQuery ? q + 1 : T;
  out.heads = static_cast<int>(pairs.size());
  out.what = t.config.is_diff() ? "A1 \xe2\x88\x92 \xce\xbb A2" : "A";
  return out;
}

std::string describe_pool(const TokenWeights& w, HeadPool pool, int layer, int head) {
  switch (pool) {
    case HeadPool::Head:
      return "layer " + std::to_string(layer) + " head " + std::to_string(head);
    case HeadPool::LayerMean:
      return "mean of layer " + std::to_string(layer) + "'s " + std::to_string(w.heads) + " heads";
    case HeadPool::AllLayers:
      break;
  }
  return "mean of " + std::to_string(w.heads) + " heads over all layers";
}

}  // namespace difflens
