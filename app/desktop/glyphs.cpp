// UI glyph bookkeeping (see glyphs.h).
#include "app/desktop/glyphs.h"

namespace difflens::app {

const uint16_t kBaseGlyphRanges[] = {0x0020, 0x024F,  // Latin
                                     0x0370, 0x03FF,  // Greek (λ)
                                     0x2000, 0x206F,  // punctuation (—, …)
                                     0x2190, 0x21FF,  // arrows
                                     0x2200, 0x22FF,  // mathematical operators (−, ≤)
                                     0x2423, 0x2423,  // open box (a token that is only a space)
                                     0x2580, 0x259F,  // block elements
                                     0xFFFD, 0xFFFD,  // the replacement character
                                     0};

bool in_base_glyph_ranges(uint32_t cp) {
  for (const uint16_t* r = kBaseGlyphRanges; r[0]; r += 2)
    if (cp >= r[0] && cp <= r[1]) return true;
  return false;
}

bool GlyphNeeds::add(const std::string& s) {
  bool added = false;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) {  // a stray or truncated byte
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    bool valid = true;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) valid = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!valid) {
      ++i;
      continue;
    }
    i += len;
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp < 0x20 || cp > 0xFFFF || (cp >= 0xD800 && cp <= 0xDFFF) || in_base_glyph_ranges(cp))
      continue;
    added |= codepoints_.insert(cp).second;
  }
  return added;
}

}  // namespace difflens::app
