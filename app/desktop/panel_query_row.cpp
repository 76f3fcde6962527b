// The "Figure 1" view: for each model, the selected query's attention over every key it sees as bars (the
// paper's Figure 1: DIFF's row lands on the answer, the baseline's spreads over the context), the answer
// span in its own colour, the shares of the answer and of the noise written on the chart, token labels
// under the bars where they fit, and the model's next-token top 5 beside it.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "app/desktop/layout.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/reports/prediction_text.h"
#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/formats/tiles.h"
#include "viz/chart.h"
#include "viz/text_shade.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

struct QueryRow {
  std::vector<float> values;  // keys 0..q
  std::string what;           // "A1 - lambda A2" or "A"
  std::string error;
};

// The selected query's row of the selected head's map (a long prompt's row is recomputed exactly).
QueryRow query_row(const GuiState& state, const Trace& t, int head, int q) {
  QueryRow r;
  const int layer = state.view.layer;
  if (layer < 0 || layer >= static_cast<int>(t.layers.size())) return r;
  const LayerTrace& l = t.layers[static_cast<size_t>(layer)];
  const auto it = std::find(l.heads.begin(), l.heads.end(), head);
  if (it == l.heads.end() || (l.a.empty() && l.pooled == 0)) {
    r.error = "this trace kept no map of layer " + std::to_string(layer) + " head " + std::to_string(head);
    return r;
  }
  const int64_t T = t.length(), h = it - l.heads.begin();
  r.what = t.config.is_diff() ? "A1 \xe2\x88\x92 \xce\xbb A2" : "A";
  try {
    if (l.pooled > 0) {
      const AttentionTile tile = attention_tile(t, layer, head, q, 1, 0, q + 1);
      r.values = tile.a;
    } else {
      const float* row = l.a.data.data() + (h * T + q) * T;
      r.values.assign(row, row + q + 1);
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// The lines of the next-token column: its head and the top 5 after the prompt's last token, in the longest
// form that fits `width` (shortened before anything is cut: "after token 250" -> "after 250", "100.0 %" ->
// "100%").
std::vector<std::string> next_token_lines(const Trace& t, int query, float width) {
  const int last = static_cast<int>(t.length()) - 1;
  // After the query when the trace keeps that position's prediction, else after the last token.
  std::vector<Candidate> c = candidates_after(t, query, 5);
  const int after = c.empty() ? last : query;
  if (c.empty()) c = candidates_after(t, last, 5);
  std::vector<std::string> best;
  for (int form = 0; form < 2; ++form) {
    std::vector<std::string> lines;
    lines.push_back(after == last && query == last ? "next token"
                    : form == 0                    ? "after token " + std::to_string(after)
                                                   : "after " + std::to_string(after));
    for (const Candidate& k : c) {
      char text[160];
      std::snprintf(text, sizeof text, form == 0 ? "%5.1f %%  %s" : "%.0f%% %s", 100.0 * k.probability,
                    k.text.c_str());
      lines.push_back(text);
    }
    best = lines;
    if (std::all_of(lines.begin(), lines.end(),
                    [&](const std::string& l) { return ImGui::CalcTextSize(l.c_str()).x <= width; }))
      break;
  }
  return best;
}

// The widest line of the column's longer form: the room it asks for.
float next_token_width(const Trace& t, int query) {
  float w = 0;
  for (const std::string& l : next_token_lines(t, query, 1e9f))
    w = std::max(w, ImGui::CalcTextSize(l.c_str()).x);
  return w;
}

// The model's top 5 after the query (after the prompt's last token when the trace keeps no prediction for the
// query's position: said so).
void draw_next_tokens(const Trace& t, int query, ImVec2 at, float width, float height) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const int last = static_cast<int>(t.length()) - 1;
  std::vector<std::string> lines = next_token_lines(t, query, width);
  // As many candidates as the chart's height holds (a short chart in lecture mode: the top few).
  lines.resize(std::min(lines.size(), static_cast<size_t>(std::max(2.0f, std::floor(height / line)))));
  // Cut at the column's edge only as a last resort (a token longer than the column).
  dl->PushClipRect(at, ImVec2(at.x + width, at.y + line * static_cast<float>(lines.size())), true);
  for (size_t i = 0; i < lines.size(); ++i)
    dl->AddText(ImVec2(at.x, at.y + line * static_cast<float>(i)),
                ImGui::GetColorU32(i == 0 ? ImGuiCol_TextDisabled : ImGuiCol_Text), lines[i].c_str());
  dl->PopClipRect();
  if (query != last && !t.predictions.has(query) &&
      ImGui::IsMouseHoveringRect(at, ImVec2(at.x + width, at.y + line)))
    ImGui::SetTooltip(
        "This trace keeps the next-token distribution of the prompt's last token (%d),\nnot of the "
        "selected query (%d).",
        last, query);
}

// The query row's shares of the answer and the noise, and the row's absolute weight Σ|A| they divide by
// (DIFF's signed row sums to 1 - lambda, its |A| to more): the chart prints the denominator, so the answer's
// bars summed and divided by it give the share.
struct RowShare {
  AttentionShare share;
  double abs_sum = 0;
};
RowShare row_share(const QueryRow& row, int q, const SelectionState& sel) {
  RowShare r;
  r.share = query_row_share(row.values.data(), q, {sel.answer_begin, sel.answer_end});
  for (int64_t j = 0; j <= q && j < static_cast<int64_t>(row.values.size()); ++j)
    r.abs_sum += std::fabs(row.values[static_cast<size_t>(j)]);
  return r;
}

// The chart's title line(s): the longest of its forms that fits beside the shares (to the answer, noise),
// else the title on one line and the shares on a second. Returns the lines and where the shares go.
struct ChartTitle {
  std::string title;  // one or two lines ("\n")
  std::string shares;
  bool shares_below = false;  // on the second line (else at the first line's right end)
};

ChartTitle chart_title(const std::vector<std::string>& forms, const std::vector<std::string>& shares,
                       float width) {
  const float gap = ImGui::GetFontSize();
  auto w = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str()).x; };
  if (shares.empty()) {
    for (const std::string& f : forms)
      if (w(f) <= width) return {f, "", false};
    return {forms.back(), "", false};
  }
  for (const std::string& sh : shares)
    for (const std::string& f : forms)
      if (w(f) + gap + w(sh) <= width) return {f, sh, false};
  std::string title = forms.back();
  for (const std::string& f : forms)
    if (w(f) <= width) {
      title = f;
      break;
    }
  std::string sh = shares.back();
  for (const std::string& s2 : shares)
    if (w(s2) <= width) {
      sh = s2;
      break;
    }
  return {title + "\n", sh, true};
}

// One model's chart in [min, max]; the y range is [lo, hi].
void draw_row_chart(GuiState& state, const Trace& t, int slot, const QueryRow& row, int q, ImVec2 min,
                    ImVec2 max, double lo, double hi) {
  const SelectionState& sel = state.selection;
  const std::string name = t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
  const std::vector<std::string>& labels = state.shown->labels[static_cast<size_t>(slot)];
  const bool answer_marked = sel.answer_begin >= 0 && sel.answer_end > sel.answer_begin;
  const std::string head =
      "  L" + std::to_string(state.view.layer) + " H" + std::to_string(state.view.head[slot]);
  const std::string query = "   query " + std::to_string(q) + " '" + labels[static_cast<size_t>(q)] + "'";
  const std::vector<std::string> forms = {
      name + head + query + ":  " + row.what + " over keys " + viz::token_range(0, q + 1),
      name + head + query, name + head, name};
  std::vector<std::string> shares;
  if (answer_marked) {
    const auto [share, abs_sum] = row_share(row, q, sel);
    (void)abs_sum;
    // Attention mass (share of the row's |A|), and the net noise only with its budget (what the signed
    // shares of answer, query and noise add up to: (1 - lambda)/sum|A| for DIFF).
    char full[240], brief[160], least[160];
    std::snprintf(
        full, sizeof full,
        "row %lld: attention mass on the answer %.3f, on the noise %.3f   (net noise %+.3f of a budget "
        "%.3f)",
        static_cast<long long>(q), share.answer_mass, share.noise_mass, share.noise, share.budget);
    std::snprintf(brief, sizeof brief, "mass: answer %.3f  noise %.3f  (net noise %+.3f of %.3f)",
                  share.answer_mass, share.noise_mass, share.noise, share.budget);
    std::snprintf(least, sizeof least, "mass: answer %.3f  noise %.3f", share.answer_mass, share.noise_mass);
    shares = {full, brief, least};
  }
  const ChartTitle ct = chart_title(forms, shares, max.x - min.x);
  const PlotArea a = draw_plot_frame(min, max, lo, hi, "%.2f", true, ct.title);
  state.drawn.note("chart." + std::to_string(slot), a.min.x, a.min.y, a.max.x, a.max.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float th = ImGui::GetTextLineHeight();
  if (!ct.shares.empty()) {  // the shares, at the title line's right end or on the line below it
    const ImVec2 ts = ImGui::CalcTextSize(ct.shares.c_str());
    const ImVec2 p = ct.shares_below ? ImVec2(min.x, min.y + th) : ImVec2(max.x - ts.x, min.y);
    dl->AddText(p, IM_COL32(10, 110, 40, 255), ct.shares.c_str());
    state.drawn.note("chart." + std::to_string(slot) + ".shares", p.x, p.y, p.x + ts.x, p.y + ts.y);
    if (ImGui::IsMouseHoveringRect(p, ImVec2(p.x + ts.x, p.y + ts.y)))
      ImGui::SetTooltip("%s.\nThe query's own token is neither answer nor noise.", kAttentionShareDefinition);
  }
  const int n = q + 1;
  const float bw = (a.max.x - a.min.x) / static_cast<float>(n);
  auto in_answer = [&](int j) { return answer_marked && j >= sel.answer_begin && j < sel.answer_end; };
  const float zero = a.y(0);
  for (int j = 0; j < n; ++j) {
    const float v = row.values[static_cast<size_t>(j)];
    const ImU32 col = in_answer(j) ? IM_COL32(20, 160, 60, 255)
                      : j == q     ? IM_COL32(240, 130, 0, 255)
                      : j == sel.hovered_key
                          ? IM_COL32(230, 0, 150, 255)
                          : ink(v < 0 ? viz::kTextNegative : viz::kTextPositive);  // the sign colours
    const float x0 = a.min.x + bw * static_cast<float>(j), x1 = std::max(x0 + 1.0f, x0 + bw * 0.85f);
    const float y = std::clamp(a.y(v), a.min.y, a.max.y);
    dl->AddRectFilled(ImVec2(x0, std::min(y, zero)), ImVec2(x1, std::max(y, zero)), col);
  }
  if (answer_marked) {  // a band under the answer's keys, so a small share is still seen
    const float x0 = a.min.x + bw * static_cast<float>(std::min(sel.answer_begin, n)),
                x1 = a.min.x + bw * static_cast<float>(std::min(sel.answer_end, n));
    if (x1 > x0)
      dl->AddRectFilled(ImVec2(x0, a.max.y - 3), ImVec2(std::max(x1, x0 + 2), a.max.y),
                        IM_COL32(20, 160, 60, 255));
  }
  const ImU32 answer_ink = IM_COL32(10, 120, 40, 255), query_ink = IM_COL32(200, 100, 0, 255),
              key_ink = IM_COL32(40, 40, 40, 255);
  if (bw * 2.5f >= th) {
    // Bars wide enough: every key's label under its bar where it fits, the answer's and the query's first.
    std::vector<std::pair<float, float>> used;
    auto try_label = [&](int j, ImU32 col) {
      const std::string& s = labels[static_cast<size_t>(j)];
      const float w = ImGui::CalcTextSize(s.c_str()).x;
      const float cx = a.min.x + bw * (static_cast<float>(j) + 0.5f);
      const float x0 = std::clamp(cx - w / 2, a.min.x, a.max.x - w), x1 = x0 + w;
      for (const auto& u : used)
        if (x0 < u.second + 4 && x1 > u.first - 4) return;
      used.push_back({x0, x1});
      dl->AddText(ImVec2(x0, a.max.y + 2), col, s.c_str());
    };
    if (answer_marked)
      for (int j = sel.answer_begin; j < std::min(sel.answer_end, n); ++j) try_label(j, answer_ink);
    try_label(q, query_ink);
    for (int j = 0; j < n; ++j) try_label(j, ImGui::GetColorU32(ImGuiCol_TextDisabled));
  } else {
    // Too many bars for a label each: the answer's and the query's keys, then the 8 keys of largest |weight|,
    // labelled at their bars' tips (so the chart says where the noise goes), never over one another.
    // One label for the answer span (its tokens' text, over its tallest bar), one for the query, then the
    // keys.
    struct Want {
      int first, end;  // keys [first, end)
      std::string text;
      ImU32 ink;
    };
    std::vector<Want> wants;
    if (answer_marked && sel.answer_begin <= q) {
      Want w{sel.answer_begin, std::min(sel.answer_end, n), "", answer_ink};
      for (int j = w.first; j < w.end; ++j) w.text += labels[static_cast<size_t>(j)];
      wants.push_back(w);
    }
    if (!in_answer(q)) wants.push_back({q, q + 1, labels[static_cast<size_t>(q)], query_ink});
    // Each key as the whole word it is a piece of ("curriculum", not "cur" and "ul"), once a word.
    for (const auto& [b, e] : labelled_words(row.values, t.tokens, q, answer_marked ? sel.answer_begin : -1,
                                             answer_marked ? sel.answer_end : -1, 8))
      wants.push_back({b, e, word_label(labels, b, e), key_ink});
    std::vector<BarLabel> want;
    for (const Want& w : wants) {
      float top = zero, bottom = zero;
      bool negative = true;
      for (int j = w.first; j < w.end; ++j) {
        const float v = row.values[static_cast<size_t>(j)], y = std::clamp(a.y(v), a.min.y, a.max.y);
        top = std::min(top, y);
        bottom = std::max(bottom, y);
        negative = negative && v < 0;
      }
      const float cx = a.min.x + bw * (static_cast<float>(w.first + w.end) * 0.5f - 0.07f);
      want.push_back({cx, top, bottom, ImGui::CalcTextSize(w.text.c_str()).x, negative});
    }
    const std::vector<LabelSpot> spots =
        place_bar_labels(want, th, a.min.x, a.max.x, a.min.y, a.max.y + th * 1.3f, 3);
    int shown = 0;
    for (size_t i = 0; i < wants.size(); ++i) {
      if (!spots[i].placed) continue;
      const LabelSpot& sp = spots[i];
      const float w = want[i].w, cx = sp.x0 + w / 2;
      const bool above = sp.y0 + th <= want[i].y_top;
      const float tip = above ? want[i].y_top : want[i].y_bottom, near = above ? sp.y0 + th : sp.y0;
      if (std::fabs(near - tip) > 4 || std::fabs(cx - want[i].x) > w / 2)  // lifted off its bar: a leader
        dl->AddLine(ImVec2(std::clamp(want[i].x, sp.x0, sp.x0 + w), near), ImVec2(want[i].x, tip),
                    IM_COL32(120, 120, 120, 200));
      dl->AddRectFilled(ImVec2(sp.x0 - 1, sp.y0), ImVec2(sp.x0 + w + 1, sp.y0 + th),
                        IM_COL32(255, 255, 255, 215));
      dl->AddText(ImVec2(sp.x0, sp.y0), wants[i].ink, wants[i].text.c_str());
      state.drawn.note("chart." + std::to_string(slot) + ".label." + std::to_string(shown++), sp.x0, sp.y0,
                       sp.x0 + w, sp.y0 + th);
    }
  }
  // Hover: the bar's key and value.
  ImGui::SetCursorScreenPos(a.min);
  ImGui::InvisibleButton(("##bars" + std::to_string(slot)).c_str(),
                         ImVec2(std::max(1.0f, a.max.x - a.min.x), std::max(1.0f, a.max.y - a.min.y)));
  if (ImGui::IsItemHovered()) {
    const int j = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - a.min.x) / bw), 0, n - 1);
    state.selection.hovered_next = j;
    ImGui::SetTooltip("key %d  %s\n%s = %.5f", j, labels[static_cast<size_t>(j)].c_str(), row.what.c_str(),
                      row.values[static_cast<size_t>(j)]);
  }
}

}  // namespace

void draw_query_row_view(GuiState& state) {
  const RunResult& r = *state.shown;
  int slots[kSlots], n = 0;
  for (int s = 0; s < kSlots; ++s)
    if (r.traces[s]) slots[n++] = s;
  if (n == 0) return;
  if (ImGui::Checkbox("one y scale", &state.layout.shared_rows_scale)) state.layout.rows_scale_chosen = true;
  if (state.selection.answer_begin >= 0) {
    flow_next(ImGui::CalcTextSize("answer").x);
    ImGui::TextColored(ImVec4(0.08f, 0.55f, 0.22f, 1), "answer");
  }
  flow_next(ImGui::CalcTextSize("query").x);
  ImGui::TextColored(ImVec4(0.85f, 0.45f, 0.0f, 1), "query");
  const char* hint = state.selection.answer_begin >= 0 ? "(click a token: the query)"
                                                       : "(right-drag over tokens: an answer span)";
  flow_next(ImGui::CalcTextSize(hint).x);
  ImGui::TextDisabled("%s", hint);
  QueryRow rows[kSlots];
  double lo = 0, hi = 0;  // over both rows (the shared scale)
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    rows[k] = query_row(state, t, state.view.head[slots[k]],
                        std::clamp(state.selection.query, 0, static_cast<int>(t.length()) - 1));
    for (float v : rows[k].values)
      lo = std::min(lo, static_cast<double>(v)), hi = std::max(hi, static_cast<double>(v));
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos(), room = ImGui::GetContentRegionAvail();
  const float gap = ImGui::GetFontSize() * 0.6f;
  // The next-token column as wide as its lines ask (up to a quarter of the view; then they shorten).
  float next_w = ImGui::GetFontSize() * 4;
  for (int k = 0; k < n; ++k)
    next_w =
        std::max(next_w, next_token_width(*r.traces[slots[k]],
                                          std::clamp(state.selection.query, 0,
                                                     static_cast<int>(r.traces[slots[k]]->length()) - 1)));
  next_w = std::min(next_w + ImGui::GetFontSize() * 0.3f, room.x * 0.25f);
  // Each model's own line about itself (its card.json) above its chart, so a class reads what the chart can
  // and cannot say; the charts share the height left.
  const float wrap = std::max(ImGui::GetFontSize() * 4, room.x - next_w - gap);
  std::string card_text[kSlots];
  float card_h[kSlots] = {0, 0}, cards_h = 0;
  const ModelCard* cards[kSlots] = {nullptr, nullptr};
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    if ((cards[k] = slot_card(state, slots[k])) == nullptr) continue;
    card_text[k] = wrap_at_spaces((t.config.name.empty() ? to_string(t.config.attention) : t.config.name) +
                                      ": " + brief_line(*cards[k]),
                                  wrap);
    card_h[k] = ImGui::CalcTextSize(card_text[k].c_str()).y + ImGui::GetStyle().ItemSpacing.y;
    cards_h += card_h[k];
  }
  const float chart_h = (room.y - cards_h - gap * static_cast<float>(n - 1)) / static_cast<float>(n);
  float y = origin.y;
  for (int k = 0; k < n; ++k) {
    const Trace& t = *r.traces[slots[k]];
    if (cards[k]) {
      ImGui::SetCursorScreenPos(ImVec2(origin.x, y));
      ImGui::PushStyleColor(ImGuiCol_Text, cards[k]->caveat.empty()
                                               ? ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled)
                                               : ImVec4(0.7f, 0.33f, 0.0f, 1));
      ImGui::TextUnformatted(card_text[k].c_str());
      ImGui::PopStyleColor();
      state.drawn.note("card." + std::to_string(slots[k]), origin.x, y, origin.x + wrap, y + card_h[k]);
      y += card_h[k];
    }
    const ImVec2 min(origin.x, y);
    const ImVec2 max(origin.x + room.x - next_w - gap, min.y + chart_h);
    y += chart_h + gap;
    if (!rows[k].error.empty() || rows[k].values.empty()) {
      ImGui::SetCursorScreenPos(min);
      ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s",
                         rows[k].error.empty() ? "no row" : rows[k].error.c_str());
      continue;
    }
    double klo = lo, khi = hi;
    if (!state.layout.shared_rows_scale) {
      klo = khi = 0;
      for (float v : rows[k].values)
        klo = std::min(klo, static_cast<double>(v)), khi = std::max(khi, static_cast<double>(v));
    }
    if (khi <= klo) khi = klo + 1;
    const int qk = std::clamp(state.selection.query, 0, static_cast<int>(t.length()) - 1);
    draw_row_chart(state, t, slots[k], rows[k], qk, min, max, klo, khi + (khi - klo) * 0.15);
    draw_next_tokens(t, qk, ImVec2(max.x + gap, min.y), next_w, chart_h);
  }
  ImGui::SetCursorScreenPos(origin);
  ImGui::Dummy(room);
}

viz::ChartFigure figure1_chart(GuiState& state, int width, int height, float font_px) {
  viz::ChartFigure f =
      chart_frame(width, height, font_px,
                  "Attention of the query to every key it sees (green: the answer, orange: the query)",
                  "weight", "keys (tokens the query sees)");
  f.shared_y = state.layout.shared_rows_scale;
  if (!state.shown) throw Error("no run on screen yet");
  const RunResult& r = *state.shown;
  const SelectionState& sel = state.selection;
  const bool answer_marked = sel.answer_begin >= 0 && sel.answer_end > sel.answer_begin;
  for (int s = 0; s < kSlots; ++s) {
    if (!r.traces[s]) continue;
    const Trace& t = *r.traces[s];
    const int q = std::clamp(sel.query, 0, static_cast<int>(t.length()) - 1);
    const QueryRow row = query_row(state, t, state.view.head[s], q);
    if (!row.error.empty() || row.values.empty())
      throw Error((t.config.name.empty() ? to_string(t.config.attention) : t.config.name) + ": " +
                  (row.error.empty() ? "no row" : row.error));
    const std::vector<std::string>& labels = r.labels[static_cast<size_t>(s)];
    const std::string name = t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
    viz::ChartPanel p;
    p.label_end.assign(static_cast<size_t>(q + 1), 0);
    p.title = name + "  L" + std::to_string(state.view.layer) + " H" + std::to_string(state.view.head[s]) +
              "   query " + std::to_string(q) + " '" + labels[static_cast<size_t>(q)] + "':  " + row.what;
    const int n = q + 1;
    p.groups.assign(labels.begin(), labels.begin() + n);
    viz::ChartSeries bars;
    bars.name = "weight > 0 | < 0";
    bars.signed_colors = true;
    bars.values.assign(row.values.begin(), row.values.end());
    p.series.push_back(bars);
    p.mark = q;
    p.color_marked_bars = true;
    if (answer_marked && sel.answer_begin < n) {
      const int b = sel.answer_begin, e = std::min(sel.answer_end, n);
      p.bands.push_back({b, e});
      std::string joined;
      for (int j = b; j < e; ++j) joined += labels[static_cast<size_t>(j)];
      p.groups[static_cast<size_t>(b)] = joined;  // the answer labelled once, under its keys
      p.label_end[static_cast<size_t>(b)] = e;
      for (int j = b + 1; j < e; ++j) p.groups[static_cast<size_t>(j)].clear();
      p.labelled.push_back(b);
      const auto [share, abs_sum] = row_share(row, q, sel);
      char note[200];
      (void)abs_sum;
      std::snprintf(
          note, sizeof note,
          "row %d: attention mass on the answer %.3f, on the noise %.3f (net noise %+.3f of a budget %.3f)",
          q, share.answer_mass, share.noise_mass, share.noise, share.budget);
      p.note = note;
    }
    p.labelled.push_back(q);
    // The keys of largest weight, each labelled as the whole word it is a piece of (once a word), centred
    // under the word's pieces.
    for (const auto& [b, e] : labelled_words(row.values, t.tokens, q, answer_marked ? sel.answer_begin : -1,
                                             answer_marked ? sel.answer_end : -1, 8)) {
      p.groups[static_cast<size_t>(b)] = word_label(labels, b, e);
      p.label_end[static_cast<size_t>(b)] = e;
      p.labelled.push_back(b);
    }
    f.panels.push_back(std::move(p));
  }
  if (f.panels.empty()) throw Error("no model has a run on screen");
  f.footnote = card_footnote(state);
  return f;
}

void draw_card_view_lines(GuiState& state, const std::string& view) {
  if (!state.shown) return;
  for (int s = 0; s < kSlots; ++s) {
    const auto& t = state.shown->traces[s];
    const ModelCard* card = t ? slot_card(state, s) : nullptr;
    // A view's brief form ("outliers-brief", lecture mode) falls back to its full line.
    std::string line = card ? view_line(*card, view) : "";
    const size_t brief = view.rfind("-brief");
    if (card && line.empty() && brief != std::string::npos && brief + 6 == view.size())
      line = view_line(*card, view.substr(0, brief));
    if (line.empty()) continue;
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.7f, 0.33f, 0.0f, 1));
    // Wrapped at the visible right edge (a child that scrolls sideways would wrap at its content's).
    ImGui::PushTextWrapPos(ImGui::GetWindowWidth() - ImGui::GetStyle().WindowPadding.x -
                           ImGui::GetStyle().ScrollbarSize + ImGui::GetScrollX());
    ImGui::TextWrapped("%s: %s",
                       (t->config.name.empty() ? to_string(t->config.attention) : t->config.name).c_str(),
                       line.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
  }
}

std::string card_view_text(GuiState& state, const std::string& view) {
  std::string lines;
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown ? state.shown->traces[s] : nullptr)
      if (const ModelCard* card = slot_card(state, s)) {
        const std::string line = view_line(*card, view);
        if (!line.empty())
          lines += (lines.empty() ? "" : "\n") +
                   (t->config.name.empty() ? to_string(t->config.attention) : t->config.name) + ": " + line;
      }
  return lines;
}

std::string card_footnote(GuiState& state) {
  std::string lines;
  for (int s = 0; s < kSlots; ++s)
    if (const auto& t = state.shown ? state.shown->traces[s] : nullptr)
      if (const ModelCard* card = slot_card(state, s))
        lines += (lines.empty() ? "" : "\n") +
                 (t->config.name.empty() ? to_string(t->config.attention) : t->config.name) + ": " +
                 brief_line(*card);
  return lines;
}

}  // namespace difflens::app
