// The top of the window: the two model slots (open a model or a trace bundle), the device menu, the prompt
// editor and the view controls (layer, heads, scale, pooling, logits, long-prompt budget, exports).
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "app/panels.h"

namespace difflens::app {

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
      ImGui::ProgressBar(static_cast<float>(state.status.load_fraction),
                         ImVec2(ImGui::GetFontSize() * 10, 0));
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
    ImGui::SetTooltip("auto: the GPU when LibTorch has CUDA, else the CPU. %s",
                      state.cuda ? "CUDA is available." : "No CUDA here.");
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
  if (ImGui::Combo("logits", &v.quantization,
                   "exact\0"
                   "8-bit\0"
                   "6-bit\0"
                   "4-bit\0")) {
    state.prompt.pending = true;  // re-run both models with the new width
    state.prompt.last_edit = 0;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Absmax-quantize every attention logit (per head, dynamic) before the softmax,\n"
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
    ImGui::SetTooltip(
        "Prompts whose exact maps would need more than this per model are captured in blocks\n"
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

// The prompt editor: an edit marks the prompt pending (the shell submits it after the debounce).
void draw_prompt_editor(GuiState& state) {
  ImGui::TextUnformatted("Prompt");
  if (ImGui::InputTextMultiline("##prompt", &state.prompt.text, ImVec2(-1, ImGui::GetTextLineHeight() * 4))) {
    state.prompt.pending = true;
    state.selection.needles.clear();  // the builder's spans no longer match the text
    state.prompt.last_edit = now_seconds();
  }
}

}  // namespace difflens::app
