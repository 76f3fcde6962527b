// CPU figure composition: colormapped maps, TrueType labels, legends.
#include "viz/figure.h"

#include <stb_truetype.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>

#include "core/error.h"
#include "viz/token_text.h"

namespace difflens::viz {
namespace {

const stbtt_fontinfo* font_info(const std::vector<unsigned char>& info) {
  return reinterpret_cast<const stbtt_fontinfo*>(info.data());
}

// UTF-8 → code points; an invalid or truncated sequence becomes U+FFFD and decoding goes on.
std::vector<int> code_points(const std::string& s) {
  std::vector<int> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    int cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out.push_back(0xfffd);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

void append_utf8(std::string& out, int cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Text for an XML document: escaped, with invalid UTF-8, surrogates and the control characters XML 1.0
// forbids replaced by U+FFFD.
std::string xml_text(const std::string& s) {
  std::string out;
  for (int cp : code_points(s)) {
    if ((cp < 0x20 && cp != '\t' && cp != '\n') || (cp >= 0xd800 && cp < 0xe000) || cp == 0xfffe ||
        cp == 0xffff || cp > 0x10ffff)
      cp = 0xfffd;
    if (cp == '&')
      out += "&amp;";
    else if (cp == '<')
      out += "&lt;";
    else if (cp == '>')
      out += "&gt;";
    else if (cp == '"')
      out += "&quot;";
    else
      append_utf8(out, cp);
  }
  return out;
}

std::string hex(Rgb8 c) {
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", c.r, c.g, c.b);
  return b;
}

// Coverage mask of a line of text: width × line height, 0..255.
struct Mask {
  int width = 0, height = 0;
  std::vector<unsigned char> a;
};

// The fonts a line is drawn with: each character from the main font, or from the fallback when only
// the fallback has it. Kerning applies between neighbours from the main font.
struct Faces {
  const stbtt_fontinfo* main;
  const stbtt_fontinfo* fallback;  // may be null
  const stbtt_fontinfo* for_char(int cp) const {
    if (fallback && stbtt_FindGlyphIndex(main, cp) == 0 && stbtt_FindGlyphIndex(fallback, cp) != 0)
      return fallback;
    return main;
  }
};

// Pen advance of a line: glyph advances plus kerning.
float advance(const Faces& faces, const std::vector<int>& cps, float px) {
  float w = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const stbtt_fontinfo* f = faces.for_char(cps[i]);
    const float scale = stbtt_ScaleForPixelHeight(f, px);
    int adv, lsb;
    stbtt_GetCodepointHMetrics(f, cps[i], &adv, &lsb);
    w += adv * scale;
    if (i + 1 < cps.size() && f == faces.main && faces.for_char(cps[i + 1]) == faces.main)
      w += scale * stbtt_GetCodepointKernAdvance(f, cps[i], cps[i + 1]);
  }
  return w;
}

Mask rasterize(const Faces& faces, const std::string& text, float px) {
  int ascent, descent, gap;
  stbtt_GetFontVMetrics(faces.main, &ascent, &descent, &gap);
  const int baseline = static_cast<int>(std::lround(ascent * stbtt_ScaleForPixelHeight(faces.main, px)));
  const std::vector<int> cps = code_points(text);
  const float width = advance(faces, cps, px);
  Mask m;
  m.width = static_cast<int>(std::ceil(width)) + 1;
  m.height = static_cast<int>(std::ceil(px));
  m.a.assign(static_cast<size_t>(m.width) * m.height, 0);
  float x = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const stbtt_fontinfo* f = faces.for_char(cps[i]);
    const float scale = stbtt_ScaleForPixelHeight(f, px);
    int adv, lsb, x0, y0, x1, y1;
    stbtt_GetCodepointHMetrics(f, cps[i], &adv, &lsb);
    stbtt_GetCodepointBitmapBox(f, cps[i], scale, scale, &x0, &y0, &x1, &y1);
    const int gw = x1 - x0, gh = y1 - y0;
    if (gw > 0 && gh > 0) {
      std::vector<unsigned char> glyph(static_cast<size_t>(gw) * gh);
      stbtt_MakeCodepointBitmap(f, glyph.data(), gw, gh, gw, scale, scale, cps[i]);
      const int ox = static_cast<int>(std::lround(x)) + x0, oy = baseline + y0;
      for (int gy = 0; gy < gh; ++gy)
        for (int gx = 0; gx < gw; ++gx) {
          const int tx = ox + gx, ty = oy + gy;
          if (tx < 0 || ty < 0 || tx >= m.width || ty >= m.height) continue;
          unsigned char& d = m.a[static_cast<size_t>(ty) * m.width + tx];
          d = std::max(d, glyph[static_cast<size_t>(gy) * gw + gx]);
        }
    }
    x += adv * scale;
    if (i + 1 < cps.size() && f == faces.main && faces.for_char(cps[i + 1]) == faces.main)
      x += scale * stbtt_GetCodepointKernAdvance(f, cps[i], cps[i + 1]);
  }
  return m;
}

void blend(Image& img, int x, int y, Rgb8 c, unsigned char a) {
  if (a == 0 || x < 0 || y < 0 || x >= img.width || y >= img.height) return;
  uint8_t* p = &img.rgb[(static_cast<size_t>(y) * img.width + x) * 3];
  const int k = a;
  p[0] = static_cast<uint8_t>((p[0] * (255 - k) + c.r * k + 127) / 255);
  p[1] = static_cast<uint8_t>((p[1] * (255 - k) + c.g * k + 127) / 255);
  p[2] = static_cast<uint8_t>((p[2] * (255 - k) + c.b * k + 127) / 255);
}

std::string format_tick(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// A label no wider than `max_px`: cut with an ellipsis.
std::string fit(const FigureFont& font, const std::string& s, float px, int max_px) {
  if (font.text_width(s, px) <= max_px) return s;
  const std::vector<int> cps = code_points(s);
  std::string out;
  for (int cp : cps) {
    std::string next = out;
    append_utf8(next, cp);
    if (font.text_width(next + "\u2026", px) > max_px) break;
    out = next;
  }
  return out + "\u2026";
}

}  // namespace

Image::Image(int w, int h, Rgb8 background) : width(w), height(h) {
  if (w <= 0 || h <= 0) throw Error("image: size must be positive");
  rgb.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = background.r;
    rgb[i + 1] = background.g;
    rgb[i + 2] = background.b;
  }
}

Rgb8 Image::at(int x, int y) const {
  const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
  return {p[0], p[1], p[2]};
}

void Image::fill(int x, int y, int w, int h, Rgb8 c) {
  for (int yy = std::max(0, y); yy < std::min(height, y + h); ++yy)
    for (int xx = std::max(0, x); xx < std::min(width, x + w); ++xx) {
      uint8_t* p = &rgb[(static_cast<size_t>(yy) * width + xx) * 3];
      p[0] = c.r;
      p[1] = c.g;
      p[2] = c.b;
    }
}

void Image::blit(const Image& src, int x, int y) {
  for (int yy = 0; yy < src.height; ++yy) {
    const int ty = y + yy;
    if (ty < 0 || ty >= height) continue;
    for (int xx = 0; xx < src.width; ++xx) {
      const int tx = x + xx;
      if (tx < 0 || tx >= width) continue;
      std::copy_n(&src.rgb[(static_cast<size_t>(yy) * src.width + xx) * 3], 3,
                  &rgb[(static_cast<size_t>(ty) * width + tx) * 3]);
    }
  }
}

namespace {

void load_font(const std::filesystem::path& ttf, std::vector<unsigned char>& data,
               std::vector<unsigned char>& info) {
  std::ifstream in(ttf, std::ios::binary);
  if (!in) throw Error(ttf.string() + ": cannot open the font file");
  data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  info.resize(sizeof(stbtt_fontinfo));
  auto* f = reinterpret_cast<stbtt_fontinfo*>(info.data());
  const int offset = data.size() >= 12 ? stbtt_GetFontOffsetForIndex(data.data(), 0) : -1;
  if (offset < 0 || !stbtt_InitFont(f, data.data(), offset))
    throw Error(ttf.string() + ": not a TrueType font");
}

}  // namespace

FigureFont::FigureFont(const std::filesystem::path& ttf, const std::filesystem::path& fallback) {
  load_font(ttf, data_, info_);
  if (!fallback.empty()) load_font(fallback, fallback_data_, fallback_info_);
}

namespace {

// The first of `names` under $DIFFLENS_FONT_DIR (searched recursively, in the order of `names`), then the
// first of `system` that exists. Fonts unpacked somewhere else than /usr/share/fonts (a server without
// Debian packages, another distribution) are found through that variable.
std::filesystem::path find_font(std::initializer_list<const char*> names,
                                std::initializer_list<const char*> system) {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("DIFFLENS_FONT_DIR"); dir != nullptr && *dir != '\0') {
    std::error_code ec;
    std::vector<fs::path> files;
    for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec)) files.push_back(it->path());
    for (const char* name : names)
      for (const fs::path& f : files)
        if (f.filename() == name) return f;
  }
  for (const char* f : system)
    if (fs::exists(f)) return f;
  return {};
}

}  // namespace

std::filesystem::path find_system_font() {
  return find_font({"DejaVuSans.ttf"}, {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                                        "/usr/share/fonts/TTF/DejaVuSans.ttf"});
}

std::filesystem::path find_fallback_font() {
  return find_font({"DroidSansFallbackFull.ttf", "NotoSansCJK-Regular.ttc", "wqy-microhei.ttc"},
                   {"/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
                    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
                    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"});
}

const FigureFont& FigureFont::standard() {
  static const FigureFont font = [] {
    const auto path = find_system_font();
    if (path.empty())
      throw Error(
          "no figure font: install fonts-dejavu-core (DejaVuSans.ttf is looked up in "
          "/usr/share/fonts/truetype/dejavu, and first under $DIFFLENS_FONT_DIR when that is set)");
    return FigureFont(path, find_fallback_font());
  }();
  return font;
}

float FigureFont::ascent(float px) const {
  const stbtt_fontinfo* f = font_info(info_);
  int ascent, descent, gap;
  stbtt_GetFontVMetrics(f, &ascent, &descent, &gap);
  return static_cast<float>(std::lround(ascent * stbtt_ScaleForPixelHeight(f, px)));
}

float FigureFont::em_size(float px) const {
  const stbtt_fontinfo* f = font_info(info_);
  return stbtt_ScaleForPixelHeight(f, px) / stbtt_ScaleForMappingEmToPixels(f, 1.0f);
}

int FigureFont::text_width(const std::string& utf8, float px) const {
  const Faces faces{font_info(info_), fallback_info_.empty() ? nullptr : font_info(fallback_info_)};
  return static_cast<int>(std::ceil(advance(faces, code_points(utf8), px)));
}

void FigureFont::draw(Image& img, int x, int y, const std::string& utf8, float px, Rgb8 color,
                      bool vertical) const {
  const Mask m =
      rasterize({font_info(info_), fallback_info_.empty() ? nullptr : font_info(fallback_info_)}, utf8, px);
  for (int my = 0; my < m.height; ++my)
    for (int mx = 0; mx < m.width; ++mx) {
      const unsigned char a = m.a[static_cast<size_t>(my) * m.width + mx];
      if (vertical)  // text column mx runs upwards from y; line row my runs rightwards from x
        blend(img, x + my, y - mx, color, a);
      else
        blend(img, x + mx, y + my, color, a);
    }
}

Image colorize_map(const float* data, int64_t rows, int64_t cols, const MapRegion& region_in, int size,
                   Pooling pooling, const HeatmapStyle& style, bool causal) {
  if (size < 1) throw Error("map image: size must be positive");
  const MapRegion region = region_in.rows > 0 ? region_in : MapRegion{0, 0, rows, cols};
  const PooledMap p = pool_region(data, rows, cols, region, size, size, pooling, causal);
  const Colormap& cmap = style.range.diverging ? diverging_colormap() : sequential_colormap();
  Image img(size, size, style.masked);
  std::vector<int64_t> col_of(static_cast<size_t>(size));
  for (int x = 0; x < size; ++x)  // pixel centre → cell, as GL_NEAREST samples it
    col_of[static_cast<size_t>(x)] =
        std::min<int64_t>(p.cols - 1, static_cast<int64_t>((x + 0.5) / size * static_cast<double>(p.cols)));
  for (int y = 0; y < size; ++y) {
    const int64_t r =
        std::min<int64_t>(p.rows - 1, static_cast<int64_t>((y + 0.5) / size * static_cast<double>(p.rows)));
    for (int x = 0; x < size; ++x) {
      const float v = p.at(r, col_of[static_cast<size_t>(x)]);
      if (std::isnan(v)) continue;
      const Rgb8 c = cmap.at(colormap_coordinate(v, style.range, style.scale));
      uint8_t* px = &img.rgb[(static_cast<size_t>(y) * size + x) * 3];
      px[0] = c.r;
      px[1] = c.g;
      px[2] = c.b;
    }
  }
  return img;
}

double value_at_coordinate(double t, const ValueRange& range, ValueScale scale) {
  t = std::clamp(t, 0.0, 1.0);
  const double sign = range.diverging ? (t < 0.5 ? -1.0 : 1.0) : 1.0;
  const double f = range.diverging ? std::fabs(t - 0.5) * 2 : t;
  double x = f;
  if (scale == ValueScale::Sqrt) x = f * f;
  if (scale == ValueScale::Log) x = std::pow(10.0, f * kLogDecades - kLogDecades);
  return sign * x * range.hi;
}

namespace {

// Ramps, rectangles and texts of a scene onto an image (maps are drawn by the caller first).
void paint_scene(Image& img, const FigureScene& sc, const FigureFont& font) {
  for (const auto& r : sc.ramps) {
    const Colormap& cmap = r.diverging ? diverging_colormap() : sequential_colormap();
    for (int x = 0; x < r.w; ++x) img.fill(r.x + x, r.y, 1, r.h, cmap.at((x + 0.5) / r.w));
  }
  for (const auto& r : sc.rects) img.fill(r.x, r.y, r.w, r.h, r.color);
  for (const auto& t : sc.texts) font.draw(img, t.x, t.y, t.text, t.px, t.color, t.vertical);
}

// The same scene as SVG; `maps` appends the map groups (drawn under the legends, rectangles and texts).
std::string scene_svg(const FigureScene& sc, const FigureFont& font,
                      const std::function<void(std::string&)>& maps) {
  std::string o;
  char b[256];
  std::snprintf(
      b, sizeof b,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"DejaVu Sans, Verdana, sans-serif\" xml:space=\"preserve\" style=\"white-space:pre\">\n",
      sc.width, sc.height, sc.width, sc.height);
  o += b;
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n<defs>\n";
  for (const bool diverging : {false, true}) {  // legend ramps as gradients, 33 stops
    const Colormap& cmap = diverging ? diverging_colormap() : sequential_colormap();
    o += std::string("<linearGradient id=\"") + (diverging ? "diverging" : "sequential") + "\">";
    for (int i = 0; i <= 32; ++i) {
      std::snprintf(b, sizeof b, "<stop offset=\"%.4f\" stop-color=\"%s\"/>", i / 32.0,
                    hex(cmap.at(i / 32.0)).c_str());
      o += b;
    }
    o += "</linearGradient>\n";
  }
  o += "</defs>\n";
  maps(o);
  for (const auto& r : sc.ramps) {
    std::snprintf(b, sizeof b,
                  "<rect class=\"legend\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"url(#%s)\"/>\n",
                  r.x, r.y, r.w, r.h, r.diverging ? "diverging" : "sequential");
    o += b;
  }
  for (const auto& r : sc.rects) {
    std::snprintf(b, sizeof b, "<rect%s x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
                  r.cell ? " class=\"cell\"" : "", r.x, r.y, r.w, r.h, hex(r.color).c_str());
    o += b;
  }
  for (const auto& t : sc.texts) {
    const float base = font.ascent(t.px);
    if (t.vertical)
      std::snprintf(b, sizeof b,
                    "<text transform=\"translate(%.1f,%d) rotate(-90)\" font-size=\"%.2f\" fill=\"%s\">",
                    t.x + base, t.y, font.em_size(t.px), hex(t.color).c_str());
    else
      std::snprintf(b, sizeof b, "<text x=\"%d\" y=\"%.1f\" font-size=\"%.2f\" fill=\"%s\">", t.x, t.y + base,
                    font.em_size(t.px), hex(t.color).c_str());
    o += b;
    o += xml_text(t.text);
    o += "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace

Image render_scene(const FigureScene& scene, const FigureFont& font) {
  if (scene.width < 16 || scene.height < 16 || scene.width > 8192 || scene.height > 8192)
    throw Error("figure: a scene of " + std::to_string(scene.width) + "x" + std::to_string(scene.height) +
                " pixels is outside 16..8192");
  Image img(scene.width, scene.height, Rgb8{255, 255, 255});
  paint_scene(img, scene, font);
  return img;
}

std::string scene_to_svg(const FigureScene& scene, const FigureFont& font) {
  return scene_svg(scene, font, [](std::string&) {});
}

FigureScene layout_head_figure(const HeadFigure& fig, const FigureFont& font) {
  if (fig.panels.empty()) throw Error("figure: no maps to draw");
  if (fig.panel_size < 64 || fig.panel_size > 8192)
    throw Error("figure: the map size must be between 64 and 8192 pixels");
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  if (T == 0) throw Error("figure: no tokens");
  for (const auto& p : fig.panels)
    if (!p.data) throw Error("figure: a panel has no data");
  const MapRegion region = fig.region.rows > 0 ? fig.region : MapRegion{0, 0, T, T};
  if (region.row0 < 0 || region.col0 < 0 || region.row0 + region.rows > T || region.col0 + region.cols > T)
    throw Error("figure: the region lies outside the map");

  FigureScene sc;
  sc.region = region;
  const int P = fig.panel_size;
  const Rgb8 ink{20, 20, 20}, grey{110, 110, 110};
  const float title_px = std::clamp(P / 22.0f, 14.0f, 64.0f);
  const float sub_px = std::clamp(P / 28.0f, 12.0f, 48.0f);
  // Labels as large as a cell allows (every token labelled down to 9-pixel cells), at most P/40.
  const double min_cell = static_cast<double>(P) / static_cast<double>(std::max(region.rows, region.cols));
  const float label_px = std::clamp(std::min(P / 40.0f, static_cast<float>(min_cell * 0.8)), 9.0f, 28.0f);
  const int margin = std::max(8, P / 32), gap = std::max(12, P / 16);
  const int label_cap = P / 3;  // longest label box, pixels
  // Every stride-th token is labelled so labels never overlap.
  auto stride_for = [&](int64_t span) {
    const double cell = static_cast<double>(P) / static_cast<double>(span);
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(label_px * 1.15 / cell)));
  };
  const int64_t row_stride = stride_for(region.rows), col_stride = stride_for(region.cols);
  // Labels from the whole sequence, so a zoomed region that starts inside a byte-fallback character
  // still shows it as a continuation; a label of only spaces is drawn as "␣" so it can be seen.
  const std::vector<std::string> shown = display_tokens(fig.tokens, Spaces::Visible);
  auto labels = [&](int64_t first, int64_t count, int64_t stride) {
    std::vector<std::pair<int64_t, std::string>> out;
    for (int64_t i = first; i < first + count; i += stride)
      out.push_back({i, fit(font, shown[static_cast<size_t>(i)], label_px, label_cap)});
    return out;
  };
  const auto row_labels = labels(region.row0, region.rows, row_stride);
  const auto col_labels = labels(region.col0, region.cols, col_stride);
  int row_label_w = 0, col_label_h = 0;
  for (const auto& [i, s] : row_labels) row_label_w = std::max(row_label_w, font.text_width(s, label_px));
  for (const auto& [i, s] : col_labels) col_label_h = std::max(col_label_h, font.text_width(s, label_px));
  row_label_w += static_cast<int>(label_px / 2);
  col_label_h += static_cast<int>(label_px / 2);

  const int legend_h = std::max(8, P / 24);
  const int n = static_cast<int>(fig.panels.size());
  const int left = margin + row_label_w;
  sc.width = left + n * P + (n - 1) * gap + margin;
  const int title_h = static_cast<int>(title_px * 1.6f), sub_h = static_cast<int>(sub_px * 1.5f);
  const int map_top = margin + title_h + sub_h;
  sc.legend_top = map_top + P + col_label_h + static_cast<int>(label_px / 2);
  sc.height = sc.legend_top + legend_h + static_cast<int>(label_px * 1.8f) + margin;
  sc.texts.push_back({margin, margin, fig.title, title_px, ink, false});

  const double cell_y = static_cast<double>(P) / static_cast<double>(region.rows);
  const double cell_x = static_cast<double>(P) / static_cast<double>(region.cols);
  for (const auto& [i, s] : row_labels) {  // queries, right-aligned against the first map
    const int cy = map_top + static_cast<int>((static_cast<double>(i - region.row0) + 0.5) * cell_y);
    sc.texts.push_back({left - static_cast<int>(label_px / 3) - font.text_width(s, label_px),
                        cy - static_cast<int>(label_px / 2), s, label_px, ink, false});
  }
  for (int k = 0; k < n; ++k) {
    const FigurePanel& panel = fig.panels[static_cast<size_t>(k)];
    const int x0 = left + k * (P + gap);
    sc.texts.push_back({x0, margin + title_h, panel.title, sub_px, ink, false});
    sc.maps.push_back({x0, map_top, P, static_cast<size_t>(k)});
    for (const auto& [i, s] : col_labels) {  // keys, vertical, under the map
      const int cx = x0 + static_cast<int>((static_cast<double>(i - region.col0) + 0.5) * cell_x);
      sc.texts.push_back({cx - static_cast<int>(label_px / 2),
                          map_top + P + static_cast<int>(label_px / 3) + font.text_width(s, label_px), s,
                          label_px, ink, true});
    }
    // Legend: the ramp, then ticks at 0, ¼, ½, ¾, 1 of it labelled with the values they stand for.
    sc.ramps.push_back({x0, sc.legend_top, P, legend_h, panel.style.range.diverging});
    std::vector<std::pair<int, int>> taken;  // label extents: the ends first, then the inner ticks
    for (int t : {0, 4, 2, 1, 3}) {
      const double pos = t / 4.0;
      std::string s = format_tick(value_at_coordinate(pos, panel.style.range, panel.style.scale));
      if (panel.style.scale == ValueScale::Log) {
        if (!panel.style.range.diverging && t == 0) s = "\u2264" + s;  // the low end holds all below it
        if (panel.style.range.diverging && t == 2) s = "0";
      }
      const int tx = x0 + static_cast<int>(pos * (P - 1));
      const int w = font.text_width(s, label_px);
      const int lx = std::clamp(tx - w / 2, x0, x0 + P - w);
      const int pad = static_cast<int>(label_px / 2);
      if (std::any_of(taken.begin(), taken.end(),
                      [&](const auto& e) { return lx < e.second + pad && lx + w + pad > e.first; }))
        continue;  // would collide with a label already placed
      taken.push_back({lx, lx + w});
      sc.rects.push_back({tx, sc.legend_top + legend_h, 1, static_cast<int>(label_px / 3), grey});
      sc.texts.push_back(
          {lx, sc.legend_top + legend_h + static_cast<int>(label_px / 3), s, label_px, ink, false});
    }
  }
  return sc;
}

Image render_head_figure(const HeadFigure& fig, const FigureFont& font, HeadFigureLayout* layout) {
  const FigureScene sc = layout_head_figure(fig, font);
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  Image img(sc.width, sc.height, {255, 255, 255});
  for (const auto& m : sc.maps) {
    const FigurePanel& panel = fig.panels[m.panel];
    img.blit(colorize_map(panel.data, T, T, sc.region, m.size, fig.pooling, panel.style), m.x, m.y);
    if (layout) layout->maps.push_back({m.x, m.y});
  }
  if (layout) layout->legend_top = sc.legend_top;
  paint_scene(img, sc, font);
  return img;
}

FigureScene layout_grid_figure(const GridFigure& g, const FigureFont& font) {
  const size_t R = g.row_labels.size(), C = g.col_labels.size();
  if (R == 0 || C == 0 || g.values.size() != R * C)
    throw Error("grid figure: " + std::to_string(g.values.size()) + " values for " + std::to_string(R) +
                " x " + std::to_string(C) + " labels");
  if (g.cell < 16 || g.cell > 512)
    throw Error("grid figure: the cell size must be between 16 and 512 pixels");
  if (!(g.hi > g.lo)) throw Error("grid figure: hi must be above lo");
  const Rgb8 ink{20, 20, 20}, white{255, 255, 255};
  const float px = std::clamp(g.cell / 4.5f, 9.0f, 40.0f), title_px = px * 1.3f;
  const int margin = static_cast<int>(px);
  int row_w = font.text_width(g.row_title, px);
  for (const auto& l : g.row_labels) row_w = std::max(row_w, font.text_width(l, px));
  const int left = margin + row_w + margin;
  // Title, column title, column labels, then the grid.
  const int top =
      margin + static_cast<int>(title_px * 1.6f) + static_cast<int>(px * 1.5f) + static_cast<int>(px * 1.5f);
  const int grid_w = static_cast<int>(C) * g.cell, grid_h = static_cast<int>(R) * g.cell;
  FigureScene sc;
  sc.legend_top = top + grid_h + static_cast<int>(px * 1.8f);
  sc.width = std::max(left + grid_w + margin, margin + font.text_width(g.title, title_px) + margin);
  sc.height = sc.legend_top + static_cast<int>(px * 0.8f) + static_cast<int>(px * 1.6f) + margin;
  auto text = [&](int x, int y, const std::string& t, float size, Rgb8 c) {
    FigureScene::Text tx;
    tx.x = x, tx.y = y, tx.text = t, tx.px = size, tx.color = c;
    sc.texts.push_back(tx);
  };
  text(margin, margin, g.title, title_px, ink);
  text(left, margin + static_cast<int>(title_px * 1.6f), g.col_title, px, ink);
  text(margin, top - static_cast<int>(px * 1.3f), g.row_title, px, ink);
  const Colormap& cmap = sequential_colormap();
  for (size_t r = 0; r < R; ++r) {
    const int y = top + static_cast<int>(r) * g.cell;
    text(left - margin / 2 - font.text_width(g.row_labels[r], px), y + (g.cell - static_cast<int>(px)) / 2,
         g.row_labels[r], px, ink);
    for (size_t c = 0; c < C; ++c) {
      const int x = left + static_cast<int>(c) * g.cell;
      const double v = g.values[r * C + c];
      char b[64];
      FigureScene::Rect cell;
      cell.x = x, cell.y = y, cell.w = g.cell - 1, cell.h = g.cell - 1, cell.cell = true;
      if (std::isnan(v)) {
        cell.color = {236, 236, 236};
        std::snprintf(b, sizeof b, "n/a");
      } else {
        cell.color = cmap.at((v - g.lo) / (g.hi - g.lo));
        std::snprintf(b, sizeof b, g.format.c_str(), v);
      }
      sc.rects.push_back(cell);
      const bool dark = !std::isnan(v) && oklab_lightness(cell.color) < 0.6;
      text(x + (g.cell - font.text_width(b, px)) / 2, y + (g.cell - static_cast<int>(px)) / 2, b, px,
           dark ? white : ink);
    }
  }
  for (size_t c = 0; c < C; ++c)  // column labels above the grid
    text(left + static_cast<int>(c) * g.cell + (g.cell - font.text_width(g.col_labels[c], px)) / 2,
         top - static_cast<int>(px * 1.3f), g.col_labels[c], px, ink);
  // Legend: the ramp from lo to hi under the grid.
  const int lh = static_cast<int>(px * 0.8f);
  sc.ramps.push_back({left, sc.legend_top, grid_w, lh, false});
  char lo[32], hi[32];
  std::snprintf(lo, sizeof lo, g.format.c_str(), g.lo);
  std::snprintf(hi, sizeof hi, g.format.c_str(), g.hi);
  text(left, sc.legend_top + lh + 2, lo, px, ink);
  text(left + grid_w - font.text_width(hi, px), sc.legend_top + lh + 2, hi, px, ink);
  return sc;
}

Image render_grid_figure(const GridFigure& g, const FigureFont& font) {
  const FigureScene sc = layout_grid_figure(g, font);
  Image img(sc.width, sc.height, {255, 255, 255});
  paint_scene(img, sc, font);
  return img;
}

std::string grid_figure_svg(const GridFigure& g, const FigureFont& font) {
  return scene_svg(layout_grid_figure(g, font), font, [](std::string&) {});
}

FigureScene layout_histogram_figure(const HistogramFigure& h, const FigureFont& font) {
  if (h.width < 200 || h.height < 200 || h.width > 8192 || h.height > 8192)
    throw Error("histogram figure: the size must be between 200 and 8192 pixels");
  if (h.series.empty()) throw Error("histogram figure: no series");
  const size_t bins = h.series[0].counts.size();
  size_t first = bins, last = 0;
  double top = 0;
  for (const auto& s : h.series) {
    if (s.counts.size() != bins) throw Error("histogram figure: the series have different bin counts");
    for (size_t b = 0; b < bins; ++b)
      if (s.counts[b] > 0)
        first = std::min(first, b), last = std::max(last, b), top = std::max(top, s.counts[b]);
  }
  if (first > last) throw Error("histogram figure: every series is empty");
  // Whole decades around the data.
  const double lo = std::floor(h.x0 + static_cast<double>(first) * h.bin_width);
  const double hi = std::ceil(h.x0 + static_cast<double>(last + 1) * h.bin_width);
  const double ytop = std::ceil(std::log10(top)) + (std::log10(top) == std::ceil(std::log10(top)) ? 1 : 0);
  const Rgb8 ink{20, 20, 20}, grid{225, 225, 225};
  const float px = std::clamp(h.height / 36.0f, 10.0f, 40.0f);
  const int left = static_cast<int>(px * 4.5f), right = static_cast<int>(px * 1.5f);
  const int top_margin = static_cast<int>(px * 2.6f), bottom = static_cast<int>(px * 3.6f);
  const int pw = h.width - left - right, ph = h.height - top_margin - bottom;
  if (pw < 50 || ph < 50) throw Error("histogram figure: too small for its labels");
  FigureScene sc;
  sc.width = h.width;
  sc.height = h.height;
  auto text = [&](int x, int y, const std::string& t, float size, bool vertical = false) {
    sc.texts.push_back({x, y, t, size, ink, vertical});
  };
  auto rect = [&](int x, int y, int w, int hh, Rgb8 c) { sc.rects.push_back({x, y, w, hh, c, false}); };
  text(left, static_cast<int>(px * 0.5f), h.title, px * 1.2f);
  auto X = [&](double lg) { return left + static_cast<int>((lg - lo) / (hi - lo) * pw); };
  auto Y = [&](double count) {  // log10(count + 1) so that single counts show
    return top_margin + ph - static_cast<int>(std::log10(count + 1) / (ytop + 0.05) * ph);
  };
  for (double d = lo; d <= hi + 1e-9; d += 1) {  // decade grid and labels
    rect(X(d), top_margin, 1, ph, grid);
    char b[32];
    std::snprintf(b, sizeof b, "1e%+.0f", d);
    text(X(d) - font.text_width(b, px) / 2, top_margin + ph + static_cast<int>(px * 0.4f), b, px);
  }
  for (int e = 0; e <= static_cast<int>(ytop); ++e) {
    const int y = Y(std::pow(10.0, e) - 1);
    rect(left, y, pw, 1, grid);
    char b[32];
    std::snprintf(b, sizeof b, e == 0 ? "0" : "1e%d", e);
    text(left - static_cast<int>(px * 0.4f) - font.text_width(b, px), y - static_cast<int>(px / 2), b, px);
  }
  rect(left, top_margin + ph, pw, 1, ink);
  rect(left, top_margin, 1, ph, ink);
  text(left + (pw - font.text_width(h.x_label, px)) / 2, top_margin + ph + static_cast<int>(px * 1.8f),
       h.x_label, px);
  text(static_cast<int>(px * 0.3f), top_margin + ph / 2 + font.text_width("count", px) / 2, "count", px,
       true);
  // Step lines, two pixels thick.
  for (const auto& s : h.series) {
    int prev_y = Y(0);
    for (size_t b = 0; b < bins; ++b) {
      const double l0 = h.x0 + static_cast<double>(b) * h.bin_width;
      if (l0 + h.bin_width < lo || l0 > hi) continue;
      const int x0 = X(l0), x1 = X(l0 + h.bin_width), y = Y(s.counts[b]);
      rect(x0, std::min(prev_y, y), 2, std::abs(prev_y - y) + 2, s.color);
      rect(x0, y, std::max(1, x1 - x0) + 1, 2, s.color);
      prev_y = y;
    }
  }
  // Legend, top right.
  int ly = top_margin + static_cast<int>(px * 0.5f);
  for (const auto& s : h.series) {
    const int w = font.text_width(s.name, px);
    const int lx = left + pw - w - static_cast<int>(px * 2.5f);
    rect(lx, ly + static_cast<int>(px / 2), static_cast<int>(px * 1.6f), 3, s.color);
    text(lx + static_cast<int>(px * 2.0f), ly, s.name, px);
    ly += static_cast<int>(px * 1.4f);
  }
  return sc;
}

Image render_histogram_figure(const HistogramFigure& h, const FigureFont& font) {
  return render_scene(layout_histogram_figure(h, font), font);
}

std::string histogram_figure_svg(const HistogramFigure& h, const FigureFont& font) {
  return scene_to_svg(layout_histogram_figure(h, font), font);
}

std::string head_figure_svg(const HeadFigure& fig, const FigureFont& font, int max_cells) {
  if (max_cells < 1) throw Error("figure: max_cells must be positive");
  const FigureScene sc = layout_head_figure(fig, font);
  const int64_t T = static_cast<int64_t>(fig.tokens.size());
  return scene_svg(sc, font, [&](std::string& o) {
    char b[256];
    for (const auto& m : sc.maps) {
      const FigurePanel& panel = fig.panels[m.panel];
      const int cells = std::min(m.size, max_cells);
      const PooledMap p = pool_region(panel.data, T, T, sc.region, cells, cells, fig.pooling, true);
      const Colormap& cmap = panel.style.range.diverging ? diverging_colormap() : sequential_colormap();
      const double cw = static_cast<double>(m.size) / static_cast<double>(p.cols);
      const double ch = static_cast<double>(m.size) / static_cast<double>(p.rows);
      std::snprintf(b, sizeof b,
                    "<g class=\"map\" data-panel=\"%zu\" data-rows=\"%lld\" data-cols=\"%lld\" "
                    "transform=\"translate(%d,%d)\" shape-rendering=\"crispEdges\">\n",
                    m.panel, static_cast<long long>(p.rows), static_cast<long long>(p.cols), m.x, m.y);
      o += b;
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t c = 0; c < p.cols; ++c) {
          const float v = p.at(r, c);
          const Rgb8 col = std::isnan(v)
                               ? panel.style.masked
                               : cmap.at(colormap_coordinate(v, panel.style.range, panel.style.scale));
          std::snprintf(
              b, sizeof b,
              "<rect class=\"cell\" x=\"%.3f\" y=\"%.3f\" width=\"%.3f\" height=\"%.3f\" fill=\"%s\"/>\n",
              c * cw, r * ch, cw, ch, hex(col).c_str());
          o += b;
        }
      o += "</g>\n";
    }
  });
}

}  // namespace difflens::viz
