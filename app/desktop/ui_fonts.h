// The app's UI fonts (UI thread only): DejaVu Sans with a fallback font merged in, baked at the normal
// and the lecture size, grown as prompts and tokens bring characters the atlas lacks.
#pragma once

#include <imgui.h>

#include <cstdint>
#include <string>

#include "app/desktop/glyphs.h"
#include "app/worker/inference_worker.h"

namespace difflens::app {

// The UI fonts: DejaVu Sans with a fallback font merged in for the scripts it lacks, baked at two sizes
// for the characters in the base ranges plus those the app has met (GlyphNeeds).
struct UiFonts {
  std::string main, fallback;  // font files ("" when none found: ImGui's built-in font)
  float scale = 1.0f;
  GlyphNeeds needs;
  ImVector<ImWchar> ranges;  // must outlive the atlas build
  ImFont* normal = nullptr;
  ImFont* lecture = nullptr;
  uint64_t seen_request = ~0ull;  // the last result whose tokens were checked
};

// (Re)builds the atlas for the characters in `f.needs` (call between frames).
void build_fonts(UiFonts& f);

// Records the characters of a result's token pieces and next-token texts; true when any was new.
bool need_trace_glyphs(UiFonts& f, const RunResult& r);

}  // namespace difflens::app
