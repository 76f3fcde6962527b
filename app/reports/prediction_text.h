// What a model predicted at each position, as the app words it (plain C++, no ImGui): the candidates after
// a token (Figure 1, the Text view) and, on hovering a token, what the model expected there against what
// stands there. Read from Trace::predictions (CaptureOptions::position_top_k).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/formats/trace.h"

namespace difflens::app {

struct Candidate {
  float probability = 0;
  std::string text;  // the piece as the app shows it (viz::display_token, spaces visible)
};

// "89.0 % ␣the": one candidate as the "next after" line lists it.
std::string candidate_text(const Candidate& c);

// Up to n likeliest next tokens after position `pos`: from the trace's predictions, or for the last
// position from its next-token top-k; empty when the trace keeps neither for `pos`.
std::vector<Candidate> candidates_after(const Trace& t, int64_t pos, size_t n);

// The Text view's and the exported page's line "next after 12:   89.0 % 1   2.6 % 2 ...": the n likeliest
// after `pos`, as many as `fits` accepts (all without it); "" when the trace keeps no prediction for `pos`.
std::string next_after_line(const Trace& t, int64_t pos, size_t n = 5,
                            const std::function<bool(const std::string&)>& fits = nullptr);

// Hovering token `pos`: "expected here: '␣the' 41.0 %, '␣a' 12.3 %, '␣code' 3.1 %\nhere: '␣code' 3.1 %,
// rank 3" (the `n` likeliest after pos − 1, then the token that stands at pos: its probability and rank).
// "" for the first token (nothing precedes it) and for positions whose prediction the trace does not keep.
std::string expected_here(const Trace& t, int64_t pos, size_t n = 3);

}  // namespace difflens::app
