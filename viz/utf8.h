// UTF-8 text for figures: decoding to code points, encoding them, and escaping for XML (SVG).
#pragma once

#include <string>
#include <vector>

namespace difflens::viz {

// UTF-8 -> code points; an invalid or truncated sequence becomes U+FFFD and decoding goes on.
std::vector<int> code_points(const std::string& s);
// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, int cp);
// Text for an XML document: escaped, with invalid UTF-8, surrogates and the control characters XML 1.0
// forbids replaced by U+FFFD.
std::string xml_text(const std::string& s);

}  // namespace difflens::viz
