// Characters the UI's font atlas has to hold. Dear ImGui 1.86 bakes every glyph before it draws, so the
// app starts with a fixed Latin/Greek/symbols set and adds the characters it meets (prompt text, token
// pieces, next-token texts, model paths), then rebuilds the atlas between frames. Plain logic, no ImGui.
#pragma once

#include <cstdint>
#include <set>
#include <string>

namespace difflens::app {

// The fixed ranges, as ImGui wants them: inclusive [first, last] pairs, zero-terminated.
extern const uint16_t kBaseGlyphRanges[];

bool in_base_glyph_ranges(uint32_t codepoint);

class GlyphNeeds {
 public:
  // Records the characters of `utf8` outside the base ranges. Invalid UTF-8 bytes, controls and
  // characters beyond U+FFFF (ImGui's 16-bit glyph ids: emoji among them) are skipped. Returns true
  // when a character was new (the atlas needs a rebuild).
  bool add(const std::string& utf8);
  const std::set<uint32_t>& codepoints() const { return codepoints_; }

 private:
  std::set<uint32_t> codepoints_;
};

}  // namespace difflens::app
