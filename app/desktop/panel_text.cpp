// The Text view: the prompt laid out as running text, each token's background the selected query's
// attention to it ("from the query": its row) or that token's attention to the query's token ("to this
// token": its column, who reads it), of the selected head, the mean over the layer's heads or over every
// layer. Both models side by side (stacked when narrow), each with its legend; DIFF's A1 − λA2 on a
// diverging scale (negative weights red), the baseline's A on a sequential one. Hovering a token makes it the
// query while the pointer stays on it; a click keeps it. Long prompts scroll, the kept query in view.
#include <imgui.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/desktop/figure_export.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/reports/prediction_text.h"
#include "app/reports/text_page.h"
#include "core/formats/atomic_file.h"
#include "core/formats/token_weights.h"
#include "viz/text_shade.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

constexpr const char* kHeadChoices[] = {"the selected head", "mean over the layer's heads",
                                        "mean over all layers"};

ImU32 col(viz::Rgb8 c) {
  return IM_COL32(c.r, c.g, c.b, 255);
}

using Cache = GuiState::TextView::Cache;

// The slot's weights for the query under the current switches, computed once per change.
const Cache& weights_of(GuiState& state, const Trace& t, int slot, int query) {
  auto& tv = state.text;
  Cache& c = tv.cache[slot];
  const std::array<int64_t, 6> key{static_cast<int64_t>(state.shown->request),
                                   state.view.layer,
                                   state.view.head[slot],
                                   tv.heads,
                                   tv.direction,
                                   query};
  if (c.key == key) return c;
  c.key = key;
  c.error.clear();
  c.top = 0;
  try {
    c.weights =
        token_weights(t, state.view.layer, state.view.head[slot], static_cast<HeadPool>(tv.heads),
                      tv.direction == 0 ? WeightDirection::FromQuery : WeightDirection::ToToken, query);
    for (int64_t i = c.weights.first; i < c.weights.end; ++i)
      c.top = std::max(c.top, static_cast<double>(std::fabs(c.weights.w[static_cast<size_t>(i)])));
  } catch (const std::exception& e) {
    c.weights = {};
    c.error = e.what();
  }
  return c;
}

// Tokens laid out as running text `width` pixels wide in the current font into c's boxes: each exactly as
// wide as its text, so a word's pieces read as one word ("Mar" "sh" "all") and the spaces are the pieces'
// own; a line feed (a label ending in "↵") ends its line.
void layout_text(const std::vector<std::string>& labels, float width, Cache& c) {
  c.pad = std::max(1.0f, ImGui::GetFontSize() * 0.12f);
  c.line = ImGui::GetTextLineHeight() + 2 * c.pad + std::max(2.0f, ImGui::GetFontSize() * 0.25f);
  c.x.resize(labels.size());
  c.y.resize(labels.size());
  c.w.resize(labels.size());
  float x = 0, y = 0;
  static const std::string kNewline = "\xe2\x86\xb5";
  for (size_t i = 0; i < labels.size(); ++i) {
    c.w[i] = ImGui::CalcTextSize(labels[i].c_str(), nullptr, false).x;
    if (x > 0 && x + c.w[i] > width) {
      x = 0;
      y += c.line;
    }
    c.x[i] = x;
    c.y[i] = y;
    x += c.w[i];
    const std::string& s = labels[i];
    if (s.size() >= kNewline.size() &&
        s.compare(s.size() - kNewline.size(), kNewline.size(), kNewline) == 0) {
      x = 0;
      y += c.line;
    }
  }
  c.height = y + c.line;
}

std::string format_weight(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g", v);
  return s;
}

// A horizontal legend at the cursor: −top (red) .. 0 (white) .. +top (blue), or 0 .. top.
void draw_text_legend(const viz::ValueRange& range, viz::ValueScale scale) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float em = ImGui::GetFontSize(), h = ImGui::GetTextLineHeight();
  const std::string lo = range.diverging ? format_weight(-range.hi) : "0", hi = format_weight(range.hi);
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float bar_x = p.x + ImGui::CalcTextSize(lo.c_str()).x + em * 0.3f, bar_w = em * 9;
  dl->AddText(p, ImGui::GetColorU32(ImGuiCol_Text), lo.c_str());
  const int steps = 72;
  for (int k = 0; k < steps; ++k) {
    const double t = (k + 0.5) / steps;  // position along the bar
    const double v = range.diverging ? (2 * t - 1) * range.hi : t * range.hi;
    // The bar's position is linear in the value: the scale shows in how fast the colour deepens.
    const viz::TextShade s = viz::text_shade(v, range, scale);
    const float x0 = bar_x + bar_w * static_cast<float>(k) / steps;
    dl->AddRectFilled(ImVec2(x0, p.y + 2), ImVec2(x0 + bar_w / steps + 0.5f, p.y + h - 2), col(s.background));
  }
  dl->AddRect(ImVec2(bar_x, p.y + 2), ImVec2(bar_x + bar_w, p.y + h - 2), IM_COL32(150, 150, 150, 255));
  if (range.diverging) {
    const float zx = bar_x + bar_w / 2;
    dl->AddLine(ImVec2(zx, p.y + h - 4), ImVec2(zx, p.y + h), IM_COL32(90, 90, 90, 255));
  }
  const char* scale_name = scale == viz::ValueScale::Sqrt  ? "sqrt"
                           : scale == viz::ValueScale::Log ? "log"
                                                           : "linear";
  const std::string right =
      hi + (range.diverging ? "   (0 at the middle, " : "   (") + scale_name + " scale)";
  dl->AddText(ImVec2(bar_x + bar_w + em * 0.3f, p.y), ImGui::GetColorU32(ImGuiCol_Text), right.c_str());
  ImGui::Dummy(ImVec2(bar_x + bar_w + em * 0.3f + ImGui::CalcTextSize(right.c_str()).x - p.x, h));
}

// The panel's title (the model, the weights, the pool, the query; as tall as the kept query's title) and
// what the model expects after the query.
void draw_text_title(GuiState& state, const Trace& t, int slot, const std::vector<std::string>& labels,
                     const Cache& c, int query) {
  auto& tv = state.text;
  const SelectionState& sel = state.selection;
  const std::string name = t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
  const int T = static_cast<int>(t.length());
  const std::string pool =
      describe_pool(c.weights, static_cast<HeadPool>(tv.heads), state.view.layer, state.view.head[slot]);
  const std::string dir = tv.direction == 0 ? "from query " : "to token ";
  // The title's height follows the kept query's title, never the hovered one's: a longer hovered label must
  // not move the text under the pointer (it would land on another token, and back).
  auto title_of = [&](int q) {
    const std::string label = q >= 0 && q < T ? labels[static_cast<size_t>(q)] : "";
    return name + "   " + c.weights.what + ", " + pool + "   " + dir + std::to_string(q) + " '" + label + "'";
  };
  const float title_w = ImGui::GetContentRegionAvail().x;
  const std::string kept_title =
      wrap_at_spaces(title_of(std::clamp(sel.query, 0, std::max(0, T - 1))), title_w);
  const int title_lines = static_cast<int>(std::count(kept_title.begin(), kept_title.end(), '\n')) + 1;
  const std::string title = wrap_at_spaces(title_of(query), title_w, title_lines);
  const int shown_lines = static_cast<int>(std::count(title.begin(), title.end(), '\n')) + 1;
  ImGui::TextUnformatted(title.c_str());
  if (shown_lines < title_lines)
    ImGui::Dummy(
        ImVec2(1, ImGui::GetTextLineHeightWithSpacing() * static_cast<float>(title_lines - shown_lines) -
                      ImGui::GetStyle().ItemSpacing.y));
  {  // what the model expects after the query token: one line, as many of its top 5 as the width holds
    std::string line = next_after_line(
        t, query, 5, [&](const std::string& l) { return ImGui::CalcTextSize(l.c_str()).x <= title_w; });
    if (line.empty()) line = "no prediction kept after token " + std::to_string(query);
    ImGui::TextDisabled("%s", line.c_str());
  }
}

// The text laid out again when the run, the box or the font changed: in the largest UI font it fits in
// (a short prompt reads from the back of the room), then its boxes.
void fit_text_layout(GuiState& state, int slot, const std::vector<std::string>& labels, Cache& c,
                     ImVec2 inner) {
  auto& tv = state.text;
  const std::array<float, 4> layout_key{static_cast<float>(state.shown->request % 16777216), inner.x, inner.y,
                                        ImGui::GetFontSize()};
  if (c.layout_key != layout_key) {  // lay the text out again: the largest font it fits in, then its boxes
    c.layout_key = layout_key;
    tv.scrolled_to[slot] = -1;  // and bring the kept query into view again
    const float width = std::max(inner.x, ImGui::GetFontSize() * 4);
    ImFont* fit = ImGui::GetFont();
    bool laid_out = false;  // by a larger font's trial that fitted (kept, not laid out again)
    for (ImFont* f : ImGui::GetIO().Fonts->Fonts)
      if (f->FontSize > fit->FontSize) {
        ImGui::PushFont(f);
        Cache trial;
        layout_text(labels, width, trial);
        ImGui::PopFont();
        if (trial.height <= inner.y) {
          fit = f;
          c.x = std::move(trial.x);
          c.y = std::move(trial.y);
          c.w = std::move(trial.w);
          c.pad = trial.pad;
          c.line = trial.line;
          c.height = trial.height;
          laid_out = true;
        }
      }
    c.font_size = fit->FontSize;
    if (!laid_out) layout_text(labels, width, c);  // the current font
  }
}

// The text box: whole lines, scrolled to the kept query and the answer, each token shaded by its weight,
// the answer outlined, the query framed; hovering a token makes it the query, a click keeps it.
void draw_text_body(GuiState& state, const Trace& t, int slot, const std::vector<std::string>& labels,
                    Cache& c, int query, const viz::ValueRange& range, viz::ValueScale scale, ImVec2 body,
                    ImVec2 inner) {
  auto& tv = state.text;
  const SelectionState& sel = state.selection;
  ImFont* font = ImGui::GetFont();
  for (ImFont* f : ImGui::GetIO().Fonts->Fonts)
    if (f->FontSize == c.font_size) font = f;
  ImGui::PushFont(font);
  // The outline margin in the font the text is drawn in (a larger font than the panel's has a wider one).
  const float margin = std::max(2.0f, c.pad * 1.2f) + 1;
  const float fit_h = body.y - 2 * margin - 2 * ImGui::GetStyle().ChildBorderSize;
  const float lines_shown = std::max(1.0f, std::floor(fit_h / c.line));
  const float box_h = c.height <= fit_h ? body.y
                                        : std::min(body.y, std::ceil(lines_shown * c.line + 2 * margin +
                                                                     2 * ImGui::GetStyle().ChildBorderSize));
  ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(ImGui::GetStyle().WindowPadding.x, margin));
  ImGui::BeginChild(("text.body." + std::to_string(slot)).c_str(), ImVec2(0, box_h), true);
  ImGui::PopStyleVar();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = inner.x, pad = c.pad, line = c.line, height = c.height;
  const float view_lines_h = ImGui::GetWindowHeight() - 2 * margin - 2 * ImGui::GetStyle().ChildBorderSize;
  // Scrolling (the wheel, the scrollbar let go) comes to rest on a whole line.
  if (!ImGui::IsMouseDown(ImGuiMouseButton_Left) && line > 0) {
    const float snapped = std::min(std::round(ImGui::GetScrollY() / line) * line, ImGui::GetScrollMaxY());
    if (std::fabs(snapped - ImGui::GetScrollY()) > 0.5f) ImGui::SetScrollY(snapped);
  }
  // Keep the kept query and the marked answer in view when either changes (not the hovered query: the text
  // would move under the pointer): both when they fit, else the answer (where the query's attention is to
  // be seen; the title names the query), starting at a whole line (no line cut at the top).
  if ((tv.scrolled_to[slot] != sel.query || tv.scrolled_answer[slot] != sel.answer_begin) && sel.query >= 0 &&
      sel.query < static_cast<int>(c.y.size())) {
    const float qy = c.y[static_cast<size_t>(sel.query)], view_h = view_lines_h;
    const bool answer = sel.answer_begin >= 0 && sel.answer_begin < static_cast<int>(c.y.size());
    const float ay = answer ? c.y[static_cast<size_t>(sel.answer_begin)] : qy;
    const float ay_end = answer ? c.y[static_cast<size_t>(std::clamp(sel.answer_end - 1, sel.answer_begin,
                                                                     static_cast<int>(c.y.size()) - 1))] +
                                      line
                                : qy + line;
    const float from = std::min(ay, qy), to = std::max(ay_end, qy + line);
    float want = ImGui::GetScrollY();
    if (from < want || to > want + view_h) {
      if (to - from <= view_h)
        want = from - (view_h - (to - from)) / 2;  // both, centred
      else if (answer)
        want = ay - (view_h - (ay_end - ay)) / 2;  // the answer, centred
      else
        want = qy - view_h / 3;
      want = std::clamp(want, 0.0f, std::max(0.0f, height - view_h));
      ImGui::SetScrollY(std::max(0.0f, std::round(want / line) * line));  // the nearest line's top
    }
    tv.scrolled_to[slot] = sel.query;
    tv.scrolled_answer[slot] = sel.answer_begin;
  }
  // Only whole lines are drawn (none cut at the box's top or bottom while it rests on a line).
  const float top = ImGui::GetScrollY() - 0.5f, bottom = ImGui::GetScrollY() + view_lines_h - line + 1.5f;
  const bool hovered_window = ImGui::IsWindowHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const ImU32 disabled = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const std::vector<int> written = written_tokens(state);  // Continue's tokens: underlined, as in the strip
  for (size_t i = 0; i < labels.size() && i < c.y.size(); ++i) {
    if (c.y[i] < top || c.y[i] > bottom) continue;
    const ImVec2 a(origin.x + c.x[i], origin.y + c.y[i]);
    const ImVec2 b(a.x + c.w[i], a.y + ImGui::GetTextLineHeight() + 2 * pad);
    const int ii = static_cast<int>(i);
    const bool carries = ii >= c.weights.first && ii < c.weights.end;
    const float w = c.weights.w[i];
    const viz::TextShade s = viz::text_shade(carries ? w : 0.0, range, scale);
    if (carries) dl->AddRectFilled(a, b, col(s.background));
    dl->AddText(ImVec2(a.x, a.y + pad), carries ? col(s.ink) : disabled, labels[i].c_str());
    if (std::binary_search(written.begin(), written.end(), ii))
      dl->AddRectFilled(ImVec2(a.x, b.y - 2), ImVec2(b.x, b.y), written_ink(state));
    const bool answer = ii >= sel.answer_begin && ii < sel.answer_end;
    if (answer) {  // the span outlined as one box (per line): top and bottom, closed at its ends
      const ImU32 green = IM_COL32(20, 160, 60, 255);
      const float t = std::max(2.0f, pad * 1.2f);
      dl->AddRectFilled(ImVec2(a.x, a.y - t), ImVec2(b.x, a.y), green);
      dl->AddRectFilled(ImVec2(a.x, b.y), ImVec2(b.x, b.y + t), green);
      const bool first = ii == sel.answer_begin || c.y[i - 1] != c.y[i];
      const bool last = ii + 1 == sel.answer_end || i + 1 >= c.y.size() || c.y[i + 1] != c.y[i];
      if (first) dl->AddRectFilled(ImVec2(a.x - t, a.y - t), ImVec2(a.x, b.y + t), green);
      if (last) dl->AddRectFilled(ImVec2(b.x, a.y - t), ImVec2(b.x + t, b.y + t), green);
    }
    if (ii == query)
      dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), IM_COL32(240, 130, 0, 255), 0, 0, 2.5f);
    else if (ii == sel.query)  // the kept query while another token is hovered
      dl->AddRect(a, b, IM_COL32(240, 130, 0, 200), 0, 0, 1.0f);
    if (ii == tv.probe && slot == tv.first_slot) state.drawn.note("text.probe", a.x, a.y, b.x, b.y);
    if (hovered_window && mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < a.y + line) {
      tv.hover_next = ii;
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) state.selection.query = ii;
      std::string expected = expected_here(t, ii);
      if (!expected.empty()) expected = "\n" + expected;
      if (carries)
        ImGui::SetTooltip("token %d '%s'\n%s = %.5f%s\nclick: keep it as the query", ii, labels[i].c_str(),
                          c.weights.what.c_str(), w, expected.c_str());
      else
        ImGui::SetTooltip("token %d '%s'\n%s%s\nclick: keep it as the query", ii, labels[i].c_str(),
                          tv.direction == 0 ? "after the query: it does not see this token"
                                            : "before the token: it cannot read it",
                          expected.c_str());
    }
  }
  ImGui::Dummy(ImVec2(width, height));
  ImGui::EndChild();
  ImGui::PopFont();
}

// One model's panel in a child of `size`: title, legend, and the text (scrolling).
void draw_text_panel(GuiState& state, const Trace& t, int slot, const std::vector<std::string>& labels,
                     Cache& c, int query, double shared_top, ImVec2 size) {
  ImGui::BeginChild(("text.panel." + std::to_string(slot)).c_str(), size, false,
                    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  {
    const ImVec2 p = ImGui::GetWindowPos(), s = ImGui::GetWindowSize();
    state.drawn.note("text." + std::to_string(slot), p.x, p.y, p.x + s.x, p.y + s.y);
  }
  if (!c.error.empty()) {
    ImGui::TextUnformatted((t.config.name.empty() ? to_string(t.config.attention) : t.config.name).c_str());
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.8f, 0.2f, 0.2f, 1));
    ImGui::TextWrapped("%s", c.error.c_str());
    ImGui::PopStyleColor();
    ImGui::EndChild();
    return;
  }
  draw_text_title(state, t, slot, labels, c, query);
  viz::ValueRange range;
  range.diverging = t.config.is_diff();
  range.hi = shared_top > 0 ? shared_top : c.top > 0 ? c.top : 1;
  const auto scale = static_cast<viz::ValueScale>(std::clamp(state.view.scale, 0, 2));
  draw_text_legend(range, scale);

  // The text, wrapped into the child's width, in the largest UI font it fits in (a short prompt reads from
  // the back of the room); only the lines in view are drawn.
  // The box shows whole lines: its padding above and below is the answer's outline (so the line before the
  // first one shown never peeks in), its height a whole number of lines, and its scrolling steps by lines.
  const ImVec2 body = ImGui::GetContentRegionAvail();
  const float edge = std::max(2.0f, std::max(1.0f, ImGui::GetFontSize() * 0.12f) * 1.2f) + 1;
  const ImVec2 inner(body.x - 2 * ImGui::GetStyle().WindowPadding.x - ImGui::GetStyle().ScrollbarSize,
                     body.y - 2 * edge - 2 * ImGui::GetStyle().ChildBorderSize);
  fit_text_layout(state, slot, labels, c, inner);
  draw_text_body(state, t, slot, labels, c, query, range, scale, body, inner);
  ImGui::EndChild();
}

}  // namespace

void draw_text_view(GuiState& state) {
  const RunResult& r = *state.shown;
  auto& tv = state.text;
  int slots[kSlots], n = 0;
  for (int s = 0; s < kSlots; ++s)
    if (r.traces[s]) slots[n++] = s;
  if (n == 0) return;
  // The controls, wrapping when narrow.
  ImGui::RadioButton("from the query", &tv.direction, 0);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Each token: how much the query attends to it (the query's row).");
  flow_next(ImGui::GetFrameHeight() + ImGui::CalcTextSize("to this token").x);
  ImGui::RadioButton("to this token", &tv.direction, 1);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Each later token: how much it attends to the query's token (its column: who reads it).");
  const float combo_w = ImGui::CalcTextSize(kHeadChoices[1]).x + ImGui::GetFrameHeight() * 2;
  flow_next(combo_w);
  ImGui::SetNextItemWidth(combo_w);
  ImGui::Combo("##heads", &tv.heads, kHeadChoices, 3);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "the selected head: the layer and head picked in the side panel\n"
        "mean over the layer's heads: the average of each head's weights (DIFF: A1 - lambda A2, each head\n"
        "  with its own lambda), every kept head of the selected layer counting once\n"
        "mean over all layers: the same average over every kept head of every layer");
  flow_next(ImGui::GetFrameHeight() + ImGui::CalcTextSize("one scale").x);
  ImGui::Checkbox("one scale", &tv.shared_scale);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Both models' colours end at the larger of their largest weights (else each its own).");

  // The query: the hovered token while the pointer stays on it, else the kept one.
  const int T = static_cast<int>(r.traces[slots[0]]->length());
  if (T == 0) {
    ImGui::TextDisabled("the trace holds no tokens");
    return;
  }
  const int query = tv.hover >= 0 && tv.hover < T ? tv.hover : std::clamp(state.selection.query, 0, T - 1);
  tv.first_slot = slots[0];
  tv.shown_query = query;
  tv.hover_next = -1;
  double shared = 0;
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    shared = std::max(
        shared, weights_of(state, t, slots[k], std::clamp(query, 0, static_cast<int>(t.length()) - 1)).top);
  }
  const ImVec2 room = ImGui::GetContentRegionAvail();
  const float gap = ImGui::GetFontSize() * 0.6f;
  const bool beside = n > 1 && room.x >= ImGui::GetFontSize() * 48;
  const ImVec2 size =
      beside ? ImVec2((room.x - gap) / 2, room.y)
             : ImVec2(room.x, (room.y - gap * static_cast<float>(n - 1)) / static_cast<float>(n));
  for (int k = 0; k < n; ++k) {
    if (k > 0) {
      if (beside)
        ImGui::SameLine(0, gap);
      else
        ImGui::Dummy(ImVec2(0, gap - ImGui::GetStyle().ItemSpacing.y * 2));
    }
    const Trace& t = *r.traces[slots[k]];
    draw_text_panel(state, t, slots[k], r.labels[static_cast<size_t>(slots[k])], tv.cache[slots[k]], query,
                    tv.shared_scale ? shared : 0, size);
  }
  tv.hover = tv.hover_next;
}

void export_text_page(GuiState& state) {
  if (!state.shown) {
    state.message = "nothing to export: no result on screen";
    return;
  }
  const RunResult& r = *state.shown;
  std::vector<const Trace*> traces;
  PageOptions o;
  std::string note;
  for (int s = 0; s < kSlots; ++s) {
    if (!r.traces[s]) continue;
    if (!traces.empty() && r.traces[s]->token_ids != traces[0]->token_ids) {
      note = " (the right model tokenises the prompt differently: the page shows the left one)";
      continue;
    }
    o.head[traces.size()] = state.view.head[s];
    traces.push_back(r.traces[s].get());
  }
  if (traces.empty()) {
    state.message = "nothing to export: no trace on screen";
    return;
  }
  o.layer = state.view.layer;
  o.query = std::clamp<int64_t>(state.selection.query, 0, traces[0]->length() - 1);
  o.answer_begin = state.selection.answer_begin;
  o.answer_end = state.selection.answer_end;
  o.direction = state.text.direction == 0 ? WeightDirection::FromQuery : WeightDirection::ToToken;
  o.pool = static_cast<HeadPool>(std::clamp(state.text.heads, 0, 2));
  o.scale = std::clamp(state.view.scale, 0, 2);
  o.shared_scale = state.text.shared_scale;
  std::string path = state.export_page_path;
  try {
    if (path.empty()) {  // a new file: earlier pages stay
      const std::filesystem::path dir = state.view.export_dir;
      std::filesystem::create_directories(dir);
      const std::string stem = "page-L" + std::to_string(o.layer) + "-q" + std::to_string(o.query) +
                               (state.shown ? intervention_file_tag(*state.shown) : "");
      path = free_path(dir, stem, {".html"}).string() + ".html";
    } else if (std::filesystem::path(path).has_parent_path()) {
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    }
    PageReport report;
    const std::string html = text_page_html(traces, o, &report);
    write_file_atomically(path, html);
    char text[256];
    std::snprintf(text, sizeof text, "wrote %s (%.1f MB, %d maps)", path.c_str(), report.bytes / 1048576.0,
                  report.maps);
    state.message = text + note;
    for (const std::string& left : report.left_out) state.message += "; left out: " + left;
  } catch (const std::exception& e) {
    state.message = "page not written: " + std::string(e.what());
  }
}

}  // namespace difflens::app
