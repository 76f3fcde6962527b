// The model slots of the side panel (what each holds, its load, "Open" buttons), the Run menu's device
// choice, and the prompt editor above the token strip.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/common/files.h"
#include "app/desktop/panels.h"
#include "app/desktop/plot.h"
#include "app/desktop/shell.h"
#include "app/remote/client.h"

namespace difflens::app {

// Each slot as a few lines of the side panel: what it holds (or why it failed), a load's progress, and
// buttons that open the "Open" dialog for it.
const ModelCard* slot_card(GuiState& state, int slot) {
  const SlotInfo& info = state.status.slots[static_cast<size_t>(slot)];
  const std::string dir = info.loaded && !is_remote(info.path) ? info.path : "";
  GuiState::Card& c = state.cards[slot];
  if (c.dir != dir) {  // a file read once per model loaded, not per frame
    c.dir = dir;
    c.card = read_model_card(dir);
  }
  return c.card ? &*c.card : nullptr;
}

void draw_about_models(GuiState& state) {
  if (!state.about_models) return;
  const ImVec2 size = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowSize(ImVec2(size.x * 0.7f, size.y * 0.75f), ImGuiCond_Appearing);
  ImGui::SetNextWindowPos(ImVec2(size.x * 0.15f, size.y * 0.12f), ImGuiCond_Appearing);
  if (!ImGui::Begin("About the models", &state.about_models, ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  std::string shown_path;
  for (int s = 0; s < kSlots; ++s) {
    const SlotInfo& info = state.status.slots[static_cast<size_t>(s)];
    ImGui::TextWrapped("%s: %s", s == 0 ? "Left" : "Right",
                       info.path.empty() ? "(empty)" : info.path.c_str());
    const ModelCard* card = slot_card(state, s);
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s",
                       card ? card_line(*card).c_str() : "no model card (card.json) in this model's folder");
    ImGui::PopStyleColor();
    if (card && !card->card_path.empty() && shown_path.empty()) shown_path = card->card_path;
  }
  ImGui::Separator();
  if (!shown_path.empty()) {
    ImGui::TextDisabled("%s", shown_path.c_str());
    ImGui::BeginChild("card", ImVec2(0, 0), true);
    static std::string text_path, text;  // the card's text, read when another card is shown
    if (text_path != shown_path) {
      text_path = shown_path;
      try {
        text = cli::read_file(shown_path, "model card");
      } catch (const std::exception& e) {
        text = e.what();
      }
    }
    ImGui::PushTextWrapPos(0);
    ImGui::TextUnformatted(text.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndChild();
  }
  ImGui::End();
}

// Each slot's training run, read again when the slot's model changes; the steps any of them kept.
std::vector<int64_t> timeline_steps(GuiState& state) {
  TimelineState& tl = state.timeline;
  std::vector<int64_t> steps;
  for (int s = 0; s < kSlots; ++s) {
    const std::string& path = state.status.slots[static_cast<size_t>(s)].path;
    if (path != tl.seen[static_cast<size_t>(s)]) {
      tl.seen[static_cast<size_t>(s)] = path;
      tl.runs[static_cast<size_t>(s)] =
          path.empty() || path.rfind("remote://", 0) == 0 ? KeptSteps{} : kept_steps(path);
    }
    for (const auto& [step, folder] : tl.runs[static_cast<size_t>(s)].steps) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

void load_training_step(GuiState& state, InferenceWorker& worker, int64_t step) {
  (void)timeline_steps(state);
  for (int s = 0; s < kSlots; ++s) {
    const KeptSteps& run = state.timeline.runs[static_cast<size_t>(s)];
    if (run.steps.empty()) continue;
    // The step asked for, else the nearest kept before it (the first when none is); -1: the run's own
    // weights.
    std::filesystem::path to = run.model;
    if (step >= 0) {
      to = run.steps.front().second;
      for (const auto& [k, folder] : run.steps)
        if (k <= step) to = folder;
    }
    if (tidy(to) != tidy(state.status.slots[static_cast<size_t>(s)].path))
      open_into_slot(state, worker, s, 0, to.string(), "");
  }
}

// The step slider: every kept step of the slots' runs; letting go loads it into both slots.
void draw_timeline(GuiState& state, InferenceWorker& worker) {
  const std::vector<int64_t> steps = timeline_steps(state);
  if (steps.empty()) return;
  ImGui::Separator();
  ImGui::TextUnformatted("Training run: kept steps");
  // The step on screen: the first slot's that shows a kept step; -1 when both show their run's own weights.
  int64_t now = -1;
  for (int s = 0; s < kSlots && now < 0; ++s)
    now =
        state.timeline.runs[static_cast<size_t>(s)].step_of(state.status.slots[static_cast<size_t>(s)].path);
  int index = static_cast<int>(steps.size()) - 1;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i] == now) index = static_cast<int>(i);
  static int dragged = -1;  // while the slider is held: its position (the slots load on release)
  if (dragged >= static_cast<int>(steps.size())) dragged = -1;  // the steps changed under the slider
  int shown = dragged >= 0 ? dragged : index;
  char label[64];
  if (now < 0 && dragged < 0)
    std::snprintf(label, sizeof label, "the run's weights");
  else
    std::snprintf(label, sizeof label, "step %lld",
                  static_cast<long long>(steps[static_cast<size_t>(shown)]));
  ImGui::SetNextItemWidth(-1);
  if (ImGui::SliderInt("##training-step", &shown, 0, static_cast<int>(steps.size()) - 1, label))
    dragged = shown;
  if (ImGui::IsItemDeactivatedAfterEdit() && dragged >= 0) {
    load_training_step(state, worker, steps[static_cast<size_t>(dragged)]);
    dragged = -1;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("The steps train --keep-every kept; let go to load that step into both slots");
  for (int s = 0; s < kSlots; ++s) {
    const KeptSteps& run = state.timeline.runs[static_cast<size_t>(s)];
    if (run.steps.empty()) continue;
    const int64_t at = run.step_of(state.status.slots[static_cast<size_t>(s)].path);
    char line[192];
    std::snprintf(line, sizeof line, "%s: %s of %zu kept (%lld-%lld)", s == 0 ? "left" : "right",
                  at >= 0 ? ("step " + std::to_string(at)).c_str() : "the run's last weights",
                  run.steps.size(), static_cast<long long>(run.steps.front().first),
                  static_cast<long long>(run.steps.back().first));
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextUnformatted(wrap_at_spaces(line, ImGui::GetContentRegionAvail().x).c_str());
    ImGui::PopStyleColor();
  }
  if (now < 0 && ImGui::SmallButton("Last kept step")) load_training_step(state, worker, steps.back());
  if (now >= 0 && ImGui::SmallButton("The run's weights")) load_training_step(state, worker, -1);
}

void draw_model_slots(GuiState& state, InferenceWorker& worker) {
  for (int s = 0; s < kSlots; ++s) {
    ImGui::PushID(s);
    const SlotInfo& info = state.status.slots[static_cast<size_t>(s)];
    const std::string& path = info.path.empty() ? state.slots[s].path_field : info.path;
    const size_t cut = path.rfind("remote://", 0) == 0
                           ? std::string::npos  // remote://HOST:PORT/N whole
                           : path.find_last_of('/', path.size() > 1 ? path.size() - 2 : 0);
    // A training run's kept step reads as its model and step ("diff-small, step 18800"), not "step-00018800".
    const KeptSteps& run = state.timeline.runs[static_cast<size_t>(s)];
    const int64_t kept = path.empty() ? -1 : run.step_of(path);
    const std::string shown = kept >= 0 ? run.model.filename().string() + ", step " + std::to_string(kept)
                              : path.empty()             ? std::string("(empty)")
                              : cut == std::string::npos ? path
                                                         : path.substr(cut + 1);
    ImGui::TextWrapped("%s: %s", s == 0 ? "Left" : "Right", shown.c_str());
    if (!path.empty() && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", path.c_str());
    const bool loading_here = state.status.load_fraction >= 0 &&
                              state.status.activity.find("loading " + state.slots[s].path_field) == 0;
    if (loading_here) {
      ImGui::ProgressBar(static_cast<float>(state.status.load_fraction), ImVec2(-1, 0));
      if (ImGui::SmallButton("Cancel loading")) worker.cancel_load();
    }
    // Wrapped: Hugging Face descriptions (architecture, dtype, tokenizer notes) can be long.
    ImGui::PushStyleColor(ImGuiCol_Text, info.error.empty() ? ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled)
                                                            : ImVec4(0.85f, 0.2f, 0.2f, 1));
    ImGui::TextWrapped("%s", !info.error.empty() ? info.error.c_str()
                             : info.loaded       ? info.description.c_str()
                                                 : "(loading)");
    ImGui::PopStyleColor();
    if (const ModelCard* card = slot_card(state, s)) {  // what the model's own card says of it
      const float w = ImGui::GetContentRegionAvail().x;
      ImGui::TextUnformatted(wrap_at_spaces(card->summary, w).c_str());
      if (!card->caveat.empty()) {
        ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.7f, 0.33f, 0.0f, 1));
        ImGui::TextUnformatted(wrap_at_spaces(card->caveat, w).c_str());
        ImGui::PopStyleColor();
      }
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("From the model's card.json; Help > About the models");
    }
    if (ImGui::SmallButton("Open model..."))
      state.open_dialog = {true, s, false, state.slots[s].path_field, false, state.open_dialog.token};
    flow_next(ImGui::CalcTextSize("Open bundle...").x + 2 * ImGui::GetStyle().FramePadding.x);
    if (ImGui::SmallButton("Open bundle..."))
      state.open_dialog = {true, s, true, state.slots[s].bundle_field, false, state.open_dialog.token};
    flow_next(ImGui::CalcTextSize("Remote...").x + 2 * ImGui::GetStyle().FramePadding.x);
    if (ImGui::SmallButton("Remote..."))
      state.open_dialog = {true, s, false, state.slots[s].path_field, true, state.open_dialog.token};
    ImGui::PopID();
    ImGui::Spacing();
  }
  draw_timeline(state, worker);
}

void pick_device(GuiState& state, InferenceWorker& worker, DeviceChoice to) {
  const DeviceSwitch plan = plan_device_switch(state.device, to, state.cuda);
  state.device_message = plan.message;
  if (!plan.message.empty()) state.message = plan.message;
  if (plan.accepted) {
    state.device = to;
    worker.set_device(to);
  }
  if (!plan.reload) return;
  for (int s = 0; s < kSlots; ++s) {
    // A loaded model again from where it came; a slot whose load failed (e.g. CUDA asked at start on a
    // CPU-only build) tries its typed folder again.
    const SlotInfo& info = state.status.slots[static_cast<size_t>(s)];
    if (info.path.rfind("remote://", 0) == 0) continue;  // runs where its server put it
    if (info.loaded && !info.path.empty())
      worker.load(s, info.path);
    else if (!info.error.empty() && !state.slots[s].path_field.empty())
      worker.load(s, state.slots[s].path_field);
  }
  state.prompt.rerun();
}

void draw_device_menu(GuiState& state, InferenceWorker& worker) {
  ImGui::TextDisabled("device (both models)");
  static const char* kDevices[] = {"auto", "cpu", "cuda"};
  for (int pick = 0; pick < 3; ++pick) {
    if (!ImGui::MenuItem(kDevices[pick], nullptr, static_cast<int>(state.device) == pick)) {
      if (pick == 0 && ImGui::IsItemHovered())
        ImGui::SetTooltip("auto: the GPU when LibTorch has CUDA, else the CPU. %s",
                          state.cuda ? "CUDA is available." : "No CUDA here.");
      continue;
    }
    pick_device(state, worker, static_cast<DeviceChoice>(pick));
  }
  if (!state.device_message.empty()) ImGui::TextDisabled("%s", state.device_message.c_str());
}

namespace {

// Continue, beside the prompt editor in two rows (no height of its own): the button, the writing model and
// how many tokens; then Back/Forward through what it wrote and where the query is among them. Returns the
// width it takes.
float continue_width() {
  const ImGuiStyle& st = ImGui::GetStyle();
  const float em = ImGui::GetFontSize();
  return ImGui::CalcTextSize("Writing...").x + 2 * st.FramePadding.x + em * 4.2f + em * 2.6f +
         ImGui::CalcTextSize("tokens").x + 4 * st.ItemSpacing.x;
}

void draw_continue_controls(GuiState& state) {
  GuiState::Continue& c = state.cont;
  const float em = ImGui::GetFontSize();
  const bool writing = c.request != 0 || c.revealed < c.steps.size();
  ImGui::BeginGroup();
  const float x0 = ImGui::GetCursorScreenPos().x;
  if (ImGui::Button(writing ? "Writing..." : "Continue") && !writing) c.start = true;
  state.drawn.note("continue", ImGui::GetItemRectMin().x, ImGui::GetItemRectMin().y,
                   ImGui::GetItemRectMax().x, ImGui::GetItemRectMax().y);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "The %s model writes %d tokens after the prompt (%s); they join the prompt one at a time, both\n"
        "models running again and the query moving to each (C; Shift+C: the right model). Typing stops it.%s%s",
        c.slot == 0 ? "left" : "right", c.tokens,
        c.temperature > 0 ? "sampled at the Run menu's temperature" : "greedy: the likeliest token each time",
        c.message.empty() ? "" : "\nLast: ", c.message.c_str());
  ImGui::SameLine();
  ImGui::SetNextItemWidth(em * 4.2f);
  ImGui::Combo("##writer", &c.slot, "left\0right\0");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("the model that writes (C: left, Shift+C: right)");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(em * 2.6f);
  ImGui::InputInt("tokens##continue", &c.tokens, 0, 0);
  c.tokens = std::clamp(c.tokens, 1, 256);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("how many tokens the model writes (1 to 256)");
  const std::vector<int> written = written_tokens(state);
  ImGui::BeginDisabled(written.empty());
  if (ImGui::ArrowButton("##back", ImGuiDir_Left)) step_written(state, -1);
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("the query to the previous token the model wrote (,)");
  ImGui::SameLine();
  if (ImGui::ArrowButton("##forward", ImGuiDir_Right)) step_written(state, +1);
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("the query to the next token the model wrote (.)");
  ImGui::EndDisabled();
  ImGui::SameLine();
  char where[96] = "";
  const auto at = std::find(written.begin(), written.end(), state.selection.query);
  if (writing)
    std::snprintf(where, sizeof where, "writing %zu of %d", c.revealed, c.tokens);
  else if (at != written.end())
    std::snprintf(where, sizeof where, "new token %d of %zu", static_cast<int>(at - written.begin()) + 1,
                  written.size());
  else if (!written.empty())
    std::snprintf(where, sizeof where, "%zu new tokens", written.size());
  else if (!c.message.empty())
    std::snprintf(where, sizeof where, "%s", c.message.c_str());
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float room = std::max(0.0f, x0 + continue_width() - p.x);
  ImGui::PushClipRect(p, ImVec2(p.x + room, p.y + ImGui::GetFrameHeight()), true);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(where);
  ImGui::PopClipRect();
  ImGui::PopStyleColor();
  if (ImGui::IsItemHovered() && !c.message.empty()) ImGui::SetTooltip("%s", c.message.c_str());
  ImGui::EndGroup();
}

}  // namespace

// The prompt editor: an edit marks the prompt pending (the shell submits it after the debounce).
void draw_prompt_editor(GuiState& state) {
  const float controls = continue_width() + ImGui::GetStyle().ItemSpacing.x;
  PromptState& p = state.prompt;
  const ImVec2 size(-controls, ImGui::GetTextLineHeight() * 3 + ImGui::GetStyle().FramePadding.y * 2);
  if (p.editing) {
    if (p.focus) {
      ImGui::SetKeyboardFocusHere();
      p.focus = false;
    }
    if (ImGui::InputTextMultiline("##prompt", &p.text, size)) prompt_edited(state);
    if (!ImGui::IsItemActive() && !ImGui::IsItemFocused() && !ImGui::IsItemActivated())
      p.editing = false;  // the keyboard went elsewhere: the wrapped text again
  } else {
    // The text wrapped at the box's width, scrolled to its end (the question, the query) when it changes;
    // a click edits it. The frame as the editor draws it; inside, a window exactly three lines high (its
    // clip rectangle is the lines', so that no part of a fourth shows).
    const ImGuiStyle& st = ImGui::GetStyle();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    const float box_w = ImGui::GetContentRegionAvail().x + size.x;  // size.x < 0: room left for the controls
    ImGui::GetWindowDrawList()->AddRectFilled(p0, ImVec2(p0.x + box_w, p0.y + size.y),
                                              ImGui::GetColorU32(ImGuiCol_FrameBg), st.FrameRounding);
    ImGui::SetCursorScreenPos(ImVec2(p0.x, p0.y + st.FramePadding.y));
    ImGui::PushStyleColor(ImGuiCol_ChildBg, ImVec4(0, 0, 0, 0));
    ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(st.FramePadding.x, 0));
    // (Named without "##" so that the layout check reads it: its lines must be whole at the edges.)
    ImGui::BeginChild("prompt-text", ImVec2(box_w, ImGui::GetTextLineHeight() * 3), false,
                      ImGuiWindowFlags_NoScrollWithMouse);
    const bool hovered = ImGui::IsWindowHovered();
    // A long text shows its last few thousand bytes (the question and the end, what the views read), from a
    // word's start, after "…": a whole book would emit more vertices than a draw list holds, and a click
    // edits all of it.
    constexpr size_t kShownBytes = 4000;
    std::string tail;
    if (p.text.size() > kShownBytes) {
      size_t at = p.text.size() - kShownBytes;
      while (at < p.text.size() && (static_cast<unsigned char>(p.text[at]) & 0xC0) == 0x80) ++at;
      const size_t space = p.text.find_first_of(" \n", at);
      if (space != std::string::npos && space - at < 80) at = space + 1;
      tail = "\xE2\x80\xA6 " + p.text.substr(at);
    }
    const char* text = p.text.empty() ? " " : tail.empty() ? p.text.c_str() : tail.c_str();
    const float line = ImGui::GetTextLineHeight();
    // The last scroll that shows whole lines: the text's lines less the three shown.
    const float lines =
        std::round(ImGui::CalcTextSize(text, nullptr, false, ImGui::GetContentRegionAvail().x).y / line);
    const float last = std::max(0.0f, (lines - 3) * line);
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(text);
    ImGui::PopTextWrapPos();
    // A changed text scrolls to its end (the question, the query) over the next frames (ImGui knows the new
    // height a frame later); the wheel and the scrollbar move by whole lines.
    if (p.shown_size != p.text.size()) {
      p.shown_size = p.text.size();
      p.scroll_frames = 3;
    }
    if (p.scroll_frames > 0) {
      --p.scroll_frames;
      ImGui::SetScrollY(last);
    } else if (hovered && ImGui::GetIO().MouseWheel != 0) {
      const float at = std::round(ImGui::GetScrollY() / line) - std::round(ImGui::GetIO().MouseWheel);
      ImGui::SetScrollY(std::clamp(at * line, 0.0f, last));
    } else if (std::fmod(ImGui::GetScrollY(), line) != 0 || ImGui::GetScrollY() > last) {
      ImGui::SetScrollY(std::min(last, std::round(ImGui::GetScrollY() / line) * line));
    }
    ImGui::EndChild();
    ImGui::PopStyleVar();
    ImGui::PopStyleColor();
    ImGui::SetCursorScreenPos(p0);
    ImGui::Dummy(ImVec2(box_w, size.y));  // the frame's place in the layout
    state.drawn.note("prompt", p0.x, p0.y, p0.x + box_w, p0.y + size.y);
    if (hovered) {
      ImGui::SetMouseCursor(ImGuiMouseCursor_TextInput);
      ImGui::SetTooltip("Click to edit the prompt (Ctrl+L); the mouse wheel scrolls it");
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
        p.editing = true;
        p.focus = true;
      }
    }
  }
  ImGui::SameLine();
  draw_continue_controls(state);
}

ImU32 written_ink(const GuiState& state) {
  return model_ink(state.cont.written_slot);
}

void reset_continue(GuiState& state, const std::string& why) {
  GuiState::Continue& c = state.cont;
  if (c.request) c.cancel = true;
  // Why a continuation stopped; with none in progress, its old report ("the left model wrote ...") goes.
  c.message = c.request || c.revealed < c.steps.size() ? why : std::string();
  c.request = 0;
  c.written_begin = c.written_end = 0;  // what the model wrote is the user's text now
  c.written_slot = -1;
  c.follow = false;
  c.steps.clear();
  c.revealed = 0;
}

void prompt_edited(GuiState& state) {
  state.prompt.pending = true;
  reset_continue(state, "stopped: the prompt was edited");  // typing ends a continuation, as it ends a run
  state.selection.needles.clear();                          // the builder's spans no longer match the text
  state.needle.focus_pending = false;  // nor is its episode's answer head to be sought in the new text
  state.prompt.last_edit = now_seconds();
}

namespace {

constexpr double kRevealSeconds = 0.4;  // between written tokens: long enough to see each token's row

// The next written token joins the prompt once the run of the text so far is on screen and its time has
// come; both models run again and the query follows it.
void reveal_next(GuiState& state) {
  GuiState::Continue& c = state.cont;
  if (c.revealed >= c.steps.size() || state.prompt.pending) return;
  const bool shown = state.shown && state.shown->prompt == state.prompt.text;
  if (c.revealed > 0 && (!shown || now_seconds() < c.next_at)) return;
  state.prompt.text += c.steps[c.revealed++];
  c.written_end = state.prompt.text.size();
  c.next_at = now_seconds() + kRevealSeconds;
  c.follow = true;
  state.prompt.rerun();
}

}  // namespace

void poll_continue(GuiState& state, InferenceWorker& worker) {
  GuiState::Continue& c = state.cont;
  if (c.cancel) {
    worker.cancel_continuation();
    c.cancel = false;
  }
  if (c.start) {
    c.start = false;
    GenerateOptions o;
    o.max_new = c.tokens;
    o.temperature = c.temperature;
    o.seed = static_cast<uint64_t>(std::max(0, c.seed));
    RunEdits edits;  // Continue writes under the Why view's interventions, as every view shows them
    edits.interventions = state.why.specs();
    edits.answer = {state.selection.answer_begin, state.selection.answer_end};
    edits.query = state.selection.query;
    edits.specials = state.prompt.specials_as_text ? Specials::text : Specials::match;
    c.request = worker.continue_prompt(c.slot, state.prompt.text, o, edits);
    c.message.clear();
    c.steps.clear();
    c.revealed = 0;
  }
  reveal_next(state);
  std::optional<Continuation> done = worker.take_continuation();
  if (!done || done->request != c.request) return;
  c.request = 0;
  const std::string who = done->slot == 0 ? "left" : "right";
  if (!done->error.empty()) {
    c.message = done->error;
    return;
  }
  if (state.prompt.text != done->prompt) {  // edited meanwhile (the edit would have cancelled it)
    c.message = "the prompt changed while the model wrote: nothing appended";
    return;
  }
  c.written_begin = c.written_end = state.prompt.text.size();
  c.written_slot = done->slot;
  c.steps = done->steps;  // revealed a token at a time, the query following each (reveal_next)
  c.revealed = 0;
  c.next_at = 0;
  reveal_next(state);
  char msg[200];
  std::snprintf(msg, sizeof msg, "the %s model wrote %zu token%s in %.0f ms", who.c_str(), done->ids.size(),
                done->ids.size() == 1 ? "" : "s", done->ms);
  c.message = msg;
  // A prompt ending in a space reads without it (SentencePiece drops it), so a model often writes it back
  // first: that token adds nothing to the text and is not among the underlined ones.
  if (done->first_wrote_back_space)
    c.message += " (the first writes back the space the prompt ended with, so " +
                 std::to_string(done->ids.size() - 1) + " are new)";
}

std::vector<int> written_tokens(const GuiState& state) {
  const GuiState::Continue& c = state.cont;
  std::vector<int> out;
  // The run on screen is of the prompt, or of its beginning while the written tokens join it one at a time.
  if (c.written_end <= c.written_begin || !state.shown || state.shown->prompt.size() < c.written_begin ||
      state.prompt.text.compare(0, state.shown->prompt.size(), state.shown->prompt) != 0)
    return out;
  // The written bytes as the shown run tokenized them (the left slot's offsets, else the right's).
  for (int s = 0; s < kSlots; ++s) {
    const auto& offsets = state.shown->offsets[s];
    if (!state.shown->traces[static_cast<size_t>(s)] || offsets.empty()) continue;
    for (size_t i = 0; i < offsets.size(); ++i)
      if (offsets[i].second > offsets[i].first && offsets[i].first >= c.written_begin &&
          offsets[i].first < c.written_end)
        out.push_back(static_cast<int>(i));
    break;
  }
  return out;
}

void step_written(GuiState& state, int direction) {
  const std::vector<int> w = written_tokens(state);
  if (w.empty()) return;
  const int q = state.selection.query;
  if (direction > 0) {
    const auto next = std::upper_bound(w.begin(), w.end(), q);
    state.selection.query = next == w.end() ? w.back() : *next;
  } else {
    const auto at = std::lower_bound(w.begin(), w.end(), q);
    state.selection.query = at == w.begin() ? w.front() : *(at - 1);
  }
}

}  // namespace difflens::app
