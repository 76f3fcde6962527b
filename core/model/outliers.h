// Activation outliers over a whole text (the paper's Table 5): |attention logits| (DIFF: both components
// pooled) and |hidden states| of every layer, gathered window by window and pooled as the paper pools
// them. LibTorch-free: runs through Model::capture with statistics only (no maps kept).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/formats/trace.h"
#include "core/model/model.h"

namespace difflens {

struct OutlierStats {
  int64_t tokens = 0;  // tokens read (BOS of each window included)
  int64_t windows = 0;
  std::vector<ValueStats> logits_per_layer, hidden_per_layer;
  ValueStats logits, hidden;  // pooled over layers: top-k and mean exact, median from the histogram
};

// Reads `text` in windows of `window` tokens (BOS + window − 1 text tokens; at most the model's
// positions), up to `max_windows` (0: all). `progress(done, total)` after each window; `cancel` stops
// with Cancelled. Throws Error for an empty text, a model without a tokenizer or a bad window.
OutlierStats measure_outliers(const Model& model, const std::string& text, int64_t window,
                              int64_t max_windows,
                              const std::function<void(int64_t, int64_t)>& progress = nullptr,
                              const std::atomic<bool>* cancel = nullptr);

}  // namespace difflens
