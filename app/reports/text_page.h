// The Text view as a page to share: one self-contained HTML file (its style, script and data inline: it
// loads nothing from the network) with the prompt's tokens and both models' exact attention weights for
// the chosen layers, showing the prompt shaded by the query's attention with hover-to-query, switches for
// the model, layer, head, direction and scale, and legends, in any browser; with the traces' predictions
// (CaptureOptions::position_top_k) also each model's top 5 after the query and, on hovering a token, what the
// model expected there (app/reports/prediction_text's words). Opened with "#selftest" the page
// drives itself (switches, a hover) and writes what it showed into <pre id="selftest-result"> for tests.
//
// Size: the page holds each map it embeds as a float32 lower triangle (T(T+1)/2 values, base64), so a map
// of T tokens costs about 2.7·T² bytes. What it holds, in order, until PageOptions::max_bytes: each model's
// mean over all layers, the chosen layers' means and the selected heads (all required: a page that cannot
// hold them is refused with the numbers), then the chosen layers' other heads, taken in turns between the
// models (those left out are named on the page and in the report). No LibTorch, no GL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/token_weights.h"
#include "core/formats/trace.h"

namespace difflens::app {

struct PageOptions {
  std::vector<int> layers;                     // the layers whose heads the page holds (empty: `layer` alone)
  int layer = 0;                               // the layer shown first (must be among `layers`)
  int head[2] = {0, 0};                        // each model's head shown first
  int64_t query = -1;                          // the query shown first (-1: the last token)
  int64_t answer_begin = -1, answer_end = -1;  // the answer span [begin, end), underlined (-1: none)
  HeadPool pool = HeadPool::Head;
  WeightDirection direction = WeightDirection::FromQuery;
  int scale = 1;  // viz::ValueScale: 0 linear, 1 sqrt, 2 log
  bool shared_scale = false;
  size_t max_bytes = size_t{64} << 20;  // bound on the embedded weights (their base64 text)
};

struct PageReport {
  size_t bytes = 0;                   // the whole page
  size_t weight_bytes = 0;            // the embedded maps' part of it
  int maps = 0;                       // maps embedded (heads and means, both models)
  std::vector<std::string> left_out;  // "baseline-small layer 1: heads 5, 6, 7" (kept under max_bytes)
};

// The base64 bytes one embedded map of T tokens takes.
size_t page_map_bytes(int64_t T);

// One or two traces of the same prompt (the same token ids). Throws Error for no trace, traces of different
// tokens, a layer or head not in a trace, a query or answer outside the prompt, or a page that cannot hold
// the required maps within max_bytes (the message gives the size needed and the bound).
std::string text_page_html(const std::vector<const Trace*>& traces, const PageOptions& options,
                           PageReport* report = nullptr);

// For tests and tools: the JSON the page embeds (the text inside <script id="difflens-data">), and an
// embedded map decoded back to its T(T+1)/2 floats (row i's keys 0..i start at i(i+1)/2). Throw Error on a
// file that is not such a page.
std::string page_data_json(const std::string& html);
std::vector<float> decode_page_map(const std::string& base64, int64_t T);

}  // namespace difflens::app
