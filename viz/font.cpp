// Rasters and TrueType text (see font.h).
#include "viz/font.h"

#include <stb_truetype.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>

#include "core/formats/error.h"
#include "viz/utf8.h"

namespace difflens::viz {
namespace {

const stbtt_fontinfo* font_info(const std::vector<unsigned char>& info) {
  return reinterpret_cast<const stbtt_fontinfo*>(info.data());
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

}  // namespace difflens::viz
