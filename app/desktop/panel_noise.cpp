// The Attention noise view: the needle builder (held-out needle prompts with question and answer marked)
// and the attention-to-answer / noise readout of the selection, per head and layer.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/common/files.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/model/needle.h"
#include "viz/chart.h"
#include "viz/token_text.h"

namespace difflens::app {

// Attention to the marked answer vs attention noise, per layer and averaged, for both models.
// Builds a held-out needle episode with the left model's tokenizer, puts it (up to the answer) into the
// prompt and marks the question and the asked needle's code, so the readout below measures retrieval.
void build_needle_prompt(GuiState& state, const std::string& model_dir) {
  GuiState::Needle& n = state.needle;
  try {
    const std::filesystem::path tok_path = std::filesystem::path(model_dir) / "tokenizer.model";
    if (!std::filesystem::exists(tok_path))
      throw Error("the needle builder needs a SentencePiece model in a slot (" + tok_path.string() +
                  " is missing)");
    if (!n.haystack || n.tokenizer_path != tok_path.string()) {  // count the haystack once per tokenizer
      const std::string text = cli::read_file(n.haystack_path, "haystack text");
      n.tokenizer = std::make_unique<Tokenizer>(Tokenizer::sentencepiece(tok_path));
      n.haystack = std::make_unique<Haystack>(text, *n.tokenizer);
      n.tokenizer_path = tok_path.string();
    }
    const EpisodeBuilder builder(*n.haystack, *n.tokenizer, NeedleSplit::Eval, NameSet::SingleToken,
                                 n.wording);
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
    reset_continue(state, "stopped: a needle prompt replaced the text");
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
        "built a " + std::to_string(n.tokenizer->encode(ep.text, true).ids.size()) + "-token prompt (of " +
        std::to_string(n.length) + " at most: whole sentences): asked " + asked.name + " -> " + asked.code +
        " (the answer: the needle's code, tokens " + viz::token_range(code.begin, code.end) + "); " +
        (n.with_answer ? "the prompt ends with the code, so the rows from the query on produce it: a "
                         "retrieving head puts weight on the needle's code there"
                       : "a model that retrieves continues with \" " + asked.code + "\" (next-token panel)");
    n.built_prompt = state.prompt.text;
  } catch (const std::exception& e) {
    n.built = std::string("could not build: ") + e.what();
    n.built_prompt.clear();
  }
}

void draw_needle_builder(GuiState& state) {
  GuiState::Needle& n = state.needle;
  const float w = ImGui::GetFontSize() * 6;
  ImGui::TextUnformatted("Needle builder (held-out names and codes):");
  flow_next(w, "tokens");
  ImGui::SetNextItemWidth(w);
  ImGui::InputInt("tokens", &n.length, 64, 256);
  n.length = std::clamp(n.length, 64, 8192);
  flow_next(w, "depth %");
  ImGui::SetNextItemWidth(w);
  ImGui::SliderInt("depth %", &n.depth_pct, 0, 100);
  flow_next(w, "needles");
  ImGui::SetNextItemWidth(w);
  ImGui::SliderInt("needles", &n.needles, 1, 6);
  flow_next(w, "asked");
  ImGui::SetNextItemWidth(w);
  ImGui::SliderInt("asked", &n.asked, 1, n.needles);
  flow_next(w, "seed");
  ImGui::SetNextItemWidth(w);
  ImGui::InputInt("seed", &n.seed);
  flow_next(ImGui::GetFrameHeight(), "with the answer");
  ImGui::Checkbox("with the answer", &n.with_answer);
  flow_next(ImGui::CalcTextSize("Build prompt").x + 2 * ImGui::GetStyle().FramePadding.x);
  if (ImGui::Button("Build prompt"))
    build_needle_prompt(state, state.status.slots[0].tokenizer_dir.empty()
                                   ? state.status.slots[1].tokenizer_dir
                                   : state.status.slots[0].tokenizer_dir);
  // What the builder made describes the prompt on screen only while that prompt is the one it built.
  const bool stale = !n.built_prompt.empty() && state.prompt.text != n.built_prompt;
  if (!n.built.empty() && !stale) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", n.built.c_str());
    ImGui::PopStyleColor();
  } else if (stale) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped(
        "the prompt on screen is not the one built last (edited or replaced): Build prompt "
        "makes a needle prompt again");
    ImGui::PopStyleColor();
  }
  state.drawn.note(stale ? "noise.builder-stale" : "noise.builder-current", 0, 0, 0, 0);
  ImGui::Separator();
}

std::string answer_rows_phrase(int64_t query, int64_t length) {
  const int64_t q = std::clamp<int64_t>(query, 0, std::max<int64_t>(0, length - 1));
  if (q + 1 >= length) return "row " + std::to_string(q) + " (the query, the last token)";
  return "rows " + std::to_string(q) + "-" + std::to_string(length - 1) + " (the query to the end)";
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
        cache.errors[s] = "the rows from the query to the end span " +
                          std::to_string(question.end - question.begin) +
                          " tokens of a long prompt: select a later query token to measure them";
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

// Selects the layer and heads that attend most to the marked answer from the question's rows: the layer
// where the models' strongest heads together give it the most (neither model leads), and each model's
// strongest head there. A model whose strongest head overall is in another layer is named with it, so
// the status line never understates a model.
void focus_answer_head(GuiState& state, const RunResult& r) {
  if (state.selection.answer_begin < 0) return;
  const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
  // The layers the readouts measured (a bundle may keep some layers only): those every model has, else any.
  std::set<int> common, any_layer;
  bool first_model = true;
  for (int s = 0; s < kSlots; ++s) {
    if (!cache.readouts[s] || !r.traces[s]) continue;
    const std::set<int> mine(cache.readouts[s]->layers.begin(), cache.readouts[s]->layers.end());
    any_layer.insert(mine.begin(), mine.end());
    if (first_model) {
      common = mine;
    } else {
      std::set<int> both;
      for (int l : mine)
        if (common.count(l)) both.insert(l);
      common = both;
    }
    first_model = false;
  }
  int best_layer = -1;
  double best_sum = -1e300;
  for (int layer : common.empty() ? any_layer : common) {
    double sum = 0;
    bool any = false;
    for (int s = 0; s < kSlots; ++s)
      if (cache.readouts[s])
        if (const auto h = strongest_answer_head(*cache.readouts[s], layer)) {
          sum += h->share.answer_mass;
          any = true;
        }
    if (any && sum > best_sum) {
      best_sum = sum;
      best_layer = layer;
    }
  }
  if (best_layer < 0) return;
  state.view.layer = best_layer;
  for (int s = 0; s < kSlots; ++s)
    if (cache.readouts[s] && r.traces[s])
      if (const auto h = strongest_answer_head(*cache.readouts[s], best_layer)) state.view.head[s] = h->head;
  describe_focused_heads(state, r);
}

void describe_focused_heads(GuiState& state, const RunResult& r) {
  if (state.selection.answer_begin < 0) return;
  const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
  const int layer = state.view.layer;
  std::string what = "layer " + std::to_string(layer) + ": ", elsewhere;
  int64_t T = 0;
  for (const auto& t : r.traces)
    if (t) T = std::max(T, t->length());
  bool first = true;
  for (int s = 0; s < kSlots; ++s) {
    if (!cache.readouts[s] || !r.traces[s]) continue;
    const NoiseReadout& ro = *cache.readouts[s];
    const ModelConfig& c = r.traces[s]->config;
    const std::string name = c.name.empty() ? to_string(c.attention) : c.name;
    char share[32];
    const int row =
        static_cast<int>(std::find(ro.layers.begin(), ro.layers.end(), layer) - ro.layers.begin());
    const int head = state.view.head[s];
    const AttentionShare* mine = nullptr;
    if (row < static_cast<int>(ro.layers.size()) && row < static_cast<int>(ro.heads.size()))
      for (size_t k = 0; k < ro.heads[static_cast<size_t>(row)].size(); ++k)
        if (ro.heads[static_cast<size_t>(row)][k] == head) mine = &ro.per_head[static_cast<size_t>(row)][k];
    if (mine) {
      std::snprintf(share, sizeof share, "%.3f", mine->answer_mass);
      what += std::string(first ? "" : ", ") + name + " head " + std::to_string(head) + " " + share;
      first = false;
    }
    const auto overall = strongest_answer_head(ro);
    if (overall && (overall->layer != layer || overall->head != head)) {
      std::snprintf(share, sizeof share, "%.3f", overall->share.answer_mass);
      elsewhere += "; " + name + "'s strongest: layer " + std::to_string(overall->layer) + " head " +
                   std::to_string(overall->head) + " " + share;
    }
  }
  if (first) return;
  // What the numbers are, on the line: each head's attention mass on the answer (its share of the rows'
  // |A|), the mean over the rows from the query to the end (Figure 1 shows the query's row alone, the Noise
  // view the mean over a layer's heads). They are the run's on screen, interventions included.
  state.message =
      what + " answer mass, mean over " + answer_rows_phrase(state.selection.query, T) + elsewhere;
  state.focus_message = state.message;
  state.focus_prompt = state.prompt.text;
  state.focus_request = r.request;
}

namespace {

// The layer that row i of the readouts stands for: the trace's own index (a bundle may keep some layers
// only), or "#i" where the models kept different layers.
std::string readout_layer(const std::optional<NoiseReadout>* readouts, size_t i) {
  int layer = -1;
  for (int s = 0; s < kSlots; ++s)
    if (readouts[s] && i < readouts[s]->layers.size()) {
      const int l = readouts[s]->layers[i];
      if (layer >= 0 && l != layer) return "#" + std::to_string(i);
      layer = l;
    }
  return layer >= 0 ? std::to_string(layer) : "#" + std::to_string(i);
}

// A bar's value to 3 decimals (the table's and the export's), in the largest font up to the view's that fits
// the bar's width: beyond its end (above a positive bar, below a negative one), or just inside it where the
// plot has no room (dark on the light noise bars, white on the solid ones); none where no font fits.
void bar_value(ImDrawList* dl, const PlotArea& a, float x0, float w, double v, bool light) {
  char s[32];
  const ImFont* font = nullptr;
  // Three decimals, as the table and the export write them: a bar too narrow for them in any font has none
  // (the table below has its number).
  for (const char* fmt : {"%.3f"}) {
    std::snprintf(s, sizeof s, fmt, v);
    if (std::strcmp(s, "-0.000") == 0) s[0] = ' ';  // never "-0"
    for (const ImFont* f : ImGui::GetIO().Fonts->Fonts)
      if (f->FontSize <= ImGui::GetFontSize() && f->CalcTextSizeA(f->FontSize, FLT_MAX, 0, s).x <= w &&
          (!font || f->FontSize > font->FontSize))
        font = f;
    if (font) break;
  }
  if (!font) return;
  const ImVec2 size = font->CalcTextSizeA(font->FontSize, FLT_MAX, 0, s);
  const float zero = a.y(0), end = a.y(v), x = x0 + (w - size.x) / 2;
  float y = v >= 0 ? end - size.y : end;  // beyond the bar's end
  bool inside = v >= 0 ? y < a.min.y : y + size.y > a.max.y;
  if (inside) {
    y = v >= 0 ? end : end - size.y;
    if (std::fabs(end - zero) < size.y) return;  // neither beyond nor inside: no room
  }
  const ImU32 ink = !inside ? ImGui::GetColorU32(ImGuiCol_Text)
                    : light ? IM_COL32(30, 30, 30, 255)
                            : IM_COL32(255, 255, 255, 255);
  // Beyond the bar, the heads' dots may sit where the number goes: it is drawn on the plot's white, over
  // them.
  if (!inside)
    dl->AddRectFilled(ImVec2(x - 1, y), ImVec2(x + size.x + 1, y + size.y), IM_COL32(255, 255, 255, 235),
                      2.0f);
  dl->AddText(font, font->FontSize, ImVec2(x, y), ink, s);
}

// The table as a chart in the space left: per layer (and the mean), each model's attention to the answer
// (solid) and noise (light) side by side, on one axis.
// The key: each model's colour (solid: the answer, light: the noise), on a chart's title line ending at
// `right`, above the bars it names; a slot without a name is left out.
void draw_model_key(GuiState& state, float right, float key_y, const std::array<std::string, kSlots>& names) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float th = ImGui::GetTextLineHeight();
  float x = right;
  for (int s = kSlots - 1; s >= 0; --s) {
    const std::string& name = names[static_cast<size_t>(s)];
    if (name.empty()) continue;
    x -= ImGui::CalcTextSize(name.c_str()).x + th * 1.6f;
    dl->AddRectFilled(ImVec2(x, key_y + th * 0.1f), ImVec2(x + th * 0.5f, key_y + th * 0.9f), model_ink(s));
    dl->AddRectFilled(ImVec2(x + th * 0.5f, key_y + th * 0.1f), ImVec2(x + th, key_y + th * 0.9f),
                      model_ink(s, true));
    dl->AddText(ImVec2(x + th * 1.2f, key_y), ImGui::GetColorU32(ImGuiCol_Text), name.c_str());
    state.drawn.note("noise.key." + std::to_string(s), x, key_y,
                     x + th * 1.2f + ImGui::CalcTextSize(name.c_str()).x, key_y + th);
  }
}

void draw_noise_chart(GuiState& state, const RunResult& r, const std::optional<NoiseReadout>* readouts,
                      size_t rows, float height) {
  const ImVec2 room(ImGui::GetContentRegionAvail().x, height);
  const float th = ImGui::GetTextLineHeight();
  if (rows == 0 || room.y < th * 6) return;
  const double lo = 0, hi = 1;  // attention mass lies in [0, 1]
  const ImVec2 min = ImGui::GetCursorScreenPos(), max(min.x + room.x, min.y + room.y);
  const PlotArea a = draw_plot_frame(min, max, lo, hi, "%.1f", true,
                                     "attention mass: answer (solid), noise (light); dots: heads");
  state.drawn.note("noise.chart", a.min.x, a.min.y, a.max.x, a.max.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Each model in its identity colour (never a sign colour), its noise in the light variant; each head a dot
  // on its layer's bar (the mean's bar carries every head), so a mean never hides its spread.
  const size_t groups = rows + 1;  // the layers, then the mean
  const float gw = (a.max.x - a.min.x) / static_cast<float>(groups), bw = gw * 0.8f / (2 * kSlots);
  const float zero = a.y(0), dot = std::clamp(bw * 0.12f, 2.0f, th * 0.22f);
  for (size_t g = 0; g < groups; ++g) {
    for (int s = 0; s < kSlots; ++s) {
      if (!readouts[s]) continue;
      const AttentionShare* v =
          g < rows ? (g < readouts[s]->per_layer.size() ? &readouts[s]->per_layer[g] : nullptr)
                   : &readouts[s]->mean;
      if (!v) continue;
      for (int k = 0; k < 2; ++k) {
        const double value = k == 0 ? v->answer_mass : v->noise_mass;
        const float x0 = a.min.x + gw * (static_cast<float>(g) + 0.1f) + bw * static_cast<float>(2 * s + k);
        const float y = a.y(value);
        dl->AddRectFilled(ImVec2(x0, std::min(y, zero)), ImVec2(x0 + bw * 0.9f, std::max(y, zero)),
                          model_ink(s, k != 0));
        auto heads_of = [&](size_t layer) -> const std::vector<AttentionShare>* {
          return layer < readouts[s]->per_head.size() ? &readouts[s]->per_head[layer] : nullptr;
        };
        for (size_t layer = g < rows ? g : 0; layer < (g < rows ? g + 1 : readouts[s]->per_head.size());
             ++layer)
          if (const auto* heads = heads_of(layer))
            for (const AttentionShare& h : *heads) {
              const ImVec2 c(x0 + bw * 0.45f, a.y(k == 0 ? h.answer_mass : h.noise_mass));
              dl->AddCircleFilled(c, dot, IM_COL32(255, 255, 255, 230));
              dl->AddCircle(c, dot, IM_COL32(40, 40, 40, 255), 0, 1.2f);
            }
        bar_value(dl, a, x0, bw * 0.9f, value, k != 0);
      }
    }
    const std::string label = g < rows ? "layer " + readout_layer(readouts, g) : "mean";
    dl->AddText(
        ImVec2(a.min.x + gw * (static_cast<float>(g) + 0.5f) - ImGui::CalcTextSize(label.c_str()).x / 2,
               a.max.y + 3),
        ImGui::GetColorU32(ImGuiCol_Text), label.c_str());
  }
  std::array<std::string, kSlots> names;
  for (int s = 0; s < kSlots; ++s)
    if (r.traces[s]) names[static_cast<size_t>(s)] = r.traces[s]->config.name;
  draw_model_key(state, a.max.x, min.y, names);
  ImGui::Dummy(room);
}

}  // namespace

void draw_steps_chart(GuiState& state, const std::array<std::vector<StepPoint>, kSlots>& points, float height,
                      const char* title, const char* id) {
  const ImVec2 room(ImGui::GetContentRegionAvail().x, height);
  const float th = ImGui::GetTextLineHeight();
  std::set<int64_t> all;
  for (const auto& pts : points)
    for (const StepPoint& q : pts) all.insert(q.step);
  if (all.empty() || room.y < th * 6) return;
  const std::vector<int64_t> steps(all.begin(), all.end());
  const ImVec2 min = ImGui::GetCursorScreenPos(), max(min.x + room.x, min.y + room.y);
  const PlotArea a = draw_plot_frame(min, max, 0, 1, "%.1f", true, title);
  state.drawn.note(id, a.min.x, a.min.y, a.max.x, a.max.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float gw = (a.max.x - a.min.x) / static_cast<float>(steps.size()), bw = gw * 0.8f / (2 * kSlots);
  const float zero = a.y(0);
  // Step labels thinned to what fits (the last always).
  const float label_w = ImGui::CalcTextSize("step 000000").x;
  const size_t every = std::max<size_t>(1, static_cast<size_t>(std::ceil(label_w / std::max(gw, 1.0f))));
  for (size_t g = 0; g < steps.size(); ++g) {
    for (int s = 0; s < kSlots; ++s)
      for (const StepPoint& q : points[static_cast<size_t>(s)]) {
        if (q.step != steps[g] || !q.error.empty()) continue;
        for (int k = 0; k < 2; ++k) {
          const double value = k == 0 ? q.answer_mass : q.noise_mass;
          const float x0 = a.min.x + gw * (static_cast<float>(g) + 0.1f) + bw * static_cast<float>(2 * s + k);
          const float y = a.y(value);
          dl->AddRectFilled(ImVec2(x0, std::min(y, zero)), ImVec2(x0 + bw * 0.9f, std::max(y, zero)),
                            model_ink(s, k != 0));
          if (bw > ImGui::CalcTextSize("0.00").x) bar_value(dl, a, x0, bw * 0.9f, value, k != 0);
        }
      }
    if (g % every != 0 && g + 1 != steps.size()) continue;
    const std::string label = "step " + std::to_string(steps[g]);
    const float w = ImGui::CalcTextSize(label.c_str()).x;  // under its bars, kept inside the plot's width
    const float x = std::clamp(a.min.x + gw * (static_cast<float>(g) + 0.5f) - w / 2, a.min.x, a.max.x - w);
    dl->AddText(ImVec2(x, a.max.y + 3), ImGui::GetColorU32(ImGuiCol_Text), label.c_str());
  }
  std::array<std::string, kSlots> names;  // each run's model folder
  for (int s = 0; s < kSlots; ++s)
    if (!points[static_cast<size_t>(s)].empty() && !state.timeline.runs[static_cast<size_t>(s)].model.empty())
      names[static_cast<size_t>(s)] = state.timeline.runs[static_cast<size_t>(s)].model.filename().string();
  draw_model_key(state, a.max.x, min.y, names);
  ImGui::Dummy(room);
}

void start_step_measure(GuiState& state, const RunResult& r, InferenceWorker& worker) {
  const SelectionState& sel = state.selection;
  if (sel.answer_begin < 0) {
    state.message = "mark an answer span first (right-drag over its tokens)";
    return;
  }
  StepsRequest q;
  q.prompt = r.prompt;
  q.specials = state.prompt.specials_as_text ? Specials::text : Specials::match;
  q.options.pooled_budget_bytes = state.pooled_budget;  // long prompts as the runs: pooled
  q.answer = {sel.answer_begin, sel.answer_end};
  q.query = sel.query;
  bool any = false;
  for (int s = 0; s < kSlots; ++s)
    for (const auto& [step, folder] : state.timeline.runs[static_cast<size_t>(s)].steps) {
      q.steps[static_cast<size_t>(s)].push_back({step, folder.string()});
      any = true;
    }
  if (!any) {
    state.message = "neither slot holds a training run with kept steps (train --keep-every N)";
    return;
  }
  worker.start_steps(q);
  state.timeline.chart_steps = true;
}

namespace {

// Under the Noise view's buttons: the measure over the slots' kept steps, its progress and Cancel, and
// which chart shows. Nothing when neither slot holds a training run.
void draw_steps_controls(GuiState& state, const RunResult& r, InferenceWorker& worker) {
  TimelineState& tl = state.timeline;
  if (auto p = worker.steps_progress(tl.steps ? tl.steps->version : 0)) tl.steps = std::move(*p);
  bool runs = false;
  for (const KeptSteps& k : tl.runs) runs = runs || !k.steps.empty();
  const bool have = tl.steps && tl.steps->id != 0;
  if (!runs && !have) return;
  ImGui::SameLine();  // beside "Show the heads ..."
  if (runs) {
    if (ImGui::Button("Measure every kept step")) start_step_measure(state, r, worker);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "runs this prompt on every step the slots' training runs kept (train --keep-every) and charts "
          "the answer's and the noise's attention mass against the step");
  }
  if (!have) return;
  const StepsProgress& p = *tl.steps;
  if (runs) ImGui::SameLine();
  ImGui::Checkbox("Chart over the steps", &tl.chart_steps);
  if (p.running) {
    ImGui::SameLine();
    ImGui::Text("measuring %zu/%zu (%s)", p.done, p.total, p.current.c_str());
    ImGui::SameLine();
    if (ImGui::Button("Cancel##steps")) worker.cancel_steps();
  } else if (p.cancelled) {
    ImGui::SameLine();
    ImGui::TextDisabled("stopped after %zu of %zu steps", p.done, p.total);
  }
  const SelectionState& sel = state.selection;
  const bool stale = p.request.prompt != r.prompt || p.request.answer.first != sel.answer_begin ||
                     p.request.answer.second != sel.answer_end || p.request.query != sel.query;
  std::string errors;
  for (const auto& pts : p.points)
    for (const StepPoint& q : pts)
      if (!q.error.empty()) errors = "step " + std::to_string(q.step) + ": " + q.error;
  if (tl.chart_steps && stale)
    ImGui::TextColored(ImVec4(0.75f, 0.35f, 0.0f, 1),
                       "measured for another prompt, answer or query than the one on screen: Measure again");
  if (tl.chart_steps && !errors.empty())
    ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", errors.c_str());
}

}  // namespace

// The slide's point first: the chart of attention to the answer and noise per layer, in the room left
// above the table of its numbers and the definitions (which scroll into view below it).
void draw_noise_panel(GuiState& state, const RunResult& r, InferenceWorker& worker) {
  const SelectionState& sel = state.selection;
  if (sel.answer_begin < 0) {
    ImGui::TextUnformatted("Right-drag over the answer's tokens on the token strip to measure.");
    ImGui::TextWrapped("%s.", kAttentionShareDefinition);
    return;
  }
  if (ImGui::Button("Show the heads that attend most to the answer")) focus_answer_head(state, r);
  draw_steps_controls(state, r, worker);
  {  // what each bar averages, with the live row numbers
    int64_t T = 0;
    for (const auto& t : r.traces)
      if (t) T = std::max(T, t->length());
    const bool over_steps = state.timeline.chart_steps && state.timeline.steps && state.timeline.steps->id;
    const std::string what =
        std::string(over_steps ? "each bar: one kept step's mean over every layer and head and "
                               : "each bar: the mean over a layer's heads and ") +
        answer_rows_phrase(sel.query, T) + "; answer: tokens " +
        viz::token_range(sel.answer_begin, sel.answer_end);
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", what.c_str());
    ImGui::PopStyleColor();
  }
  const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
  const std::optional<NoiseReadout>* readouts = cache.readouts;
  const std::string* errors = cache.errors;
  size_t rows = 0;
  for (int s = 0; s < kSlots; ++s)
    if (readouts[s]) rows = std::max(rows, readouts[s]->layers.size());
  for (int s = 0; s < kSlots; ++s)
    if (!errors[s].empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", errors[s].c_str());
  // The chart takes what the table (a row a layer, the mean, the header) leaves, at least 8 lines. In
  // lecture mode the chart is the slide: it takes the whole view, its bars carry the table's numbers, and
  // the table is left out (the definitions scroll into view below).
  const ImGuiStyle& style = ImGui::GetStyle();
  const float th = ImGui::GetTextLineHeight();
  const float table_h =
      state.lecture ? 0.0f : static_cast<float>(rows + 2) * (th + 2 * style.CellPadding.y + 1);
  const float chart_h =
      std::max(th * 8, ImGui::GetContentRegionAvail().y - table_h - style.ItemSpacing.y * 2);
  if (state.timeline.chart_steps && state.timeline.steps && state.timeline.steps->id != 0)
    draw_steps_chart(state, state.timeline.steps->points, chart_h,
                     "attention mass against the training step: answer (solid), noise (light)",
                     "noise.steps-chart");
  else
    draw_noise_chart(state, r, readouts, rows, chart_h);
  const std::vector<ShareColumn>& columns = share_columns();  // core/formats/metrics.h
  const int per_slot = static_cast<int>(columns.size());
  if (!state.lecture && ImGui::BeginTable("noise", 1 + per_slot * kSlots,
                                          ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchSame)) {
    // Short headers in each model's colour (the chart's key names the colours): the table fits 1280 pixels.
    ImGui::TableSetupColumn("layer");
    for (int s = 0; s < kSlots; ++s)
      for (const ShareColumn& c : columns) ImGui::TableSetupColumn(c.header);
    ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
    ImGui::TableSetColumnIndex(0);
    ImGui::TableHeader("layer");
    for (int s = 0; s < kSlots; ++s)
      for (int c = 0; c < per_slot; ++c) {
        ImGui::TableSetColumnIndex(1 + per_slot * s + c);
        ImGui::PushStyleColor(ImGuiCol_Text, ImGui::ColorConvertU32ToFloat4(model_ink(s)));
        ImGui::TableHeader(columns[static_cast<size_t>(c)].header);
        ImGui::PopStyleColor();
        if (ImGui::IsItemHovered() && r.traces[s])
          ImGui::SetTooltip("%s: %s", r.traces[s]->config.name.c_str(),
                            columns[static_cast<size_t>(c)].meaning);
      }
    for (size_t i = 0; i <= rows; ++i) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (i < rows)
        ImGui::TextUnformatted(readout_layer(readouts, i).c_str());
      else
        ImGui::TextUnformatted("mean");
      for (int s = 0; s < kSlots; ++s) {
        const AttentionShare* a = nullptr;
        if (readouts[s])
          a = i < readouts[s]->per_layer.size() ? &readouts[s]->per_layer[i]
              : i == rows                       ? &readouts[s]->mean
                                                : nullptr;
        for (const ShareColumn& c : columns) {
          ImGui::TableNextColumn();
          if (a) ImGui::TextUnformatted(c.cell(*a).c_str());
        }
      }
    }
    ImGui::EndTable();
  }
  // Beyond the chart, in words: each model's mean noise as output share and as net share with its budget
  // (the signed sum never stands alone: a DIFF row's net shares add up to (1 - lambda)/sum|A|).
  for (int s = 0; s < kSlots; ++s)
    if (readouts[s] && r.traces[s]) {
      const AttentionShare& m = readouts[s]->mean;
      char line[520];
      // DIFF: A1 alone in the same run, what the subtraction starts from (A1 -> A).
      char first[160] = "";
      if (!std::isnan(m.a1_noise_mass))
        std::snprintf(first, sizeof first, " (A1 alone: %.3f of its mass, %s of the output)", m.a1_noise_mass,
                      std::isnan(m.a1_noise_output) ? "-" : signed3(m.a1_noise_output).c_str());
      std::snprintf(
          line, sizeof line,
          "%s, mean: noise %.3f of the attention mass, %s of the heads' output (output share)%s; net "
          "share %s of a budget %.3f (signed sum over |A|).",
          r.traces[s]->config.name.c_str(), m.noise_mass,
          std::isnan(m.noise_output) ? "-" : signed3(m.noise_output).c_str(), first, signed3(m.noise).c_str(),
          m.budget);
      ImGui::TextWrapped("%s", line);
    }
  ImGui::TextWrapped("%s.", kAttentionShareDefinition);
}

viz::ChartFigure noise_chart(GuiState& state, int width, int height, float font_px) {
  if (!state.shown) throw Error("no run on screen yet");
  const RunResult& r = *state.shown;
  const SelectionState& sel = state.selection;
  if (sel.answer_begin < 0) throw Error("mark an answer span first (right-drag over its tokens)");
  const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
  size_t rows = 0;
  int64_t T = 0;
  for (int s = 0; s < kSlots; ++s) {
    if (cache.readouts[s]) rows = std::max(rows, cache.readouts[s]->layers.size());
    if (r.traces[s]) T = std::max(T, r.traces[s]->length());
  }
  if (rows == 0) {
    for (int s = 0; s < kSlots; ++s)
      if (!cache.errors[s].empty()) throw Error(cache.errors[s]);
    throw Error("no readout of attention to the answer");
  }
  viz::ChartFigure f = chart_frame(
      width, height, font_px, "Attention mass on the answer (solid) and on the noise (light) per layer",
      "attention mass (share of the rows' |A|)",
      "each bar: the mean over a layer's heads and " + answer_rows_phrase(sel.query, T) +
          "; answer: tokens " + viz::token_range(sel.answer_begin, sel.answer_end));
  viz::ChartPanel p;
  for (size_t i = 0; i < rows; ++i) p.groups.push_back("layer " + readout_layer(cache.readouts, i));
  p.groups.push_back("mean");
  for (int s = 0; s < kSlots; ++s) {
    if (!cache.readouts[s] || !r.traces[s]) continue;
    const NoiseReadout& nr = *cache.readouts[s];
    const std::string name = r.traces[s]->config.name.empty() ? to_string(r.traces[s]->config.attention)
                                                              : r.traces[s]->config.name;
    viz::ChartSeries answer, noise;
    answer.name = name + " answer mass";
    answer.color = viz::model_colour(static_cast<size_t>(s));
    noise.name = name + " noise mass";
    noise.color = viz::model_colour(static_cast<size_t>(s), true);
    for (size_t i = 0; i <= rows; ++i) {
      const AttentionShare* a = i < nr.per_layer.size() ? &nr.per_layer[i] : i == rows ? &nr.mean : nullptr;
      answer.values.push_back(a ? a->answer_mass : std::nan(""));
      noise.values.push_back(a ? a->noise_mass : std::nan(""));
    }
    p.series.push_back(answer);
    p.series.push_back(noise);
  }
  p.value_labels = true;
  f.panels.push_back(std::move(p));
  f.footnote = card_footnote(state);
  return f;
}

}  // namespace difflens::app
