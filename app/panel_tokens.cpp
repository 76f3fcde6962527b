// The token strip: the prompt's tokens as chips; hover marks a key in every map, click selects the
// query, right-drag marks the answer span. Wraps and scrolls beyond a few lines.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "app/panels.h"

namespace difflens::app {

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
    const bool needle =
        std::any_of(state.selection.needles.begin(), state.selection.needles.end(),
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

}  // namespace difflens::app
