// The token strip: the prompt's tokens as chips; hover marks a key in every map, click selects the
// query, right-drag marks the answer span. Wraps and scrolls beyond a few lines.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "app/desktop/panels.h"
#include "app/reports/prediction_text.h"

namespace difflens::app {

// The prompt's tokens as chips that read as the text: word markers drawn as spaces, byte-fallback runs
// decoded, neighbours told apart by alternating shades. Hover marks the key in every map, click selects the
// query token, right-drag marks the answer span.
void draw_token_strip(GuiState& state, const std::vector<std::string>& tokens,
                      const std::vector<std::string>& labels) {
  if (!ImGui::IsMouseDown(ImGuiMouseButton_Right)) state.selection.answer_anchor = -1;
  const ImVec2 pad(2, 1);
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(1, 2));
  // Long prompts: at most four lines of chips, scrolling, so the views keep their room (two in lecture mode
  // on a window under 900 px: its 26 px chips would take a fifth of a 1280x800 projector's height).
  const float line = ImGui::GetTextLineHeight() + 2 * pad.y + 2;
  const float lines = state.lecture && ImGui::GetIO().DisplaySize.y < 900 ? 2.0f : 4.0f;
  const float height = std::min(state.strip_height > 0 ? state.strip_height : line, lines * line);
  ImGui::BeginChild("##tokenstrip", ImVec2(0, height), false);
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const std::vector<int> written = written_tokens(state);  // what Continue's model wrote: underlined
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& text = labels[i];
    // Text as it is (no "##" label rules), each chip exactly as wide as its text.
    const ImVec2 ts = ImGui::CalcTextSize(text.c_str(), nullptr, false);
    const ImVec2 size(ts.x + 2 * pad.x, ts.y + 2 * pad.y);
    if (i > 0) {
      ImGui::SameLine();
      if (ImGui::GetItemRectMax().x + size.x + 1 > right) ImGui::NewLine();
    }
    const int ii = static_cast<int>(i);
    const bool query = ii == state.selection.query;
    const bool key = ii == state.selection.hovered_key;
    const bool answer = ii >= state.selection.answer_begin && ii < state.selection.answer_end;
    const bool needle =
        std::any_of(state.selection.needles.begin(), state.selection.needles.end(),
                    [&](const std::pair<int, int>& n) { return ii >= n.first && ii < n.second; });
    ImGui::PushID(ii);
    if (ImGui::InvisibleButton("tok", size)) state.selection.query = ii;
    ImGui::PopID();
    const ImVec2 p = ImGui::GetItemRectMin();
    const ImU32 bg = query    ? IM_COL32(255, 158, 51, 255)
                     : key    ? IM_COL32(255, 153, 217, 255)
                     : answer ? IM_COL32(115, 204, 115, 255)
                     : needle ? (i % 2 ? IM_COL32(250, 224, 128, 255) : IM_COL32(242, 214, 110, 255))
                     : i % 2  ? IM_COL32(222, 228, 238, 255)
                              : IM_COL32(236, 240, 246, 255);
    dl->AddRectFilled(p, ImVec2(p.x + size.x, p.y + size.y), bg, 2.0f);
    dl->AddText(ImVec2(p.x + pad.x, p.y + pad.y), ImGui::GetColorU32(ImGuiCol_Text), text.c_str());
    if (std::binary_search(written.begin(), written.end(), ii))
      dl->AddRectFilled(ImVec2(p.x, p.y + size.y - 3), ImVec2(p.x + size.x, p.y + size.y),
                        written_ink(state));
    if (query && state.strip_scrolled_to != ii) {  // keep the selected query in sight, whole lines shown
      const float y = p.y - ImGui::GetWindowPos().y + ImGui::GetScrollY();  // its line's top in the strip
      const float visible = std::max(1.0f, std::floor(ImGui::GetWindowHeight() / line));
      ImGui::SetScrollY(std::max(0.0f, (std::round(y / line) - visible + 1) * line));
      state.strip_scrolled_to = ii;
    }
    if (ImGui::IsItemHovered()) {
      state.selection.hovered_next = ii;
      // What each model expected at this token, against what stands there.
      std::string expected;
      if (state.shown)
        for (const auto& t : state.shown->traces) {
          const std::string e =
              t && t->length() == static_cast<int64_t>(tokens.size()) ? expected_here(*t, ii) : "";
          if (!e.empty())
            expected += "\n" + (t->config.name.empty() ? std::string("model") : t->config.name) + " " + e;
        }
      const std::string wrote = std::binary_search(written.begin(), written.end(), ii)
                                    ? std::string("\nwritten by the ") +
                                          (state.cont.written_slot == 1 ? "right" : "left") + " model"
                                    : "";
      ImGui::SetTooltip(
          "token %d: '%s'  (piece '%s')%s\nclick: the query   right-drag: the answer span%s", ii,
          text.c_str(), tokens[i].c_str(), (wrote + expected).c_str(),
          state.selection.needles.empty() ? "" : "\nyellow: needle sentences, green: the asked code");
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Right)) state.selection.answer_anchor = ii;
      if (ImGui::IsMouseDown(ImGuiMouseButton_Right) && state.selection.answer_anchor >= 0) {
        state.selection.answer_begin = std::min(state.selection.answer_anchor, ii);
        state.selection.answer_end = std::max(state.selection.answer_anchor, ii) + 1;
      }
    }
  }
  state.strip_height = ImGui::GetCursorPosY();
  ImGui::EndChild();
  ImGui::PopStyleVar();
}

}  // namespace difflens::app
