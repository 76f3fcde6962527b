// The Model view: each model's layers x heads grid, as maps (A1 − λA2 for DIFF, A for the baseline) or
// coloured by a per-head summary of the selected query's row or the rows from it to the end (attention to the
// answer, noise, entropy, the first token's share) with its legend; a click selects the layer and head.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/desktop/gui.h"
#include "app/desktop/panel_maps.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/reports/head_figures.h"
#include "core/formats/error.h"
#include "core/formats/head_scores.h"
#include "core/formats/model_dir.h"
#include "core/formats/tokenizer.h"
#include "core/model/model.h"

namespace difflens::app {
namespace {

constexpr const char* kMetricNames[] = {"maps",
                                        "attention mass on the answer",
                                        "attention noise (mass)",
                                        "entropy / ln(keys seen)",
                                        "first-token share (sink)",
                                        "previous-token score",
                                        "duplicate-token score",
                                        "induction score"};
// Metrics 5-7 (TransformerLens's head scores) are over the whole map: the query rows do not change them.
bool whole_map_metric(int metric) {
  return metric >= 5;
}

double metric_of(const HeadSummary& h, int metric) {
  switch (metric) {
    case 1:
      return h.answer;
    case 2:
      return h.noise;
    case 3:
      return h.entropy_norm;
    case 5:
      return h.previous_token;
    case 6:
      return h.duplicate_token;
    case 7:
      return h.induction;
    default:
      return h.sink;
  }
}

// A summary as a cell shows it: shares to 3 decimals below 0.1 (small shares are the point), 2 above; a
// value that rounds to zero is "0", never "-0.000".
std::string metric_text(double v, int metric) {
  char text[32];
  if (std::fabs(v) < 0.0005) return "0";
  if (metric != 3 && std::fabs(v) < 0.1)
    std::snprintf(text, sizeof text, "%.3f", v);
  else
    std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

}  // namespace

const HeadSummaries* ModelView::summaries(const GuiState& state, const Trace& t, uint64_t request) {
  const SelectionState& sel = state.selection;
  const int64_t T = t.length();
  const int64_t q = std::clamp<int64_t>(sel.query, 0, T - 1);
  const std::array<int64_t, 5> key{static_cast<int64_t>(request), q, sel.answer_begin, sel.answer_end,
                                   state.view.metric_rows};
  if (key == key_) return summaries_ ? &*summaries_ : nullptr;
  key_ = key;
  summaries_.reset();
  error_.clear();
  std::vector<int64_t> rows;
  for (int64_t i = q; i < (state.view.metric_rows == 1 ? T : q + 1); ++i) rows.push_back(i);
  const bool pooled = !t.layers.empty() && t.layers[0].pooled > 0;
  const double work =
      static_cast<double>(rows.size()) * static_cast<double>(T) *
      static_cast<double>(t.config.num_hidden_layers * t.config.num_attention_heads * t.config.head_dim);
  if (pooled && work > 4e8) {
    error_ = "the rows from the query to the end span " + std::to_string(rows.size()) +
             " tokens of a long prompt: pick the selected query's row, or a later query";
    return nullptr;
  }
  const bool answer = sel.answer_begin >= 0 && sel.answer_end > sel.answer_begin;
  try {
    summaries_ = head_summaries(
        t, rows,
        answer ? TokenSpan{std::min<int64_t>(sel.answer_begin, T), std::min<int64_t>(sel.answer_end, T)}
               : TokenSpan{},
        TokenSpan{q, T});
  } catch (const std::exception& e) {
    error_ = e.what();
  }
  return summaries_ ? &*summaries_ : nullptr;
}

// The width of a grid's row labels: "L3  lambda 0.141" for DIFF, "L3" for a model without lambda.
static float row_label_width(const Trace& t) {
  return t.config.is_diff() ? std::max(ImGui::CalcTextSize("L00  lambda -0.000").x,
                                       ImGui::CalcTextSize("L00  mean \xce\xbb -0.000").x)
                            : ImGui::CalcTextSize("L00  ").x;
}

static ImVec2 thumbnail_box(ImVec2 cell, bool summary) {
  if (summary) return cell;
  return ImVec2(std::min(cell.x, cell.y * 1.6f), std::min(cell.y, cell.x * 2.0f));
}

void ModelView::draw(GuiState& state, const Trace& t, int slot, uint64_t request,
                     const viz::HeatmapRenderer& renderer, ImVec2 cell, const MetricRange& range) {
  // Maps fill their cell up to 1.6 times wider than tall or twice as tall as wide (thumbnails: the grid fills
  // the view's height); summary cells fill it whole (numbers need no aspect).
  const int metric = state.view.head_metric;
  const ImVec2 box = thumbnail_box(cell, metric > 0);
  const int64_t T = t.length();
  // The title wraps at the grid's width (it must not push the other model's grid off the view).
  const int shown_heads = static_cast<int>(
      parse_index_filter(state.view.head_filter, static_cast<int>(t.config.map_heads())).size());
  const float label_w = row_label_width(t);
  const float grid_w = std::max(ImGui::CalcTextSize("L00  lambda -0.000").x, label_w) +
                       static_cast<float>(shown_heads) * (box.x + ImGui::GetStyle().ItemSpacing.x);
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + grid_w);
  // A run under interventions names them on the grid (its maps and λ are that run's).
  const std::string written = t.written_interventions();
  const std::string intervened = written.empty() ? "" : " (INTERVENED: " + written + ")";
  ImGui::TextWrapped("%s: %s%s", t.config.name.c_str(),
                     metric > 0           ? kMetricNames[metric]
                     : t.config.is_diff() ? "A1 - lambda A2, layers x heads"
                                          : "softmax A, layers x heads",
                     intervened.c_str());
  ImGui::PopTextWrapPos();
  const HeadSummaries* sums = metric > 0 ? summaries(state, t, request) : nullptr;
  if (metric > 0 && !sums) {
    ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", error_.c_str());
    return;
  }
  const bool needs_answer = metric == 1 || metric == 2;
  if (needs_answer && sums && !sums->has_answer) {
    ImGui::TextWrapped("Mark an answer span (right-drag over its tokens) to see the attention to it.");
    return;
  }
  const double lo = range.lo, hi = range.hi;
  const viz::Colormap& cmap = range.diverging ? viz::diverging_colormap() : viz::sequential_colormap();
  const std::vector<int> layers =
      parse_index_filter(state.view.layer_filter, static_cast<int>(t.layers.size()));
  const std::vector<int> heads =
      parse_index_filter(state.view.head_filter, static_cast<int>(t.config.map_heads()));
  {  // the heads' numbers over their columns
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float pad = ImGui::GetStyle().ItemSpacing.x;
    float x = p.x + label_w;
    for (size_t h = 0; h < heads.size(); ++h, x += box.x + pad) {
      const std::string s = "H" + std::to_string(heads[h]);
      ImGui::GetWindowDrawList()->AddText(ImVec2(x + (box.x - ImGui::CalcTextSize(s.c_str()).x) / 2, p.y),
                                          ImGui::GetColorU32(ImGuiCol_TextDisabled), s.c_str());
    }
    ImGui::Dummy(
        ImVec2(label_w + (box.x + pad) * static_cast<float>(heads.size()), ImGui::GetTextLineHeight()));
  }
  ImVec2 grid_min(FLT_MAX, FLT_MAX), grid_max(-FLT_MAX, -FLT_MAX);  // the cells drawn (layout report)
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
    if (t.config.is_diff_v2())  // λ per token and head: its mean over the layer
      ImGui::Text("L%d  mean \xce\xbb %.3f", l.index, l.lambda);
    else if (t.config.is_diff())
      ImGui::Text("L%d  lambda %.3f", l.index, l.lambda);
    else
      ImGui::Text("L%d", l.index);
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
    const viz::ValueRange map_range = ranges_.get({layer_version}, pct, t.config.is_diff(), [&] {
      return viz::value_range({grid.data.data()}, side * static_cast<int64_t>(l.heads.size()), side, pct,
                              t.config.is_diff(), false);
    });
    // This layer's row of summaries, if any.
    const std::vector<HeadSummary>* row = nullptr;
    const std::vector<int>* row_heads = nullptr;
    if (sums)
      for (size_t k = 0; k < sums->layers.size(); ++k)
        if (sums->layers[k] == l.index) row = &sums->per_head[k], row_heads = &sums->heads[k];
    bool first = true;
    for (size_t h = 0; h < l.heads.size(); ++h) {
      if (!std::binary_search(heads.begin(), heads.end(), l.heads[h])) continue;
      if (!first) ImGui::SameLine();
      first = false;
      {
        const ImVec2 c = ImGui::GetCursorScreenPos();
        grid_min = ImVec2(std::min(grid_min.x, c.x), std::min(grid_min.y, c.y));
        grid_max = ImVec2(std::max(grid_max.x, c.x + box.x), std::max(grid_max.y, c.y + box.y));
      }
      if (!ImGui::IsRectVisible(box)) {  // scrolled away: keep the space, skip the work
        ImGui::Dummy(box);
        continue;
      }
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const HeadSummary* hs = nullptr;
      if (row)
        for (size_t k = 0; k < row_heads->size(); ++k)
          if ((*row_heads)[k] == l.heads[h]) hs = &(*row)[k];
      if (metric > 0) {
        ImGui::PushID(static_cast<int>(l.index * 4096 + l.heads[h]));
        ImGui::InvisibleButton("cell", box);
        ImGui::PopID();
        ImDrawList* dl = ImGui::GetWindowDrawList();
        if (hs && std::isnan(metric_of(*hs, metric))) {  // a long prompt's pooled layer: no whole map kept
          dl->AddRectFilled(p, ImVec2(p.x + box.x, p.y + box.y), IM_COL32(200, 200, 200, 255));
          const ImVec2 ts = ImGui::CalcTextSize("n/a");
          if (ts.x < box.x - 4)
            dl->AddText(ImVec2(p.x + (box.x - ts.x) / 2, p.y + (box.y - ts.y) / 2), IM_COL32(20, 20, 20, 255),
                        "n/a");
        } else if (hs) {
          const double v = metric_of(*hs, metric);
          const viz::Rgb8 c = cmap.at(std::clamp((v - lo) / (hi - lo), 0.0, 1.0));
          dl->AddRectFilled(p, ImVec2(p.x + box.x, p.y + box.y), IM_COL32(c.r, c.g, c.b, 255));
          std::string text_s = metric_text(v, metric);
          for (int decimals : {2, 1}) {  // a narrow cell: fewer decimals rather than none ("0", never "-0.0")
            if (ImGui::CalcTextSize(text_s.c_str()).x < box.x - 4) break;
            char b[32];
            std::snprintf(b, sizeof b, "%.*f", decimals, v);
            text_s = std::fabs(v) < 0.5 * std::pow(10.0, -decimals) ? "0" : b;
          }
          const char* text = text_s.c_str();
          const ImVec2 ts = ImGui::CalcTextSize(text);
          const bool dark = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 140;
          if (ts.x < box.x - 4)
            dl->AddText(ImVec2(p.x + (box.x - ts.x) / 2, p.y + (box.y - ts.y) / 2),
                        dark ? IM_COL32(255, 255, 255, 255) : IM_COL32(20, 20, 20, 255), text);
        } else {
          dl->AddRectFilled(p, ImVec2(p.x + box.x, p.y + box.y), IM_COL32(230, 230, 230, 255));
        }
      } else {
        viz::HeatmapStyle style;
        style.range = map_range;
        style.scale = static_cast<viz::ValueScale>(state.view.scale);
        viz::HeatmapView& v = views_[{l.index, l.heads[h]}];
        const uint64_t version = (request << 24) ^ (static_cast<uint64_t>(slot) << 20) ^
                                 (static_cast<uint64_t>(l.index) << 12) ^
                                 (static_cast<uint64_t>(l.heads[h]) << 4) ^ 0x9 ^
                                 (pooled && state.view.pooling == 0 ? (uint64_t{1} << 60) : 0);
        v.update({grid.data.data() + static_cast<int64_t>(h) * side * side, side, side, version, true, {}},
                 static_cast<int>(box.x), static_cast<int>(box.y),
                 static_cast<viz::Pooling>(state.view.pooling), style, renderer);
        ImGui::Image(reinterpret_cast<ImTextureID>(static_cast<intptr_t>(v.target().texture())), box,
                     ImVec2(0, 1), ImVec2(1, 0));
      }
      const bool selected = l.index == state.view.layer && l.heads[h] == state.view.head[slot];
      if (selected)
        ImGui::GetWindowDrawList()->AddRect(p, ImVec2(p.x + box.x, p.y + box.y), IM_COL32(255, 140, 0, 255),
                                            0, 0, 3);
      if (ImGui::IsItemHovered()) {
        if (hs)
          ImGui::SetTooltip(
              "layer %d, head %d\nattention mass on the answer %.3f\non the noise %.3f\nentropy %.3f nats (%.3f of "
              "uniform)\nfirst-token share %.3f\nprevious-token %.3f, duplicate-token %.3f, induction %.3f",
              l.index, l.heads[h], hs->answer, hs->noise, hs->entropy, hs->entropy_norm, hs->sink,
              hs->previous_token, hs->duplicate_token, hs->induction);
        else
          ImGui::SetTooltip("layer %d, head %d", l.index, l.heads[h]);
      }
      if (ImGui::IsItemClicked()) {
        state.view.layer = l.index;
        state.view.head[slot] = l.heads[h];
      }
    }
    if (first) ImGui::NewLine();
  }
  if (grid_max.x > grid_min.x)
    state.drawn.note("modelgrid." + std::to_string(slot), grid_min.x, grid_min.y, grid_max.x, grid_max.y);
}

void build_repeated_prompt(GuiState& state, const std::string& model_dir) {
  GuiState::Repeated& r = state.repeated;
  try {
    if (model_dir.empty()) throw Error("the left slot has no model whose tokenizer could draw the tokens");
    const std::filesystem::path dir = resolve_model_folder(model_dir);  // a hub cache folder: its snapshot
    std::string note;
    // A remote model's tokenizer is a local copy of its tokenizer.model alone.
    const Tokenizer tok = std::filesystem::exists(dir / "config.json")
                              ? Model::load_tokenizer(dir, note)
                              : Tokenizer::sentencepiece(dir / "tokenizer.model");
    r.length = std::clamp(r.length, 1, kMaxRepeated);
    const RepeatedPrompt p =
        repeated_random_prompt(tok, r.length, static_cast<uint64_t>(std::max(0, r.seed)));
    reset_continue(state, "stopped: repeated random tokens replaced the text");
    state.prompt.text = p.text;
    state.prompt.rerun();
    state.selection = SelectionState{};  // no answer span or needle in random tokens; the query: the last
    state.needle.focus_pending = false;
    r.built = std::to_string(r.length) + " random tokens, then the same " + std::to_string(r.length) +
              " again (seed " + std::to_string(r.seed) + "): " + std::to_string(p.ids.size()) +
              " tokens. In the second copy an induction head looks at the token after the current token's "
              "first appearance (the induction score), a previous-token head one token back.";
    r.built_prompt = state.prompt.text;
  } catch (const std::exception& e) {
    r.built = std::string("could not build: ") + e.what();
    r.built_prompt.clear();
  }
}

namespace {

// The repeated random tokens row, shown with the head scores.
void draw_repeated_builder(GuiState& state) {
  GuiState::Repeated& r = state.repeated;
  const float w = ImGui::GetFontSize() * 6;
  flow_next(w, "random tokens");
  ImGui::SetNextItemWidth(w);
  ImGui::InputInt("random tokens", &r.length, 10, 100);
  r.length = std::clamp(r.length, 1, kMaxRepeated);
  flow_next(w, "seed##repeated");
  ImGui::SetNextItemWidth(w);
  ImGui::InputInt("seed##repeated", &r.seed);
  r.seed = std::max(0, r.seed);
  flow_next(ImGui::CalcTextSize("Repeat them").x + 2 * ImGui::GetStyle().FramePadding.x);
  if (ImGui::Button("Repeat them"))
    build_repeated_prompt(state, state.status.slots[0].tokenizer_dir.empty()
                                     ? state.status.slots[1].tokenizer_dir
                                     : state.status.slots[0].tokenizer_dir);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Prompt: that many random tokens, then the same tokens again (the induction score's prompt, as "
        "TransformerLens's head detector uses it; difflens heads --repeated N --seed S draws the same)");
  // The caption describes the prompt it built, while that prompt is on screen (not after an edit, a needle,
  // or a new count not yet built).
  const bool stale = !r.built_prompt.empty() && state.prompt.text != r.built_prompt;
  if (!r.built.empty() && !stale) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", r.built.c_str());
    ImGui::PopStyleColor();
  }
  state.drawn.note(stale ? "repeated.caption-stale" : "repeated.caption-current", 0, 0, 0, 0);
}

}  // namespace

void draw_model_view_tab(GuiState& state, ModelView model_views[kSlots],
                         const viz::HeatmapRenderer& renderer) {
  const float fw = ImGui::GetFontSize() * 7;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 13);
  ImGui::Combo(
      "show", &state.view.head_metric,
      "maps\0attention mass on the answer\0attention noise (mass)\0entropy\0first-token share (sink)\0"
      "previous-token score\0duplicate-token score\0induction score\0");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", kHeadSummaryDefinition);
  if (state.view.head_metric > 0 && !whole_map_metric(state.view.head_metric)) {
    flow_next(ImGui::GetFontSize() * 11, "over");
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 11);
    ImGui::Combo("over", &state.view.metric_rows, "the query's row\0rows query..end\0");
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("the selected query's row, or every row from the selected query to the end");
  }
  flow_next(fw, "layers");
  ImGui::SetNextItemWidth(fw);
  ImGui::InputTextWithHint("layers", "all, or 0-3,7", &state.view.layer_filter);
  flow_next(fw, "heads");
  ImGui::SetNextItemWidth(fw);
  ImGui::InputTextWithHint("heads", "all, or 0-3,7", &state.view.head_filter);
  if (whole_map_metric(state.view.head_metric)) draw_repeated_builder(state);
  // Cells as large as the view allows: every shown layer's row fits the height, both grids the width;
  // at least 2 or 3 text lines (the grid scrolls beyond that).
  // The two grids side by side or one above the other, whichever gives larger cells.
  int rows = 1, cols = 0, max_cols = 1, models = 0;
  float labels_w = 0, widest_label = 0;  // side by side: every grid's row labels; stacked: the widest
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown->traces[s]) {
      ++models;
      labels_w += row_label_width(*t) + ImGui::GetStyle().ItemSpacing.x;
      widest_label = std::max(widest_label, row_label_width(*t));
      rows = std::max(
          rows, static_cast<int>(
                    parse_index_filter(state.view.layer_filter, static_cast<int>(t->layers.size())).size()));
      const int c = static_cast<int>(
          parse_index_filter(state.view.head_filter, static_cast<int>(t->config.map_heads())).size());
      cols += c;
      max_cols = std::max(max_cols, c);
    }
  ImGui::BeginChild("modelgrid", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
  // One colour range for both models' summaries, so their cells compare: signed shares diverge around 0
  // when anything is negative; entropy / ln(keys seen) spans 0..1.
  const int metric = state.view.head_metric;
  // The colours span the summary's whole range, not the values shown (so a baseline's 0.004 stays pale
  // beside DIFF's 0.64): shares 0..1, or -1..1 when any is negative (DIFF can subtract); entropy 0..1.
  MetricRange range{0, 1, false};
  if (metric > 0) {
    for (int s = 0; s < kSlots; ++s)
      if (const auto& t = state.shown->traces[s])
        if (const HeadSummaries* sums = model_views[s].summaries(state, *t, state.shown->request))
          for (const auto& layer : sums->per_head)
            for (const HeadSummary& h : layer)
              if (metric != 3 && metric_of(h, metric) < -0.0005) range = {-1, 1, true};
    const viz::Colormap& cmap = range.diverging ? viz::diverging_colormap() : viz::sequential_colormap();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float w = ImGui::GetFontSize() * 14, h = ImGui::GetFontSize() * 0.8f;
    for (int i = 0; i < 48; ++i) {
      const viz::Rgb8 c = cmap.at((i + 0.5) / 48);
      dl->AddRectFilled(ImVec2(p.x + w * i / 48, p.y), ImVec2(p.x + w * (i + 1) / 48, p.y + h),
                        IM_COL32(c.r, c.g, c.b, 255));
    }
    ImGui::Dummy(ImVec2(w, h));
    ImGui::SameLine();
    ImGui::Text("%.0f ... %.0f  (%s%s; hover a cell for every score)", range.lo, range.hi,
                kMetricNames[metric], whole_map_metric(metric) ? ", over every row" : "");
    if (whole_map_metric(metric)) draw_card_view_lines(state, "heads");  // e.g. no induction head
  }
  // The cells take the room the legend and the cards' lines leave.
  const ImVec2 room = ImGui::GetContentRegionAvail();
  const float pad = ImGui::GetStyle().ItemSpacing.x, vpad = ImGui::GetStyle().ItemSpacing.y;
  const float header = 4 * ImGui::GetTextLineHeightWithSpacing();  // title, legend, head numbers
  const ImVec2 beside((room.x - 2 * ImGui::GetFontSize() - labels_w) / std::max(1, cols) - pad,
                      (room.y - header) / rows - vpad);
  const ImVec2 stacked((room.x - widest_label - pad) / max_cols - pad,
                       (room.y - models * header) / std::max(1, models * rows) - vpad);
  // A cell reads at 2 text lines, its number or its map (the lecture font's 46 px: both bundled grids side
  // by side at 1280 x 800 rather than the baseline's below the fold).
  const float least = ImGui::GetTextLineHeight() * 2;
  // The larger cells, unless that arrangement runs off the view's width while the other does not (the grid
  // scrolls down more readily than sideways).
  auto area = [&](ImVec2 c) {
    const ImVec2 b = thumbnail_box(c, state.view.head_metric > 0);
    return std::max(0.0f, b.x) * std::max(0.0f, b.y);
  };
  bool stack = area(stacked) > area(beside);
  if (beside.x < least && stacked.x >= least) stack = true;
  const ImVec2 cell(std::clamp((stack ? stacked : beside).x, least, 400.0f),
                    std::clamp((stack ? stacked : beside).y, least, 400.0f));
  for (int s = 0; s < kSlots; ++s) {
    if (s && !stack) ImGui::SameLine(0, 2 * ImGui::GetFontSize());
    ImGui::BeginGroup();
    if (const auto& t = state.shown->traces[s])
      model_views[s].draw(state, *t, s, state.shown->request, renderer, cell, range);
    ImGui::EndGroup();
    if (state.shown->traces[s])
      state.drawn.note("grid." + std::to_string(s), ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y,
                       ImGui::GetItemRectMax().x, ImGui::GetItemRectMax().y);
  }
  ImGui::EndChild();
}

}  // namespace difflens::app
