// Chart frames (see plot.h).
#include "app/desktop/plot.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "app/desktop/layout.h"

namespace difflens::app {

PlotArea draw_plot_frame(ImVec2 min, ImVec2 max, double lo, double hi, const char* fmt, bool x_labels,
                         const std::string& y_title) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float th = ImGui::GetTextLineHeight();
  if (!(hi > lo)) hi = lo + 1;
  const std::vector<double> ticks =
      nice_ticks(lo, hi, std::max(2, static_cast<int>((max.y - min.y) / (th * 3.0f))));
  const std::string label_fmt = tick_label_format(ticks, fmt);  // "0.005", not "0.01", at a step of 0.005
  fmt = label_fmt.c_str();
  char buf[32];
  float label_w = 0;
  for (double t : ticks) {
    std::snprintf(buf, sizeof buf, fmt, t);
    label_w = std::max(label_w, ImGui::CalcTextSize(buf).x);
  }
  const float lines = static_cast<float>(std::count(y_title.begin(), y_title.end(), '\n') + 1);
  const float top = y_title.empty() ? th * 0.5f : th * (0.8f + lines);
  PlotArea a{ImVec2(min.x + label_w + th * 0.6f, min.y + top),
             ImVec2(max.x - th * 0.3f, max.y - (x_labels ? th * 1.4f : th * 0.3f)), lo, hi};
  dl->AddRectFilled(a.min, a.max, IM_COL32(255, 255, 255, 255));
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  for (double t : ticks) {
    const float y = a.y(t);
    if (y < a.min.y - 1 || y > a.max.y + 1) continue;
    dl->AddLine(ImVec2(a.min.x, y), ImVec2(a.max.x, y),
                t == 0 ? IM_COL32(90, 90, 90, 255) : IM_COL32(0, 0, 0, 28), 1.0f);
    std::snprintf(buf, sizeof buf, fmt, t);
    dl->AddText(ImVec2(a.min.x - th * 0.3f - ImGui::CalcTextSize(buf).x, y - th / 2), text, buf);
  }
  dl->AddLine(ImVec2(a.min.x, a.min.y), ImVec2(a.min.x, a.max.y), IM_COL32(90, 90, 90, 255));
  if (!y_title.empty()) {  // cut at the frame's right edge (a narrow view: the chart's neighbours stay clear)
    dl->PushClipRect(min, ImVec2(max.x, min.y + th * (lines + 0.3f)), true);
    dl->AddText(ImVec2(min.x, min.y), text, y_title.c_str());
    dl->PopClipRect();
  }
  return a;
}

// `text` wrapped at its spaces into lines of at most `width` pixels, joined by "\n": at most `lines` of them,
// the last ending in "..." when the text goes on (a word wider than a line is broken between characters).
std::string wrap_at_spaces(const std::string& text, float width, int lines) {
  auto w = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str(), nullptr, false).x; };
  std::vector<std::string> out(1);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(at, end - at);
    at = end + 1;
    const std::string joined = out.back().empty() ? word : out.back() + " " + word;
    if (w(joined) <= width || out.back().empty()) {
      out.back() = joined;
    } else {
      out.push_back(word);
    }
    while (w(out.back()) > width && out.back().size() > 1) {  // a word wider than the line
      size_t cut = out.back().size() - 1;
      while (cut > 1 && (w(out.back().substr(0, cut)) > width ||
                         (static_cast<unsigned char>(out.back()[cut]) & 0xC0) == 0x80))
        --cut;
      const std::string rest = out.back().substr(cut);
      out.back().resize(cut);
      out.push_back(rest);
    }
  }
  if (lines > 0 && static_cast<int>(out.size()) > lines) {
    out.resize(static_cast<size_t>(lines));
    std::string& last = out.back();
    while (!last.empty() && w(last + "...") > width) {
      last.pop_back();
      while (!last.empty() && (static_cast<unsigned char>(last.back()) & 0xC0) == 0x80) last.pop_back();
      if (!last.empty() && (static_cast<unsigned char>(last.back()) & 0xC0) == 0xC0) last.pop_back();
    }
    last += "...";
  }
  std::string joined;
  for (size_t i = 0; i < out.size(); ++i) joined += (i ? "\n" : "") + out[i];
  return joined;
}

void flow_next(float width, const char* label) {
  const ImGuiStyle& st = ImGui::GetStyle();
  const float need = width + (label && *label ? st.ItemInnerSpacing.x + ImGui::CalcTextSize(label).x : 0);
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + st.ItemSpacing.x + need <= right) ImGui::SameLine();
}

}  // namespace difflens::app
