// Window-by-window outlier statistics.
#include "core/model/outliers.h"

#include <algorithm>

#include "core/formats/error.h"

namespace difflens {

OutlierStats measure_outliers(const Model& model, const std::string& text, int64_t window,
                              int64_t max_windows, const std::function<void(int64_t, int64_t)>& progress,
                              const std::atomic<bool>* cancel) {
  const Tokenizer& tok = model.tokenizer();
  if (!tok.can_encode()) throw Error("this model has no text tokenizer: it cannot read a text file");
  if (window < 2) throw Error("the window must hold at least 2 tokens");
  if (window > model.config().max_position_embeddings)
    throw Error("the window of " + std::to_string(window) + " tokens is longer than the " +
                std::to_string(model.config().max_position_embeddings) + " positions " +
                (model.config().name.empty() ? std::string("the model") : model.config().name) +
                " reads: give --window " + std::to_string(model.config().max_position_embeddings) +
                " or less");
  const std::vector<int64_t> ids = tok.encode(text, false).ids;
  if (ids.empty()) throw Error("the text is empty: nothing to measure");
  const bool bos = tok.bos_id() >= 0;
  const int64_t body = window - (bos ? 1 : 0);
  int64_t total = (static_cast<int64_t>(ids.size()) + body - 1) / body;
  if (max_windows > 0) total = std::min(total, max_windows);
  const size_t L = static_cast<size_t>(model.config().num_hidden_layers);
  OutlierStats out;
  out.logits_per_layer.resize(L);
  out.hidden_per_layer.resize(L);
  CaptureOptions opt;
  opt.keep_maps = false;
  opt.next_token_top_k = 1;
  for (int64_t w = 0; w < total; ++w) {
    std::vector<int64_t> chunk;
    chunk.reserve(static_cast<size_t>(window));
    if (bos) chunk.push_back(tok.bos_id());
    const size_t b = static_cast<size_t>(w * body), e = std::min(ids.size(), b + static_cast<size_t>(body));
    chunk.insert(chunk.end(), ids.begin() + static_cast<std::ptrdiff_t>(b),
                 ids.begin() + static_cast<std::ptrdiff_t>(e));
    opt.stats_from = bos && w > 0 ? 1 : 0;  // BOS's state is the same in every window: count it once
    const Trace t = model.capture(chunk, opt, cancel);
    for (size_t l = 0; l < L && l < t.layers.size(); ++l) {
      out.logits_per_layer[l].merge(t.layers[l].logit_stats);
      out.hidden_per_layer[l].merge(t.layers[l].hidden_stats);
    }
    out.tokens += static_cast<int64_t>(chunk.size());
    ++out.windows;
    if (progress) progress(w + 1, total);
    if (cancel && cancel->load()) throw Cancelled();
  }
  for (size_t l = 0; l < L; ++l) {
    out.logits.merge(out.logits_per_layer[l]);
    out.hidden.merge(out.hidden_per_layer[l]);
  }
  return out;
}

}  // namespace difflens
