// Display labels for tokenizer pieces (see token_text.h for the rules).
#include "viz/token_text.h"

#include <cstddef>
#include <cstdio>

namespace difflens::viz {
namespace {

const std::string kWordMarker = "\u2581";    // ▁, SentencePiece's "a word starts here"
const std::string kVisibleSpace = "\u2423";  // ␣
const std::string kContinuation = "\u00b7";  // ·, the piece holds more bytes of the character before it

// The byte a piece "<0xNN>" stands for, or -1 for any other piece.
int byte_of_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  auto digit = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int hi = digit(p[3]), lo = digit(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Length of the well-formed UTF-8 sequence at b[0] (n bytes available), or 0: no overlong forms,
// surrogates or code points above U+10FFFF, as Unicode's table of well-formed sequences has it.
size_t utf8_length(const unsigned char* b, size_t n) {
  const unsigned char c = b[0];
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < len || b[1] < lo || b[1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((b[k] & 0xc0) != 0x80) return 0;
  return len;
}

// Text of a piece that is not a byte piece: word markers as spaces, control characters by name. Other
// bytes, valid UTF-8 or not, are copied.
std::string piece_text(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (p.compare(i, kWordMarker.size(), kWordMarker) == 0) {
      out += ' ';
      i += kWordMarker.size();
      continue;
    }
    if (c == '\n') {
      out += "\u21b5";  // ↵
    } else if (c == '\t') {
      out += "\u21e5";  // ⇥
    } else if (c == '\r') {
      out += "\\r";  // DejaVu Sans has no ␍
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

}  // namespace

std::vector<std::string> display_tokens(const std::vector<std::string>& pieces, Spaces spaces) {
  const size_t n = pieces.size();
  std::vector<std::string> out(n);
  for (size_t i = 0; i < n;) {
    if (byte_of_piece(pieces[i]) < 0) {
      out[i] = piece_text(pieces[i]);
      ++i;
      continue;
    }
    // A run of byte pieces: decode it character by character.
    std::vector<unsigned char> bytes;
    for (int b; i + bytes.size() < n && (b = byte_of_piece(pieces[i + bytes.size()])) >= 0;)
      bytes.push_back(static_cast<unsigned char>(b));
    for (size_t k = 0; k < bytes.size();) {
      const size_t len = utf8_length(&bytes[k], bytes.size() - k);
      if (len == 0) {
        out[i + k] = pieces[i + k];
      } else if (len == 1) {
        out[i + k] = piece_text(std::string(1, static_cast<char>(bytes[k])));
      } else {
        out[i + k].assign(bytes.begin() + static_cast<std::ptrdiff_t>(k),
                          bytes.begin() + static_cast<std::ptrdiff_t>(k + len));
        for (size_t m = 1; m < len; ++m) out[i + k + m] = kContinuation;
      }
      k += len == 0 ? 1 : len;
    }
    i += bytes.size();
  }
  if (spaces == Spaces::Visible)
    for (std::string& label : out)
      if (!label.empty() && label.find_first_not_of(' ') == std::string::npos) {
        const size_t count = label.size();
        label.clear();
        for (size_t k = 0; k < count; ++k) label += kVisibleSpace;
      }
  return out;
}

std::string text_of_pieces(const std::vector<std::string>& pieces, bool skip_bos) {
  const std::vector<std::string> labels = display_tokens(pieces, Spaces::Plain);
  std::string text;
  for (size_t i = skip_bos && !labels.empty() ? 1 : 0; i < labels.size(); ++i) text += labels[i];
  for (const char* mark : {"↵", "⇥"}) {  // display marks of control characters back to the characters
    const std::string m = mark, c = m == "↵" ? "\n" : "\t";
    for (size_t at = text.find(m); at != std::string::npos; at = text.find(m, at + c.size()))
      text.replace(at, m.size(), c);
  }
  if (!text.empty() && text[0] == ' ' && !pieces.empty() &&
      pieces[skip_bos && pieces.size() > 1 ? 1 : 0].rfind("\xE2\x96\x81", 0) == 0)
    text.erase(0, 1);
  return text;
}

std::string token_range(long long begin, long long end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string display_token(const std::string& piece, Spaces spaces) {
  return display_tokens({piece}, spaces)[0];
}

}  // namespace difflens::viz
