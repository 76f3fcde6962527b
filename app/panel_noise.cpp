// The Attention noise view: the needle builder (held-out needle prompts with question and answer marked)
// and the attention-to-answer / noise readout of the selection, per head and layer.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/cli_common.h"
#include "app/panels.h"
#include "app/plot.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/needle.h"
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
        "built a " + std::to_string(n.tokenizer->encode(ep.text, true).ids.size()) + "-token prompt: asked " +
        asked.name + " -> " + asked.code + " (answer span = the needle's code, tokens " +
        viz::token_range(code.begin, code.end) + "); " +
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
  if (!n.built.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", n.built.c_str());
    ImGui::PopStyleColor();
  }
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
          sum += h->share.answer;
          any = true;
        }
    if (any && sum > best_sum) {
      best_sum = sum;
      best_layer = layer;
    }
  }
  if (best_layer < 0) return;
  state.view.layer = best_layer;
  std::string what = "layer " + std::to_string(best_layer) + ": ", elsewhere;
  bool first = true;
  for (int s = 0; s < kSlots; ++s) {
    if (!cache.readouts[s] || !r.traces[s]) continue;
    const ModelConfig& c = r.traces[s]->config;
    const std::string name = c.name.empty() ? to_string(c.attention) : c.name;
    char share[32];
    if (const auto h = strongest_answer_head(*cache.readouts[s], best_layer)) {
      state.view.head[s] = h->head;
      std::snprintf(share, sizeof share, "%.3f", h->share.answer);
      what += std::string(first ? "" : ", ") + name + " head " + std::to_string(h->head) + " " + share;
      first = false;
    }
    const auto overall = strongest_answer_head(*cache.readouts[s]);
    if (overall && overall->layer != best_layer) {
      std::snprintf(share, sizeof share, "%.3f", overall->share.answer);
      elsewhere += "; " + name + "'s strongest: layer " + std::to_string(overall->layer) + " head " +
                   std::to_string(overall->head) + " " + share;
    }
  }
  state.message = what + " to the answer over the question's rows" + elsewhere;
  state.focus_message = state.message;
  state.focus_prompt = state.prompt.text;
}

namespace {

// The table as a chart in the space left: per layer (and the mean), each model's attention to the answer
// (solid) and noise (light) side by side, on one axis.
void draw_noise_chart(GuiState& state, const RunResult& r, const std::optional<NoiseReadout>* readouts,
                      size_t rows, float height) {
  const ImVec2 room(ImGui::GetContentRegionAvail().x, height);
  const float th = ImGui::GetTextLineHeight();
  if (rows == 0 || room.y < th * 6) return;
  double lo = 0, hi = 1;
  for (int s = 0; s < kSlots; ++s)
    if (readouts[s]) {
      for (const AttentionShare& a : readouts[s]->per_layer) lo = std::min({lo, a.answer, a.noise});
      lo = std::min({lo, readouts[s]->mean.answer, readouts[s]->mean.noise});
    }
  const ImVec2 min = ImGui::GetCursorScreenPos(), max(min.x + room.x, min.y + room.y);
  const PlotArea a = draw_plot_frame(min, max, lo, hi, "%.1f", true,
                                     "attention to the answer (solid) and noise (light) per layer");
  state.drawn.note("noise.chart", a.min.x, a.min.y, a.max.x, a.max.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Each model in its identity colour (never a sign colour: the bars themselves may be negative), its
  // noise in the light variant.
  const size_t groups = rows + 1;  // the layers, then the mean
  const float gw = (a.max.x - a.min.x) / static_cast<float>(groups), bw = gw * 0.8f / (2 * kSlots);
  const float zero = a.y(0);
  for (size_t g = 0; g < groups; ++g) {
    for (int s = 0; s < kSlots; ++s) {
      if (!readouts[s]) continue;
      const AttentionShare* v =
          g < rows ? (g < readouts[s]->per_layer.size() ? &readouts[s]->per_layer[g] : nullptr)
                   : &readouts[s]->mean;
      if (!v) continue;
      for (int k = 0; k < 2; ++k) {
        const float x0 = a.min.x + gw * (static_cast<float>(g) + 0.1f) + bw * static_cast<float>(2 * s + k);
        const float y = a.y(k == 0 ? v->answer : v->noise);
        dl->AddRectFilled(ImVec2(x0, std::min(y, zero)), ImVec2(x0 + bw * 0.9f, std::max(y, zero)),
                          model_ink(s, k != 0));
      }
    }
    const std::string label = g < rows ? "layer " + std::to_string(g) : "mean";
    dl->AddText(
        ImVec2(a.min.x + gw * (static_cast<float>(g) + 0.5f) - ImGui::CalcTextSize(label.c_str()).x / 2,
               a.max.y + 3),
        ImGui::GetColorU32(ImGuiCol_Text), label.c_str());
  }
  // The key: each model's colour, on the title's line (right-aligned), above the bars it names.
  float x = a.max.x;
  const float key_y = min.y;
  for (int s = kSlots - 1; s >= 0; --s) {
    if (!r.traces[s]) continue;
    const std::string& name = r.traces[s]->config.name;
    x -= ImGui::CalcTextSize(name.c_str()).x + th * 1.6f;
    dl->AddRectFilled(ImVec2(x, key_y + th * 0.1f), ImVec2(x + th * 0.5f, key_y + th * 0.9f), model_ink(s));
    dl->AddRectFilled(ImVec2(x + th * 0.5f, key_y + th * 0.1f), ImVec2(x + th, key_y + th * 0.9f),
                      model_ink(s, true));
    dl->AddText(ImVec2(x + th * 1.2f, key_y), ImGui::GetColorU32(ImGuiCol_Text), name.c_str());
    state.drawn.note("noise.key." + std::to_string(s), x, key_y,
                     x + th * 1.2f + ImGui::CalcTextSize(name.c_str()).x, key_y + th);
  }
  ImGui::Dummy(room);
}

}  // namespace

// The slide's point first: the chart of attention to the answer and noise per layer, in the room left
// above the table of its numbers and the definitions (which scroll into view below it).
void draw_noise_panel(GuiState& state, const RunResult& r) {
  const SelectionState& sel = state.selection;
  if (sel.answer_begin < 0) {
    ImGui::TextUnformatted("Right-drag over the answer's tokens on the token strip to measure.");
    ImGui::TextWrapped("%s.", kAttentionShareDefinition);
    return;
  }
  if (ImGui::Button("Show the heads that attend most to the answer")) focus_answer_head(state, r);
  ImGui::SameLine();
  ImGui::TextDisabled("rows: the query to the end; answer: the marked span");
  const GuiState::NoiseCache& cache = refresh_noise_cache(state, r);
  const std::optional<NoiseReadout>* readouts = cache.readouts;
  const std::string* errors = cache.errors;
  size_t rows = 0;
  for (int s = 0; s < kSlots; ++s)
    if (readouts[s]) rows = std::max(rows, readouts[s]->layers.size());
  for (int s = 0; s < kSlots; ++s)
    if (!errors[s].empty()) ImGui::TextColored(ImVec4(0.8f, 0.2f, 0.2f, 1), "%s", errors[s].c_str());
  // The chart takes what the table (a row a layer, the mean, the header) leaves, at least 8 lines.
  const ImGuiStyle& style = ImGui::GetStyle();
  const float th = ImGui::GetTextLineHeight();
  const float table_h = static_cast<float>(rows + 2) * (th + 2 * style.CellPadding.y + 1);
  const float chart_h =
      std::max(th * 8, ImGui::GetContentRegionAvail().y - table_h - style.ItemSpacing.y * 2);
  draw_noise_chart(state, r, readouts, rows, chart_h);
  if (ImGui::BeginTable("noise", 1 + 2 * kSlots,
                        ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchSame)) {
    ImGui::TableSetupColumn("layer");
    for (int s = 0; s < kSlots; ++s) {
      const auto& t = r.traces[s];
      const std::string n =
          t ? (t->config.name.empty() ? to_string(t->config.attention) : t->config.name) : "-";
      ImGui::TableSetupColumn((n + " answer").c_str());
      ImGui::TableSetupColumn((n + " noise").c_str());
    }
    ImGui::TableHeadersRow();
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
  }
  ImGui::TextWrapped("%s.", kAttentionShareDefinition);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "Question = tokens from the selected query to the end; answer = the right-dragged span.");
  ImGui::PopStyleColor();
}

}  // namespace difflens::app
