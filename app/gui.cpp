// The GUI shell: window, fonts, the frame loop, and the panels over plain state structs. Results come
// from the InferenceWorker at one point per frame; GL uploads happen only here, on the UI thread.
#include "app/gui.h"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <imgui_freetype.h>
#include <imgui_stdlib.h>
#include <stb_image_write.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <unordered_map>

#include "app/figures.h"
#include "app/glyphs.h"
#include "app/inference_worker.h"
#include "app/needle_report.h"
#include "core/data.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/needle.h"
#include "core/tiles.h"
#include "viz/export.h"
#include "viz/figure.h"
#include "viz/heatmap_view.h"

namespace difflens::app {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --- plain state -------------------------------------------------------------------------------------

struct ViewState {
  int layer = -1;
  int head[kSlots] = {0, 0};
  int scale = 1;    // viz::ValueScale: 0 linear, 1 sqrt, 2 log
  int pooling = 0;  // viz::Pooling: 0 max, 1 mean
  bool shared_scale = true;
  float clamp_percentile = 99.5f;
  int outlier_layer = -1;  // -1: pooled over layers
  int export_size = 1024;  // PNG export resolution (pixels per side)
  // Zoom of the head view, shared by its maps so they stay comparable: the visible square of
  // `span` tokens starting at (row0, col0). span 0 = the whole map.
  double zoom_row0 = 0, zoom_col0 = 0, zoom_span = 0;
  std::string export_dir = "difflens-exports";
  float maps_fraction = 0.6f;  // share of the height below the token strip given to the head view
  int quantization = 0;        // attention logits: 0 exact, 1: 8 bits, 2: 6 bits, 3: 4 bits
  std::string layer_filter, head_filter;  // model view: "0-3,7"; empty = all
};

constexpr int kQuantizationBits[] = {0, 8, 6, 4};

struct PromptState {
  std::string text;
  double last_edit = 0;
  bool pending = false;  // edited, not yet submitted (debounce)
};

struct SlotState {
  std::string path_field;
  std::string bundle_field;
};

// Token selection, shared by every view of both models (linked highlight).
struct SelectionState {
  int query = -1;         // selected query token (-1: the last token)
  int hovered_key = -1;   // key under the mouse, as drawn this frame (collected last frame)
  int hovered_next = -1;  // key under the mouse, collected while drawing this frame
  int answer_begin = -1;  // answer span [begin, end) marked by right-dragging on the token strip
  int answer_end = -1;
  int answer_anchor = -1;  // where the current right-drag started
  std::vector<std::pair<int, int>> needles;  // needle sentences [begin, end) placed by the needle builder
};

// The UI fonts: DejaVu Sans with a fallback font merged in for the scripts it lacks, baked at two sizes
// for the characters in the base ranges plus those the app has met (GlyphNeeds).
struct UiFonts {
  std::string main, fallback;  // font files ("" when none found: ImGui's built-in font)
  float scale = 1.0f;
  GlyphNeeds needs;
  ImVector<ImWchar> ranges;    // must outlive the atlas build
  ImFont* normal = nullptr;
  ImFont* lecture = nullptr;
  uint64_t seen_request = ~0ull;  // the last result whose tokens were checked
};

void build_fonts(UiFonts& f) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  f.normal = f.lecture = nullptr;
  if (f.main.empty()) return;  // ImGui's default font
  ImFontGlyphRangesBuilder builder;
  builder.AddRanges(reinterpret_cast<const ImWchar*>(kBaseGlyphRanges));
  for (uint32_t cp : f.needs.codepoints()) builder.AddChar(static_cast<ImWchar>(cp));
  f.ranges.clear();
  builder.BuildRanges(&f.ranges);
  auto add = [&](float px) {
    ImFont* font = io.Fonts->AddFontFromFileTTF(f.main.c_str(), px, nullptr, f.ranges.Data);
    if (font && !f.fallback.empty() && !f.needs.codepoints().empty()) {
      ImFontConfig merge;
      merge.MergeMode = true;  // only glyphs the main font lacks come from the fallback
      io.Fonts->AddFontFromFileTTF(f.fallback.c_str(), px, &merge, f.ranges.Data);
    }
    return font;
  };
  f.normal = add(16.0f * f.scale);
  f.lecture = add(26.0f * f.scale);
  io.Fonts->Build();
}

// Records the characters of a result's token pieces and next-token texts; true when any was new.
bool need_trace_glyphs(UiFonts& f, const RunResult& r) {
  bool added = false;
  for (const auto& t : r.traces) {
    if (!t) continue;
    for (const std::string& piece : t->tokens) added |= f.needs.add(piece);
    for (const TokenProbability& p : t->next_token) added |= f.needs.add(p.text);
    added |= f.needs.add(t->model_path) | f.needs.add(t->config.name);
  }
  return added;
}

struct GuiState {
  PromptState prompt;
  ViewState view;
  SelectionState selection;
  SlotState slots[kSlots];
  std::optional<RunResult> shown;  // the result on screen
  WorkerStatus status;
  std::string message;                       // last export result or error, shown in the status line
  bool lecture = false;                      // large font for lecture halls
  DeviceChoice device = DeviceChoice::Auto;  // the device menu: where loads put the models
  std::string device_message;                // what the last pick of that menu did, or why it was refused
  bool cuda = false;                         // LibTorch has a usable CUDA device (asked once at start)
  double edited_at = 0;                      // the last keystroke of the prompt now running
  double edit_to_screen_ms = 0;  // that keystroke → both maps drawn (debounce + inference + upload)
  bool export_all = false;       // Ctrl+E: export every map of the head view this frame
  // Needle builder (Attention noise tab): the episode it built last and the haystack it reads.
  struct Needle {
    int length = 256, depth_pct = 50, needles = 1, asked = 1, seed = 1;
    bool with_answer = true;     // the prompt goes on through the asked code (where retrieval shows)
    bool focus_pending = false;  // select the strongest answer head once the built prompt's result arrives
    std::string haystack_path;
    NeedleTemplate wording;      // needle and question sentences (builder and lab)
    std::string built;           // description of the last built episode, or why building failed
    std::string tokenizer_path;  // the tokenizer the cached haystack was counted with
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Haystack> haystack;
  } needle;
  // Needle lab tab: the sweep grid as typed, the worker's last progress and its per-cell summaries.
  struct Lab {
    std::string lengths, depths, needles, queried;
    int seeds = 3;
    int names = 0;  // 0: single-token held-out names, 1: the original multi-piece ones
    int cell_px = 72;  // export resolution of the heatmaps (pixels per cell)
    int attention_view = 1;  // second heatmap: 0 attention to answer reading the question, 1 strongest head answering
    std::string form_error, message;
    std::optional<SweepProgress> progress;
    std::vector<NeedleCellSummary> cells[kSlots];
  } lab;
  // Attention-noise readouts of the result on screen for the current selection.
  struct NoiseCache {
    std::array<int64_t, 4> key{-1, -1, -1, -1};  // request, query, answer begin, answer end
    std::optional<NoiseReadout> readouts[kSlots];
    std::string errors[kSlots];
  } noise_cache;
  size_t pooled_budget = size_t{256} << 20;  // long prompts: pooled maps within this many bytes per model
  bool exact_tile_shown[kSlots] = {false, false};  // last frame: a head view drew an exact tile (headless report)
  float strip_height = 0;        // the token chips' full height last frame (the strip scrolls beyond ~4 lines)
  int strip_scrolled_to = -1;    // the query the strip last scrolled to
};

std::string file_safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return s;
}

// Writes one map as PNG (rendered from the data at the export size), NPY and CSV; reports in the message.
void export_map(GuiState& state, const std::string& model, int layer, int head, const std::string& which,
                const viz::MapSource& src, const viz::HeatmapStyle& style,
                const std::vector<std::string>& tokens, const viz::HeatmapRenderer& renderer) {
  try {
    std::filesystem::create_directories(state.view.export_dir);
    const std::filesystem::path base =
        std::filesystem::path(state.view.export_dir) /
        file_safe(model + "-L" + std::to_string(layer) + "-H" + std::to_string(head) + "-" + which);
    const int size = std::clamp(state.view.export_size, 8, 16384);
    viz::write_png(base.string() + ".png",
                   viz::render_map(renderer, src, size, static_cast<viz::Pooling>(state.view.pooling), style),
                   size, size);
    viz::write_npy(base.string() + ".npy", src.data, src.rows, src.cols);
    viz::write_csv(base.string() + ".csv", src.data, src.rows, src.cols, tokens, tokens);
    state.message = "exported " + base.string() + ".png/.npy/.csv";
  } catch (const std::exception& e) {
    state.message = std::string("export failed: ") + e.what();
  }
}

constexpr double kDebounceSeconds = 0.15;

// --- map panels --------------------------------------------------------------------------------------

struct MapSpec {
  std::string title;
  std::string export_name;  // A1, A2, A
  const float* data = nullptr;
  int64_t T = 0;  // map side (tokens, or cells of a pooled map)
  bool diverging = false;
  uint64_t version = 0;
  int64_t pooled_from = 0;  // > 0: a pooled map over this many tokens
};

// Draws a horizontal colour legend with its numeric ends under a map.
void draw_legend(const viz::Colormap& cmap, const viz::ValueRange& range, viz::ValueScale scale, float width) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetTextLineHeight() * 0.6f;
  constexpr int kSegments = 32;
  for (int i = 0; i < kSegments; ++i) {
    const viz::Rgb8 a = cmap.at(static_cast<double>(i) / kSegments),
                    b = cmap.at(static_cast<double>(i + 1) / kSegments);
    dl->AddRectFilledMultiColor(ImVec2(p.x + width * i / kSegments, p.y),
                                ImVec2(p.x + width * (i + 1) / kSegments, p.y + h),
                                IM_COL32(a.r, a.g, a.b, 255), IM_COL32(b.r, b.g, b.b, 255),
                                IM_COL32(b.r, b.g, b.b, 255), IM_COL32(a.r, a.g, a.b, 255));
  }
  ImGui::Dummy(ImVec2(width, h));
  char lo[32], mid[32], hi[32];
  // Labels are the values at the ramp's ends and middle under the chosen scale (sqrt: hi/4 in the middle;
  // log: the low end holds everything below hi·1e-4).
  const bool log_low = scale == viz::ValueScale::Log && !range.diverging;
  std::snprintf(lo, sizeof lo, "%s%.3g", log_low ? "<=" : "", viz::value_at_coordinate(0, range, scale));
  std::snprintf(mid, sizeof mid, "%.3g", range.diverging ? 0.0 : viz::value_at_coordinate(0.5, range, scale));
  std::snprintf(hi, sizeof hi, "%.3g", range.hi);
  // Inside a group, SameLine() offsets count from the group's start.
  ImGui::TextUnformatted(lo);
  const float lo_w = ImGui::CalcTextSize(lo).x, mid_w = ImGui::CalcTextSize(mid).x,
              hi_w = ImGui::CalcTextSize(hi).x;
  const float gap = ImGui::GetFontSize();
  const float mid_x = width / 2 - mid_w / 2, hi_x = width - hi_w;
  if (mid_x > lo_w + gap && mid_x + mid_w + gap < hi_x) {  // the middle label only where it cannot collide
    ImGui::SameLine(mid_x);
    ImGui::TextUnformatted(mid);
  }
  ImGui::SameLine(std::max(width - hi_w, lo_w + 8));
  ImGui::TextUnformatted(hi);
}

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

// Exact tiles of long-prompt maps, computed off the UI thread from the trace's queries, keys and row
// log-sum-exps (no model needed): the latest request wins, one computation at a time.
class TileService {
 public:
  struct Key {
    const Trace* trace = nullptr;
    int layer = -1, head = -1;
    int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
    bool operator==(const Key& o) const {
      return trace == o.trace && layer == o.layer && head == o.head && row0 == o.row0 && rows == o.rows &&
             col0 == o.col0 && cols == o.cols;
    }
  };
  // The tile for `key` when it is ready; otherwise starts (or queues) it and returns nullptr.
  const AttentionTile* get(const std::shared_ptr<const Trace>& trace, const Key& key) {
    if (running_.valid() && running_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        done_ = std::make_pair(running_key_, running_.get());
        ++generation_;
        error_.clear();
      } catch (const std::exception& e) {
        done_.reset();
        error_ = e.what();
      }
    }
    if (done_ && done_->first == key) return &done_->second;
    if (!running_.valid()) {
      running_key_ = key;
      running_ = std::async(std::launch::async, [trace, key] {
        return attention_tile(*trace, key.layer, key.head, key.row0, key.rows, key.col0, key.cols);
      });
    }
    return nullptr;
  }
  const std::string& error() const { return error_; }
  uint64_t generation() const { return generation_; }  // grows with every finished tile
  ~TileService() {
    if (running_.valid()) running_.wait();
  }

 private:
  std::future<AttentionTile> running_;
  Key running_key_;
  std::optional<std::pair<Key, AttentionTile>> done_;
  std::string error_;
  uint64_t generation_ = 0;
};

class HeadView {
 public:
  void set_subject(const std::string& model, int layer, int head, std::shared_ptr<const Trace> trace = {}) {
    model_name_ = model;
    layer_ = layer;
    head_ = head;
    trace_ = std::move(trace);
  }
  // Returns whether an exact tile of a long prompt was drawn.
  bool draw(GuiState& state, const std::vector<MapSpec>& maps, const std::vector<std::string>& token_text,
            const viz::HeatmapRenderer& renderer, float side) {
    if (maps.empty()) return false;
    // Pooled maps (long prompts): the axes are cells of several tokens; selection and hover stay in tokens.
    const int64_t pooled_from = maps[0].pooled_from;
    const std::vector<int64_t> starts = pooled_from > 0 ? cell_starts(pooled_from, maps[0].T) : std::vector<int64_t>{};
    const std::vector<std::string> cell_text = pooled_from > 0 ? cell_labels(token_text, maps[0].T) : std::vector<std::string>{};
    const std::vector<std::string>& tokens = pooled_from > 0 ? cell_text : token_text;
    auto to_map = [&](int t) -> int64_t { return pooled_from > 0 ? cell_of(starts, t) : t; };
    auto to_token = [&](int64_t m) -> int { return static_cast<int>(pooled_from > 0 ? starts[static_cast<size_t>(m)] : m); };
    if (pooled_from > 0) {
      ImGui::TextDisabled("long prompt: %lld tokens pooled to %lld x %lld cells (%s per cell; pooling menu). "
                          "Hover a cell for its token range.",
                          static_cast<long long>(pooled_from), static_cast<long long>(maps[0].T),
                          static_cast<long long>(maps[0].T), state.view.pooling == 0 ? "largest entry" : "mean");
      if (trace_) {  // what this model keeps for the prompt, so the budget setting can be judged
        const Trace::KeptBytes k = trace_->kept_bytes();
        ImGui::TextDisabled("kept: %.0f MB of pooled maps (budget %.0f MB) + %.0f MB of queries and keys for exact tiles",
                            k.pooled_maps / 1048576.0, trace_->pooled_budget / 1048576.0, k.tile_inputs / 1048576.0);
      }
    }
    // Value ranges: sequential maps share one range when asked; the difference map has its own
    // symmetric range (it is on another scale: it can be negative).
    std::vector<const float*> shared;
    uint64_t shared_versions = 0;
    for (const auto& m : maps)
      if (!m.diverging) {
        shared.push_back(m.data);
        shared_versions = shared_versions * 31 + m.version;
      }
    const int64_t T = maps[0].T;
    const float pct = state.view.clamp_percentile;
    const viz::ValueRange shared_range = ranges_.get(
        {shared_versions, 1}, pct, false, [&] { return viz::value_range(shared, T, T, pct, false, true); });
    viz::HeadFigure figure;  // the same maps, styles and zoom, for "Export head view"
    figure.tokens = tokens;
    // Zoomed into a long prompt's pooled map far enough (at most kTileTokens per side): the exact values of
    // the visible tokens, recomputed off the UI thread, replace the pooled cells.
    const AttentionTile* tile = nullptr;
    if (pooled_from > 0 && trace_) {
      ViewState& v = state.view;
      const int64_t P = maps[0].T;
      // The visible tokens (the zoom is kept in tokens).
      (void)P;
      const int64_t n = pooled_from;
      const int64_t tspan = std::clamp<int64_t>(std::llround(v.zoom_span > 0 ? v.zoom_span : double(n)), 1, n);
      const int64_t tr0 = std::clamp<int64_t>(std::llround(v.zoom_row0), 0, n - tspan), tr1 = tr0 + tspan;
      const int64_t tc0 = std::clamp<int64_t>(std::llround(v.zoom_col0), 0, n - tspan), tc1 = tc0 + tspan;
      constexpr int64_t kTileTokens = 1024;
      if (tr1 - tr0 <= kTileTokens && tc1 - tc0 <= kTileTokens) {
        tile = tiles_.get(trace_, {trace_.get(), layer_, head_, tr0, tr1 - tr0, tc0, tc1 - tc0});
        if (!tile)
          ImGui::TextDisabled("computing the exact values of tokens %lld-%lld x %lld-%lld ...", static_cast<long long>(tr0),
                              static_cast<long long>(tr1 - 1), static_cast<long long>(tc0), static_cast<long long>(tc1 - 1));
        else
          ImGui::TextColored(ImVec4(0.1f, 0.5f, 0.1f, 1), "exact values: query tokens %lld-%lld, key tokens %lld-%lld",
                             static_cast<long long>(tr0), static_cast<long long>(tr1 - 1), static_cast<long long>(tc0),
                             static_cast<long long>(tc1 - 1));
        if (!tiles_.error().empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", tiles_.error().c_str());
      } else {
        ImGui::TextDisabled("zoom in to %lld tokens or fewer per side for exact values", static_cast<long long>(kTileTokens));
      }
    }
    // A new tile (or none) means new textures and ranges.
    const uint64_t tile_state = tile ? tiles_.generation() * 2 + 1 : 0;
    if (tile_state != last_tile_state_) {
      last_tile_state_ = tile_state;
      ++tile_version_;
    }
    // The tile's maps with hidden keys as NaN (drawn masked), in the order of `maps`.
    std::vector<std::vector<float>> tile_maps;
    if (tile) {
      const std::vector<float>* parts[3] = {&tile->a1, &tile->a2, &tile->a};
      for (size_t i = 0; i < maps.size(); ++i) {
        const std::vector<float>& src = maps.size() == 1 ? tile->a : *parts[i];
        std::vector<float> m = src;
        for (int64_t r = 0; r < tile->rows; ++r)
          for (int64_t c = 0; c < tile->cols; ++c)
            if (tile->col0 + c > tile->row0 + r) m[static_cast<size_t>(r * tile->cols + c)] = std::nanf("");
        tile_maps.push_back(std::move(m));
      }
    }
    for (size_t i = 0; i < maps.size(); ++i) {
      const MapSpec& m = maps[i];
      if (i) ImGui::SameLine();
      ImGui::BeginGroup();
      ImGui::TextUnformatted(m.title.c_str());
      viz::HeatmapStyle style;
      style.scale = static_cast<viz::ValueScale>(state.view.scale);
      style.range =
          m.diverging || !state.view.shared_scale
              ? ranges_.get({m.version, 2}, pct, m.diverging,
                            [&] { return viz::value_range({m.data}, T, T, pct, m.diverging, true); })
              : shared_range;
      if (tile) {  // the exact tile gets the colour range of its own values (the pooled map's is far wider)
        std::vector<const float*> group;
        if (m.diverging || !state.view.shared_scale) {
          group.push_back(tile_maps[i].data());
        } else {
          for (size_t j = 0; j < maps.size(); ++j)
            if (!maps[j].diverging) group.push_back(tile_maps[j].data());
        }
        style.range = ranges_.get({tile_version_ * 16 + (m.diverging || !state.view.shared_scale ? i : 15), 3}, pct,
                                  m.diverging, [&] {
                                    return viz::value_range(group, tile->rows, tile->cols, pct, m.diverging, false);
                                  });
      }
      viz::HeatmapView& view = views_[i];
      const int px = std::max(16, static_cast<int>(side));
      ViewState& v = state.view;
      // The zoom lives in tokens (shared by both models); a pooled map converts it to its cells.
      const double n_tokens = pooled_from > 0 ? static_cast<double>(pooled_from) : static_cast<double>(T);
      const double u = static_cast<double>(T) / n_tokens;  // map units per token
      if (v.zoom_span <= 0 || v.zoom_span > n_tokens) v.zoom_span = n_tokens, v.zoom_row0 = v.zoom_col0 = 0;
      const int64_t span = std::clamp<int64_t>(std::llround(v.zoom_span * u), 1, T);
      const int64_t r0 = std::clamp<int64_t>(std::llround(v.zoom_row0 * u), 0, T - span);
      const int64_t c0 = std::clamp<int64_t>(std::llround(v.zoom_col0 * u), 0, T - span);
      view.update({m.data, T, T, m.version, true, {r0, c0, span, span}}, px, px,
                  static_cast<viz::Pooling>(v.pooling), style, renderer);
      viz::HeatmapView& tview = tile_views_[i];
      if (tile)
        tview.update({tile_maps[i].data(), tile->rows, tile->cols, tile_version_ * 8 + i, false, {}}, px, px,
                     static_cast<viz::Pooling>(v.pooling), style, renderer);
      figure.panels.push_back({m.title, m.data, style});
      figure.region = {r0, c0, span, span};
      const ImVec2 origin = ImGui::GetCursorScreenPos();
      ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>((tile ? tview : view).target().texture())),
                   ImVec2(side, side), ImVec2(0, 1),
                   ImVec2(1, 0));  // the target is bottom-up: flip once, here
      // Linked selection: the selected query's row and the hovered key's column, in every map.
      ImDrawList* dl = ImGui::GetWindowDrawList();
      dl->PushClipRect(origin, ImVec2(origin.x + side, origin.y + side), true);
      const float cell = side / static_cast<float>(span);
      const int64_t q_sel = state.selection.query >= 0 ? to_map(state.selection.query) : -1;
      if (q_sel >= r0 && q_sel < r0 + span)
        dl->AddRect(ImVec2(origin.x, origin.y + cell * (q_sel - r0)),
                    ImVec2(origin.x + side, origin.y + cell * (q_sel - r0 + 1)), IM_COL32(255, 140, 0, 255),
                    0, 0, 1.5f);
      const int64_t k_hov = state.selection.hovered_key >= 0 ? to_map(state.selection.hovered_key) : -1;
      if (k_hov >= c0 && k_hov < c0 + span)
        dl->AddRect(ImVec2(origin.x + cell * (k_hov - c0), origin.y),
                    ImVec2(origin.x + cell * (k_hov - c0 + 1), origin.y + side), IM_COL32(255, 0, 160, 200),
                    0, 0, 1.0f);
      dl->PopClipRect();
      if (ImGui::IsItemHovered()) {
        ImGuiIO& io = ImGui::GetIO();
        const ImVec2 mouse = io.MousePos;
        const double fx = (mouse.x - origin.x) / side, fy = (mouse.y - origin.y) / side;  // 0..1 in the view
        const int64_t q = std::clamp<int64_t>(r0 + static_cast<int64_t>(fy * span), 0, T - 1);
        const int64_t k = std::clamp<int64_t>(c0 + static_cast<int64_t>(fx * span), 0, T - 1);
        state.selection.hovered_next = to_token(k);
        if (io.MouseWheel != 0) {  // zoom around the cursor (in tokens)
          const double new_span =
              std::clamp(v.zoom_span * std::pow(0.8, io.MouseWheel), std::min(8.0, n_tokens), n_tokens);
          v.zoom_row0 = (r0 + fy * span) / u - fy * new_span;
          v.zoom_col0 = (c0 + fx * span) / u - fx * new_span;
          v.zoom_span = new_span;
        }
        if (ImGui::IsMouseDragging(ImGuiMouseButton_Left)) {  // pan
          v.zoom_row0 = (r0 - io.MouseDelta.y / side * span) / u;
          v.zoom_col0 = (c0 - io.MouseDelta.x / side * span) / u;
        } else if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
                   ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0).x == 0 &&
                   ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0).y == 0) {
          state.selection.query = to_token(q);
        }
        if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) v.zoom_span = 0;  // reset
        ImGui::BeginTooltip();
        if (tile) {  // exact: the token under the cursor
          const int64_t tq = std::clamp<int64_t>(tile->row0 + static_cast<int64_t>(fy * tile->rows), tile->row0, tile->row0 + tile->rows - 1);
          const int64_t tk = std::clamp<int64_t>(tile->col0 + static_cast<int64_t>(fx * tile->cols), tile->col0, tile->col0 + tile->cols - 1);
          state.selection.hovered_next = static_cast<int>(tk);
          ImGui::Text("query %lld  %s", static_cast<long long>(tq), token_text[static_cast<size_t>(tq)].c_str());
          ImGui::Text("key   %lld  %s", static_cast<long long>(tk), token_text[static_cast<size_t>(tk)].c_str());
          if (tk > tq)
            ImGui::TextUnformatted("masked (future key)");
          else
            for (size_t mi = 0; mi < maps.size(); ++mi)
              ImGui::Text("%s = %.5f (exact)", maps[mi].title.c_str(),
                          tile_maps[mi][static_cast<size_t>((tq - tile->row0) * tile->cols + (tk - tile->col0))]);
          ImGui::EndTooltip();
        } else {
        if (pooled_from > 0) {
          ImGui::Text("queries %s", tokens[static_cast<size_t>(q)].c_str());
          ImGui::Text("keys    %s", tokens[static_cast<size_t>(k)].c_str());
        } else {
          ImGui::Text("query %lld  %s", static_cast<long long>(q),
                      q < static_cast<int64_t>(tokens.size()) ? tokens[q].c_str() : "");
          ImGui::Text("key   %lld  %s", static_cast<long long>(k),
                      k < static_cast<int64_t>(tokens.size()) ? tokens[k].c_str() : "");
        }
        if (k > q)
          ImGui::TextUnformatted("masked (future key)");
        else
          for (const auto& other : maps) ImGui::Text("%s = %.5f", other.title.c_str(), other.data[q * T + k]);
        if (span < T)
          ImGui::TextDisabled("zoom: %s %lld-%lld (double-click resets)", pooled_from > 0 ? "cells" : "rows",
                              static_cast<long long>(r0), static_cast<long long>(r0 + span - 1));
        ImGui::EndTooltip();
        }
      }
      draw_legend(m.diverging ? viz::diverging_colormap() : viz::sequential_colormap(), style.range, style.scale,
                  side);
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::SmallButton("Export PNG/NPY/CSV") || state.export_all)
        export_map(state, model_name_, layer_, head_, m.export_name, {m.data, T, T, m.version, true, {}},
                   style, tokens, renderer);
      ImGui::PopID();
      ImGui::EndGroup();
    }
    if (ImGui::SmallButton("Export head view (PNG with token labels and legends)") || state.export_all)
      export_head_figure(state, figure, static_cast<viz::Pooling>(state.view.pooling));
    return tile != nullptr;
  }

 private:
  void export_head_figure(GuiState& state, viz::HeadFigure& figure, viz::Pooling pooling) const {
    try {
      const bool zoomed = figure.region.rows < static_cast<int64_t>(figure.tokens.size());
      figure.title = model_name_ + "   layer " + std::to_string(layer_) + "   head " + std::to_string(head_) +
                     "   " + std::to_string(figure.tokens.size()) + " tokens";
      if (zoomed)
        figure.title += "   (rows and keys " + std::to_string(figure.region.row0) + "-" +
                        std::to_string(figure.region.row0 + figure.region.rows - 1) + ")";
      figure.panel_size = std::clamp(state.view.export_size, 64, 8192);
      figure.pooling = pooling;
      std::filesystem::create_directories(state.view.export_dir);
      const std::filesystem::path path =
          std::filesystem::path(state.view.export_dir) /
          file_safe(model_name_ + "-L" + std::to_string(layer_) + "-H" + std::to_string(head_) + "-headview.png");
      const viz::Image img = viz::render_head_figure(figure);
      viz::write_png(path, img.rgb, img.width, img.height);
      state.message = "exported " + path.string() + " (" + std::to_string(img.width) + "x" +
                      std::to_string(img.height) + ")";
    } catch (const std::exception& e) {
      state.message = std::string("head view export failed: ") + e.what();
    }
  }

  std::map<size_t, viz::HeatmapView> views_;
  std::map<size_t, viz::HeatmapView> tile_views_;
  RangeCache ranges_;
  std::string model_name_;
  int layer_ = 0, head_ = 0;
  std::shared_ptr<const Trace> trace_;
  TileService tiles_;
  uint64_t tile_version_ = 0;
  uint64_t last_tile_state_ = 0;
};

// Layers × heads grid of one model's maps (A1 − λA2 for DIFF, A for the baseline): click selects.
class ModelView {
 public:
  // Rows = the layers passing the filter, each led by a one-line summary (λ for DIFF, the largest
  // |attention logit| and |hidden state|); columns = the heads passing the filter. Only thumbnails in
  // view are rendered, so models with many layers and heads scroll without uploading every map.
  void draw(GuiState& state, const Trace& t, int slot, uint64_t request, const viz::HeatmapRenderer& renderer,
            float thumb) {
    const int64_t T = t.length();
    ImGui::Text("%s: layers (rows) x heads (columns), %s", t.config.name.c_str(),
                t.config.is_diff() ? "A1 - lambda A2" : "softmax A");
    const std::vector<int> layers = parse_index_filter(state.view.layer_filter, static_cast<int>(t.layers.size()));
    const std::vector<int> heads = parse_index_filter(state.view.head_filter, static_cast<int>(t.config.map_heads()));
    const float label_w = ImGui::CalcTextSize("L00  lambda -0.000").x;
    for (int li : layers) {
      const LayerTrace& l = t.layers[static_cast<size_t>(li)];
      // Exact maps, or a long prompt's pooled ones (mean or largest entry, as the pooling menu says).
      const bool pooled = l.pooled > 0;
      const FloatArray& grid = !pooled ? l.a : state.view.pooling == 0 ? l.a_max : l.a_mean;
      const int64_t side = pooled ? l.pooled : T;
      if (grid.empty()) continue;
      const double top_logit = l.logit_stats.top.empty() ? 0.0 : l.logit_stats.top[0];
      const double top_hidden = l.hidden_stats.top.empty() ? 0.0 : l.hidden_stats.top[0];
      ImGui::BeginGroup();
      if (t.config.is_diff())
        ImGui::Text("L%d  lambda %.3f", l.index, l.lambda);
      else
        ImGui::Text("L%d", l.index);
      ImGui::TextDisabled("%.3g / %.3g", top_logit, top_hidden);
      ImGui::EndGroup();
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("layer %d%s\nlargest |attention logit| %.4g\nlargest |hidden state| %.4g", l.index,
                          t.config.is_diff() ? (" lambda " + std::to_string(l.lambda)).c_str() : "", top_logit,
                          top_hidden);
      ImGui::SameLine(label_w);
      const uint64_t layer_version = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                                     (static_cast<uint64_t>(l.index) << 12) ^ 0x7 ^
                                     (pooled && state.view.pooling == 0 ? (uint64_t{1} << 60) : 0);
      const float pct = state.view.clamp_percentile;
      const viz::ValueRange range = ranges_.get({layer_version}, pct, t.config.is_diff(), [&] {
        return viz::value_range({grid.data.data()}, side * static_cast<int64_t>(l.heads.size()), side, pct,
                                t.config.is_diff(), false);
      });
      bool first = true;
      for (size_t h = 0; h < l.heads.size(); ++h) {
        if (!std::binary_search(heads.begin(), heads.end(), l.heads[h])) continue;
        if (!first) ImGui::SameLine();
        first = false;
        if (!ImGui::IsRectVisible(ImVec2(thumb, thumb))) {  // scrolled away: keep the space, skip the work
          ImGui::Dummy(ImVec2(thumb, thumb));
          continue;
        }
        viz::HeatmapStyle style;
        style.range = range;
        style.scale = static_cast<viz::ValueScale>(state.view.scale);
        viz::HeatmapView& v = views_[{l.index, l.heads[h]}];
        const uint64_t version = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                                 (static_cast<uint64_t>(l.index) << 12) ^
                                 (static_cast<uint64_t>(l.heads[h]) << 4) ^ 0x9 ^
                                 (pooled && state.view.pooling == 0 ? (uint64_t{1} << 60) : 0);
        v.update({grid.data.data() + static_cast<int64_t>(h) * side * side, side, side, version, true, {}},
                 static_cast<int>(thumb), static_cast<int>(thumb),
                 static_cast<viz::Pooling>(state.view.pooling), style, renderer);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(v.target().texture())),
                     ImVec2(thumb, thumb), ImVec2(0, 1), ImVec2(1, 0));
        const bool selected = l.index == state.view.layer && l.heads[h] == state.view.head[slot];
        if (selected)
          ImGui::GetWindowDrawList()->AddRect(p, ImVec2(p.x + thumb, p.y + thumb), IM_COL32(255, 140, 0, 255),
                                              0, 0, 3);
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("layer %d, head %d", l.index, l.heads[h]);
        if (ImGui::IsItemClicked()) {
          state.view.layer = l.index;
          state.view.head[slot] = l.heads[h];
        }
      }
      if (first) ImGui::NewLine();
    }
  }

 private:
  std::map<std::pair<int, int>, viz::HeatmapView> views_;
  RangeCache ranges_;
};

// Maps of the selected layer/head of one slot's trace; empty when the trace kept none.
std::vector<MapSpec> maps_of(const Trace& t, int layer, int head, uint64_t request, int slot, bool max_pooled) {
  std::vector<MapSpec> out;
  const uint64_t base = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                        (static_cast<uint64_t>(layer) << 12) ^ (static_cast<uint64_t>(head) << 4) ^
                        (max_pooled ? (uint64_t{1} << 60) : 0);  // pooled traces: mean and max are two maps
  uint64_t k = t.config.is_diff() ? 1 : 4;  // map versions: A1, A2, A = 1, 2, 3; baseline A = 4
  for (const HeadMap& m : head_maps(t, layer, head, max_pooled))
    out.push_back({m.title, m.export_name, m.data, m.T, m.diverging, base + k++, m.pooled_from});
  return out;
}

// The prompt's tokens as chips: hover marks the key in every map, click selects the query token.
void draw_token_strip(GuiState& state, const std::vector<std::string>& tokens) {
  ImGui::TextUnformatted(state.selection.needles.empty()
                             ? "Tokens (click: query / question start, hover: key, right-drag: answer span)"
                             : "Tokens (click: query / question start, hover: key, right-drag: answer span; "
                               "yellow: needle sentences, green: the asked code)");
  if (!ImGui::IsMouseDown(ImGuiMouseButton_Right)) state.selection.answer_anchor = -1;
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(2, 2));
  ImGui::PushStyleVar(ImGuiStyleVar_FramePadding, ImVec2(3, 1));
  // Long prompts: at most about four lines of chips, scrolling, so the maps keep their room.
  const float line = ImGui::GetFrameHeight() + 2;
  const float height = std::min(state.strip_height > 0 ? state.strip_height : line, 4.5f * line) + 4;
  ImGui::BeginChild("##tokenstrip", ImVec2(0, height), false);
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string label = tokens[i] + "##tok" + std::to_string(i);
    const float w = ImGui::CalcTextSize(tokens[i].c_str()).x + 6;
    if (i > 0) {
      ImGui::SameLine();
      if (ImGui::GetItemRectMax().x + w + 2 > right) ImGui::NewLine();
    }
    const int ii = static_cast<int>(i);
    const bool query = ii == state.selection.query;
    const bool key = ii == state.selection.hovered_key;
    const bool answer = ii >= state.selection.answer_begin && ii < state.selection.answer_end;
    const bool needle = std::any_of(state.selection.needles.begin(), state.selection.needles.end(),
                                    [&](const std::pair<int, int>& n) { return ii >= n.first && ii < n.second; });
    ImGui::PushStyleColor(ImGuiCol_Button, query    ? ImVec4(1.0f, 0.62f, 0.2f, 1)
                                           : key    ? ImVec4(1.0f, 0.6f, 0.85f, 1)
                                           : answer ? ImVec4(0.45f, 0.8f, 0.45f, 1)
                                           : needle ? ImVec4(0.98f, 0.88f, 0.5f, 1)
                                                    : ImVec4(0.86f, 0.88f, 0.92f, 1));
    if (ImGui::Button(label.c_str())) state.selection.query = ii;
    if (query && state.strip_scrolled_to != ii) {  // keep the selected query in sight
      ImGui::SetScrollHereY(0.5f);
      state.strip_scrolled_to = ii;
    }
    if (ImGui::IsItemHovered()) {
      state.selection.hovered_next = ii;
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Right)) state.selection.answer_anchor = ii;
      if (ImGui::IsMouseDown(ImGuiMouseButton_Right) && state.selection.answer_anchor >= 0) {
        state.selection.answer_begin = std::min(state.selection.answer_anchor, ii);
        state.selection.answer_end = std::max(state.selection.answer_anchor, ii) + 1;
      }
    }
    ImGui::PopStyleColor();
  }
  state.strip_height = ImGui::GetCursorPosY();
  ImGui::EndChild();
  ImGui::PopStyleVar(2);
}

// The selected query's attention over its keys, as bars, for one trace.
void draw_row_view(const GuiState& state, const Trace& t, int head) {
  const int layer = state.view.layer;
  if (layer < 0 || layer >= static_cast<int>(t.layers.size())) return;
  const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
  auto it = std::find(l.heads.begin(), l.heads.end(), head);
  if (it == l.heads.end() || (l.a.empty() && l.pooled == 0)) return;
  const int64_t T = t.length(), h = it - l.heads.begin();
  const int q = std::clamp(state.selection.query, 0, static_cast<int>(T) - 1);
  // Long prompts keep no full rows: the selected row is recomputed exactly (one 1 x T tile).
  std::vector<float> tile_row;
  if (l.pooled > 0) tile_row = attention_tile(t, layer, head, q, 1, 0, T).a;
  const float* row = l.pooled > 0 ? tile_row.data() : l.a.data.data() + (h * T + q) * T;
  float lo = 0, hi = 0;
  for (int j = 0; j <= q; ++j) {
    lo = std::min(lo, row[j]);
    hi = std::max(hi, row[j]);
  }
  char overlay[160];
  std::snprintf(overlay, sizeof overlay, "%s, query %d '%s': %s over keys 0..%d", t.config.name.c_str(), q,
                t.tokens[static_cast<size_t>(q)].c_str(), t.config.is_diff() ? "A1 - lambda A2" : "A", q);
  ImGui::TextUnformatted(overlay);  // above the bars, not over them
  ImGui::PlotHistogram(("##row" + t.config.name).c_str(), row, q + 1, 0, nullptr, lo, hi > lo ? hi : lo + 1,
                       ImVec2(ImGui::GetContentRegionAvail().x, ImGui::GetTextLineHeight() * 3.5f));
}

// λ per layer of a DIFF trace: the chart and the numbers (λ = exp1 - exp2 + λ_init).
void draw_lambda_panel(const Trace& t) {
  std::vector<float> lambdas, inits;
  for (const auto& l : t.layers) {
    lambdas.push_back(static_cast<float>(l.lambda));
    inits.push_back(static_cast<float>(l.lambda_init));
  }
  ImGui::Text("lambda per layer (%s)", t.config.name.c_str());
  ImGui::PlotLines("##lambda", lambdas.data(), static_cast<int>(lambdas.size()), 0, "lambda", -0.2f, 1.2f,
                   ImVec2(ImGui::GetContentRegionAvail().x, ImGui::GetTextLineHeight() * 3));
  if (ImGui::BeginTable("lambda", 5, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    for (const char* h : {"layer", "lambda", "exp(q1.k1)", "exp(q2.k2)", "lambda_init"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& l : t.layers) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%d", l.index);
      for (double v : {l.lambda, l.lambda_exp1, l.lambda_exp2, l.lambda_init}) {
        ImGui::TableNextColumn();
        ImGui::Text("%.4f", v);
      }
    }
    ImGui::EndTable();
  }
}

void draw_next_tokens(const Trace& t) {
  ImGui::Text("next token (%s)", t.config.name.c_str());
  for (size_t i = 0; i < std::min<size_t>(5, t.next_token.size()); ++i)
    ImGui::Text("%5.1f %%  %s", 100.0 * t.next_token[i].probability, t.next_token[i].text.c_str());
}

// Two models' |value| histograms on the same log10 axis (bins merged to 4 per decade), log-count bars,
// DIFF blue and baseline red side by side in each bin.
void draw_histograms(const char* title, const ValueStats* stats[kSlots], const char* names[kSlots],
                     ImVec2 size) {
  constexpr int kMerge = LogHistogram::kBinsPerDecade / 4;
  constexpr int kBins = LogHistogram::kBins / kMerge;
  double counts[kSlots][kBins] = {};
  int first = kBins, last = -1;
  double peak = 1;
  for (int s = 0; s < kSlots; ++s) {
    if (!stats[s]) continue;
    for (int b = 0; b < LogHistogram::kBins; ++b)
      counts[s][b / kMerge] += static_cast<double>(stats[s]->histogram.counts[b]);
    for (int b = 0; b < kBins; ++b)
      if (counts[s][b] > 0) {
        first = std::min(first, b);
        last = std::max(last, b);
        peak = std::max(peak, counts[s][b]);
      }
  }
  ImGui::TextUnformatted(title);
  const ImVec4 legend[kSlots] = {ImVec4(0.12f, 0.47f, 0.71f, 1), ImVec4(0.84f, 0.15f, 0.16f, 1)};
  for (int s = 0; s < kSlots; ++s)
    if (stats[s]) {
      ImGui::SameLine();
      ImGui::TextColored(legend[s], "%s", names[s]);
    }
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(size);
  if (last < first) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(p, ImVec2(p.x + size.x, p.y + size.y), IM_COL32(255, 255, 255, 255));
  const float label_h = ImGui::GetTextLineHeight();
  const float plot_h = size.y - label_h;
  const int n = last - first + 1;
  const float bw = size.x / static_cast<float>(n);
  const ImU32 colors[kSlots] = {IM_COL32(31, 119, 180, 230), IM_COL32(214, 39, 40, 230)};
  for (int b = first; b <= last; ++b)
    for (int s = 0; s < kSlots; ++s) {
      if (!stats[s] || counts[s][b] <= 0) continue;
      const float h =
          plot_h * static_cast<float>(std::log10(1 + counts[s][b]) / std::log10(1 + peak));  // log count
      const float x0 = p.x + bw * static_cast<float>(b - first) + bw * 0.5f * static_cast<float>(s);
      dl->AddRectFilled(ImVec2(x0, p.y + plot_h - h), ImVec2(x0 + bw * 0.5f, p.y + plot_h), colors[s]);
    }
  // Decade ticks on the |value| axis.
  for (int b = first; b <= last + 1; ++b) {
    const double lower = LogHistogram::bin_lower(b * kMerge);
    if (std::fabs(std::log10(lower) - std::round(std::log10(lower))) > 1e-6) continue;
    const float x = p.x + bw * static_cast<float>(b - first);
    dl->AddLine(ImVec2(x, p.y), ImVec2(x, p.y + plot_h), IM_COL32(0, 0, 0, 60));
    char t[16];
    std::snprintf(t, sizeof t, "1e%d", static_cast<int>(std::round(std::log10(lower))));
    dl->AddText(ImVec2(x + 2, p.y + plot_h), IM_COL32(60, 60, 60, 255), t);
  }
}

// The paper's Table 5 readout: k-th largest |value| and the median, both models side by side.
void draw_outlier_table(const char* id, const ValueStats* stats[kSlots], const char* names[kSlots]) {
  if (!ImGui::BeginTable(id, 7, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) return;
  for (const char* h : {"model", "top-1", "top-2", "top-3", "top-10", "top-100", "median"})
    ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (int s = 0; s < kSlots; ++s) {
    if (!stats[s]) continue;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(names[s]);
    for (int k : {1, 2, 3, 10, 100}) {
      ImGui::TableNextColumn();
      ImGui::Text("%.3f", stats[s]->top_k(k));
    }
    ImGui::TableNextColumn();
    ImGui::Text("%.3f", stats[s]->median);
  }
  ImGui::EndTable();
}

void draw_outlier_panel(const RunResult& r, int& layer_choice) {
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  int layers = 0;
  for (const auto& t : r.traces)
    if (t) layers = std::max(layers, static_cast<int>(t->layers.size()));
  ImGui::SliderInt("layer (-1: all layers pooled)", &layer_choice, -1, layers - 1);
  ValueStats logits[kSlots], hidden[kSlots];
  const ValueStats* lp[kSlots] = {nullptr, nullptr};
  const ValueStats* hp[kSlots] = {nullptr, nullptr};
  const char* names[kSlots] = {"", ""};
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = r.traces[s];
    if (!t) continue;
    names[s] = t->config.name.empty() ? to_string(t->config.attention) : t->config.name.c_str();
    if (layer_choice < 0) {
      logits[s] = pooled_logit_stats(*t);
      hidden[s] = pooled_hidden_stats(*t);
    } else if (layer_choice < static_cast<int>(t->layers.size())) {
      logits[s] = t->layers[static_cast<size_t>(layer_choice)].logit_stats;
      hidden[s] = t->layers[static_cast<size_t>(layer_choice)].hidden_stats;
    } else {
      continue;
    }
    lp[s] = &logits[s];
    hp[s] = &hidden[s];
  }
  const float w = ImGui::GetContentRegionAvail().x / 2 - ImGui::GetStyle().ItemSpacing.x;
  const float h = ImGui::GetTextLineHeight() * 7;
  ImGui::BeginGroup();
  draw_histograms("|attention logits| (DIFF: both components pooled; log count)", lp, names, ImVec2(w, h));
  draw_outlier_table("logit_table", lp, names);
  ImGui::EndGroup();
  ImGui::SameLine();
  ImGui::BeginGroup();
  draw_histograms("|hidden states| at layer outputs (log count)", hp, names, ImVec2(w, h));
  draw_outlier_table("hidden_table", hp, names);
  ImGui::EndGroup();
  if (layer_choice < 0)
    ImGui::TextDisabled("pooled over layers: top-k exact; median from the log histogram (within 3.7 %%)");
}

// Attention to the marked answer vs attention noise, per layer and averaged, for both models.
// Builds a held-out needle episode with the left model's tokenizer, puts it (up to the answer) into the
// prompt and marks the question and the asked needle's code, so the readout below measures retrieval.
void build_needle_prompt(GuiState& state, const std::string& model_dir) {
  GuiState::Needle& n = state.needle;
  try {
    const std::filesystem::path tok_path = std::filesystem::path(model_dir) / "tokenizer.model";
    if (!std::filesystem::exists(tok_path))
      throw Error("the needle builder needs a SentencePiece model in a slot (" + tok_path.string() + " is missing)");
    if (!n.haystack || n.tokenizer_path != tok_path.string()) {  // count the haystack once per tokenizer
      std::ifstream in(n.haystack_path, std::ios::binary);
      if (!in) throw Error(n.haystack_path + ": cannot open the haystack text");
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      n.tokenizer = std::make_unique<Tokenizer>(Tokenizer::sentencepiece(tok_path));
      n.haystack = std::make_unique<Haystack>(text, *n.tokenizer);
      n.tokenizer_path = tok_path.string();
    }
    const EpisodeBuilder builder(*n.haystack, *n.tokenizer, NeedleSplit::Eval, NameSet::SingleToken, n.wording);
    n.asked = std::clamp(n.asked, 1, n.needles);
    Episode ep = needle_episode(builder, {n.length, n.depth_pct / 100.0, n.needles, n.asked},
                                static_cast<uint64_t>(std::max(1, n.seed)));
    const Span code = ep.needle_code_spans[static_cast<size_t>(ep.queried.back())];
    const Span question = ep.question_spans.back();
    const Span reply = ep.answer_spans.back();  // the asked code after the question
    const Needle& asked = ep.needles[static_cast<size_t>(ep.queried.back())];
    // The episode ends "... is <code>.": keep the code (its rows read it from the needle), or stop before it
    // so that the model answers next.
    ep.text.resize(ep.text.size() - (n.with_answer ? 1 : asked.code.size() + 1));
    state.prompt.text = ep.text;
    state.prompt.pending = true;
    state.prompt.last_edit = 0;
    // With the code in the prompt, the query is the token whose next token is the code's first piece.
    state.selection.query = static_cast<int>(n.with_answer ? reply.begin - 1 : question.begin);
    n.focus_pending = true;
    state.selection.answer_begin = static_cast<int>(code.begin);
    state.selection.answer_end = static_cast<int>(code.end);
    state.selection.needles.clear();
    for (const Span& sp : ep.needle_spans)
      state.selection.needles.push_back({static_cast<int>(sp.begin), static_cast<int>(sp.end)});
    n.built =
        "built a " + std::to_string(n.tokenizer->encode(ep.text, true).ids.size()) + "-token prompt: asked " +
        asked.name + " -> " + asked.code + " (answer span = the needle's code, tokens " +
        std::to_string(code.begin) + "-" + std::to_string(code.end - 1) + "); " +
        (n.with_answer ? "the prompt ends with the code: the rows from the selected query on are the tokens "
                         "that produce it, so a retrieving head puts weight on the needle's code there"
                       : "a model that retrieves continues with \" " + asked.code + "\" (next-token panel)");
  } catch (const std::exception& e) {
    n.built = std::string("could not build: ") + e.what();
  }
}

void draw_needle_builder(GuiState& state) {
  GuiState::Needle& n = state.needle;
  const float w = ImGui::GetFontSize() * 6;
  ImGui::TextUnformatted("Needle builder (held-out names and codes):");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::InputInt("tokens", &n.length, 64, 256);
  n.length = std::clamp(n.length, 64, 8192);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::SliderInt("depth %", &n.depth_pct, 0, 100);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::SliderInt("needles", &n.needles, 1, 6);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::SliderInt("asked", &n.asked, 1, n.needles);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::InputInt("seed", &n.seed);
  ImGui::SameLine();
  ImGui::Checkbox("with the answer", &n.with_answer);
  ImGui::SameLine();
  if (ImGui::Button("Build prompt"))
    build_needle_prompt(state, state.status.slots[0].path.empty() ? state.status.slots[1].path
                                                                  : state.status.slots[0].path);
  if (!n.built.empty()) ImGui::TextDisabled("%s", n.built.c_str());
  ImGui::Separator();
}

// Attention to the answer and noise for the current selection, computed once per result and selection
// (long prompts recompute the question's rows from tiles).
const GuiState::NoiseCache& refresh_noise_cache(GuiState& state, const RunResult& r) {
  const SelectionState& sel = state.selection;
  GuiState::NoiseCache& cache = state.noise_cache;
  const std::array<int64_t, 4> key{static_cast<int64_t>(r.request), sel.query, sel.answer_begin,
                                   sel.answer_end};
  if (cache.key != key) {
    cache.key = key;
    for (int s = 0; s < kSlots; ++s) {
      cache.readouts[s].reset();
      cache.errors[s].clear();
      const auto& t = r.traces[s];
      if (!t) continue;
      const int64_t T = t->length();
      const TokenSpan answer{std::min<int64_t>(sel.answer_begin, T), std::min<int64_t>(sel.answer_end, T)};
      const TokenSpan question{std::clamp<int64_t>(sel.query, 0, T - 1), T};
      const bool tiles = !t->layers.empty() && t->layers[0].pooled > 0;
      const double work = static_cast<double>(question.end - question.begin) * static_cast<double>(T) *
                          static_cast<double>(t->config.num_hidden_layers * t->config.num_attention_heads *
                                              t->config.head_dim);
      if (tiles && work > 4e8) {
        cache.errors[s] = "the question spans " + std::to_string(question.end - question.begin) +
                          " tokens of a long prompt: select a later query token (the question start) to "
                          "measure it";
        continue;
      }
      try {
        cache.readouts[s] = attention_noise(*t, answer, question);
      } catch (const std::exception& e) {
        cache.errors[s] = e.what();
      }
    }
  }
  return cache;
}

// Selects the layer and heads that attend most to the marked answer from the question's rows: the left
// model's strongest head over all layers, then the right model's strongest head in that layer.
void focus_answer_head(GuiState& state, const RunResult& r) {
  if (state.selection.answer_begin < 0) return;
  const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
  const int lead = cache.readouts[0] ? 0 : 1;
  if (!cache.readouts[lead]) return;
  const auto best = strongest_answer_head(*cache.readouts[lead]);
  if (!best) return;
  state.view.layer = best->layer;
  std::string what = "layer " + std::to_string(best->layer) + ": ";
  for (int k = 0; k < kSlots; ++k) {
    const int s = (lead + k) % kSlots;
    if (!cache.readouts[s] || !r.traces[s]) continue;
    const auto h = strongest_answer_head(*cache.readouts[s], best->layer);
    if (!h) continue;
    state.view.head[s] = h->head;
    char share[32];
    std::snprintf(share, sizeof share, "%.3f", h->share.answer);
    const ModelConfig& c = r.traces[s]->config;
    what += std::string(k ? ", " : "") + (c.name.empty() ? to_string(c.attention) : c.name) + " head " +
            std::to_string(h->head) + " " + share;
  }
  state.message = what + " attention to the answer (the strongest heads; Attention noise tab)";
}

void draw_noise_panel(GuiState& state, const RunResult& r) {
  const SelectionState& sel = state.selection;
  ImGui::TextWrapped("%s.", kAttentionShareDefinition);
  ImGui::TextDisabled(
      "Question = tokens from the selected query to the end; answer = the right-dragged span.");
  if (sel.answer_begin < 0) {
    ImGui::TextUnformatted("Right-drag over the answer's tokens on the token strip to measure.");
    return;
  }
  if (ImGui::Button("Show the heads that attend most to the answer")) focus_answer_head(state, r);
  if (ImGui::BeginTable("noise", 1 + 2 * kSlots, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("layer");
    std::string heads[kSlots];
    for (int s = 0; s < kSlots; ++s) {
      const auto& t = r.traces[s];
      const std::string n =
          t ? (t->config.name.empty() ? to_string(t->config.attention) : t->config.name) : "-";
      ImGui::TableSetupColumn((n + " answer").c_str());
      ImGui::TableSetupColumn((n + " noise").c_str());
    }
    ImGui::TableHeadersRow();
    const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
    const std::optional<NoiseReadout>* readouts = cache.readouts;
    const std::string* errors = cache.errors;
    size_t rows = 0;
    for (int s = 0; s < kSlots; ++s)
      if (readouts[s]) rows = std::max(rows, readouts[s]->layers.size());
    for (size_t i = 0; i <= rows; ++i) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (i < rows)
        ImGui::Text("%zu", i);
      else
        ImGui::TextUnformatted("mean");
      for (int s = 0; s < kSlots; ++s) {
        const AttentionShare* a = nullptr;
        if (readouts[s])
          a = i < readouts[s]->per_layer.size() ? &readouts[s]->per_layer[i]
              : i == rows                       ? &readouts[s]->mean
                                                : nullptr;
        ImGui::TableNextColumn();
        if (a) ImGui::Text("%.3f", a->answer);
        ImGui::TableNextColumn();
        if (a) ImGui::Text("%.3f", a->noise);
      }
    }
    ImGui::EndTable();
    for (int s = 0; s < kSlots; ++s)
      if (!errors[s].empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", errors[s].c_str());
  }
}

// --- needle lab ----------------------------------------------------------------------------------------

void start_lab_sweep(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  try {
    SweepRequest req;
    req.sweep = parse_needle_sweep(lab.lengths, lab.depths, lab.needles, lab.queried, lab.seeds);
    req.haystack_path = state.needle.haystack_path;
    req.names = lab.names == 0 ? NameSet::SingleToken : NameSet::Original;
    req.wording = state.needle.wording;
    req.wording.validate();
    req.logit_bits = kQuantizationBits[std::clamp(state.view.quantization, 0, 3)];
    worker.start_sweep(req);
    lab.form_error.clear();
    lab.message.clear();
  } catch (const std::exception& e) {
    lab.form_error = e.what();
  }
}

// Takes the worker's sweep progress when it changed (the lab's one point per frame).
void poll_lab(GuiState& state, const InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  auto p = worker.sweep_progress(lab.progress ? lab.progress->version : 0);
  if (!p || p->id == 0) return;
  for (int s = 0; s < kSlots; ++s) lab.cells[s] = summarize(p->runs[static_cast<size_t>(s)]);
  lab.progress = std::move(p);
}

ImU32 colormap_u32(double t) {
  const viz::Rgb8 c = viz::sequential_colormap().at(t);
  return IM_COL32(c.r, c.g, c.b, 255);
}

std::string depth_label(double d) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", d * 100);
  return b;
}

// A depth × length grid of one model's cells for one (N, R), coloured over [lo, hi], values printed when
// they fit; hovering a cell tells its numbers.
// What a lab heatmap shows of a cell: its accuracy, the attention to the answer while the question is read,
// or the strongest head's attention to the answer while the code is produced.
enum class LabValue { Accuracy, QuestionAttention, AnsweringHead };
double lab_value(const NeedleCellSummary& c, LabValue v) {
  return v == LabValue::Accuracy ? c.accuracy : v == LabValue::QuestionAttention ? c.attention.answer : c.answering_head;
}

void draw_lab_grid(const char* title, const NeedleSweep& sweep, const std::vector<NeedleCellSummary>& cells,
                   std::pair<int, int> nr, LabValue value, double lo, double hi, float cell) {
  ImGui::BeginGroup();
  ImGui::TextUnformatted(title);
  const float label_w = ImGui::CalcTextSize("100%").x + ImGui::GetStyle().ItemSpacing.x;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  for (size_t c = 0; c < sweep.lengths.size(); ++c) {  // length labels above the columns
    const std::string l = std::to_string(sweep.lengths[c]);
    const float w = ImGui::CalcTextSize(l.c_str()).x;
    dl->AddText(ImVec2(p.x + label_w + cell * (static_cast<float>(c) + 0.5f) - w / 2, p.y), ImGui::GetColorU32(ImGuiCol_Text),
                l.c_str());
  }
  p.y += ImGui::GetTextLineHeightWithSpacing();
  for (size_t r = 0; r < sweep.depths.size(); ++r) {
    const float y = p.y + cell * static_cast<float>(r);
    const std::string dlabel = depth_label(sweep.depths[r]);
    dl->AddText(ImVec2(p.x, y + (cell - ImGui::GetTextLineHeight()) / 2), ImGui::GetColorU32(ImGuiCol_Text),
                dlabel.c_str());
    for (size_t c = 0; c < sweep.lengths.size(); ++c) {
      const ImVec2 a(p.x + label_w + cell * static_cast<float>(c), y), b(a.x + cell - 1, a.y + cell - 1);
      const NeedleCellSummary* found = nullptr;
      for (const auto& cs : cells)
        if (cs.cell.length == sweep.lengths[c] && cs.cell.depth == sweep.depths[r] && cs.cell.needles == nr.first &&
            cs.cell.queried == nr.second)
          found = &cs;
      if (!found) {
        dl->AddRectFilled(a, b, IM_COL32(236, 236, 236, 255));
        continue;
      }
      const double v = lab_value(*found, value);
      const double t = std::clamp((v - lo) / (hi - lo), 0.0, 1.0);
      dl->AddRectFilled(a, b, colormap_u32(t));
      char txt[32];
      std::snprintf(txt, sizeof txt, value == LabValue::QuestionAttention ? "%.3f" : "%.2f", v);
      const ImVec2 ts = ImGui::CalcTextSize(txt);
      if (ts.x < cell - 2) {
        const bool dark = viz::oklab_lightness(viz::sequential_colormap().at(t)) < 0.6;
        dl->AddText(ImVec2(a.x + (cell - ts.x) / 2, a.y + (cell - ts.y) / 2),
                    dark ? IM_COL32(255, 255, 255, 255) : IM_COL32(20, 20, 20, 255), txt);
      }
      if (ImGui::IsMouseHoveringRect(a, b))
        ImGui::SetTooltip("%lld tokens, depth %s, N=%d R=%d\n%d episodes: accuracy %.2f\n"
                          "reading the question: attention to answer %.3f, attention noise %.3f\n"
                          "while answering: to answer %.3f, noise %.3f, strongest head %.2f",
                          static_cast<long long>(found->cell.length), depth_label(found->cell.depth).c_str(),
                          nr.first, nr.second, found->runs, found->accuracy, found->attention.answer,
                          found->attention.noise, found->answering.answer, found->answering.noise,
                          found->answering_head);
    }
  }
  ImGui::Dummy(ImVec2(label_w + cell * static_cast<float>(sweep.lengths.size()),
                      ImGui::GetTextLineHeightWithSpacing() + cell * static_cast<float>(sweep.depths.size())));
  ImGui::EndGroup();
}

void export_lab(GuiState& state) {
  GuiState::Lab& lab = state.lab;
  const SweepProgress& p = *lab.progress;
  try {
    std::vector<std::string> names;
    std::vector<std::vector<NeedleRun>> runs;
    const bool same = p.models[0] == p.models[1];  // e.g. one model in both slots: tell the files apart
    for (size_t s = 0; s < kSlots; ++s)
      if (!p.models[s].empty()) {
        names.push_back(p.models[s] + (same ? (s == 0 ? "-left" : "-right") : ""));
        runs.push_back(p.runs[s]);
      }
    const std::filesystem::path dir =
        std::filesystem::path(state.view.export_dir) / ("needle-lab-" + std::to_string(p.id));
    write_needle_report(dir, names, runs, std::clamp(lab.cell_px, 16, 512));
    lab.message = "exported " + dir.string() + " (needle.json, needle.csv, tables.md, PNG + SVG heatmaps)";
  } catch (const std::exception& e) {
    lab.message = std::string("export failed: ") + e.what();
  }
  state.message = lab.message;
}

void draw_lab_panel(GuiState& state, InferenceWorker& worker) {
  GuiState::Lab& lab = state.lab;
  const float w = ImGui::GetFontSize() * 9;
  ImGui::TextUnformatted("Sweep:");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("lengths (tokens)", &lab.lengths);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w);
  ImGui::InputText("depths (%)", &lab.depths);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w * 0.5f);
  ImGui::InputText("needles N", &lab.needles);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w * 0.5f);
  ImGui::InputText("asked R", &lab.queried);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w * 0.6f);
  ImGui::InputInt("seeds", &lab.seeds);
  lab.seeds = std::clamp(lab.seeds, 1, 1000);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w * 1.4f);
  ImGui::Combo("names", &lab.names, "held-out single-token\0held-out original\0");
  ImGui::SetNextItemWidth(w * 3);
  ImGui::InputText("haystack text file", &state.needle.haystack_path);
  ImGui::SameLine();
  if (ImGui::Button("Wording...")) ImGui::OpenPopup("wording");
  if (ImGui::BeginPopup("wording")) {
    NeedleTemplate& t = state.needle.wording;
    ImGui::TextUnformatted("{name} and {code} are filled in; the answer \" <code>.\" follows the question.");
    ImGui::SetNextItemWidth(w * 4);
    ImGui::InputText("needle", &t.needle);
    ImGui::InputTextMultiline("question", &t.question, ImVec2(w * 4, ImGui::GetTextLineHeight() * 3));
    if (ImGui::Button("Trained wording")) t = NeedleTemplate{};
    try {
      t.validate();
    } catch (const std::exception& e) {
      ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", e.what());
    }
    ImGui::TextDisabled("The bundled pair was trained on the default wording only.");
    ImGui::EndPopup();
  }
  ImGui::SameLine();
  const bool running = lab.progress && lab.progress->running;
  if (ImGui::Button(running ? "Restart sweep" : "Run sweep")) start_lab_sweep(state, worker);
  ImGui::SameLine();
  if (!running) ImGui::BeginDisabled();
  if (ImGui::Button("Cancel")) worker.cancel_sweep();
  if (!running) ImGui::EndDisabled();
  ImGui::SameLine();
  const bool have_runs = lab.progress && lab.progress->done > 0;
  if (!have_runs) ImGui::BeginDisabled();
  if (ImGui::Button("Export results")) export_lab(state);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(w * 0.6f);
  ImGui::InputInt("px per cell", &lab.cell_px, 8, 32);
  lab.cell_px = std::clamp(lab.cell_px, 16, 512);
  if (!have_runs) ImGui::EndDisabled();
  if (!lab.form_error.empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", lab.form_error.c_str());
  if (!lab.progress) {
    ImGui::TextWrapped(
        "Runs every length x depth x (N, R) cell on both models with held-out names, codes and haystack text; "
        "typing a prompt meanwhile pauses the sweep. Accuracy: the whole code produced greedily. The sweep uses "
        "the logits menu above: exact, or attention logits quantized to 8/6/4 bits.");
    return;
  }
  const SweepProgress& p = *lab.progress;
  char overlay[320];
  const double eta = p.done > 0 && p.running ? p.seconds / static_cast<double>(p.done) *
                                                   static_cast<double>(p.total - p.done)
                                             : 0;
  std::snprintf(overlay, sizeof overlay, "%zu/%zu episodes%s%s%s", p.done, p.total,
                p.running ? (" - " + p.current).c_str() : p.cancelled ? " - cancelled" : p.finished ? " - done" : "",
                p.running && p.done > 0 ? (" - ETA " + std::to_string(static_cast<int>(eta + 0.5)) + " s").c_str() : "",
                "");
  ImGui::ProgressBar(p.total ? static_cast<float>(p.done) / static_cast<float>(p.total) : 0.0f, ImVec2(-1, 0),
                     overlay);
  if (!p.error.empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", p.error.c_str());
  if (!lab.message.empty()) ImGui::TextDisabled("%s", lab.message.c_str());
  if (p.done == 0) return;
  ImGui::TextWrapped("%s. Answer span: the code of the needle the last question asks about; query rows: that "
                     "question's tokens.",
                     kAttentionShareDefinition);
  const NeedleSweep& sweep = p.request.sweep;
  std::vector<int> slots;
  for (int s = 0; s < kSlots; ++s)
    if (!p.models[static_cast<size_t>(s)].empty()) slots.push_back(s);
  const float avail = ImGui::GetContentRegionAvail().x;
  const float label_w = ImGui::CalcTextSize("100%").x + 2 * ImGui::GetStyle().ItemSpacing.x;
  const float grids = 2.0f * static_cast<float>(slots.size());
  // Cells as large as the width allows, up to 3.5 em, and short enough that the tables below stay in view.
  const float by_width = (avail - grids * label_w - grids * ImGui::GetFontSize()) /
                         (grids * static_cast<float>(sweep.lengths.size()));
  const float by_height = 0.5f * ImGui::GetContentRegionAvail().y / static_cast<float>(sweep.depths.size());
  // ...but never narrower than a value or a length label (the tab scrolls instead).
  float min_cell = ImGui::CalcTextSize("-0.000").x;
  for (int64_t L : sweep.lengths) min_cell = std::max(min_cell, ImGui::CalcTextSize(std::to_string(L).c_str()).x);
  min_cell += ImGui::GetFontSize() * 0.5f;
  const float cell = std::max(min_cell, std::min({by_width, by_height, ImGui::GetFontSize() * 3.5f}));
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 22);
  ImGui::Combo("second heatmap", &lab.attention_view,
               "attention to answer (reading the question)\0strongest head (answering)\0");
  const LabValue shown = lab.attention_view == 0 ? LabValue::QuestionAttention : LabValue::AnsweringHead;
  const char* shown_name = shown == LabValue::QuestionAttention ? "attention to answer" : "strongest head answering";
  for (const auto& nr : sweep.needles_queried) {
    // One range for both models so their colours compare (DIFF's attention to the answer can be < 0).
    double lo = 0, hi = 0;
    for (int s : slots)
      for (const auto& c : lab.cells[s])
        if (c.cell.needles == nr.first && c.cell.queried == nr.second)
          lo = std::min(lo, lab_value(c, shown)), hi = std::max(hi, lab_value(c, shown));
    if (!(hi > lo)) hi = lo + 1;
    ImGui::Text("N=%d needles, R=%d asked: rows = depth of the asked needle, columns = context length", nr.first,
                nr.second);
    bool first = true;
    for (int s : slots) {
      const std::string& name = p.models[static_cast<size_t>(s)];
      for (const bool accuracy : {true, false}) {
        if (!first) ImGui::SameLine(0, ImGui::GetFontSize());
        first = false;
        ImGui::PushID(s * 2 + (accuracy ? 0 : 1) + 16 * nr.first + 256 * nr.second);
        draw_lab_grid((name + ": " + (accuracy ? "accuracy" : shown_name)).c_str(), sweep, lab.cells[s], nr,
                      accuracy ? LabValue::Accuracy : shown, accuracy ? 0.0 : lo, accuracy ? 1.0 : hi, cell);
        ImGui::PopID();
      }
    }
    ImGui::TextDisabled("accuracy colours span 0..1; %s spans %.3f..%.3f for both models", shown_name, lo, hi);
  }
  // The paper's Table 3 layout: attention to answer / noise by depth, per length and model.
  for (const auto& nr : sweep.needles_queried) {
    ImGui::Text("Attention to answer / attention noise by depth (N=%d, R=%d)", nr.first, nr.second);
    const int cols = 2 + static_cast<int>(sweep.depths.size()) + 1;
    ImGui::PushID(nr.first * 64 + nr.second);
    if (ImGui::BeginTable("table3", cols, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("model");
      ImGui::TableSetupColumn("tokens");
      for (double d : sweep.depths) ImGui::TableSetupColumn(depth_label(d).c_str());
      ImGui::TableSetupColumn("accuracy");
      ImGui::TableHeadersRow();
      for (int64_t L : sweep.lengths)
        for (int s : slots) {
          ImGui::TableNextRow();
          ImGui::TableNextColumn();
          ImGui::TextUnformatted(p.models[static_cast<size_t>(s)].c_str());
          ImGui::TableNextColumn();
          ImGui::Text("%lld", static_cast<long long>(L));
          double acc = 0;
          int n = 0;
          for (double d : sweep.depths) {
            ImGui::TableNextColumn();
            for (const auto& c : lab.cells[s])
              if (c.cell.length == L && c.cell.depth == d && c.cell.needles == nr.first && c.cell.queried == nr.second) {
                ImGui::Text("%.3f / %.3f", c.attention.answer, c.attention.noise);
                acc += c.accuracy;
                ++n;
              }
          }
          ImGui::TableNextColumn();
          if (n) ImGui::Text("%.2f", acc / n);
        }
      ImGui::EndTable();
    }
    ImGui::PopID();
  }
  // While answering (the rows that produce the code): mean over depths, per length, as `needle` tables it.
  ImGui::TextUnformatted("While answering: to answer / noise / strongest head (mean over depths and seeds)");
  ImGui::SameLine();
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Query rows: the tokens that produce the asked code, the true code given; the question and "
                      "the answer so far are neither answer nor noise. Strongest head: the attention to the answer "
                      "of the head that gives it the most, per episode.");
  if (ImGui::BeginTable("answering", 2 + static_cast<int>(sweep.lengths.size()),
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("model");
    ImGui::TableSetupColumn("N, R");
    for (int64_t L : sweep.lengths) ImGui::TableSetupColumn((std::to_string(L) + " tokens").c_str());
    ImGui::TableHeadersRow();
    for (int s : slots)
      for (const auto& nr : sweep.needles_queried) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(p.models[static_cast<size_t>(s)].c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%d, %d", nr.first, nr.second);
        for (int64_t L : sweep.lengths) {
          ImGui::TableNextColumn();
          const AnsweringMean a = answering_over_depths(lab.cells[s], L, nr.first, nr.second);
          if (a.cells) ImGui::Text("%.3f / %.3f / %.2f", a.share.answer, a.share.noise, a.strongest_head);
        }
      }
    ImGui::EndTable();
  }
  if (sweep.needles_queried.size() > 1 &&
      ImGui::BeginTable("multi", 1 + static_cast<int>(sweep.needles_queried.size()),
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("accuracy (mean over lengths, depths, seeds)");
    std::vector<std::string> heads;
    for (const auto& nr : sweep.needles_queried)
      heads.push_back("N=" + std::to_string(nr.first) + " R=" + std::to_string(nr.second));
    for (const auto& h : heads) ImGui::TableSetupColumn(h.c_str());
    ImGui::TableHeadersRow();
    for (int s : slots) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.models[static_cast<size_t>(s)].c_str());
      for (const auto& nr : sweep.needles_queried) {
        ImGui::TableNextColumn();
        double acc = 0;
        int n = 0;
        for (const auto& c : lab.cells[s])
          if (c.cell.needles == nr.first && c.cell.queried == nr.second) acc += c.accuracy, ++n;
        if (n) ImGui::Text("%.2f", acc / n);
      }
    }
    ImGui::EndTable();
  }
  // Every episode: what each model answered, right or not, and where it looked.
  size_t episodes = 0;
  for (int s : slots) episodes += p.runs[static_cast<size_t>(s)].size();
  if (ImGui::CollapsingHeader(("Episodes (" + std::to_string(episodes) + ")").c_str(), ImGuiTreeNodeFlags_DefaultOpen) &&
      ImGui::BeginTable("episodes", 9,
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY |
                            ImGuiTableFlags_RowBg,
                        ImVec2(0, ImGui::GetTextLineHeightWithSpacing() * 12))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* h : {"model", "tokens", "depth", "N", "R", "seed", "asked -> answered", "answer", "noise"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    std::vector<std::pair<int, size_t>> rows;
    for (int s : slots)
      for (size_t k = 0; k < p.runs[static_cast<size_t>(s)].size(); ++k) rows.push_back({s, k});
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(rows.size()));
    while (clipper.Step())
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
        const auto [s, k] = rows[static_cast<size_t>(i)];
        const NeedleRun& run = p.runs[static_cast<size_t>(s)][k];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(p.models[static_cast<size_t>(s)].c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%lld", static_cast<long long>(run.tokens));
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(depth_label(run.cell.depth).c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%d", run.cell.needles);
        ImGui::TableNextColumn();
        ImGui::Text("%d", run.cell.queried);
        ImGui::TableNextColumn();
        ImGui::Text("%llu", static_cast<unsigned long long>(run.seed));
        ImGui::TableNextColumn();
        std::string qa;
        for (size_t q = 0; q < run.truths.size() && q < run.replies.size(); ++q)
          qa += (q ? "; " : "") + run.truths[q] + " -> " + run.replies[q] +
                (run.truths[q] == run.replies[q] ? " (right)" : " (wrong)");
        if (run.answered == run.asked)
          ImGui::TextColored(ImVec4(0.1f, 0.55f, 0.1f, 1), "%s", qa.c_str());
        else
          ImGui::TextUnformatted(qa.c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%.3f", run.attention.mean.answer);
        ImGui::TableNextColumn();
        ImGui::Text("%.3f", run.attention.mean.noise);
      }
    ImGui::EndTable();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "Paper (Ye et al., ICLR 2025, Table 3; 3B models, 4K context): attention to answer by depth 0/25/50/75/100 %%: "
      "Transformer .03 .03 .03 .07 .09, DIFF .27 .30 .31 .32 .40; noise: Transformer .51 .54 .52 .49 .49, DIFF .01 "
      ".02 .02 .02 .01.");
  ImGui::PopStyleColor();
}

void draw_model_slots(GuiState& state, InferenceWorker& worker) {
  for (int s = 0; s < kSlots; ++s) {
    ImGui::PushID(s);
    const SlotInfo& info = state.status.slots[static_cast<size_t>(s)];
    ImGui::Text("%s model:", s == 0 ? "Left" : "Right");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 22);
    ImGui::InputText("##path", &state.slots[s].path_field);
    ImGui::SameLine();
    if (ImGui::Button("Open model")) {
      worker.load(s, state.slots[s].path_field);
      state.prompt.pending = true;  // re-run the prompt with the new model
      state.prompt.last_edit = 0;
    }
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
    ImGui::InputTextWithHint("##bundle", "trace bundle folder", &state.slots[s].bundle_field);
    ImGui::SameLine();
    if (ImGui::Button("Open trace bundle")) worker.open_bundle(s, state.slots[s].bundle_field);
    ImGui::SameLine();
    const bool loading_here = state.status.load_fraction >= 0 &&
                              state.status.activity.find("loading " + state.slots[s].path_field) == 0;
    if (loading_here) {
      ImGui::ProgressBar(static_cast<float>(state.status.load_fraction), ImVec2(ImGui::GetFontSize() * 10, 0));
      ImGui::SameLine();
      if (ImGui::Button("Cancel loading")) worker.cancel_load();
      ImGui::SameLine();
    }
    // Wrapped: Hugging Face descriptions (architecture, dtype, tokenizer notes) can be long.
    ImGui::PushStyleColor(ImGuiCol_Text, info.error.empty() ? ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled)
                                                            : ImVec4(0.9f, 0.3f, 0.3f, 1));
    ImGui::TextWrapped("%s", !info.error.empty() ? info.error.c_str()
                             : info.loaded       ? info.description.c_str()
                                                 : "(loading)");
    ImGui::PopStyleColor();
    ImGui::PopID();
  }
}

// Where both models run. Picking another device loads the loaded models again there (a sweep in
// progress stops, as with any model load) and re-runs the prompt.
void draw_device_menu(GuiState& state, InferenceWorker& worker) {
  int pick = static_cast<int>(state.device);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
  if (ImGui::Combo("device (both models)", &pick, "auto\0cpu\0cuda\0")) {
    const auto to = static_cast<DeviceChoice>(pick);
    const DeviceSwitch plan = plan_device_switch(state.device, to, state.cuda);
    state.device_message = plan.message;
    if (plan.accepted) {
      state.device = to;
      worker.set_device(to);
    }
    if (plan.reload) {
      for (int s = 0; s < kSlots; ++s) {
        // A loaded model again from where it came; a slot whose load failed (e.g. CUDA asked at start on
        // a CPU-only build) tries its typed folder again.
        const SlotInfo& info = state.status.slots[static_cast<size_t>(s)];
        if (info.loaded && !info.path.empty())
          worker.load(s, info.path);
        else if (!info.error.empty() && !state.slots[s].path_field.empty())
          worker.load(s, state.slots[s].path_field);
      }
      state.prompt.pending = true;
      state.prompt.last_edit = 0;
    }
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("auto: the GPU when LibTorch has CUDA, else the CPU. %s", state.cuda ? "CUDA is available."
                                                                                          : "No CUDA here.");
  if (!state.device_message.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("%s", state.device_message.c_str());
  }
}

void draw_controls(GuiState& state, int layers, int heads[kSlots]) {
  ViewState& v = state.view;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  // -1 until a model answers: the last layer is shown then.
  ImGui::SliderInt("layer", &v.layer, 0, std::max(0, layers - 1), v.layer < 0 ? "last" : "%d");
  for (int s = 0; s < kSlots; ++s) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
    ImGui::SliderInt(s == 0 ? "left head" : "right head", &v.head[s], 0, std::max(0, heads[s] - 1));
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
  ImGui::Combo("scale", &v.scale, "linear\0sqrt\0log\0");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
  ImGui::Combo("pooling", &v.pooling, "max\0mean\0");
  ImGui::SameLine();
  ImGui::Checkbox("shared scale", &v.shared_scale);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
  ImGui::SliderFloat("clamp %", &v.clamp_percentile, 90.0f, 100.0f, "%.1f");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
  if (ImGui::Combo("logits", &v.quantization, "exact\0" "8-bit\0" "6-bit\0" "4-bit\0")) {
    state.prompt.pending = true;  // re-run both models with the new width
    state.prompt.last_edit = 0;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Absmax-quantize every attention logit (per head, dynamic) before the softmax,\n"
                      "as in the paper's quantization study; both models re-run.");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
  int budget_mb = static_cast<int>(state.pooled_budget >> 20);
  if (ImGui::InputInt("long-prompt MB", &budget_mb, 64, 256, ImGuiInputTextFlags_EnterReturnsTrue)) {
    state.pooled_budget = static_cast<size_t>(std::clamp(budget_mb, 0, 65536)) << 20;
    state.prompt.pending = true;  // re-run with the new budget
    state.prompt.last_edit = 0;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Prompts whose exact maps would need more than this per model are captured in blocks\n"
                      "and kept as pooled maps of this size (0: always exact maps, memory grows with T^2).");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 16);
  ImGui::InputText("export folder", &v.export_dir);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
  ImGui::InputInt("PNG size", &v.export_size, 256, 1024);
  v.export_size = std::clamp(v.export_size, 8, 16384);
  ImGui::SameLine();
  ImGui::TextDisabled("Ctrl+E: export all maps shown   F12: window screenshot");
}

bool write_screenshot(const std::string& path, int width, int height) {
  std::vector<unsigned char> px(static_cast<size_t>(width) * height * 3);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, px.data());
  stbi_flip_vertically_on_write(1);  // GL rows are bottom-up
  const int ok = stbi_write_png(path.c_str(), width, height, 3, px.data(), width * 3);
  stbi_flip_vertically_on_write(0);
  return ok != 0;
}


}  // namespace

int run_gui(const GuiOptions& opt) {
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "difflens: cannot open a window (no display?). Headless commands: difflens --help\n");
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(opt.width, opt.height, "DiffLens", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "difflens: cannot create an OpenGL 3.3 core window\n");
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // a fixed layout; nothing to persist yet
  io.Fonts->FontBuilderIO = ImGuiFreeType::GetBuilderForFreeType();
  // Two sizes baked (crisp text in both): the normal one and the lecture one; characters beyond the base
  // ranges are added as prompts and tokens bring them (the atlas is rebuilt between frames).
  UiFonts fonts;
  fonts.main = viz::find_system_font().string();
  fonts.fallback = viz::find_fallback_font().string();
  fonts.scale = opt.font_scale;
  fonts.needs.add(opt.prompt);
  build_fonts(fonts);
  ImGui::StyleColorsLight();
  ImGui::GetStyle().ScaleAllSizes(opt.font_scale);  // padding, spacing, grab sizes follow the font (HiDPI)
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  int exit_status = 0;
  {
    const viz::HeatmapRenderer renderer;
    InferenceWorker worker([] { glfwPostEmptyEvent(); }, opt.threads);
    GuiState state;
    state.device = parse_device(opt.device);
    state.cuda = cuda_available();
    worker.set_device(state.device);
    for (int s = 0; s < kSlots; ++s) {
      state.slots[s].path_field = opt.models[s];
      if (!opt.models[s].empty()) worker.load(s, opt.models[s]);
    }
    state.prompt.text = opt.prompt;
    state.prompt.pending = opt.bundle.empty();  // a bundle at start is shown instead of a run of the prompt
    if (!opt.bundle.empty()) {
      state.slots[0].bundle_field = opt.bundle;
      worker.open_bundle(0, opt.bundle);
    }
    state.view.layer = opt.layer;
    state.selection.query = opt.query;
    state.lecture = opt.lecture;
    state.view.zoom_row0 = opt.zoom[0];
    state.view.zoom_col0 = opt.zoom[1];
    state.view.zoom_span = opt.zoom[2];
    if (!opt.export_dir.empty()) state.view.export_dir = opt.export_dir;
    state.view.maps_fraction = opt.maps_fraction;
    state.needle.haystack_path = opt.haystack;
    state.pooled_budget = opt.pooled_budget_mb > 0 ? static_cast<size_t>(opt.pooled_budget_mb * 1024 * 1024) : 0;
    state.lab.lengths = opt.lab_lengths;
    state.lab.depths = opt.lab_depths;
    state.lab.needles = opt.lab_needles;
    state.lab.queried = opt.lab_queried;
    state.lab.seeds = opt.lab_seeds;
    state.selection.answer_begin = opt.answer_begin;
    state.selection.answer_end = opt.answer_end;
    if (opt.needle.size() >= 5) {  // a needle prompt at start (validated by the CLI)
      state.needle.length = opt.needle[0];
      state.needle.depth_pct = opt.needle[1];
      state.needle.needles = opt.needle[2];
      state.needle.asked = opt.needle[3];
      state.needle.seed = opt.needle[4];
      if (opt.needle.size() == 6) state.needle.with_answer = opt.needle[5] != 0;
      build_needle_prompt(state, opt.models[0]);
      if (opt.layer >= 0 || opt.head >= 0) state.needle.focus_pending = false;  // --select wins
      if (state.needle.built.rfind("could not", 0) == 0)
        std::fprintf(stderr, "difflens: %s\n", state.needle.built.c_str());
    }
    for (int k = 0; k < 4; ++k)
      if (kQuantizationBits[k] == opt.logit_bits) state.view.quantization = k;
    if (opt.head >= 0) state.view.head[0] = state.view.head[1] = opt.head;
    if (opt.lab_run) start_lab_sweep(state, worker);  // after the logits setting it uses
    HeadView head_views[kSlots];
    ModelView model_views[kSlots];
    int frames_since_result = -1;
    std::vector<double> first_frame_ms, steady_ms;  // headless frame timing
    bool first_panels = true;
    bool export_pending = opt.export_all;
    bool simulated_edit = false;  // headless Ctrl+E, once the first result is on screen
    bool result_ready = false;    // headless: the simulated edit's result arrived

    while (!glfwWindowShouldClose(window)) {
      // Sleep until input or a worker result (the worker posts an event when a job ends); wake up for the
      // debounce deadline. While the models run, redraw only a few times a second for the status line:
      // every frame costs CPU the inference could use (software GL especially).
      if (state.prompt.pending || frames_since_result >= 0)
        glfwWaitEventsTimeout(0.03);
      else if (state.status.busy)
        glfwWaitEventsTimeout(0.25);
      else
        glfwWaitEventsTimeout(0.5);
      const double frame_start = now_seconds();  // the frame's own work, not the wait for events

      // The one point per frame where results reach the UI.
      if (auto r = worker.take_result()) {
        state.shown = std::move(r);
        if (state.needle.focus_pending && state.shown->prompt == state.prompt.text) {
          state.needle.focus_pending = false;
          focus_answer_head(state, *state.shown);
        }
        // Headless screenshots time a real edit: the first result (models just loaded) triggers one
        // simulated keystroke, and the screenshot waits for the result of that edit. A bundle at start is
        // shown as it is.
        if (!opt.screenshot.empty() && !simulated_edit && opt.bundle.empty()) {
          simulated_edit = true;
          state.prompt.pending = true;
          state.prompt.last_edit = now_seconds();
          continue;
        }
        if (state.edited_at > 0) state.edit_to_screen_ms = 1000.0 * (now_seconds() - state.edited_at);
        if (!opt.screenshot.empty()) result_ready = true;
      }
      state.status = worker.status();
      poll_lab(state, worker);
      if (frames_since_result < 0 && result_ready &&
          (!opt.lab_run || (state.lab.progress && !state.lab.progress->running))) {
        frames_since_result = 0;  // headless: the screenshot waits for the first result (and --lab-run's sweep)
        if (opt.lab_run) {
          const SweepProgress& p = *state.lab.progress;
          std::printf("needle lab: %zu/%zu episodes%s%s\n", p.done, p.total, p.finished ? "" : " (not finished) ",
                      p.error.c_str());
          if (opt.export_all && p.done > 0) {
            export_lab(state);
            std::printf("%s\n", state.lab.message.c_str());
          }
        }
      }
      if (state.prompt.pending && now_seconds() - state.prompt.last_edit > kDebounceSeconds) {
        CaptureOptions capture;
        capture.logit_bits = kQuantizationBits[std::clamp(state.view.quantization, 0, 3)];
        // Long prompts switch to pooled maps (quantization needs whole maps: off above the budget).
        capture.pooled_budget_bytes = capture.logit_bits > 0 ? 0 : state.pooled_budget;
        worker.run(state.prompt.text, capture);
        state.prompt.pending = false;
        state.edited_at = state.prompt.last_edit;
      }

      // Characters the atlas lacks (new prompt text, a new trace's tokens): rebuild it before this frame.
      const bool new_result = state.shown && state.shown->request != fonts.seen_request;
      if (fonts.needs.add(state.prompt.text) | (new_result && need_trace_glyphs(fonts, *state.shown))) {
        build_fonts(fonts);
        ImGui_ImplOpenGL3_DestroyFontsTexture();
        ImGui_ImplOpenGL3_CreateFontsTexture();
      }
      if (new_result) fonts.seen_request = state.shown->request;
      if (fonts.normal && fonts.lecture) io.FontDefault = state.lecture ? fonts.lecture : fonts.normal;
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      ImGui::SetNextWindowPos(ImVec2(0, 0));
      ImGui::SetNextWindowSize(io.DisplaySize);
      ImGui::Begin(
          "DiffLens", nullptr,
          ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoBringToFrontOnFocus);
      draw_model_slots(state, worker);
      ImGui::Checkbox("Lecture mode (large text)", &state.lecture);
      ImGui::SameLine(0, ImGui::GetFontSize() * 2);
      draw_device_menu(state, worker);
      ImGui::Separator();
      ImGui::TextUnformatted("Prompt");
      if (ImGui::InputTextMultiline("##prompt", &state.prompt.text,
                                    ImVec2(-1, ImGui::GetTextLineHeight() * 4))) {
        state.prompt.pending = true;
        state.selection.needles.clear();  // the builder's spans no longer match the text
        state.prompt.last_edit = now_seconds();
      }
      int layers = 0, heads[kSlots] = {0, 0};
      if (state.shown)
        for (int s = 0; s < kSlots; ++s)
          if (const auto& t = state.shown->traces[s]) {
            layers = std::max(layers, static_cast<int>(t->layers.size()));
            heads[s] = static_cast<int>(t->config.map_heads());
          }
      if (layers > 0) {  // keep the requested selection until there is a model to check it against
        if (state.view.layer < 0 || state.view.layer >= layers) state.view.layer = layers - 1;
        for (int s = 0; s < kSlots; ++s)
          state.view.head[s] = std::clamp(state.view.head[s], 0, std::max(0, heads[s] - 1));
      }
      draw_controls(state, layers, heads);
      ImGui::Separator();
      state.selection.hovered_key = state.selection.hovered_next;
      state.selection.hovered_next = -1;
      std::shared_ptr<const Trace> any;
      if (state.shown)
        for (int s = kSlots - 1; s >= 0; --s)
          if (state.shown->traces[s]) any = state.shown->traces[s];
      if (any) {
        const int T = static_cast<int>(any->length());
        if (state.selection.query < 0 || state.selection.query >= T) state.selection.query = T - 1;
        draw_token_strip(state, any->tokens);
        ImGui::Separator();
      }
      if (state.shown) {
        const float avail = ImGui::GetContentRegionAvail().x, avail_h = ImGui::GetContentRegionAvail().y;
        // Maps take `maps_fraction` of the height left (the tabbed panels below get the rest; the bar
        // under the maps drags it), as wide as four maps side by side allow.
        const float side =
            std::max(96.0f, std::min((avail - 5 * ImGui::GetStyle().ItemSpacing.x) / 4.0f,
                                     state.view.maps_fraction * avail_h -
                                         5 * ImGui::GetTextLineHeightWithSpacing()));
        for (int s = 0; s < kSlots; ++s) {
          const auto& t = state.shown->traces[s];
          if (s) ImGui::SameLine();
          ImGui::BeginGroup();
          if (!t && state.shown->errors[s].empty()) {
            ImGui::TextDisabled("%s model: none loaded", s == 0 ? "left" : "right");
          } else if (!t) {  // which side failed, then why
            ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s model: %s", s == 0 ? "left" : "right",
                               state.shown->errors[s].c_str());
          } else {
            ImGui::Text("%s  layer %d  head %d  (%lld tokens)",
                        t->config.name.empty() ? to_string(t->config.attention) : t->config.name.c_str(),
                        state.view.layer, state.view.head[s], static_cast<long long>(t->length()));
            if (t->logit_bits > 0) {
              ImGui::SameLine();
              ImGui::TextColored(ImVec4(0.75f, 0.35f, 0.0f, 1), "logits quantized to %d bits", t->logit_bits);
            }
            head_views[s].set_subject(
                t->config.name.empty() ? to_string(t->config.attention) : t->config.name, state.view.layer,
                state.view.head[s], t);
            state.exact_tile_shown[s] = head_views[s].draw(state,
                               maps_of(*t, state.view.layer, state.view.head[s], state.shown->request, s,
                                       state.view.pooling == 0),
                               t->tokens, renderer, side);
          }
          ImGui::EndGroup();
        }
        // Splitter: drag to give the maps more or less of the height.
        ImGui::InvisibleButton("##split", ImVec2(-1, std::max(6.0f, ImGui::GetFontSize() * 0.4f)));
        const bool split_hot = ImGui::IsItemHovered() || ImGui::IsItemActive();
        if (ImGui::IsItemActive() && avail_h > 0)
          state.view.maps_fraction =
              std::clamp(state.view.maps_fraction + ImGui::GetIO().MouseDelta.y / avail_h, 0.2f, 0.85f);
        if (split_hot) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeNS);
        {
          const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
          const float y = (a.y + b.y) / 2;
          ImGui::GetWindowDrawList()->AddLine(ImVec2(a.x, y), ImVec2(b.x, y),
                                              split_hot ? IM_COL32(60, 120, 220, 255) : IM_COL32(180, 180, 180, 255),
                                              split_hot ? 3.0f : 1.0f);
        }
        const float bottom = -1.5f * ImGui::GetTextLineHeightWithSpacing();  // keep the status line visible
        ImGui::BeginChild("panels", ImVec2(0, bottom));
        if (ImGui::BeginTabBar("panels")) {
          if (ImGui::BeginTabItem("Query row, lambda, next token")) {
            // Row view for both models, then λ and next-token panels side by side.
            const float col = ImGui::GetContentRegionAvail().x / 2 - ImGui::GetStyle().ItemSpacing.x;
            for (int s = 0; s < kSlots; ++s) {
              if (s) ImGui::SameLine();
              ImGui::BeginChild(s == 0 ? "row0" : "row1", ImVec2(col, ImGui::GetTextLineHeight() * 5.5f));
              if (const auto& t = state.shown->traces[s]) draw_row_view(state, *t, state.view.head[s]);
              ImGui::EndChild();
            }
            ImGui::BeginChild("lambda", ImVec2(col, 0));
            for (int s = 0; s < kSlots; ++s)
              if (const auto& t = state.shown->traces[s]; t && t->config.is_diff()) draw_lambda_panel(*t);
            ImGui::EndChild();
            ImGui::SameLine();
            ImGui::BeginChild("next", ImVec2(col, 0));
            for (int s = 0; s < kSlots; ++s)
              if (const auto& t = state.shown->traces[s]) draw_next_tokens(*t);
            ImGui::EndChild();
            ImGui::EndTabItem();
          }
          if (ImGui::BeginTabItem("Model view", nullptr,
                                  opt.open_model_view && first_panels ? ImGuiTabItemFlags_SetSelected : 0)) {
            const float fw = ImGui::GetFontSize() * 8;
            ImGui::SetNextItemWidth(fw);
            ImGui::InputTextWithHint("layers", "all, or 0-3,7", &state.view.layer_filter);
            ImGui::SameLine();
            ImGui::SetNextItemWidth(fw);
            ImGui::InputTextWithHint("heads", "all, or 0-3,7", &state.view.head_filter);
            ImGui::SameLine();
            ImGui::TextDisabled("(scrolls when the grid is larger than the tab)");
            // Thumbnails as large as the tab allows: every shown layer's row fits the height, both grids the
            // width; at least 32 px (the grid scrolls beyond that).
            int rows = 1, cols = 0;
            for (int s = 0; s < kSlots; ++s)
              if (const auto& t = state.shown->traces[s]) {
                rows = std::max(rows, static_cast<int>(
                                          parse_index_filter(state.view.layer_filter, static_cast<int>(t->layers.size())).size()));
                cols += static_cast<int>(
                    parse_index_filter(state.view.head_filter, static_cast<int>(t->config.map_heads())).size());
              }
            ImGui::BeginChild("modelgrid", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
            const ImVec2 room = ImGui::GetContentRegionAvail();
            const float pad = ImGui::GetStyle().ItemSpacing.x;
            const float label_w = ImGui::CalcTextSize("L00  lambda -0.000").x;
            const float thumb = std::clamp(
                std::min((room.y - 2 * ImGui::GetTextLineHeightWithSpacing()) / rows - pad,
                         (room.x - 3 * ImGui::GetFontSize() - kSlots * label_w) / std::max(1, cols) - pad),
                32.0f, 320.0f);
            for (int s = 0; s < kSlots; ++s) {
              if (s) ImGui::SameLine(0, 3 * ImGui::GetFontSize());
              ImGui::BeginGroup();
              if (const auto& t = state.shown->traces[s])
                model_views[s].draw(state, *t, s, state.shown->request, renderer, thumb);
              ImGui::EndGroup();
            }
            ImGui::EndChild();
            ImGui::EndTabItem();
          }
          if (ImGui::BeginTabItem("Attention noise", nullptr,
                                  opt.open_noise && first_panels ? ImGuiTabItemFlags_SetSelected : 0)) {
            draw_needle_builder(state);
            draw_noise_panel(state, *state.shown);
            ImGui::EndTabItem();
          }
          if (ImGui::BeginTabItem("Needle lab", nullptr,
                                  opt.open_lab && first_panels ? ImGuiTabItemFlags_SetSelected : 0)) {
            draw_lab_panel(state, worker);
            ImGui::EndTabItem();
          }
          if (ImGui::BeginTabItem("Outliers", nullptr,
                                  opt.open_outliers && first_panels ? ImGuiTabItemFlags_SetSelected : 0)) {
            draw_outlier_panel(*state.shown, state.view.outlier_layer);
            ImGui::EndTabItem();
          }
          ImGui::EndTabBar();
          first_panels = false;  // --tab selects a tab once; the user's clicks rule after that
        }
        ImGui::EndChild();
      }
      ImGui::Separator();
      ImGui::Text("%s | last run %.0f ms for both models, %.0f ms from keystroke to maps on screen | %s",
                  state.status.busy ? "running..." : "idle", state.status.last_run_ms,
                  state.edit_to_screen_ms, state.message.c_str());
      ImGui::End();
      state.export_all = (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_E, false) && !io.WantTextInput) ||
                         (export_pending && state.shown.has_value());
      if (state.shown) export_pending = false;
      const bool window_shot = ImGui::IsKeyPressed(GLFW_KEY_F12, false);

      ImGui::Render();
      int w, h;
      glfwGetFramebufferSize(window, &w, &h);
      glViewport(0, 0, w, h);
      glClearColor(0.95f, 0.95f, 0.95f, 1);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      if (window_shot) {
        std::error_code ec;
        std::filesystem::create_directories(state.view.export_dir, ec);
        const std::string path =
            (std::filesystem::path(state.view.export_dir) /
             ("window-" + std::to_string(static_cast<long long>(now_seconds())) + ".png"))
                .string();
        state.message = write_screenshot(path, w, h) ? "wrote " + path : "could not write " + path;
      }
      if (frames_since_result >= 0 && !opt.screenshot.empty()) {  // headless: frame cost incl. GPU work
        glFinish();
        const double ms = 1000.0 * (now_seconds() - frame_start);
        (frames_since_result == 0 ? first_frame_ms : steady_ms).push_back(ms);
      }
      if (frames_since_result >= 0 && ++frames_since_result > opt.exit_after_frames) {
        if (!write_screenshot(opt.screenshot, w, h)) {
          std::fprintf(stderr, "difflens: cannot write %s\n", opt.screenshot.c_str());
          exit_status = 1;
        } else {
          long long T = 0;  // the prompt's length in tokens, from whichever slot ran it
          for (int s = kSlots - 1; s >= 0; --s)
            if (state.shown && state.shown->traces[s]) T = state.shown->traces[s]->length();
          std::printf(
              "wrote %s (%dx%d); %lld tokens: both models %.1f ms, keystroke -> maps on screen %.1f ms\n",
              opt.screenshot.c_str(), w, h, T, state.status.last_run_ms, state.edit_to_screen_ms);
          if (!state.message.empty()) std::printf("status line: %s\n", state.message.c_str());
          for (int s = 0; s < kSlots; ++s) {  // what each slot shows instead of maps, if anything
            const WorkerStatus st = worker.status();
            if (!st.slots[s].error.empty()) std::printf("slot %d: %s\n", s, st.slots[s].error.c_str());
            if (state.shown && !state.shown->errors[s].empty())
              std::printf("slot %d run: %s\n", s, state.shown->errors[s].c_str());
          }
          for (int s = 0; s < kSlots; ++s) {  // long prompts: what was kept and what the head view shows
            const auto& t = state.shown ? state.shown->traces[s] : nullptr;
            if (t && !t->layers.empty() && t->layers[0].pooled > 0)
              std::printf("%s: pooled %lld x %lld cells of %lld tokens; head view %s\n", t->config.name.c_str(),
                          static_cast<long long>(t->layers[0].pooled), static_cast<long long>(t->layers[0].pooled),
                          T, state.exact_tile_shown[s] ? "shows an exact tile" : "shows pooled cells");
          }
          if (!steady_ms.empty()) {
            double sum = 0, worst = 0;
            for (double m : steady_ms) sum += m, worst = std::max(worst, m);
            std::printf("frame time: first frame with new maps %.1f ms; then mean %.1f ms, max %.1f ms over %zu "
                        "frames\n",
                        first_frame_ms.empty() ? 0.0 : first_frame_ms[0], sum / steady_ms.size(), worst,
                        steady_ms.size());
          }
        }
        glfwSetWindowShouldClose(window, 1);
      }
      glfwSwapBuffers(window);
    }
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_status;
}

}  // namespace difflens::app
