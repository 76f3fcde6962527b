// The Explain view's slides: one head of each model for one query, step by step (core/formats/explain), drawn
// as 1920 x 1080 scenes that the app shows in its Explain tab and writes as PNG and SVG for slides. No GL.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/formats/explain.h"
#include "viz/figure.h"

namespace difflens::app {

constexpr int kExplainSteps = 6;

struct ExplainSide {
  std::string model;                  // name shown above its column
  std::vector<std::string> tokens;    // its tokens as display labels (viz/token_text.h), for key labels
  std::vector<double> layer_lambdas;  // DIFF: λ of every layer (step 4); empty otherwise
  std::vector<double> token_lambdas;  // DIFF V2: λ of the explained head at tokens 0..query (step 4)
  std::optional<HeadExplain> head;    // empty: `why` says what is missing
  std::string interventions;          // the run's interventions as written ("lambda=0, ..."), "" as trained
  std::string why;
};

struct ExplainInput {
  ExplainSide diff, base;                      // left and right columns
  TokenSpan answer{-1, -1}, question{-1, -1};  // marked spans (begin < 0: none)
  // How this reader marks an answer, said where none is marked: the app's gesture, or the command's flag.
  std::string answer_hint = "mark an answer span (right-drag on the tokens)";
};

// The one-line title of step 1..kExplainSteps.
const char* explain_step_title(int step);

// The slide of `step` (1..kExplainSteps), width x height pixels (at least 480 x 270). Its text is laid out
// at least `min_text_px` high (0: as designed for 1920 x 1080, scaled with the slide): a slide shown on a
// small screen keeps readable text and gives its charts what is left. Throws Error for a step outside
// 1..kExplainSteps.
viz::FigureScene explain_slide(const ExplainInput& in, int step, int width = 1920, int height = 1080,
                               float min_text_px = 0);

// The explanation of one slot's trace: its head for the query, or why there is none.
ExplainSide explain_side(const std::string& model, const Trace* trace, int layer, int head, int64_t query);

// Writes every step as DIR/explain-step-K.png and .svg at width x height; returns the files written.
std::vector<std::string> export_explain_slides(const ExplainInput& in, const std::string& dir,
                                               int width = 1920, int height = 1080);

}  // namespace difflens::app
