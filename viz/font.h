// Rasters and TrueType text for figures drawn on the CPU (stb_truetype): an RGB image, and a font that
// measures and draws UTF-8 lines on it, horizontal or vertical, with a fallback font for other scripts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "viz/colormap.h"

namespace difflens::viz {

// RGB8 raster, rows top first.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Image() = default;
  Image(int w, int h, Rgb8 background);
  Rgb8 at(int x, int y) const;
  void fill(int x, int y, int w, int h, Rgb8 c);  // clipped to the image
  void blit(const Image& src, int x, int y);      // clipped to the image
};

// A TrueType font for figures. Text is UTF-8; invalid bytes draw as U+FFFD; characters the font lacks
// come from the fallback font when one is set and has them, else draw as the font's placeholder box.
class FigureFont {
 public:
  // Throws Error naming the file. `fallback` (optional) supplies the glyphs `ttf` lacks (CJK, ...).
  explicit FigureFont(const std::filesystem::path& ttf, const std::filesystem::path& fallback = {});
  // DejaVu Sans from the system (fonts-dejavu-core), with find_fallback_font() behind it when there is
  // one; throws Error saying what to install when DejaVu is absent.
  static const FigureFont& standard();
  int text_width(const std::string& utf8, float px) const;
  // Draws with the top of the line box at y. `vertical`: rotated 90° counter-clockwise (reads bottom to
  // top), with the end of the text at y and its line box spanning [x, x + px).
  void draw(Image& img, int x, int y, const std::string& utf8, float px, Rgb8 color,
            bool vertical = false) const;

 private:
  std::vector<unsigned char> data_, fallback_data_;
  std::vector<unsigned char> info_,
      fallback_info_;  // stbtt_fontinfo, kept opaque here (fallback: empty if none)

 public:
  // Distance from the top of the line box to the baseline at `px` (for SVG text anchors).
  float ascent(float px) const;
  // The em size (CSS/SVG font-size) of text drawn at line height `px`.
  float em_size(float px) const;
};

// The font DiffLens uses (DejaVu Sans), or empty: first under $DIFFLENS_FONT_DIR (recursively) when that
// is set, then in the system's font folders.
std::filesystem::path find_system_font();
// A font with CJK and other scripts DejaVu lacks (fonts-droid-fallback, else Noto CJK or WenQuanYi when
// installed; searched like find_system_font); empty when none is.
std::filesystem::path find_fallback_font();

}  // namespace difflens::viz
