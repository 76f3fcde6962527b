// The app's UI fonts (app/desktop/ui_fonts.h).
#include "app/desktop/ui_fonts.h"

#include <imgui_freetype.h>

namespace difflens::app {

void build_fonts(UiFonts& f) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  f.normal = f.lecture = nullptr;
  if (f.main.empty()) return;  // ImGui's default font
  ImFontGlyphRangesBuilder builder;
  builder.AddRanges(reinterpret_cast<const ImWchar*>(kBaseGlyphRanges));
  for (uint32_t cp : f.needs.codepoints()) builder.AddChar(static_cast<ImWchar>(cp));
  f.ranges.clear();
  builder.BuildRanges(&f.ranges);
  auto add = [&](float px) {
    ImFont* font = io.Fonts->AddFontFromFileTTF(f.main.c_str(), px, nullptr, f.ranges.Data);
    if (font && !f.fallback.empty() && !f.needs.codepoints().empty()) {
      ImFontConfig merge;
      merge.MergeMode = true;  // only glyphs the main font lacks come from the fallback
      io.Fonts->AddFontFromFileTTF(f.fallback.c_str(), px, &merge, f.ranges.Data);
    }
    return font;
  };
  f.normal = add(16.0f * f.scale);
  f.lecture = add(26.0f * f.scale);
  io.Fonts->Build();
}

bool need_trace_glyphs(UiFonts& f, const RunResult& r) {
  bool added = false;
  for (const auto& t : r.traces) {
    if (!t) continue;
    for (const std::string& piece : t->tokens) added |= f.needs.add(piece);
    for (const TokenProbability& p : t->next_token) added |= f.needs.add(p.text);
    added |= f.needs.add(t->model_path) | f.needs.add(t->config.name);
  }
  return added;
}

}  // namespace difflens::app
