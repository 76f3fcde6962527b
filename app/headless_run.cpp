// The headless run of the window (see headless_run.h).
#include "app/headless_run.h"

#include <imgui_internal.h>
#include "viz/gl.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "app/panels.h"
#include "viz/export.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

// The headless layout report: the view shown, every region drawn (window pixels) and any window that lies
// outside the screen or whose contents it clips without a scrollbar to reach them.
// Text cut by a clip rectangle in the frame just rendered: glyph quads of the font atlas that reach past
// their draw command's clip rectangle (sideways anywhere; up or down only in windows that cannot scroll).
// ImGui emits a glyph that straddles the clip edge and skips those wholly beyond it, so a cut line shows as
// one straddling glyph. The prompt editor (it scrolls to its cursor) is left out. Prints up to 8 of them,
// one per window and line; returns how many lines of text are cut.
int count_cut_text() {
  const ImDrawData* dd = ImGui::GetDrawData();
  if (!dd) return 0;
  auto key = [](float u0, float v0, float u1, float v1) {
    return std::array<long, 4>{std::lround(u0 * 1e6f), std::lround(v0 * 1e6f), std::lround(u1 * 1e6f),
                               std::lround(v1 * 1e6f)};
  };
  std::set<std::array<long, 4>> glyphs;  // the atlas rectangles of every glyph
  for (const ImFont* f : ImGui::GetIO().Fonts->Fonts)
    for (const ImFontGlyph& g : f->Glyphs)
      if (g.Visible) glyphs.insert(key(g.U0, g.V0, g.U1, g.V1));
  auto is_glyph = [&](const ImDrawVert& a, const ImDrawVert& c) {
    return a.uv.x != c.uv.x && a.uv.y != c.uv.y && glyphs.count(key(a.uv.x, a.uv.y, c.uv.x, c.uv.y)) > 0;
  };
  std::map<const ImDrawList*, ImGuiWindow*> owner;
  for (ImGuiWindow* w : GImGui->Windows)
    if (w->Active) owner[w->DrawList] = w;
  std::set<std::pair<std::string, int>> lines;  // (window, line y): each cut line counted once
  for (int l = 0; l < dd->CmdListsCount; ++l) {
    const ImDrawList* list = dd->CmdLists[l];
    const auto it = owner.find(list);
    const ImGuiWindow* win = it == owner.end() ? nullptr : it->second;
    const std::string name = win ? win->Name : (list->_OwnerName ? list->_OwnerName : "?");
    if (name.find("/##prompt") != std::string::npos) continue;
    const bool scrolls = win && (win->ScrollMax.y > 0 || win->ScrollbarY);
    for (const ImDrawCmd& cmd : list->CmdBuffer) {
      if (cmd.UserCallback) continue;
      const ImVec4 clip = cmd.ClipRect;
      // Glyphs are quads drawn as the index pattern v, v+1, v+2, v, v+2, v+3 (corners v: top left,
      // v + 2: bottom right); other shapes are triangles, so the scan steps by one triangle.
      const ImDrawIdx* idx = list->IdxBuffer.Data + cmd.IdxOffset;
      for (unsigned int i = 0; i + 6 <= cmd.ElemCount; i += 3) {
        const ImDrawIdx v = idx[i];
        if (idx[i + 1] != v + 1 || idx[i + 2] != v + 2 || idx[i + 3] != v || idx[i + 4] != v + 2 ||
            idx[i + 5] != v + 3)
          continue;
        const ImDrawVert& a = list->VtxBuffer[static_cast<int>(v + cmd.VtxOffset)];
        const ImDrawVert& c = list->VtxBuffer[static_cast<int>(v + 2 + cmd.VtxOffset)];
        if (!is_glyph(a, c)) continue;
        i += 3;  // the quad's second triangle
        const float x0 = std::min(a.pos.x, c.pos.x), x1 = std::max(a.pos.x, c.pos.x);
        const float y0 = std::min(a.pos.y, c.pos.y), y1 = std::max(a.pos.y, c.pos.y);
        // Glyph quads carry a pixel of the rasteriser's padding: a cut shows beyond 2 px.
        const bool sideways = x0 < clip.x - 2 || x1 > clip.z + 2;
        const bool vertical = !scrolls && (y0 < clip.y - 2 || y1 > clip.w + 2);
        if (!sideways && !vertical) continue;
        if (lines.insert({name, static_cast<int>(y0)}).second && lines.size() <= 8)
          std::printf("layout: text cut in %s at %.0f,%.0f (clip %.0f,%.0f-%.0f,%.0f)\n", name.c_str(), x0,
                      y0, clip.x, clip.y, clip.z, clip.w);
      }
    }
  }
  return static_cast<int>(lines.size());
}

void print_layout_report(const GuiState& state, int width, int height) {
  std::printf(
      "layout: view %s%s\n", view_name(state.layout.view),
      state.layout.split_shown() ? (state.layout.side_by_side ? " beside the maps" : " below the maps") : "");
  for (const LayoutRecord::Rect& r : state.drawn.rects)
    std::printf("layout: %s %.0f %.0f %.0f %.0f (%.0fx%.0f)\n", r.name.c_str(), r.x0, r.y0, r.x1, r.y1,
                r.x1 - r.x0, r.y1 - r.y0);
  int windows = 0, bad = 0;
  for (ImGuiWindow* win : GImGui->Windows) {
    if (!win->Active || (win->Flags & (ImGuiWindowFlags_Tooltip | ImGuiWindowFlags_Popup))) continue;
    if (std::strstr(win->Name, "/##prompt"))
      continue;  // the prompt editor scrolls to its cursor (no wrapping)
    // Wider than the window is a fault even with a scrollbar to reach it (a cut toolbar, a table off the
    // edge), except in the Model view's grid, which scrolls for models with many heads by design.
    const bool scrolls_by_design = std::strstr(win->Name, "/modelgrid") != nullptr;
    ++windows;
    const ImRect r = win->Rect();
    // Below (or above) the window only counts where no scrolling parent can bring it into view.
    const bool parent_scrolls = win->ParentWindow && win->ParentWindow->ScrollbarY;
    const bool outside = r.Min.x < -0.5f || r.Max.x > width + 0.5f ||
                         (!parent_scrolls && (r.Min.y < -0.5f || r.Max.y > height + 0.5f));
    const ImVec2 room(win->ContentRegionRect.GetWidth(), win->ContentRegionRect.GetHeight());
    const bool clipped_x = (!win->ScrollbarX || !scrolls_by_design) && win->ContentSize.x > room.x + 1.0f;
    const bool clipped_y = !win->ScrollbarY && win->ContentSize.y > room.y + 1.0f;
    if (outside || clipped_x || clipped_y) {
      ++bad;
      std::printf("layout: %s %s: content %.0fx%.0f in %.0fx%.0f at %.0f,%.0f-%.0f,%.0f\n", win->Name,
                  outside ? "outside the window" : "clips its contents", win->ContentSize.x,
                  win->ContentSize.y, room.x, room.y, r.Min.x, r.Min.y, r.Max.x, r.Max.y);
    }
  }
  const int cut = count_cut_text();
  std::printf("layout check: %d windows, %d outside or clipped, %d texts cut\n", windows, bad, cut);
}

// The prompt's length in tokens, from whichever slot ran it (0 before any result).
long long shown_length(const GuiState& state) {
  for (int s = 0; s < kSlots; ++s)
    if (state.shown && state.shown->traces[s]) return state.shown->traces[s]->length();
  return 0;
}

}  // namespace

bool write_window_png(const std::string& path, int width, int height) {
  const size_t row = static_cast<size_t>(width) * 3;
  std::vector<unsigned char> px(row * static_cast<size_t>(height)), flipped(px.size());
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, px.data());
  for (int y = 0; y < height; ++y)  // GL rows are bottom-up
    std::copy_n(px.data() + row * static_cast<size_t>(height - 1 - y), row,
                flipped.data() + row * static_cast<size_t>(y));
  try {  // whole or not at all (viz::write_png writes through a temporary)
    viz::write_png(path, flipped, width, height);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "difflens: %s\n", e.what());
    return false;
  }
}

bool HeadlessRun::take_result(GuiState& state) {
  if (!active()) return true;
  if (!simulated_edit_ && opt_.bundle.empty()) {  // a bundle at start is shown as it is
    simulated_edit_ = true;
    state.prompt.pending = true;
    state.prompt.last_edit = now_seconds();
    return false;
  }
  result_ready_ = true;
  return true;
}

void HeadlessRun::after_poll(GuiState& state) {
  if (!active() || frames_ >= 0 || !result_ready_) return;
  if (opt_.lab_run && !(state.lab.progress && !state.lab.progress->running)) return;
  frames_ = 0;
  if (!opt_.lab_run) return;
  const SweepProgress& p = *state.lab.progress;
  std::printf("needle lab: %zu/%zu episodes%s%s\n", p.done, p.total, p.finished ? "" : " (not finished) ",
              p.error.c_str());
  if (opt_.export_all && p.done > 0) {
    export_lab(state);
    std::printf("%s\n", state.lab.message.c_str());
  }
}

void HeadlessRun::place_mouse(const GuiState& state, ImGuiIO& io) const {
  if (!active()) return;
  io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);  // no hover, and no presenting pointer, unless asked
  if (opt_.hover_token >= 0) {  // the middle of the token's box in the Text view, as drawn last frame
    if (const LayoutRecord::Rect* r = state.drawn.find("text.probe"))
      io.MousePos = ImVec2(std::floor((r->x0 + r->x1) / 2), std::floor((r->y0 + r->y1) / 2));
    return;
  }
  if (opt_.hover[0] < 0) return;
  if (state.explain.present) {  // --hover while presenting: the pointer dot at the window's centre
    io.MousePos = ImVec2(std::floor(io.DisplaySize.x / 2), std::floor(io.DisplaySize.y / 2));
    return;
  }
  if (const LayoutRecord::Rect* m = state.drawn.find("map.0")) {
    // The first whole pixel of the cell (ImGui floors the mouse position): exact while cells are at least
    // a pixel wide.
    const double span = state.view.zoom_span > 0 ? state.view.zoom_span : 1;
    io.MousePos = ImVec2(std::ceil(m->x0 + static_cast<float>((opt_.hover[1] - state.view.zoom_col0) / span) *
                                               (m->x1 - m->x0)),
                         std::ceil(m->y0 + static_cast<float>((opt_.hover[0] - state.view.zoom_row0) / span) *
                                               (m->y1 - m->y0)));
  }
}

bool HeadlessRun::export_now(const GuiState& state) {
  if (!export_pending_ || !state.shown) return false;
  export_pending_ = false;
  return true;
}

bool HeadlessRun::page_now(const GuiState& state) {
  if (!page_pending_ || !state.shown) return false;
  page_pending_ = false;
  return true;
}

bool HeadlessRun::after_render(const GuiState& state, const InferenceWorker& worker, int width, int height,
                               double frame_start) {
  if (!active() || frames_ < 0) return false;
  glFinish();  // the frame's cost includes the GPU's work
  (frames_ == 0 ? first_frame_ms_ : steady_ms_).push_back(1000.0 * (now_seconds() - frame_start));
  if (++frames_ <= opt_.exit_after_frames) return false;
  std::error_code ec;
  if (std::filesystem::path(opt_.screenshot).has_parent_path())
    std::filesystem::create_directories(std::filesystem::path(opt_.screenshot).parent_path(), ec);
  if (!write_window_png(opt_.screenshot, width, height)) {
    std::fprintf(stderr, "difflens: cannot write %s\n", opt_.screenshot.c_str());
    exit_status_ = 1;
  } else {
    report(state, worker, width, height);
  }
  check_asked(state);
  return true;
}

void HeadlessRun::check_asked(const GuiState& state) {
  const long long T = shown_length(state);
  if (opt_.zoom[2] > 0 && T > 0 && (opt_.zoom[0] + opt_.zoom[2] > T || opt_.zoom[1] + opt_.zoom[2] > T)) {
    // The head view keeps the zoom inside the map: say what it shows instead of what was asked.
    const long long span = std::min<long long>(opt_.zoom[2], T);
    const long long r0 = std::clamp<long long>(opt_.zoom[0], 0, T - span);
    const long long c0 = std::clamp<long long>(opt_.zoom[1], 0, T - span);
    std::fprintf(
        stderr,
        "difflens: --zoom %d,%d,%d asks for rows %s and keys %s, but the prompt has %lld tokens: the "
        "maps show rows %s, keys %s\n",
        opt_.zoom[0], opt_.zoom[1], opt_.zoom[2],
        viz::token_range(opt_.zoom[0], opt_.zoom[0] + opt_.zoom[2]).c_str(),
        viz::token_range(opt_.zoom[1], opt_.zoom[1] + opt_.zoom[2]).c_str(), T,
        viz::token_range(r0, r0 + span).c_str(), viz::token_range(c0, c0 + span).c_str());
  }
  if ((opt_.layer >= 0 && opt_.layer != state.view.layer) ||
      (opt_.head >= 0 && (opt_.head != state.view.head[0] || opt_.head != state.view.head[1])))
    std::fprintf(
        stderr,
        "difflens: --select %d,%d is beyond the models: shown layer %d, heads %d (left) and %d (right)\n",
        opt_.layer, opt_.head, state.view.layer, state.view.head[0], state.view.head[1]);
  if (!opt_.export_page.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(opt_.export_page, ec) ||
        std::filesystem::last_write_time(opt_.export_page, ec) < started_) {
      std::fprintf(stderr, "difflens: --export-page wrote nothing: %s\n",
                   state.message.empty() ? "no result to export" : state.message.c_str());
      exit_status_ = 1;
    }
  }
  if (opt_.export_all) {
    std::error_code ec;
    int written = 0;
    const std::filesystem::path dir = state.view.export_dir;
    for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      written += it->is_regular_file(ec) && it->last_write_time(ec) >= started_;
    if (written == 0) {
      std::fprintf(stderr, "difflens: --export-all wrote nothing to %s: %s%s\n", dir.string().c_str(),
                   state.message.empty() ? "no result to export" : state.message.c_str(),
                   state.drawn.find("map.0") ? "" : "; on the command line: --view maps, or --split below");
      exit_status_ = 1;
    } else {
      std::printf("exported %d files to %s\n", written, dir.string().c_str());
    }
  }
}

void HeadlessRun::report(const GuiState& state, const InferenceWorker& worker, int w, int h) const {
  const long long T = shown_length(state);
  char typed[64] = "";  // none for a bundle shown as it is (no keystroke ran it)
  if (state.edit_to_screen_ms >= 0)
    std::snprintf(typed, sizeof typed, ", keystroke -> maps on screen %.1f ms", state.edit_to_screen_ms);
  std::printf("wrote %s (%dx%d); %lld tokens: both models %.1f ms%s\n", opt_.screenshot.c_str(), w, h, T,
              state.status.last_run_ms, typed);
  if (!state.message.empty()) std::printf("status line: %s\n", state.message.c_str());
  {
    std::string shown = state.prompt.text.substr(0, 120);
    for (char& c : shown)
      if (c == '\n') c = ' ';
    std::printf("prompt box: %zu bytes: %s%s\n", state.prompt.text.size(), shown.c_str(),
                state.prompt.text.size() > 120 ? "..." : "");
  }
  print_layout_report(state, w, h);
  for (int s = 0; s < kSlots; ++s)
    if (state.cards[s].card) std::printf("model card %d: %s\n", s, card_line(*state.cards[s].card).c_str());
  if (state.drawn.find("text.0") || state.drawn.find("text.1"))
    std::printf("text view: query %d shown, kept query %d\n", state.text.shown_query, state.selection.query);
  const WorkerStatus st = worker.status();
  for (int s = 0; s < kSlots; ++s) {  // what each slot shows instead of maps, if anything
    if (!st.slots[s].error.empty()) std::printf("slot %d: %s\n", s, st.slots[s].error.c_str());
    if (state.shown && !state.shown->errors[s].empty())
      std::printf("slot %d run: %s\n", s, state.shown->errors[s].c_str());
  }
  for (int s = 0; s < kSlots; ++s) {  // long prompts: what was kept and what the head view shows
    const auto& t = state.shown ? state.shown->traces[s] : nullptr;
    if (t && !t->layers.empty() && t->layers[0].pooled > 0)
      std::printf("%s: pooled %lld x %lld cells of %lld tokens; head view %s\n", t->config.name.c_str(),
                  static_cast<long long>(t->layers[0].pooled), static_cast<long long>(t->layers[0].pooled), T,
                  state.exact_tile_shown[s] ? "shows an exact tile" : "shows pooled cells");
  }
  if (!steady_ms_.empty()) {
    double sum = 0, worst = 0;
    for (double m : steady_ms_) sum += m, worst = std::max(worst, m);
    std::printf(
        "frame time: first frame with new maps %.1f ms; then mean %.1f ms, max %.1f ms over %zu frames\n",
        first_frame_ms_.empty() ? 0.0 : first_frame_ms_[0], sum / steady_ms_.size(), worst,
        steady_ms_.size());
  }
}

}  // namespace difflens::app
