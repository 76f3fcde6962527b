// The window's division into views, without ImGui: which view the central area shows, how the maps are
// arranged in the space they get, and the layout settings kept between runs. Plain logic, tested alone.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "viz/ticks.h"

namespace difflens::app {

// The views of the central area (keys 1-9 and 0 pick them, in this order).
enum class View { Maps, QueryRow, Models, Lambda, Noise, Lab, Outliers, Explain, Text, Why };
constexpr int kViews = 10;  // keys 1-9 and 0
// The view's name on the command line and in the settings file ("maps", "query-row", ...).
const char* view_name(View v);
// Its title in the View menu ("Maps", "Figure 1: query row", ...), and a short one for a narrow view bar.
const char* view_title(View v);
const char* view_short_title(View v);
// A --view / --tab name, the old tab names included (overview = query-row); nullopt for anything else.
std::optional<View> parse_view(const std::string& name);
// "maps, query-row, models, lambda, noise, lab, outliers, explain, text or why", for messages.
std::string view_names();

// How the window is divided. The selected view gets the central area; an analysis view (anything but
// Maps) can share it with the maps across a draggable splitter.
struct LayoutState {
  View view = View::QueryRow;  // the first screen: Figure 1 below the maps
  // Per view: whether it shares the central area with the maps (Figure 1 does at first; the rest get it
  // whole). split_shown(): the view shown shares it now.
  std::array<bool, kViews> split{false, true, false, false, false, false, false, false, false, false};
  bool side_by_side = true;        // the split puts the maps left of the view (false: above it)
  float split_fraction = 0.5f;     // the maps' share of the split (kMinSplit..kMaxSplit)
  bool side_panel = true;          // the model slots and layer/head pickers at the left
  float side_width_em = 17;        // its width in font heights
  bool square_maps = false;        // maps keep square cells (false: they fill the space they are given)
  bool shared_rows_scale = false;  // Figure 1: both models' bars on one y scale
  // Set by the box, --one-y-scale or the play action: lecture mode then leaves shared_rows_scale alone.
  bool rows_scale_chosen = false;
  int window_w = 0, window_h = 0;  // the window's size when the app last closed (0: not known)
  bool& view_split() { return split[static_cast<size_t>(view)]; }  // the shown view's setting
  bool split_shown() const { return view != View::Maps && split[static_cast<size_t>(view)]; }
};
constexpr float kMinSplit = 0.15f, kMaxSplit = 0.85f;

// The layout settings as "key=value" lines (the body of the settings file's [DiffLens][Layout] section),
// and one such line read back into `layout`. Unknown keys and bad values are ignored (the file may come
// from another version): returns whether the line was used.
std::string layout_settings_text(const LayoutState& layout);
bool read_layout_setting(LayoutState& layout, const std::string& line);

// N maps of one kind arranged in a grid inside width x height pixels. Each cell holds a title line
// (title_h) above the map and a legend (legend_w) beside it; cells are `gap` apart. The grid's column count
// is the one giving the largest map; the map fills its cell up to 1.6 times wider than tall (wide keys help
// to see the answer's columns) and 1.4 times taller than wide (or, `square`, keeps a square of the smaller
// side). Sizes never go below 16 px.
struct MapGrid {
  int columns = 1, rows = 1;
  float map_w = 16, map_h = 16;  // one map's image
  float cell_w = 0, cell_h = 0;  // one cell: map, legend and title
};
MapGrid plan_map_grid(int maps, float width, float height, float legend_w, float title_h, float gap,
                      bool square);

// Labels at the bars of a chart (screen y grows downwards). Each label, `w` wide and `line_h` tall, sits
// centred on its bar's x, just beyond the bar's tip: above the bar's top (y_top) or, `below`, under its
// bottom (y_bottom); when that spot overlaps a label placed before it, it moves one line further away, up to
// `max_rows` lines, then tries the other side. Labels are placed in the order given (the caller's priority)
// and stay inside [x_min, x_max] × [y_min, y_max]; one that fits nowhere is left out (placed false). Placed
// labels never overlap (`gap` pixels apart at least).
struct BarLabel {
  float x = 0, y_top = 0, y_bottom = 0, w = 0;
  bool below = false;
};
struct LabelSpot {
  bool placed = false;
  float x0 = 0, y0 = 0;  // the label's top-left corner
};
std::vector<LabelSpot> place_bar_labels(const std::vector<BarLabel>& labels, float line_h, float x_min,
                                        float x_max, float y_min, float y_max, int max_rows, float gap = 3);

// The keys of a query row (keys 0..q) a chart labels besides the answer span [answer_begin, answer_end) and
// the query's own key (labelled first, by the caller): the `top` keys of largest |value| among the rest,
// largest first (ties: the earlier key first). answer_begin < 0: no answer.
std::vector<int> labelled_keys(const std::vector<float>& row, int q, int answer_begin, int answer_end,
                               int top);

// The word that piece `j` belongs to, as [begin, end) of `pieces` (the tokenizer's pieces): a piece that
// starts with a space mark ("▁", "Ġ", ' '), with no letter or digit first, or a key's first token starts
// a word; letters or digits glued on continue it ("cur" "ric" "ulum"), at most 12 pieces. A label reads
// better as the word than as a piece of it.
std::pair<int, int> word_of(const std::vector<std::string>& pieces, int j);
// The keys labelled_keys picks, each as the word it belongs to ([begin, end) of `pieces`), clipped so that it
// reaches neither the query nor into the answer span, a word that overlaps an earlier one left out: what
// Figure 1 (the view and its export) labels.
std::vector<std::pair<int, int>> labelled_words(const std::vector<float>& row,
                                                const std::vector<std::string>& pieces, int q,
                                                int answer_begin, int answer_end, int top);
// The labels of [begin, end) joined, a leading space (or its visible mark) left out.
std::string word_label(const std::vector<std::string>& labels, int begin, int end);

// Ticks of a map axis at round token numbers: the axis shows map units [first, first + span) (tokens, or the
// cells of a pooled map), `to_token(u)` is unit u's first token (defined up to first + span). Each tick is a
// token from nice_ticks over the tokens shown and its place in map units: the unit holding it plus its share
// of that unit's tokens, at the token's middle (an exact map's token t sits at t + 0.5). So a pooled axis
// reads 0, 2000, 4000 rather than its cells' first tokens (0, 1933, 3866).
struct AxisTick {
  double at = 0;  // in map units
  int64_t token = 0;
};
std::vector<AxisTick> axis_ticks(int64_t first, int64_t span, int max_ticks,
                                 const std::function<int64_t(int64_t)>& to_token);

// Round ticks for the panels' charts (viz/ticks.h: the figures use the same).
using viz::nice_ticks;
using viz::tick_label_format;

}  // namespace difflens::app
