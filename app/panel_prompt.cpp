// The model slots of the side panel (what each holds, its load, "Open" buttons), the Run menu's device
// choice, and the prompt editor above the token strip.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "app/cli_common.h"
#include "app/panels.h"
#include "app/plot.h"
#include "app/remote_client.h"

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

void draw_model_slots(GuiState& state, InferenceWorker& worker) {
  for (int s = 0; s < kSlots; ++s) {
    ImGui::PushID(s);
    const SlotInfo& info = state.status.slots[static_cast<size_t>(s)];
    const std::string& path = info.path.empty() ? state.slots[s].path_field : info.path;
    const size_t cut = path.rfind("remote://", 0) == 0
                           ? std::string::npos  // remote://HOST:PORT/N whole
                           : path.find_last_of('/', path.size() > 1 ? path.size() - 2 : 0);
    ImGui::TextWrapped("%s: %s", s == 0 ? "Left" : "Right",
                       path.empty()               ? "(empty)"
                       : cut == std::string::npos ? path.c_str()
                                                  : path.c_str() + cut + 1);
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

// The prompt editor: an edit marks the prompt pending (the shell submits it after the debounce).
void draw_prompt_editor(GuiState& state) {
  if (ImGui::InputTextMultiline(
          "##prompt", &state.prompt.text,
          ImVec2(-1, ImGui::GetTextLineHeight() * 3 + ImGui::GetStyle().FramePadding.y * 2)))
    prompt_edited(state);
}

void prompt_edited(GuiState& state) {
  state.prompt.pending = true;
  state.selection.needles.clear();     // the builder's spans no longer match the text
  state.needle.focus_pending = false;  // nor is its episode's answer head to be sought in the new text
  state.prompt.last_edit = now_seconds();
}

}  // namespace difflens::app
