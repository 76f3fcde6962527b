// (library difflens_desktop) The map panels' building blocks: one model's head view (its maps of the selected
// layer and head, zoom, hover, exact tiles of long prompts, exports) and model view (the layers x heads
// grid). UI thread only; the GL textures live in their viz::HeatmapView members.
#pragma once

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <imgui.h>

#include "app/desktop/gui_state.h"
#include "app/desktop/layout.h"
#include "app/desktop/tile_service.h"
#include "core/formats/metrics.h"
#include "core/formats/tiles.h"
#include "viz/colormap.h"
#include "viz/export.h"
#include "viz/figure.h"
#include "viz/heatmap_view.h"

namespace difflens::app {

struct MapSpec {
  std::string title;
  std::string export_name;  // A1, A2, A
  const float* data = nullptr;
  int64_t T = 0;  // map side (tokens, or cells of a pooled map)
  bool diverging = false;
  uint64_t version = 0;
  int64_t pooled_from = 0;  // > 0: a pooled map over this many tokens
};

// Draws a vertical colour legend (high at the top) at `p`, `height` pixels tall, with its values beside it;
// legend_width() is the room it takes.
void draw_legend(const viz::Colormap& cmap, const viz::ValueRange& range, viz::ValueScale scale, ImVec2 p,
                 float height);
float legend_width();

// Percentile ranges need a selection over all T² values of a map: computed once per (maps, percentile,
// mode) and reused every frame after, not recomputed per frame.
class RangeCache {
 public:
  viz::ValueRange get(std::initializer_list<uint64_t> versions, float percentile, bool diverging,
                      const std::function<viz::ValueRange()>& compute) {
    uint64_t key = 0x9e3779b97f4a7c15ull ^ (diverging ? 1u : 0u);
    uint32_t bits;
    std::memcpy(&bits, &percentile, sizeof bits);
    for (uint64_t v : versions) key = (key ^ v) * 0x100000001b3ull;
    key = (key ^ bits) * 0x100000001b3ull;
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (cache_.size() > 512) cache_.clear();  // old requests' ranges
    return cache_[key] = compute();
  }

 private:
  std::unordered_map<uint64_t, viz::ValueRange> cache_;
};

class HeadView {
 public:
  void set_subject(const std::string& model, int layer, int head, std::shared_ptr<const Trace> trace = {}) {
    model_name_ = model;
    layer_ = layer;
    head_ = head;
    trace_ = std::move(trace);
  }
  // The lines above the maps (a long prompt's pooling, its exact tile's state); finds the tile to show.
  void draw_notes(GuiState& state, const std::vector<MapSpec>& maps);
  // Draws the maps into the grid's cells first_cell, first_cell + 1, ... (cell 0 at `origin`). Returns
  // whether an exact tile of a long prompt was drawn.
  // `token_text`: the trace's token pieces; `shown_tokens`: them as the UI shows them (RunResult::labels).
  bool draw(GuiState& state, const std::vector<MapSpec>& maps, const std::vector<std::string>& token_text,
            const std::vector<std::string>& shown_tokens, const viz::HeatmapRenderer& renderer,
            const MapGrid& grid, int first_cell, ImVec2 origin, float gap);

 private:
  void export_head_figure(GuiState& state, viz::HeadFigure& figure, viz::Pooling pooling) const;

  std::map<size_t, viz::HeatmapView> views_;
  std::map<size_t, viz::HeatmapView> tile_views_;
  RangeCache ranges_;
  std::string model_name_;
  int layer_ = 0, head_ = 0;
  std::shared_ptr<const Trace> trace_;
  TileService tiles_;
  const AttentionTile* tile_ = nullptr;  // this frame's exact tile (draw_notes), or none
  uint64_t tile_version_ = 0;
  uint64_t last_tile_state_ = 0;
};

// The colours of a per-head summary: [lo, hi], diverging around 0 when signed values are negative.
struct MetricRange {
  double lo = 0, hi = 1;
  bool diverging = false;
};

// Layers × heads grid of one model: its maps (A1 − λA2 for DIFF, A for the baseline) as thumbnails, or a
// per-head summary (attention to the answer, noise, entropy, the first token's share) as coloured cells with
// their values. A click selects the layer and head.
class ModelView {
 public:
  // Rows = the layers passing the filter, each led by a one-line summary (λ for DIFF); columns = the heads
  // passing the filter. Only thumbnails in view are rendered, so big models scroll without uploading every
  // map.
  // `range`: the colours of the summaries (shared by both models' grids).
  void draw(GuiState& state, const Trace& t, int slot, uint64_t request, const viz::HeatmapRenderer& renderer,
            ImVec2 cell, const MetricRange& range);
  // The per-head summaries for the state's selection (cached per result and selection); nullptr with
  // `error()` set when they cannot be computed.
  const HeadSummaries* summaries(const GuiState& state, const Trace& t, uint64_t request);
  const std::string& error() const { return error_; }

 private:
  std::map<std::pair<int, int>, viz::HeatmapView> views_;
  RangeCache ranges_;
  std::array<int64_t, 5> key_{-1, -1, -1, -1, -1};
  std::optional<HeadSummaries> summaries_;
  std::string error_;
};

// Maps of the selected layer/head of one slot's trace; empty when the trace kept none.
std::vector<MapSpec> maps_of(const Trace& t, int layer, int head, uint64_t request, int slot,
                             bool max_pooled);

// Writes one map as PNG (rendered from the data at the export size), NPY and CSV; reports in the message.
void export_map(GuiState& state, const std::string& model, int layer, int head, const std::string& which,
                const viz::MapSource& src, const viz::HeatmapStyle& style,
                const std::vector<std::string>& tokens, const viz::HeatmapRenderer& renderer);

// How draw_head_views lays out `maps` maps of `tokens` tokens in `room` (its map size: what a split can
// give the maps).
MapGrid plan_head_views(int maps, int64_t tokens, ImVec2 room, bool square);

// The maps of both slots' selected heads in one grid filling the space left (or why a slot has none).
void draw_head_views(GuiState& state, HeadView head_views[kSlots], const viz::HeatmapRenderer& renderer);

// The Model view tab: both slots' layers x heads grids, thumbnails as large as the tab allows.
void draw_model_view_tab(GuiState& state, ModelView model_views[kSlots],
                         const viz::HeatmapRenderer& renderer);

}  // namespace difflens::app
