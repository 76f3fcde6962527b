// CPU figures: colorized maps match the colormap cell by cell, legend ticks invert the value scale, text
// lands where it is asked to (also for broken UTF-8), and a head figure puts maps, labels and legends
// at the places its layout reports. No GL and no LibTorch.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/formats/error.h"
#include "helpers.h"
#include "viz/chart.h"
#include "viz/export.h"
#include "viz/figure.h"
#include "viz/scene.h"
#include "viz/text_shade.h"

using namespace difflens;
using namespace difflens::viz;

namespace {

bool same(Rgb8 a, Rgb8 b) {
  return a.r == b.r && a.g == b.g && a.b == b.b;
}

// Pixels in [x0, x1) × [y0, y1) that differ from white.
int inked(const Image& img, int x0, int y0, int x1, int y1) {
  int n = 0;
  for (int y = std::max(0, y0); y < std::min(img.height, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(img.width, x1); ++x) n += !same(img.at(x, y), {255, 255, 255});
  return n;
}

// scripts/install-deps installs fonts-dejavu-core: a missing font is a set-up failure, not a skip.
const FigureFont* system_font() {
  INFO("DejaVuSans.ttf not found: install fonts-dejavu-core");
  REQUIRE_FALSE(find_system_font().empty());
  return &FigureFont::standard();
}

}  // namespace

TEST_CASE("figure: a small causal map colours exact blocks and masks the future", "[viz][figure]") {
  // 2 × 2 map, 4 × 4 image: each cell is a 2 × 2 block; cell (0, 1) is the masked future.
  const float m[4] = {1.0f, 0.5f, 0.25f, 0.75f};
  HeatmapStyle style;
  style.range = {1.0, false};
  const Image img = colorize_map(m, 2, 2, {}, 4, Pooling::Max, style);
  const Colormap& c = sequential_colormap();
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) {
      INFO(x << "," << y);
      const int r = y / 2, k = x / 2;
      const Rgb8 want = k > r ? style.masked : c.at(m[r * 2 + k]);
      CHECK(same(img.at(x, y), want));
    }
  // Diverging, sqrt: −0.25 of hi 1 sits at 0.5 − 0.5·√0.25 = 0.25 of the ramp.
  const float d[4] = {-0.25f, 0.0f, 1.0f, 0.0f};
  style.range = {1.0, true};
  style.scale = ValueScale::Sqrt;
  const Image di = colorize_map(d, 2, 2, {}, 2, Pooling::Max, style);
  CHECK(same(di.at(0, 0), diverging_colormap().at(0.25)));
  CHECK(same(di.at(0, 1), diverging_colormap().at(1.0)));
  CHECK(same(di.at(1, 1), diverging_colormap().at(0.5)));
}

TEST_CASE("figure: legend tick values invert the colormap coordinate", "[viz][figure][scale]") {
  for (const bool diverging : {false, true})
    for (const ValueScale s : {ValueScale::Linear, ValueScale::Sqrt, ValueScale::Log}) {
      const ValueRange r{0.8, diverging};
      for (double t : {0.1, 0.25, 0.5, 0.75, 1.0}) {
        if (diverging && t == 0.5) continue;  // zero: no magnitude to invert on the log scale
        const double v = value_at_coordinate(t, r, s);
        INFO("diverging " << diverging << " scale " << static_cast<int>(s) << " t " << t);
        CHECK(colormap_coordinate(v, r, s) == Approx(t).margin(1e-12));
      }
    }
  CHECK(value_at_coordinate(0.5, {0.8, false}, ValueScale::Linear) == Approx(0.4));
  CHECK(value_at_coordinate(0.5, {0.8, false}, ValueScale::Sqrt) == Approx(0.2));   // 0.8 · 0.5²
  CHECK(value_at_coordinate(0.5, {0.8, false}, ValueScale::Log) == Approx(0.008));  // 0.8 · 10^−2
  CHECK(value_at_coordinate(0.0, {0.8, true}, ValueScale::Linear) == Approx(-0.8));
}

TEST_CASE("figure: text lands inside its box in both directions and broken UTF-8 still draws",
          "[viz][figure][text]") {
  const FigureFont* font = system_font();
  CHECK(font->text_width("", 16) == 0);
  const int w = font->text_width("query", 16);
  CHECK(w > 20);
  CHECK(w < 80);
  CHECK(font->text_width("query query", 16) > 2 * w);
  Image img(200, 120, {255, 255, 255});
  font->draw(img, 10, 10, "query", 16, {0, 0, 0});
  CHECK(inked(img, 10, 10, 10 + w + 1, 10 + 17) > 40);
  CHECK(inked(img, 0, 0, 200, 120) == inked(img, 10, 10, 10 + w + 1, 10 + 17));
  // Vertical: reads bottom to top, ending at y = 100, one line box wide from x = 150.
  font->draw(img, 150, 100, "query", 16, {0, 0, 0}, true);
  CHECK(inked(img, 150, 100 - w - 1, 150 + 17, 101) > 40);
  CHECK(inked(img, 140, 0, 200, 120) == inked(img, 150, 100 - w - 1, 150 + 17, 101));
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence) draws replacement glyphs.
  Image bad(100, 30, {255, 255, 255});
  const std::string broken = std::string("a\x80") + "\xe2\x82";
  CHECK(font->text_width(broken, 16) > font->text_width("a", 16));
  font->draw(bad, 0, 0, broken, 16, {0, 0, 0});
  CHECK(inked(bad, 0, 0, 100, 30) > 0);
  CHECK_THROWS_WITH(FigureFont("/nonexistent/font.ttf"), Catch::Contains("cannot open the font file"));
}

TEST_CASE("figure: fonts are looked up under DIFFLENS_FONT_DIR first, then in the system folders",
          "[viz][figure][text]") {
  const char* before = std::getenv("DIFFLENS_FONT_DIR");
  const std::string saved = before ? before : "";
  struct Restore {
    bool had;
    std::string value;
    ~Restore() {
      if (had)
        setenv("DIFFLENS_FONT_DIR", value.c_str(), 1);
      else
        unsetenv("DIFFLENS_FONT_DIR");
    }
  } restore{before != nullptr, saved};
  const std::filesystem::path font = find_system_font();  // wherever it is found now
  REQUIRE_FALSE(font.empty());
  unsetenv("DIFFLENS_FONT_DIR");
  const std::filesystem::path system_main = find_system_font(), system_fallback = find_fallback_font();

  test::ScratchDir dir("fonts");
  std::filesystem::create_directories(dir / "truetype/dejavu");
  std::filesystem::copy_file(font, dir / "truetype/dejavu/DejaVuSans.ttf");
  std::ofstream(dir / "notes.txt") << "not a font";
  setenv("DIFFLENS_FONT_DIR", dir.path().c_str(), 1);
  CHECK(find_system_font() == dir / "truetype/dejavu/DejaVuSans.ttf");  // found in a subfolder
  CHECK(find_fallback_font() == system_fallback);                       // not there: the system's
  CHECK(FigureFont(find_system_font()).text_width("query", 16) == FigureFont(font).text_width("query", 16));

  setenv("DIFFLENS_FONT_DIR", (dir / "missing").c_str(), 1);  // a folder that does not exist
  CHECK(find_system_font() == system_main);
  setenv("DIFFLENS_FONT_DIR", "", 1);  // empty: ignored
  CHECK(find_system_font() == system_main);
}

TEST_CASE("figure: characters DejaVu lacks come from the fallback font", "[viz][figure][text]") {
  // scripts/install-deps installs fonts-droid-fallback: a missing fallback is a set-up failure.
  INFO("no CJK fallback font found: install fonts-droid-fallback");
  REQUIRE_FALSE(find_fallback_font().empty());
  const FigureFont main_only(find_system_font());
  const FigureFont fallback_only(find_fallback_font());
  const FigureFont both(find_system_font(), find_fallback_font());
  const std::string cjk = "\xE5\xB7\xAE\xE5\x88\x86";  // 差分
  auto draw = [&](const FigureFont& f, const std::string& text) {
    Image img(120, 30, {255, 255, 255});
    f.draw(img, 2, 2, text, 20, {0, 0, 0});
    return img;
  };
  // The CJK characters are drawn by the fallback: same width and the same pixels as the fallback alone;
  // DejaVu by itself draws its placeholder boxes instead.
  CHECK(both.text_width(cjk, 20) == fallback_only.text_width(cjk, 20));
  CHECK(draw(both, cjk).rgb == draw(fallback_only, cjk).rgb);
  CHECK(draw(both, cjk).rgb != draw(main_only, cjk).rgb);
  // Latin text still comes from DejaVu.
  CHECK(draw(both, "query").rgb == draw(main_only, "query").rgb);
  const int sum = main_only.text_width("A", 20) + fallback_only.text_width(cjk, 20);  // each rounded up
  CHECK(both.text_width("A" + cjk, 20) >= sum - 1);
  CHECK(both.text_width("A" + cjk, 20) <= sum);
  CHECK(inked(draw(both, cjk), 0, 0, 120, 30) > 40);
}

TEST_CASE("figure: a head figure places maps, labels and legends where its layout says", "[viz][figure]") {
  const FigureFont* font = system_font();
  // T = 6 causal maps: A1 uniform over the past, A2 on the first token, their difference.
  const int64_t T = 6;
  std::vector<float> a1(T * T, 0), a2(T * T, 0), diff(T * T, 0);
  for (int64_t q = 0; q < T; ++q) {
    for (int64_t k = 0; k <= q; ++k) a1[q * T + k] = 1.0f / static_cast<float>(q + 1);
    a2[q * T] = 1;
    for (int64_t k = 0; k <= q; ++k) diff[q * T + k] = a1[q * T + k] - 0.5f * a2[q * T + k];
  }
  HeadFigure fig;
  fig.title = "diff-small  layer 0  head 0  lambda 0.5";
  fig.tokens = {"<s>", "_The", "_cat", "_sat", "\xff", "_on"};  // one token is not valid UTF-8
  HeatmapStyle seq, div;
  seq.range = {1.0, false};
  div.range = {1.0, true};
  fig.panels = {{"A1", a1.data(), seq}, {"A2", a2.data(), seq}, {"A1 - 0.5 A2", diff.data(), div}};
  fig.panel_size = 192;
  HeadFigureLayout layout;
  const Image img = render_head_figure(fig, *font, &layout);
  REQUIRE(layout.maps.size() == 3);
  const int P = fig.panel_size;
  for (size_t k = 0; k < 3; ++k) {
    INFO("panel " << k);
    const auto [x0, y0] = layout.maps[k];
    const Image expect = colorize_map(fig.panels[k].data, T, T, {}, P, Pooling::Max, fig.panels[k].style);
    int mismatched = 0;
    for (int y = 0; y < P; ++y)
      for (int x = 0; x < P; ++x) mismatched += !same(img.at(x0 + x, y0 + y), expect.at(x, y));
    CHECK(mismatched == 0);
    CHECK(same(img.at(x0 + P - 2, y0 + 1), seq.masked));                // the future: top right
    CHECK(inked(img, x0, y0 + P + 1, x0 + P, layout.legend_top) > 50);  // key labels under the map
    CHECK(inked(img, x0, layout.legend_top, x0 + P, layout.legend_top + 8) == 8 * P);  // the ramp
    CHECK(inked(img, x0, layout.legend_top + 9, x0 + P, img.height) > 30);             // tick numbers
  }
  CHECK(layout.maps[1].first - layout.maps[0].first == layout.maps[2].first - layout.maps[1].first);
  CHECK(inked(img, 0, layout.maps[0].second, layout.maps[0].first, layout.maps[0].second + P) > 100);
  CHECK(inked(img, 0, 0, img.width, layout.maps[0].second - 20) > 100);  // title and panel titles
  // A zoomed region: rows and keys 2..4 only, exact cells.
  fig.region = {2, 2, 3, 3};
  HeadFigureLayout zl;
  const Image zoomed = render_head_figure(fig, *font, &zl);
  const Colormap& c = sequential_colormap();
  CHECK(same(zoomed.at(zl.maps[0].first + 1, zl.maps[0].second + 1), c.at(1.0 / 3)));          // A1[2][2]
  CHECK(same(zoomed.at(zl.maps[0].first + P - 1, zl.maps[0].second + P - 1), c.at(1.0 / 5)));  // A1[4][4]
  // Bad requests are refused with a reason.
  fig.region = {4, 4, 3, 3};
  CHECK_THROWS_WITH(render_head_figure(fig, *font), Catch::Contains("outside the map"));
  fig.region = {};
  fig.panel_size = 32;
  CHECK_THROWS_WITH(render_head_figure(fig, *font), Catch::Contains("between 64 and 8192"));
  // Sized for print: what cannot be drawn as asked is refused with the user's own numbers, never drawn
  // at another size.
  HeadFigure one = fig;
  one.panels.resize(1);
  CHECK_THROWS_WITH(size_for_print(one, *font, 30, 8, 300),
                    Catch::Contains("30 in at 300 dpi needs a map over the 8192 pixels a map may take"));
  CHECK_THROWS_WITH(size_for_print(fig, *font, 7, 80, 300),
                    Catch::Contains("80 pt at 300 dpi is a") && Catch::Contains("at most 200 pixels"));
  {
    HeadFigure small = fig;
    size_for_print(small, *font, 7, 4, 72);  // a 5-pixel line: drawn at the smallest, 6 pixels
    CHECK(small.label_px == Approx(6.0));
  }
  CHECK_THROWS_WITH(size_for_print(fig, *font, 0.5, 8, 300),
                    Catch::Contains("at 8 pt the labels leave no room for 3 maps in 0.5 in"));
  size_for_print(one, *font, 7.5, 8, 300);
  CHECK(std::abs(layout_head_figure(one, *font).width - 7.5 * 300) < 3);
  fig.panel_size = 128;
  fig.panels.clear();
  CHECK_THROWS_WITH(render_head_figure(fig, *font), Catch::Contains("no maps"));
}

TEST_CASE("figure: many tokens are labelled sparsely and long labels are cut", "[viz][figure]") {
  const FigureFont* font = system_font();
  const int64_t T = 300;
  std::vector<float> a(T * T, 0);
  for (int64_t q = 0; q < T; ++q) a[q * T + q] = 1;
  HeadFigure fig;
  fig.title = "diagonal";
  for (int64_t i = 0; i < T; ++i)
    fig.tokens.push_back(i == 7 ? std::string(400, 'x') : "tok" + std::to_string(i));
  HeatmapStyle s;
  s.range = {1.0, false};
  fig.panels = {{"A", a.data(), s}};
  fig.panel_size = 256;
  HeadFigureLayout layout;
  const Image img = render_head_figure(fig, *font, &layout);
  // The label column is capped at a third of the map, whatever the longest token.
  CHECK(layout.maps[0].first < 256 / 3 + 64);
  CHECK(img.width < 256 + 256 / 3 + 128);
  // Max pooling 300 → 256 keeps the diagonal visible in every row.
  int lit_rows = 0;
  for (int y = 0; y < 256; ++y) {
    bool lit = false;
    for (int x = 0; x < 256; ++x)
      lit |= same(img.at(layout.maps[0].first + x, layout.maps[0].second + y), sequential_colormap().at(1.0));
    lit_rows += lit;
  }
  CHECK(lit_rows == 256);
}

namespace {

// A strict little XML well-formedness check for what head_figure_svg writes: one prolog, balanced and
// properly nested elements, quoted attributes, and no raw '<' or stray '&' in text. Returns "" or why not.
std::string xml_problem(const std::string& x) {
  std::vector<std::string> open;
  size_t i = 0;
  if (x.rfind("<?xml ", 0) != 0) return "no XML prolog";
  i = x.find("?>") + 2;
  while (i < x.size()) {
    const size_t lt = x.find('<', i);
    const std::string text = x.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    for (size_t a = text.find('&'); a != std::string::npos; a = text.find('&', a + 1)) {
      const size_t semi = text.find(';', a);
      const std::string ent = text.substr(a, semi == std::string::npos ? 0 : semi - a + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;") return "bad entity in text";
    }
    if (lt == std::string::npos) break;
    const size_t gt = x.find('>', lt);
    if (gt == std::string::npos) return "unterminated tag";
    std::string tag = x.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos) return "'<' inside a tag";
    size_t quotes = 0;
    for (char c : tag) quotes += c == '"';
    if (quotes % 2) return "unbalanced quotes in <" + tag + ">";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = gt + 1;
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("figure: SVG export is well-formed XML with one coloured cell per map entry",
          "[viz][figure][svg]") {
  const FigureFont* font = system_font();
  const int64_t T = 5;
  std::vector<float> a1(T * T, 0), diff(T * T, 0);
  for (int64_t q = 0; q < T; ++q)
    for (int64_t k = 0; k <= q; ++k) {
      a1[q * T + k] = 1.0f / static_cast<float>(q + 1);
      diff[q * T + k] = k == q ? 0.5f : -0.1f;
    }
  HeadFigure fig;
  fig.title = "L0 H0 <A & B>";
  fig.tokens = {"<s>", "a&b", "\"q\"", "\x01", "\xc3"};  // markup characters, a control byte, broken UTF-8
  HeatmapStyle seq, div;
  seq.range = {1.0, false};
  div.range = {0.5, true};
  fig.panels = {{"A1", a1.data(), seq}, {"A1 - 0.5 A2", diff.data(), div}};
  fig.panel_size = 100;
  const std::string svg = head_figure_svg(fig, *font, 256, SvgCells::Vector);
  INFO(svg.substr(0, 400));
  CHECK(xml_problem(svg).empty());
  CHECK(xml_problem("<?xml version=\"1.0\"?><svg><g></svg>") == "mismatched </svg>");  // the checker works
  CHECK(count(svg, "class=\"cell\"") == 2 * T * T);
  CHECK(count(svg, "<g class=\"map\"") == 2);
  CHECK(svg.find("&lt;A &amp; B&gt;") != std::string::npos);
  CHECK(svg.find("a&amp;b") != std::string::npos);
  CHECK(svg.find("\x01") == std::string::npos);
  CHECK(svg.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD stands in for the broken bytes
  // Cell colours: A1[4][0] = 0.2 on the sequential ramp; a masked future cell; diff's diagonal at +0.5.
  auto cell_fill = [&](size_t panel, int64_t r, int64_t c) {
    size_t g = svg.find("<g class=\"map\" data-panel=\"" + std::to_string(panel) + "\"");
    size_t p = svg.find("class=\"cell\"", g);
    for (int64_t k = 0; k < r * T + c; ++k) p = svg.find("class=\"cell\"", p + 1);
    const size_t f = svg.find("fill=\"#", p) + 6;
    return svg.substr(f, 7);
  };
  auto hex = [](Rgb8 c) {
    char b[8];
    std::snprintf(b, sizeof b, "#%02x%02x%02x", c.r, c.g, c.b);
    return std::string(b);
  };
  CHECK(cell_fill(0, 4, 0) == hex(sequential_colormap().at(0.2)));
  CHECK(cell_fill(0, 0, 3) == hex(seq.masked));
  CHECK(cell_fill(1, 2, 2) == hex(diverging_colormap().at(1.0)));
  CHECK(cell_fill(1, 3, 1) == hex(diverging_colormap().at(0.5 - 0.5 * 0.2)));
  // Large maps are pooled to max_cells per side.
  const std::string pooled = head_figure_svg(fig, *font, 3, SvgCells::Vector);
  CHECK(count(pooled, "class=\"cell\"") == 2 * 3 * 3);
  CHECK(xml_problem(pooled).empty());
}

TEST_CASE("figure: a grid figure's SVG has one cell per value, coloured and labelled like its PNG",
          "[viz][figure][svg]") {
  const FigureFont* font = system_font();
  GridFigure g;
  g.title = "acc <N=1 & R=1>";
  g.row_title = "depth";
  g.col_title = "context length";
  g.row_labels = {"0%", "50%", "100%"};
  g.col_labels = {"128", "256"};
  g.values = {0.0, 0.25, 1.0, std::nan(""), 0.5, 0.75};
  g.cell = 40;
  const std::string svg = grid_figure_svg(g, *font);
  INFO(svg.substr(0, 400));
  CHECK(xml_problem(svg).empty());
  CHECK(count(svg, "class=\"cell\"") == 6);
  CHECK(count(svg, "class=\"legend\"") == 1);
  CHECK(svg.find("acc &lt;N=1 &amp; R=1&gt;") != std::string::npos);
  CHECK(svg.find(">0.25</text>") != std::string::npos);
  CHECK(svg.find(">n/a</text>") != std::string::npos);
  // The k-th cell (row-major) carries the colour of its value; the PNG paints the same colour there.
  auto fill = [&](int k) {
    size_t p = svg.find("class=\"cell\"");
    for (int i = 0; i < k; ++i) p = svg.find("class=\"cell\"", p + 1);
    return svg.substr(svg.find("fill=\"#", p) + 6, 7);
  };
  auto hex = [](Rgb8 c) {
    char b[8];
    std::snprintf(b, sizeof b, "#%02x%02x%02x", c.r, c.g, c.b);
    return std::string(b);
  };
  CHECK(fill(0) == hex(sequential_colormap().at(0.0)));
  CHECK(fill(1) == hex(sequential_colormap().at(0.25)));
  CHECK(fill(2) == hex(sequential_colormap().at(1.0)));
  CHECK(fill(3) == "#ececec");
  const FigureScene sc = layout_grid_figure(g, *font);
  const Image img = render_grid_figure(g, *font);
  CHECK(img.width == sc.width);
  CHECK(img.height == sc.height);
  int cells = 0;
  for (const auto& r : sc.rects) {
    if (!r.cell) continue;
    ++cells;
    const Rgb8 px = img.at(r.x + 1, r.y + 1);  // a corner pixel, away from the centred number
    CHECK(hex(px) == hex(r.color));
  }
  CHECK(cells == 6);
  g.values.pop_back();
  CHECK_THROWS_WITH(grid_figure_svg(g, *font), Catch::Contains("5 values for 3 x 2 labels"));
}

TEST_CASE("colour ranges: a clamped end is known and marked, and a zoom's range is its own",
          "[viz][figure]") {
  // T = 4 causal rows; one large entry (0.9) among small ones (0.1 .. 0.4).
  const int64_t T = 4;
  std::vector<float> m(T * T, std::nanf(""));
  const float values[4][4] = {{0.1f}, {0.2f, 0.1f}, {0.3f, 0.2f, 0.1f}, {0.9f, 0.4f, 0.3f, 0.2f}};
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) m[i * T + j] = values[i][j];
  // 10 causal entries: the 90th percentile (nearest rank 9) is 0.4, below the largest 0.9.
  const ValueRange clamped = value_range({m.data()}, T, T, 90, false, true);
  CHECK(clamped.hi == Approx(0.4));
  CHECK(clamped.max_abs == Approx(0.9));
  CHECK(clamped.percentile == Approx(90));
  CHECK(clamped.clamped());
  const ValueRange whole = value_range({m.data()}, T, T, 100, false, true);
  CHECK(whole.hi == Approx(0.9));
  CHECK_FALSE(whole.clamped());
  // A zoom on rows 0-2, columns 0-2 (6 causal entries, largest 0.3): its range ends at 0.3, unclamped.
  const ValueRange zoom = value_range({m.data()}, T, T, MapRegion{0, 0, 3, 3}, 100, false, true);
  CHECK(zoom.hi == Approx(0.3));
  CHECK(zoom.max_abs == Approx(0.3));
  // The figure's colour bar marks the clamped end with "≥" and the percentile; an unclamped one does not.
  const FigureFont* font = system_font();
  HeadFigure fig;
  fig.tokens = {"a", "b", "c", "d"};
  HeatmapStyle style;
  style.range = clamped;
  fig.panels = {{"A", m.data(), style}};
  auto legend_texts = [&] {
    std::string all;
    for (const auto& t : layout_head_figure(fig, *font).texts) all += t.text + "|";
    return all;
  };
  CHECK_THAT(legend_texts(), Catch::Contains("\u22650.4 (p90)"));
  fig.panels[0].style.range = whole;
  CHECK_THAT(legend_texts(), !Catch::Contains("\u2265"));
}

TEST_CASE("base64: the RFC 4648 test vectors", "[viz]") {
  CHECK(base64("") == "");
  CHECK(base64("f") == "Zg==");
  CHECK(base64("fo") == "Zm8=");
  CHECK(base64("foo") == "Zm9v");
  CHECK(base64("foob") == "Zm9vYg==");
  CHECK(base64("fooba") == "Zm9vYmE=");
  CHECK(base64("foobar") == "Zm9vYmFy");
  CHECK(base64(std::string("\xff\x00\x10", 3)) == "/wAQ");
}

TEST_CASE("chart figures: bars where their values put them, in the sign or series colours, labels apart",
          "[viz][figure]") {
  const FigureFont* font = system_font();
  ChartFigure f;
  f.title = "t";
  f.y_title = "weight";
  f.x_title = "keys";
  f.width = 800;
  f.height = 400;
  f.lo = -0.5;
  f.hi = 1.0;
  ChartPanel p;
  p.groups = {"a", "b", "c", "d"};
  ChartSeries s;
  s.name = "";  // no legend: the sign colours' rectangles are the bars alone
  s.signed_colors = true;
  s.values = {0.5, -0.25, 1.0, std::nan("")};
  p.series = {s};
  p.bands = {{2, 3}};
  p.mark = 0;
  p.value_labels = true;
  f.panels = {p};
  const FigureScene sc = layout_chart_figure(f, *font);
  CHECK(scene_text_faults(sc, *font).clean());
  // The bars: 0.5 blue up from 0, -0.25 red down, 1.0 blue to the top; none for NaN. Their heights keep
  // the values' ratios (0.5 : 0.25 : 1.0) to a pixel.
  std::vector<FigureScene::Rect> bars;
  for (const auto& r : sc.rects)
    if ((r.color.r == kTextPositive.r && r.color.g == kTextPositive.g && r.color.b == kTextPositive.b) ||
        (r.color.r == kTextNegative.r && r.color.g == kTextNegative.g && r.color.b == kTextNegative.b))
      bars.push_back(r);
  REQUIRE(bars.size() == 3);
  CHECK(bars[1].color.r == kTextNegative.r);
  CHECK(bars[0].h == Approx(bars[2].h / 2.0).margin(1));
  CHECK(bars[1].h == Approx(bars[2].h / 4.0).margin(1));
  CHECK(bars[1].y == Approx(bars[0].y + bars[0].h).margin(1));  // the negative bar hangs from zero
  CHECK(bars[0].x < bars[1].x);
  CHECK(bars[1].x < bars[2].x);
  std::string texts;
  for (const auto& t : sc.texts) texts += t.text + "|";
  for (const char* want : {"0.500|", "-0.250|", "1.000|", "weight|", "keys|", "t|", "a|", "d|"})
    CHECK_THAT(texts, Catch::Contains(want));
  // The SVG has every label as text.
  const std::string svg = chart_figure_svg(f, *font);
  CHECK(svg.find(">-0.250<") != std::string::npos);
  // Bad figures are refused with what is wrong.
  ChartFigure bad = f;
  bad.panels[0].series[0].values.pop_back();
  CHECK_THROWS_WITH(layout_chart_figure(bad, *font), Catch::Contains("3 values for 4 groups"));
  bad = f;
  bad.panels[0].bands = {{3, 5}};
  CHECK_THROWS_WITH(layout_chart_figure(bad, *font), Catch::Contains("band outside the groups"));
  bad = f;
  bad.height = 100;
  CHECK_THROWS_WITH(layout_chart_figure(bad, *font), Catch::Contains("between 200 and 8192"));
  bad = f;
  bad.panels[0].label_end = {2};
  CHECK_THROWS_WITH(layout_chart_figure(bad, *font), Catch::Contains("one entry per group"));
}

TEST_CASE("chart figures: an interval per bar is a whisker from its low to its high, the range holds it",
          "[viz][figure]") {
  const FigureFont* font = system_font();
  ChartFigure f;
  f.width = 800;
  f.height = 400;
  ChartPanel p;
  p.groups = {"a", "b", "c"};
  ChartSeries s;
  s.color = Rgb8{200, 200, 200};
  s.values = {0.5, 0.25, 0.75};
  s.low = {0.4, std::nan(""), 0.7};
  s.high = {0.6, 0.3, 1.25};  // above every value: the y range reaches it
  p.series = {s};
  f.panels = {p};
  const FigureScene sc = layout_chart_figure(f, *font);
  std::vector<FigureScene::Rect> bars, ink;
  for (const auto& r : sc.rects) {
    if (r.color.r == 200 && r.color.g == 200) bars.push_back(r);
    if (r.color.r == 25 && r.color.g == 25 && r.color.b == 25 && r.h > r.w) ink.push_back(r);  // the ink
  }
  REQUIRE(bars.size() == 3);
  REQUIRE(ink.size() == 2);  // no whisker where the low is NaN
  // Bar a: 0.5 tall, its whisker from 0.4 to 0.6 (0.2 of a scale where 0.5 is bars[0].h pixels), centred.
  const double per_unit = bars[0].h / 0.5;
  CHECK(ink[0].h == Approx(0.2 * per_unit).margin(2));
  CHECK(ink[0].x == Approx(bars[0].x + bars[0].w / 2.0).margin(2));
  CHECK(ink[0].y == Approx(bars[0].y - 0.1 * per_unit).margin(2));
  CHECK(ink[1].y >= bars[2].y - 0.5 * per_unit - 2);  // 1.25 within the plot, not cut at the top
  CHECK(ink[1].y > 0);
  ChartFigure bad = f;
  bad.panels[0].series[0].low.pop_back();
  CHECK_THROWS_WITH(layout_chart_figure(bad, *font),
                    Catch::Contains("one interval (low and high) per group"));
}

TEST_CASE("chart figures: a label for several groups sits under them, a long note takes its own line",
          "[viz][figure]") {
  const FigureFont* font = system_font();
  ChartFigure f;
  f.width = 500;
  f.height = 400;
  ChartPanel p;
  p.groups = {"x", "", "", "", "", "", "", "wordy"};
  p.labelled = {0, 7};
  p.label_end = {6, 0, 0, 0, 0, 0, 0, 0};  // "x" stands for groups 0-5
  ChartSeries s;
  s.color = {10, 20, 200};
  s.values = {1, 1, 1, 1, 1, 1, 1, 1};
  p.series = {s};
  p.title = "a title that is long enough to meet the note, and whole";
  p.note = "a note on the right that is long as well, in green";
  f.panels = {p};
  const FigureScene sc = layout_chart_figure(f, *font);
  CHECK(scene_text_faults(sc, *font).clean());
  const FigureScene::Text *x = nullptr, *title = nullptr, *note = nullptr;
  for (const auto& t : sc.texts) {
    if (t.text == "x") x = &t;
    if (t.text == p.title) title = &t;
    if (t.text == p.note) note = &t;
  }
  REQUIRE(x);
  REQUIRE(title);  // whole, not cut short
  REQUIRE(note);
  CHECK(note->y > title->y);  // on the next line
  // The groups' bars: "x" is centred under the first six (its middle between bars 2 and 3).
  std::vector<int> bar_x;
  for (const auto& r : sc.rects)
    if (r.color.r == 10 && r.color.g == 20 && r.color.b == 200) bar_x.push_back(r.x + r.w / 2);
  std::sort(bar_x.begin(), bar_x.end());
  REQUIRE(bar_x.size() == 8);
  const float mid = x->x + font->text_width("x", x->px) / 2.0f;
  CHECK(mid > bar_x[2]);
  CHECK(mid < bar_x[3]);
}

TEST_CASE(
    "head figures: the answer and the query marked, axis titles, round legend ticks, a chosen text size",
    "[viz][figure]") {
  const FigureFont* font = system_font();
  const int64_t T = 12;
  std::vector<float> a(T * T, 0);
  for (int64_t q = 0; q < T; ++q)
    for (int64_t k = 0; k <= q; ++k)
      a[q * T + k] = 0.937f * static_cast<float>(k + 1) / static_cast<float>(q + 1) / 6.5f;
  HeadFigure fig;
  for (int64_t i = 0; i < T; ++i) fig.tokens.push_back("t" + std::to_string(i));
  HeatmapStyle style;
  style.scale = ValueScale::Sqrt;
  style.range = value_range({a.data()}, T, T, 100, false, true);
  fig.panels = {{"A", a.data(), style}};
  fig.panel_size = 240;
  fig.answer_begin = 3;
  fig.answer_end = 6;
  fig.query = 9;
  fig.label_px = 13;
  const FigureScene sc = layout_head_figure(fig, *font);
  CHECK(scene_text_faults(sc, *font).clean());
  const Rgb8 green{20, 130, 50}, orange{220, 110, 0};
  auto same = [](Rgb8 p, Rgb8 q) { return p.r == q.r && p.g == q.g && p.b == q.b; };
  // The answer's band spans keys 3-5 (a 20-pixel cell each) just under the map; the query's mark sits left
  // of the map on row 9.
  const auto& m = sc.maps.at(0);
  bool band = false, mark = false;
  for (const auto& r : sc.rects) {
    if (same(r.color, green) && r.x == m.x + 3 * 20 && r.w == 3 * 20 && r.y == m.y + m.size + 1) band = true;
    if (same(r.color, orange) && r.x + r.w <= m.x && r.y == m.y + 9 * 20 && r.h == 20) mark = true;
  }
  CHECK(band);
  CHECK(mark);
  // Labels: the answer's keys green, the query's row orange, all at the size asked; the axis titles.
  int green_labels = 0, orange_labels = 0;
  std::vector<std::string> ticks;
  for (const auto& t : sc.texts) {
    if (same(t.color, green)) ++green_labels;
    if (same(t.color, orange)) {
      CHECK(t.text == "t9");
      ++orange_labels;
    }
    if (t.y > m.y + m.size + 40 && !t.vertical && t.text != "keys") ticks.push_back(t.text);
  }
  CHECK(green_labels == 3);
  CHECK(orange_labels == 1);
  std::string all;
  for (const auto& t : sc.texts) all += t.text + "|";
  CHECK_THAT(all, Catch::Contains("|queries|"));
  CHECK_THAT(all, Catch::Contains("|keys|"));
  for (const auto& t : sc.texts)
    if (t.text.rfind("t", 0) == 0) CHECK(t.px == Approx(13));
  // The ramp's ends are the range's (0 and its top, 0.937 / 6.5 = 0.144); inside, only round values
  // (1, 2 or 5 times a power of ten, or multiples of such a step).
  REQUIRE(ticks.size() >= 3);
  CHECK(ticks[0] == "0");
  CHECK(ticks[1] == "0.144");
  for (size_t i = 2; i < ticks.size(); ++i) {
    INFO(ticks[i]);
    const double v = std::stod(ticks[i]);
    const double step = std::pow(10.0, std::floor(std::log10(v)));
    const double mant = v / step;
    CHECK(std::fabs(mant - std::round(mant)) < 1e-9);  // 0.02, 0.05, 0.1: one significant digit
  }
}

TEST_CASE("grid figures: signed values take the sign scale around 0, as every view colours them",
          "[viz][figure]") {
  // The needle lab's attention to the answer: DIFF's can be below 0 (-0.2 here), the baseline's up to 0.5.
  const Colormap& div = diverging_colormap();
  auto same = [](Rgb8 p, Rgb8 q) { return p.r == q.r && p.g == q.g && p.b == q.b; };
  CHECK(same(grid_cell_colour(0.0, -0.2, 0.5, true), div.at(0.5)));   // 0: the middle (near white)
  CHECK(same(grid_cell_colour(0.5, -0.2, 0.5, true), div.at(1.0)));   // the largest |value|: the blue end
  CHECK(same(grid_cell_colour(-0.2, -0.2, 0.5, true), div.at(0.3)));  // -0.2 of 0.5: red, 0.4 of the way
  CHECK(same(grid_cell_colour(0.25, 0.0, 0.5, false), sequential_colormap().at(0.5)));
  GridFigure g;
  g.row_labels = {"0%"};
  g.col_labels = {"256", "512"};
  g.values = {-0.2, 0.5};
  g.lo = -0.2;
  g.hi = 0.5;
  g.diverging = true;
  g.format = "%.3f";
  const FigureScene sc = layout_grid_figure(g, *system_font());
  REQUIRE(sc.ramps.size() == 1);
  CHECK(sc.ramps[0].diverging);
  std::string all;
  for (const auto& t : sc.texts) all += t.text + "|";
  CHECK_THAT(all, Catch::Contains("|-0.500|"));  // the ramp spans ±0.5 with 0 in the middle
  CHECK_THAT(all, Catch::Contains("|0.500|"));
  CHECK_THAT(all, Catch::Contains("|0|"));
}

TEST_CASE(
    "one sign convention in every export: maps, charts, tables and head figures colour +0.5 blue, -0.5 red",
    "[viz][figure][colormap]") {
  const auto blue = [](Rgb8 c) { return c.b > c.r + 60; };
  const auto red = [](Rgb8 c) { return c.r > c.b + 60; };
  // A signed 2 x 2 map (a DIFF A1 - lambda A2): +0.5 on the diagonal, -0.5 below it.
  const float m[4] = {0.5f, std::nanf(""), -0.5f, 0.5f};
  HeatmapStyle style;
  style.range = {0.5, true};
  const Image img = colorize_map(m, 2, 2, {}, 2, Pooling::Max, style);
  CHECK(blue(img.at(0, 0)));  // the map export and render's PNG
  CHECK(red(img.at(0, 1)));
  // The same map's SVG cells (render --out F.svg, the head views' SVG).
  HeadFigure fig;
  fig.tokens = {"a", "b"};
  fig.panels = {{"A", m, style}};
  fig.panel_size = 64;
  const std::string svg = head_figure_svg(fig, *system_font(), 256, SvgCells::Vector);
  CHECK(svg.find(svg_color(diverging_colormap().at(1.0))) != std::string::npos);
  CHECK(svg.find(svg_color(diverging_colormap().at(0.0))) != std::string::npos);
  // Figure 1's exported chart (signed bars) and the lab's tables (signed shares).
  ChartFigure f;
  f.width = 400;
  f.height = 300;
  ChartPanel p;
  p.groups = {"a", "b"};
  ChartSeries s;
  s.signed_colors = true;
  s.values = {0.5, -0.5};
  p.series = {s};
  f.panels = {p};
  bool saw_blue = false, saw_red = false;
  for (const auto& r : layout_chart_figure(f, *system_font()).rects) {
    saw_blue = saw_blue || (r.h > 20 && blue(r.color));
    saw_red = saw_red || (r.h > 20 && red(r.color));
  }
  CHECK(saw_blue);
  CHECK(saw_red);
  CHECK(blue(grid_cell_colour(0.5, -0.5, 0.5, true)));
  CHECK(red(grid_cell_colour(-0.5, -0.5, 0.5, true)));
}
