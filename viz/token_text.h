// Display labels for tokenizer pieces: SentencePiece's word marker as a space, byte-fallback pieces decoded.
// Token data keeps the raw pieces ("▁The", "<0xE2>"); labels are made from them where they are drawn.
#pragma once

#include <string>
#include <vector>

namespace difflens::viz {

// Plain: a space is a space. Visible: a label that would be nothing but spaces shows "␣" (U+2423) for
// each, so a lone "▁" or "<0x20>" is seen; labels with other text keep plain spaces.
enum class Spaces { Plain, Visible };

// One label per piece, index for index (the UI addresses tokens by position). Never throws.
// - "▁" (U+2581) anywhere becomes a space: "▁The" -> " The", "▁▁" -> "  " (Visible: "␣␣").
// - A run of consecutive byte pieces "<0xNN>" is decoded as UTF-8: the piece where a character starts
//   shows it, the pieces holding the rest of its bytes show "·" (U+00B7, "continues the character to the
//   left"): <0xE2><0x80><0x94> -> "—", "·", "·". Bytes that are not valid UTF-8 there stay "<0xNN>".
// - Control characters, from byte pieces or inside a piece: LF -> "↵", TAB -> "⇥", CR -> backslash "r"
//   (DejaVu has no ␍), other controls and DEL -> backslash "xNN": <0x0A> -> "↵", <0x1B> -> "\x1B".
// - Everything else is unchanged: "<s>", "</s>", "<|begin_of_text|>", "co"; invalid UTF-8 passes through.
// The marks added here (␣ ↵ ⇥ ·) are all in DejaVu Sans, the figures' font.
std::vector<std::string> display_tokens(const std::vector<std::string>& pieces,
                                        Spaces spaces = Spaces::Plain);

// The text a sequence of pieces spells (what a prompt box shows for a trace bundle, which keeps pieces, not
// the prompt): the pieces' Plain labels joined, a leading "<s>"-like BOS piece left out when `skip_bos`,
// and the one space SentencePiece's word marker puts before the first word dropped.
std::string text_of_pieces(const std::vector<std::string>& pieces, bool skip_bos);

// A span of tokens as DiffLens writes it everywhere (flags, panels, help, figure titles, exports): half-open,
// the first token and one past the last, as --answer BEGIN,END takes it: token_range(10, 13) = "[10, 13)",
// tokens 10, 11 and 12.
std::string token_range(long long begin, long long end);

// The label of one piece on its own (a byte piece is a run of one: "<0x41>" -> "A", "<0xE2>" stays).
std::string display_token(const std::string& piece, Spaces spaces = Spaces::Plain);

}  // namespace difflens::viz
