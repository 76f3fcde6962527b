// The headless run of the window (see headless_run.h).
#include "app/desktop/headless_run.h"

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

#include "app/desktop/panels.h"
#include "viz/export.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

// Text the frame just rendered shows badly: glyph quads of the font atlas that reach past their draw
// command's clip rectangle (sideways anywhere; up or down in windows that cannot scroll — and, counted
// apart, at the edge of one that can: a line half shown at the top or bottom of a scrolled box), and glyphs
// of two different texts drawn over each other. ImGui emits a glyph that straddles the clip edge and skips
// those wholly beyond it, so a cut line shows as one straddling glyph. The prompt editor (it scrolls to its
// cursor) is left out. Prints up to 8 of each kind, one per window and line.
struct TextFaults {
  int cut = 0, cut_at_scroll_edge = 0, overlaps = 0;
};

TextFaults count_text_faults() {
  TextFaults faults;
  const ImDrawData* dd = ImGui::GetDrawData();
  if (!dd) return faults;
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
  // A shown glyph: its quad less the rasteriser's padding, cut to its clip rectangle, and the text run it
  // belongs to (glyphs one after another in the vertex buffer, each right of the last or on a new line).
  struct Shown {
    float x0, y0, x1, y1;
    int run;
    std::string window;
  };
  std::vector<Shown> shown;
  int run = 0;
  std::set<std::pair<std::string, int>> cut_lines, edge_lines;  // (window, line y): each line counted once
  for (int l = 0; l < dd->CmdListsCount; ++l) {
    const ImDrawList* list = dd->CmdLists[l];
    const auto it = owner.find(list);
    const ImGuiWindow* win = it == owner.end() ? nullptr : it->second;
    if (win && (win->Flags & ImGuiWindowFlags_Tooltip)) continue;  // a tooltip covers what is under it
    const std::string name = win ? win->Name : (list->_OwnerName ? list->_OwnerName : "?");
    if (name.find("/##prompt") != std::string::npos) continue;
    const bool scrolls = win && (win->ScrollMax.y > 0 || win->ScrollbarY);
    for (const ImDrawCmd& cmd : list->CmdBuffer) {
      if (cmd.UserCallback) continue;
      const ImVec4 clip = cmd.ClipRect;
      // Glyphs are quads drawn as the index pattern v, v+1, v+2, v, v+2, v+3 (corners v: top left,
      // v + 2: bottom right); other shapes are triangles, so the scan steps by one triangle.
      const ImDrawIdx* idx = list->IdxBuffer.Data + cmd.IdxOffset;
      long last_v = -10;
      float last_x0 = 0, last_y0 = 0;
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
        const bool same_run = static_cast<long>(v) == last_v + 4 && (x0 > last_x0 || y0 > last_y0 + 1);
        if (!same_run) ++run;
        last_v = v;
        last_x0 = x0;
        last_y0 = y0;
        // Glyph quads carry a pixel of the rasteriser's padding: a cut shows beyond 2 px.
        // A glyph wholly beyond its clip rectangle is not drawn at all (the scissor): only one that
        // straddles an edge shows cut.
        const bool sideways = (x0 < clip.x - 2 && x1 > clip.x + 2) || (x0 < clip.z - 2 && x1 > clip.z + 2);
        const bool vertical = (y0 < clip.y - 2 && y1 > clip.y + 2) || (y0 < clip.w - 2 && y1 > clip.w + 2);
        if (sideways || (vertical && !scrolls)) {
          if (cut_lines.insert({name, static_cast<int>(y0)}).second && cut_lines.size() <= 8)
            std::printf("layout: text cut in %s at %.0f,%.0f (clip %.0f,%.0f-%.0f,%.0f)\n", name.c_str(), x0,
                        y0, clip.x, clip.y, clip.z, clip.w);
        } else if (vertical) {
          if (edge_lines.insert({name, static_cast<int>(y0)}).second && edge_lines.size() <= 8)
            std::printf("layout: a line half shown at the scroll edge of %s at %.0f,%.0f (clip %.0f-%.0f)\n",
                        name.c_str(), x0, y0, clip.y, clip.w);
        }
        const Shown g{std::max(x0 + 1.5f, clip.x),
                      std::max(y0 + 1.5f, clip.y),
                      std::min(x1 - 1.5f, clip.z),
                      std::min(y1 - 1.5f, clip.w),
                      run,
                      name};
        if (g.x1 > g.x0 && g.y1 > g.y0) shown.push_back(g);
      }
    }
  }
  faults.cut = static_cast<int>(cut_lines.size());
  faults.cut_at_scroll_edge = static_cast<int>(edge_lines.size());
  // Two texts over each other: glyphs of different runs whose inked boxes share more than a fifth of the
  // smaller one (neighbouring words only touch). A sweep over x keeps it linear in practice.
  std::sort(shown.begin(), shown.end(), [](const Shown& p, const Shown& q) { return p.x0 < q.x0; });
  std::set<std::pair<int, int>> pairs;  // (run, run): each pair of texts counted once
  for (size_t i = 0; i < shown.size(); ++i)
    for (size_t j = i + 1; j < shown.size() && shown[j].x0 < shown[i].x1; ++j) {
      const Shown &p = shown[i], &q = shown[j];
      if (p.run == q.run) continue;
      const float w = std::min(p.x1, q.x1) - std::max(p.x0, q.x0),
                  h = std::min(p.y1, q.y1) - std::max(p.y0, q.y0);
      if (w <= 0 || h <= 0) continue;
      const float smaller = std::min((p.x1 - p.x0) * (p.y1 - p.y0), (q.x1 - q.x0) * (q.y1 - q.y0));
      if (w * h <= 0.2f * smaller) continue;
      if (pairs.insert({std::min(p.run, q.run), std::max(p.run, q.run)}).second && pairs.size() <= 8)
        std::printf("layout: texts over each other in %s%s%s at %.0f,%.0f\n", p.window.c_str(),
                    p.window == q.window ? "" : " and ", p.window == q.window ? "" : q.window.c_str(), q.x0,
                    q.y0);
    }
  faults.overlaps = static_cast<int>(pairs.size());
  return faults;
}

}  // namespace

LayoutCheck check_layout(const GuiState& state, int width, int height, bool print_regions) {
  if (print_regions) {
    std::printf("layout: view %s%s\n", view_name(state.layout.view),
                state.layout.split_shown()
                    ? (state.layout.side_by_side ? " beside the maps" : " below the maps")
                    : "");
    for (const LayoutRecord::Rect& r : state.drawn.rects)
      std::printf("layout: %s %.0f %.0f %.0f %.0f (%.0fx%.0f)\n", r.name.c_str(), r.x0, r.y0, r.x1, r.y1,
                  r.x1 - r.x0, r.y1 - r.y0);
  }
  LayoutCheck check;
  for (ImGuiWindow* win : GImGui->Windows) {
    if (!win->Active || (win->Flags & (ImGuiWindowFlags_Tooltip | ImGuiWindowFlags_Popup))) continue;
    if (std::strstr(win->Name, "/##prompt"))
      continue;  // the prompt editor scrolls to its cursor (no wrapping)
    // Wider than the window is a fault even with a scrollbar to reach it (a cut toolbar, a table off the
    // edge), except in the Model view's grid, which scrolls for models with many heads by design.
    const bool scrolls_by_design = std::strstr(win->Name, "/modelgrid") != nullptr;
    ++check.windows;
    const ImRect r = win->Rect();
    // Below (or above) the window only counts where no scrolling parent can bring it into view.
    const bool parent_scrolls = win->ParentWindow && win->ParentWindow->ScrollbarY;
    const bool outside = r.Min.x < -0.5f || r.Max.x > width + 0.5f ||
                         (!parent_scrolls && (r.Min.y < -0.5f || r.Max.y > height + 0.5f));
    const ImVec2 room(win->ContentRegionRect.GetWidth(), win->ContentRegionRect.GetHeight());
    const bool clipped_x = (!win->ScrollbarX || !scrolls_by_design) && win->ContentSize.x > room.x + 1.0f;
    const bool clipped_y = !win->ScrollbarY && win->ContentSize.y > room.y + 1.0f;
    if (outside || clipped_x || clipped_y) {
      ++check.clipped;
      std::printf("layout: %s %s: content %.0fx%.0f in %.0fx%.0f at %.0f,%.0f-%.0f,%.0f\n", win->Name,
                  outside ? "outside the window" : "clips its contents", win->ContentSize.x,
                  win->ContentSize.y, room.x, room.y, r.Min.x, r.Min.y, r.Max.x, r.Max.y);
    }
  }
  check.lecture = state.lecture;
  // A region past the window, or one that starts in the central area (the view) and ends beyond it (below
  // the fold of a view that scrolls).
  const LayoutRecord::Rect* central = state.drawn.find("central");
  for (const LayoutRecord::Rect& r : state.drawn.rects) {
    if (!(r.x1 > r.x0 && r.y1 > r.y0) || r.name == "central") continue;
    const bool in_view = central && r.x0 >= central->x0 - 0.5f && r.y0 >= central->y0 - 0.5f &&
                         r.x0 < central->x1 && r.y0 < central->y1;
    const float right = in_view ? central->x1 : static_cast<float>(width);
    const float bottom = in_view ? central->y1 : static_cast<float>(height);
    if (r.x1 > right + 1 || r.y1 > bottom + 1) {
      if (++check.regions_beyond <= 8)
        std::printf("layout: %s reaches past the %s: %.0f,%.0f-%.0f,%.0f (ends at %.0f,%.0f)\n",
                    r.name.c_str(), in_view ? "view" : "window", r.x0, r.y0, r.x1, r.y1, right, bottom);
    }
  }
  const TextFaults text = count_text_faults();
  check.cut = text.cut;
  check.cut_at_scroll_edge = text.cut_at_scroll_edge;
  check.overlaps = text.overlaps + static_cast<int>(state.drawn.figure_faults.size());
  for (size_t i = 0; i < state.drawn.figure_faults.size() && i < 8; ++i)
    std::printf("layout: %s\n", state.drawn.figure_faults[i].c_str());
  // Text older than the run on screen: the status line's heads' shares of another run of the prompt (an
  // intervention set since), once nothing is on its way.
  if (state.shown && !state.prompt.pending && !state.status.busy && !state.focus_message.empty() &&
      state.message == state.focus_message && state.focus_request != state.shown->request) {
    ++check.stale;
    std::printf("layout: the status line gives the heads' shares of run %llu, the screen shows run %llu\n",
                static_cast<unsigned long long>(state.focus_request),
                static_cast<unsigned long long>(state.shown->request));
  }
  std::printf(
      "layout check: %d windows, %d outside or clipped, %d texts cut, %d lines half shown at a scroll edge, "
      "%d texts over each other, %d regions past the window%s, %d texts older than the run on screen\n",
      check.windows, check.clipped, check.cut, check.cut_at_scroll_edge, check.overlaps, check.regions_beyond,
      check.lecture ? " (lecture mode: all count)" : " (the last two count in lecture mode)", check.stale);
  return check;
}

namespace {

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
  std::printf("needle lab: %zu/%zu episodes%s%s%s\n", p.done, p.total, p.finished ? "" : " (not finished)",
              p.error.empty() ? "" : "; ", p.error.c_str());
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
  check_layout(state, w, h, true);
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
