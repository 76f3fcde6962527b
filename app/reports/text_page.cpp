// The shareable page of the Text view (see text_page.h).
#include "app/reports/text_page.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "app/reports/prediction_text.h"
#include "core/formats/error.h"
#include "core/formats/tiles.h"
#include "page_files.h"  // generated: app/reports/page/page.js and page.css (cmake/embed_text.cmake)
#include "viz/text_shade.h"
#include "viz/token_text.h"
#include "viz/utf8.h"

namespace difflens::app {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kB64[v & 63] : '=';
  }
  return out;
}

std::string hex(viz::Rgb8 c) {
  char s[8];
  std::snprintf(s, sizeof s, "#%02x%02x%02x", c.r, c.g, c.b);
  return s;
}

std::string model_name(const Trace& t) {
  return t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
}

bool has_layer(const Trace& t, int layer) {
  return std::any_of(t.layers.begin(), t.layers.end(), [&](const LayerTrace& l) { return l.index == layer; });
}

// One head's whole map as its lower triangle (rows 0..T-1, keys 0..i), read in blocks of rows (a block's
// tile spans only the keys its rows see, so memory stays near the triangle's own).
std::vector<float> lower_triangle(const Trace& t, int layer, int head) {
  const int64_t T = t.length(), block = 128;
  std::vector<float> out(static_cast<size_t>(T * (T + 1) / 2));
  size_t k = 0;
  for (int64_t r0 = 0; r0 < T; r0 += block) {
    const int64_t rows = std::min(block, T - r0), cols = r0 + rows;
    const AttentionTile tile = attention_tile(t, layer, head, r0, rows, 0, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j <= r0 + i; ++j) out[k++] = tile.a[static_cast<size_t>(i * cols + j)];
  }
  return out;
}

// The mean of maps summed in double in the order token_weights sums them, divided and cast as it does, so
// the page's means equal the Text view's weights bit for bit.
struct MeanMap {
  std::vector<double> sum;
  int count = 0;
  void add(const std::vector<float>& m) {
    if (sum.empty()) sum.assign(m.size(), 0.0);
    for (size_t i = 0; i < m.size(); ++i) sum[i] += m[i];
    ++count;
  }
  std::vector<float> mean() const {
    std::vector<float> out(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) out[i] = static_cast<float>(sum[i] / count);
    return out;
  }
};

std::string list_heads(const std::vector<int>& heads) {
  std::string out;
  for (size_t i = 0; i < heads.size(); ++i) out += (i ? ", " : "") + std::to_string(heads[i]);
  return out;
}

}  // namespace

size_t page_map_bytes(int64_t T) {
  const size_t floats = static_cast<size_t>(T) * static_cast<size_t>(T + 1) / 2;
  return (floats * 4 + 2) / 3 * 4;
}

std::string text_page_html(const std::vector<const Trace*>& traces, const PageOptions& o,
                           PageReport* report) {
  if (traces.empty() || traces.size() > 2 || !traces[0] || (traces.size() == 2 && !traces[1]))
    throw Error("a page shows one or two traces");
  const Trace& first = *traces[0];
  const int64_t T = first.length();
  if (T == 0) throw Error("the trace has no tokens: nothing to show");
  if (traces.size() == 2 && traces[1]->token_ids != first.token_ids)
    throw Error("the two traces hold different tokens (" + std::to_string(T) + " and " +
                std::to_string(traces[1]->length()) +
                "): a page shows one text, so give traces of the same prompt and tokenizer");
  const int64_t query = o.query < 0 ? T - 1 : o.query;
  if (query >= T)
    throw Error("query token " + std::to_string(query) + " is outside the " + std::to_string(T) +
                "-token prompt");
  const bool answered = o.answer_begin >= 0 && o.answer_end > o.answer_begin;
  if (answered && o.answer_end > T)
    throw Error("the answer " + viz::token_range(o.answer_begin, o.answer_end) + " lies outside the " +
                std::to_string(T) + "-token prompt");
  std::vector<int> layers = o.layers.empty() ? std::vector<int>{o.layer} : o.layers;
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  if (std::find(layers.begin(), layers.end(), o.layer) == layers.end())
    throw Error("layer " + std::to_string(o.layer) + " is shown first but is not among the page's layers");

  // What each model must carry (means, the selected head), then the other heads while they fit.
  const size_t per_map = page_map_bytes(T);
  struct Want {
    size_t model;
    int layer, head;  // head -1: the layer's mean; layer -1: the mean over all layers
  };
  std::vector<Want> required;
  std::vector<std::vector<Want>> optional_of(traces.size());  // per model, in layer and head order
  for (size_t m = 0; m < traces.size(); ++m) {
    const Trace& t = *traces[m];
    required.push_back({m, -1, -1});
    for (int l : layers) {
      if (!has_layer(t, l))
        throw Error(model_name(t) + ": layer " + std::to_string(l) + " is not in this trace");
      const std::vector<int> heads = kept_heads(t, l);
      if (heads.empty())
        throw Error(model_name(t) + ": this trace kept no map of layer " + std::to_string(l));
      required.push_back({m, l, -1});
      const int selected = o.head[m];
      if (l == o.layer) {
        if (std::find(heads.begin(), heads.end(), selected) == heads.end())
          throw Error(model_name(t) + ": head " + std::to_string(selected) + " of layer " +
                      std::to_string(l) + " is not in this trace (kept: " + list_heads(heads) + ")");
        required.push_back({m, l, selected});
      }
      for (int h : heads)
        if (l != o.layer || h != selected) optional_of[m].push_back({m, l, h});
    }
  }
  const size_t need = required.size() * per_map;
  if (need > o.max_bytes) {
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "a page of %lld tokens needs %.1f MB for each model's means and selected head (%zu maps of "
                  "%.1f MB: a map holds T(T+1)/2 exact weights), over the %.1f MB bound: raise the bound "
                  "(--max-mb) or choose fewer layers or a shorter prompt",
                  static_cast<long long>(T), need / 1048576.0, required.size(), per_map / 1048576.0,
                  o.max_bytes / 1048576.0);
    throw Error(msg);
  }
  // The other heads taken in turns, one model's then the other's, so a tight bound shares them fairly.
  std::vector<Want> optional;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (const auto& list : optional_of)
      if (i < list.size()) {
        optional.push_back(list[i]);
        any = true;
      }
    if (!any) break;
  }
  size_t room = o.max_bytes - need;
  std::vector<Want> kept = required, dropped;
  for (const Want& w : optional)
    if (per_map <= room) {
      kept.push_back(w);
      room -= per_map;
    } else {
      dropped.push_back(w);
    }

  nlohmann::json data;
  data["format"] = "difflens-page 1";
  data["tokens"] = viz::display_tokens(first.tokens, viz::Spaces::Visible);
  data["query"] = query;
  data["answer"] =
      answered ? std::vector<int64_t>{o.answer_begin, o.answer_end} : std::vector<int64_t>{-1, -1};
  data["direction"] = o.direction == WeightDirection::FromQuery ? "from" : "to";
  data["pool"] = o.pool == HeadPool::Head ? "head" : o.pool == HeadPool::LayerMean ? "layer" : "all";
  data["layer"] = o.layer;
  data["scale"] = std::array<const char*, 3>{"linear", "sqrt", "log"}[std::clamp(o.scale, 0, 2)];
  data["shared_scale"] = o.shared_scale;
  data["selftest_token"] = answered ? o.answer_begin : T / 2;
  // The hover a screenshot of #selftest ends on: a token the kept query is not, whose own row shows.
  data["selftest_hover"] = query > 1 ? query - 1 : query;
  nlohmann::json shade;
  shade["steps"] = viz::kTextShadeSteps;
  shade["log_decades"] = viz::kLogDecades;
  for (bool neg : {false, true})
    for (int k = 0; k < viz::kTextShadeSteps; ++k) {
      const viz::TextShade s = viz::text_shade_step(k, neg);
      shade[neg ? "neg" : "pos"].push_back(hex(s.background));
      shade[neg ? "neg_ink" : "pos_ink"].push_back(hex(s.ink));
    }
  data["shade"] = shade;

  PageReport rep;
  for (size_t m = 0; m < traces.size(); ++m) {
    const Trace& t = *traces[m];
    nlohmann::json jm;
    jm["name"] = model_name(t);
    jm["what"] = t.config.is_diff() ? "A1 \xe2\x88\x92 \xce\xbb A2" : "A";
    jm["diverging"] = t.config.is_diff();
    jm["head"] = o.head[m];
    // What the model expected: after each token (its top 5, as the Text view's line) and at each token (the
    // hover's "expected here"); left out when the trace keeps no prediction (a bundle captured without).
    std::vector<std::string> next(static_cast<size_t>(T)), here(static_cast<size_t>(T));
    bool any_next = false, any_here = false;
    for (int64_t i = 0; i < T; ++i) {
      next[static_cast<size_t>(i)] = next_after_line(t, i);
      any_next |= !next[static_cast<size_t>(i)].empty();
      here[static_cast<size_t>(i)] = expected_here(t, i);
      any_here |= !here[static_cast<size_t>(i)].empty();
    }
    if (any_next) jm["next"] = next;
    if (any_here) jm["here"] = here;
    jm["layers"] = nlohmann::json::array();
    MeanMap all;
    for (const LayerTrace& lt : t.layers) {
      const bool on_page = std::find(layers.begin(), layers.end(), lt.index) != layers.end();
      nlohmann::json jl;
      MeanMap mean;
      std::vector<int> left_out;
      jl["maps"] = nlohmann::json::object();
      for (int h : kept_heads(t, lt.index)) {
        const std::vector<float> map = lower_triangle(t, lt.index, h);
        all.add(map);
        if (!on_page) continue;
        mean.add(map);
        const bool keep = std::any_of(kept.begin(), kept.end(), [&](const Want& w) {
          return w.model == m && w.layer == lt.index && w.head == h;
        });
        if (keep) {
          jl["maps"][std::to_string(h)] = base64(map.data(), map.size() * sizeof(float));
          ++rep.maps;
        } else {
          left_out.push_back(h);
        }
      }
      if (!on_page) continue;
      const std::vector<float> mm = mean.mean();
      jl["index"] = lt.index;
      jl["mean"] = base64(mm.data(), mm.size() * sizeof(float));
      jl["mean_heads"] = mean.count;
      jl["left_out"] = left_out;
      ++rep.maps;
      if (!left_out.empty())
        rep.left_out.push_back(model_name(t) + " layer " + std::to_string(lt.index) + ": heads " +
                               list_heads(left_out));
      jm["layers"].push_back(jl);
    }
    const std::vector<float> am = all.mean();
    jm["all"] = base64(am.data(), am.size() * sizeof(float));
    jm["all_heads"] = all.count;
    ++rep.maps;
    data["models"].push_back(jm);
  }
  rep.weight_bytes = static_cast<size_t>(rep.maps) * per_map;

  // Inside <script>, "</script>" would end the element and "<!--<script>" keep it from ending: no <, > or &
  // reaches the page raw (they only occur inside JSON strings, where \u003c and the like mean the same).
  const std::string raw = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string json;
  json.reserve(raw.size());
  for (char ch : raw) {
    if (ch == '<')
      json += "\\u003c";
    else if (ch == '>')
      json += "\\u003e";
    else if (ch == '&')
      json += "\\u0026";
    else
      json += ch;
  }

  std::string names, intervened;
  for (const Trace* t : traces) {
    names += (names.empty() ? "" : " and ") + model_name(*t);
    const std::string list = t->written_interventions();
    if (!list.empty()) intervened += (intervened.empty() ? "" : "; ") + model_name(*t) + " under " + list;
  }
  std::string left_note;
  for (const std::string& s : rep.left_out) left_note += (left_note.empty() ? "" : "; ") + s;
  std::string html;
  html.reserve(json.size() + 32768);
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<meta name=\"generator\" content=\"DiffLens\">\n";
  html += "<title>DiffLens: " + viz::xml_text(names) + ", " + std::to_string(T) + " tokens</title>\n";
  html += "<style>" + std::string(page_files::page_css) + "</style>\n</head>\n<body>\n<header>\n";
  html +=
      "<h1>Attention of " + viz::xml_text(names) + " over a " + std::to_string(T) + "-token prompt</h1>\n";
  if (!intervened.empty())  // a run under interventions says so, as the app's status line does
    html += "<p class=\"intervened\">INTERVENED: " + viz::xml_text(intervened) + "</p>\n";
  html += R"(<div class="controls">
<label>show <select id="show"><option value="both">both models</option></select></label>
<span><label><input type="radio" name="dir" id="dir-from"> from the query</label>
<label><input type="radio" name="dir" id="dir-to"> to this token (who reads it)</label></span>
<label><select id="layer"></select></label>
<label><select id="pool"><option value="head">the selected head</option>
<option value="layer">mean over the layer's heads</option><option value="all">mean over all layers</option></select></label>
<span id="heads"></span>
<label>scale <select id="scale"><option value="linear">linear</option><option value="sqrt">sqrt</option><option value="log">log</option></select></label>
<label><input type="checkbox" id="shared"> one scale</label>
</div>
<div class="note">Hover a token: it becomes the query while the pointer stays on it; a click keeps it. Orange: the
query; green box: the answer. Each token's background is the weight: blue positive, red negative (DIFF's
A1 &minus; &lambda;A2 can push a token away), white 0. Means weigh every head equally; DIFF's heads each with its own &lambda;.)";
  if (!left_note.empty()) html += "<br>Left out to keep the page small: " + viz::xml_text(left_note) + ".";
  html += "</div>\n</header>\n<main id=\"panels\"></main>\n<pre id=\"selftest-result\"></pre>\n";
  html += "<script type=\"application/json\" id=\"difflens-data\">" + json + "</script>\n";
  html += "<script>" + std::string(page_files::page_js) + "</script>\n</body>\n</html>\n";
  rep.bytes = html.size();
  rep.left_out.shrink_to_fit();
  if (report) *report = rep;
  return html;
}

std::string page_data_json(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"difflens-data\">";
  const size_t a = html.find(open);
  const size_t b = a == std::string::npos ? a : html.find("</script>", a);
  if (b == std::string::npos) throw Error("not a DiffLens page: no embedded data");
  return html.substr(a + open.size(), b - a - open.size());
}

std::vector<float> decode_page_map(const std::string& text, int64_t T) {
  int value[256];
  std::fill(std::begin(value), std::end(value), -1);
  for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kB64[i])] = i;
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = value[static_cast<unsigned char>(c)];
    if (v < 0) throw Error("not base64 text in the page's data");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  const size_t n = static_cast<size_t>(T) * static_cast<size_t>(T + 1) / 2;
  if (bytes.size() != n * sizeof(float))
    throw Error("a map of the page holds " + std::to_string(bytes.size()) + " bytes, not the " +
                std::to_string(n * sizeof(float)) + " of " + std::to_string(T) + " tokens");
  std::vector<float> out(n);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace difflens::app
