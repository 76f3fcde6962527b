// Slides of the Explain view (app/reports/explain_slides.h). Laid out on a 1920 x 1080 grid and scaled to the
// size asked for; every number drawn comes from core/formats/explain's HeadExplain.
#include "app/reports/explain_slides.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "viz/colormap.h"
#include "viz/export.h"
#include "viz/text_shade.h"
#include "viz/token_text.h"

namespace difflens::app {
namespace {

using viz::Rgb8;

const Rgb8 kInk{30, 30, 30}, kMuted{110, 110, 110}, kAxis{150, 150, 150};
// The models' identity colours (viz::kModelColours: never the sign scale's blue or red).
const Rgb8 kDiff = viz::kModelColours[0], kBase = viz::kModelColours[1], kShared{175, 175, 175},
           kExcess{226, 135, 28};
const Rgb8 kAnswer{225, 243, 221}, kQuestion{252, 236, 246};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Token text for a label: the piece, cut to 14 characters, quoted, with its position.
std::string key_label(const std::vector<std::string>& tokens, int64_t j) {
  std::string t = j >= 0 && j < static_cast<int64_t>(tokens.size()) ? tokens[static_cast<size_t>(j)] : "?";
  if (t.size() > 14) t = t.substr(0, 13) + "…";
  return "'" + t + "' " + std::to_string(j);
}

// The scene, drawn in 1920 x 1080 coordinates scaled to its size. Text sizes are multiplied by k (>= 1): a
// slide shown small keeps its text readable, and the layout makes room for it (k() scales the lines).
class Canvas {
 public:
  Canvas(viz::FigureScene& scene, float k = 1)
      : sc_(scene), s_(static_cast<float>(scene.width) / 1920.0f), k_(std::max(1.0f, k)) {}
  float k() const { return k_; }
  void text(float x, float y, const std::string& t, float px, Rgb8 c = kInk) {
    viz::FigureScene::Text tx;
    tx.x = static_cast<int>(std::lround(x * s_));
    tx.y = static_cast<int>(std::lround(y * s_));
    tx.text = t;
    tx.px = px * k_ * s_;
    tx.color = c;
    sc_.texts.push_back(tx);
  }
  void rect(float x, float y, float w, float h, Rgb8 c, bool cell = false) {
    viz::FigureScene::Rect r;
    r.x = static_cast<int>(std::floor(x * s_));
    r.y = static_cast<int>(std::floor(y * s_));
    r.w = std::max(1, static_cast<int>(std::ceil((x + w) * s_)) - r.x);
    r.h = std::max(1, static_cast<int>(std::ceil((y + h) * s_)) - r.y);
    r.color = c;
    r.cell = cell;
    sc_.rects.push_back(r);
  }
  int text_width(const std::string& t, float px) const {
    return static_cast<int>(viz::FigureFont::standard().text_width(t, px * k_ * s_) / s_);
  }
  // `t` broken at its spaces into lines no wider than w at px.
  std::vector<std::string> wrap(const std::string& t, float px, float w) const {
    std::vector<std::string> lines;
    std::string line;
    size_t from = 0;
    while (from < t.size()) {
      size_t end = t.find(' ', from);
      if (end == std::string::npos) end = t.size();
      const std::string word = t.substr(from, end - from);
      const std::string wider = line.empty() ? word : line + " " + word;
      if (!line.empty() && text_width(wider, px) > w) {
        lines.push_back(line);
        line = word;
      } else {
        line = wider;
      }
      from = end + 1;
    }
    if (!line.empty()) lines.push_back(line);
    return lines;
  }

 private:
  viz::FigureScene& sc_;
  float s_;
  float k_;
};

struct Bar {
  double value = 0;
  Rgb8 color = kDiff;
  double shared = 0;  // step 5: the part of the bar drawn grey (cancelled)
};

// A bar chart in the box (x, y, w, h): a title line, then bars around a zero line (signed: zero in the
// middle), the largest |value| printed at the axis, and labels under the bars in `labelled`. Keys in the
// answer / question spans get a tinted band behind them.
void bar_chart(Canvas& cv, float x, float y, float w, float h, const std::string& title,
               const std::vector<Bar>& bars, bool signed_axis,
               const std::vector<std::pair<size_t, std::string>>& labelled = {},
               const std::vector<Rgb8>& bands = {}) {
  const float k = cv.k();
  const std::vector<std::string> title_lines = cv.wrap(title, 24, w);
  for (size_t i = 0; i < title_lines.size(); ++i)
    cv.text(x, y + 30 * k * static_cast<float>(i), title_lines[i], 24);
  const float title_h = 30 * k * static_cast<float>(title_lines.size()) + 6;
  const float below = (labelled.empty() ? 24 : 70) * k;  // the labels' lines under the bars
  const float axis_w = 70 * k, plot_w = w - axis_w;
  const float top = y + title_h, plot_h = std::max(20.0f, h - title_h - below);
  const float px0 = x + axis_w;
  double m = 0;
  for (const Bar& b : bars) m = std::max(m, std::fabs(b.value));
  if (m <= 0) m = 1;
  const float zero = signed_axis ? top + plot_h / 2 : top + plot_h;
  const float unit = static_cast<float>((signed_axis ? plot_h / 2 : plot_h) / m);
  const size_t n = std::max<size_t>(bars.size(), 1);
  const float bw = plot_w / static_cast<float>(n), gap = bw > 6 ? bw * 0.15f : 0.0f;
  for (size_t i = 0; i < bands.size() && i < bars.size(); ++i)
    if (bands[i].r != 255 || bands[i].g != 255 || bands[i].b != 255)
      cv.rect(px0 + bw * static_cast<float>(i), top, bw, plot_h, bands[i]);
  cv.rect(px0, zero, plot_w, 1.5f, kAxis);
  cv.rect(px0 - 1, top, 1.5f, plot_h, kAxis);
  cv.text(x, top - 8 * k, fmt("%.3g", m), 18, kMuted);
  cv.text(x, zero - 10 * k, "0", 18, kMuted);
  if (signed_axis) cv.text(x, top + plot_h - 14 * k, fmt("%.3g", -m), 18, kMuted);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const float bx = px0 + bw * static_cast<float>(i) + gap / 2, bwi = std::max(1.0f, bw - gap);
    const float len = static_cast<float>(std::fabs(b.value)) * unit;
    const float shared = static_cast<float>(std::max(0.0, std::min(b.shared, std::fabs(b.value)))) * unit;
    if (b.value >= 0) {
      cv.rect(bx, zero - len, bwi, len, b.color, true);
      if (shared > 0) cv.rect(bx, zero - shared, bwi, shared, kShared, true);
    } else {
      cv.rect(bx, zero, bwi, len, b.color, true);
    }
  }
  // Labels on up to three lines, each on the first line where it does not overlap its left neighbour
  // (a label that fits nowhere is left out).
  float last_end[3] = {-1e9f, -1e9f, -1e9f};
  for (const auto& [i, label] : labelled) {
    if (i >= bars.size()) continue;
    const float cx = px0 + bw * (static_cast<float>(i) + 0.5f);
    const int lw = cv.text_width(label, 17);
    const float lx = std::clamp(cx - lw / 2.0f, px0, std::max(px0, px0 + plot_w - lw));
    int line = 0;
    while (line < 3 && lx <= last_end[line] + 10 * k) ++line;
    if (line == 3) continue;
    cv.rect(cx, top + plot_h + 2, 1, 6.0f + 20.0f * k * line, kMuted);
    cv.text(lx, top + plot_h + 8 + 20.0f * k * line, label, 17, kMuted);
    last_end[line] = lx + lw;
  }
}

// The indices (into e.keys) of the `n` keys with the largest |values|, plus the query itself, in key order.
std::vector<size_t> top_keys(const std::vector<double>& values, size_t n) {
  std::vector<size_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return std::fabs(values[a]) > std::fabs(values[b]); });
  idx.resize(std::min(n, idx.size()));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<std::pair<size_t, std::string>> labels_for(const HeadExplain& e,
                                                       const std::vector<std::string>& tokens,
                                                       const std::vector<double>& values, size_t n = 3) {
  std::vector<std::pair<size_t, std::string>> out;
  for (size_t k : top_keys(values, n)) out.push_back({k, key_label(tokens, e.keys[k])});
  return out;
}

std::vector<Rgb8> span_bands(const HeadExplain& e, const ExplainInput& in) {
  std::vector<Rgb8> out;
  for (int64_t j : e.keys)
    out.push_back(j >= in.answer.begin && j < in.answer.end       ? kAnswer
                  : j >= in.question.begin && j < in.question.end ? kQuestion
                                                                  : Rgb8{255, 255, 255});
  return out;
}

std::vector<Bar> plain_bars(const std::vector<double>& v, Rgb8 c) {
  std::vector<Bar> out;
  for (double x : v) out.push_back({x, c, 0});
  return out;
}
std::vector<Bar> plain_bars(const std::vector<float>& v, Rgb8 c) {
  return plain_bars(std::vector<double>(v.begin(), v.end()), c);
}
// A signed weight's bars in the sign colours of every view (blue above zero, red below: core/FORMATS.md).
std::vector<Bar> signed_bars(const std::vector<double>& v) {
  std::vector<Bar> out;
  for (double x : v) out.push_back({x, x >= 0 ? viz::kTextPositive : viz::kTextNegative, 0});
  return out;
}

// Several vectors side by side in one chart (e.g. q1 | q2), separated by an empty bar.
std::vector<Bar> groups(const std::vector<std::vector<float>>& vs, Rgb8 c) {
  std::vector<Bar> out;
  for (size_t g = 0; g < vs.size(); ++g) {
    if (g) out.push_back({0, c, 0});
    for (float x : vs[g]) out.push_back({x, c, 0});
  }
  return out;
}

double length(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// One model's column of the slide of `step`.
void draw_column(Canvas& cv, const ExplainInput& in, const ExplainSide& side, bool diff_column, int step,
                 float x, float w) {
  const float k = cv.k();
  float y = 145 * k + 25;
  cv.text(x, y, side.model, 30, diff_column ? kDiff : kBase);
  y += 50 * k;
  if (!side.head) {
    cv.text(x, y, side.why.empty() ? "no trace" : side.why, 22, kMuted);
    return;
  }
  const HeadExplain& e = *side.head;
  const Rgb8 col = diff_column ? kDiff : kBase;  // the slot's colour, as the title's and every other view's
  const char* col_name = diff_column ? "purple" : "teal";
  const auto& tk = side.tokens;
  // Rows at the same heights in both columns, so the two models' rows line up; with larger text (k > 1) they
  // share what is left of the slide's height above two note lines.
  const float rows = step == 1 || step == 6 ? 3.0f : 2.0f;
  const float row_h = std::min(step == 1 || step == 6 ? 260.0f : 330.0f,
                               (1080.0f - (145 * k + 25 + 50 * k) - 2 * 28 * k - 16) / rows);
  const std::string q = key_label(tk, e.query);
  // A note under a chart, wrapped at word boundaries to the column's width; returns the y below it.
  auto note = [&](float yy, const std::string& t) {
    for (const std::string& line : cv.wrap(t, 21, w)) {
      cv.text(x, yy, line, 21, kMuted);
      yy += 28 * k;
    }
    return yy + 2 * k;
  };
  switch (step) {
    case 1: {
      const std::vector<double>& weight = e.diff ? e.a : e.a1;
      const std::vector<size_t> top = top_keys(weight, 3);
      std::string names;
      std::vector<std::vector<float>> k1s, k2s;
      for (size_t k : top) {
        names += (names.empty() ? "" : ", ") + key_label(tk, e.keys[k]);
        k1s.push_back(e.k1[k]);
        if (e.diff) k2s.push_back(e.k2[k]);
      }
      if (e.diff) {
        bar_chart(cv, x, y, w, row_h,
                  "query " + q + ":  q1 | q2  (rotated, /√d; " + std::to_string(e.d) + " each)",
                  groups({e.q1, e.q2}, col), true);
        if (e.v2) {  // one key per token, read by both queries
          bar_chart(cv, x, y + row_h, w, row_h, "k of the keys A1 − λA2 weighs most: " + names,
                    groups(k1s, col), true);
          note(y + 2 * row_h + 6, "|q1| = " + fmt("%.3f", length(e.q1)) +
                                      ",  |q2| = " + fmt("%.3f", length(e.q2)) +
                                      ": two queries, one shared key and value per token, two maps");
        } else {
          bar_chart(cv, x, y + row_h, w, row_h, "k1 of the keys A1 − λA2 weighs most: " + names,
                    groups(k1s, col), true);
          bar_chart(cv, x, y + 2 * row_h, w, row_h, "k2 of the same keys", groups(k2s, col), true);
          note(y + 3 * row_h + 6, "|q1| = " + fmt("%.3f", length(e.q1)) +
                                      ",  |q2| = " + fmt("%.3f", length(e.q2)) +
                                      ": two queries, two keys per token, two maps");
        }
      } else {
        bar_chart(cv, x, y, w, row_h, "query " + q + ":  q  (rotated, /√d; " + std::to_string(e.d) + ")",
                  plain_bars(e.q1, col), true);
        bar_chart(cv, x, y + row_h, w, row_h, "k of the keys A weighs most: " + names, groups(k1s, col),
                  true);
        note(y + 2 * row_h + 6, "|q| = " + fmt("%.3f", length(e.q1)) + ": one query, one key per token");
      }
      break;
    }
    case 2:
      if (e.diff) {
        bar_chart(cv, x, y, w, row_h, "logits 1 = q1·k1/√d over " + std::to_string(e.keys.size()) + " keys",
                  plain_bars(e.logits1, col), true, labels_for(e, tk, e.logits1), span_bands(e, in));
        bar_chart(cv, x, y + row_h, w, row_h, "logits 2 = q2·k2/√d", plain_bars(e.logits2, col), true,
                  labels_for(e, tk, e.logits2), span_bands(e, in));
      } else {
        bar_chart(cv, x, y, w, row_h, "logits = q·k/√d over " + std::to_string(e.keys.size()) + " keys",
                  plain_bars(e.logits1, col), true, labels_for(e, tk, e.logits1), span_bands(e, in));
      }
      break;
    case 3: {
      auto peak = [&](const std::vector<double>& a) {
        const size_t k = top_keys(a, 1)[0];
        return fmt("%.3f", a[k]) + " on " + key_label(tk, e.keys[k]);
      };
      if (e.diff) {
        bar_chart(cv, x, y, w, row_h, "A1 = softmax(logits 1): largest " + peak(e.a1), plain_bars(e.a1, col),
                  false, labels_for(e, tk, e.a1), span_bands(e, in));
        bar_chart(cv, x, y + row_h, w, row_h, "A2 = softmax(logits 2): largest " + peak(e.a2),
                  plain_bars(e.a2, col), false, labels_for(e, tk, e.a2), span_bands(e, in));
        note(y + 2 * row_h + 6, "each row sums to 1");
      } else {
        bar_chart(cv, x, y, w, row_h, "A = softmax(logits): largest " + peak(e.a1), plain_bars(e.a1, col),
                  false, labels_for(e, tk, e.a1), span_bands(e, in));
        note(y + row_h + 6, "the row sums to 1: every key gets some attention");
      }
      break;
    }
    case 4:
      if (e.diff && e.lambda_set) {  // an intervention replaced λ: the learned value, then the one in force
        cv.text(x, y,
                "λ as trained: " + fmt("%.4f", e.lambda_own) +
                    (e.v2 ? "  = σ(" + fmt("%.4f", e.lambda_logit) + ")"
                          : "  = " + fmt("%.4f", e.lambda_exp1) + " − " + fmt("%.4f", e.lambda_exp2) + " + " +
                                fmt("%.4f", e.lambda_init)),
                30, kMuted);
        cv.text(x, y + 50 * k, "this run: λ = " + fmt("%.4f", e.lambda) + ", set by an intervention", 30,
                col);
        cv.text(x, y + 100 * k,
                e.lambda == 0 ? "with λ = 0 nothing is subtracted: A = A1, which sums to 1"
                              : "steps 5 and 6 subtract λ·A2 with the value set",
                24, kMuted);
        note(std::min(y + 540, 1080 - 60 * k),
             "interventions: " + side.interventions + " (the Why view sets and clears them)");
      } else if (e.v2) {  // λ of this head and query token: a sigmoid of one dot product
        cv.text(x, y, "λ = σ(x_t · w_λ,h): this token's and this head's own", 30);
        cv.text(x, y + 50 * k,
                "   = σ(" + fmt("%.4f", e.lambda_logit) + ") = 1 / (1 + e^" + fmt("%.4f", -e.lambda_logit) +
                    ") = " + fmt("%.4f", e.lambda),
                30, col);
        cv.text(x, y + 100 * k,
                "x_t: the layer's normed input at the query token; w_λ,h: row " + std::to_string(e.head) +
                    " of lambda_proj",
                24, kMuted);
        const std::vector<double>& tl = side.token_lambdas;
        std::vector<Bar> lam;
        for (size_t t = 0; t < tl.size(); ++t) lam.push_back({tl[t], t + 1 == tl.size() ? col : kShared, 0});
        if (!lam.empty()) {  // labelled: the lowest and highest λ, and the query
          std::vector<size_t> at = {static_cast<size_t>(std::min_element(tl.begin(), tl.end()) - tl.begin()),
                                    static_cast<size_t>(std::max_element(tl.begin(), tl.end()) - tl.begin()),
                                    tl.size() - 1};
          std::sort(at.begin(), at.end());
          at.erase(std::unique(at.begin(), at.end()), at.end());
          std::vector<std::pair<size_t, std::string>> lab;
          for (size_t t : at)
            lab.push_back({t, key_label(side.tokens, static_cast<int64_t>(t)) + " " + fmt("%.2f", tl[t])});
          bar_chart(cv, x, y + 150 * k + 20, w, std::min(330.0f, 1080 - (y + 150 * k + 20) - 60 * k),
                    "λ of head " + std::to_string(e.head) +
                        " at every token up to the query (the query's in colour)",
                    lam, false, lab);
        }
        note(std::min(y + 540, 1080 - 60 * k),
             "λ lies in (0, 1) and changes from token to token and head to head");
      } else if (e.diff) {
        cv.text(x, y, "λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init", 30);
        cv.text(x, y + 50 * k,
                "   = " + fmt("%.4f", e.lambda_exp1) + " − " + fmt("%.4f", e.lambda_exp2) + " + " +
                    fmt("%.4f", e.lambda_init) + " = " + fmt("%.4f", e.lambda),
                30, col);
        cv.text(x, y + 100 * k,
                "λ_init(" + std::to_string(e.layer) + ") = 0.8 − 0.6·exp(−0.3·" + std::to_string(e.layer) +
                    ") = " + fmt("%.4f", e.lambda_init),
                24, kMuted);
        std::vector<Bar> lam;
        std::vector<std::pair<size_t, std::string>> lab;
        bool negative = false;
        for (size_t l = 0; l < side.layer_lambdas.size(); ++l) {
          lam.push_back({side.layer_lambdas[l], static_cast<int>(l) == e.layer ? col : kShared, 0});
          lab.push_back({l, "L" + std::to_string(l) + " " + fmt("%.3f", side.layer_lambdas[l])});
          negative |= side.layer_lambdas[l] < 0;
        }
        if (!lam.empty())
          bar_chart(
              cv, x, y + 150 * k + 20, std::min(w, 140.0f * k * static_cast<float>(lam.size()) + 70 * k),
              std::min(330.0f, 1080 - (y + 150 * k + 20) - 60 * k), "λ of every layer", lam, negative, lab);
        note(std::min(y + 540, 1080 - 60 * k),
             "λ is learned per layer, the same for every head and token of the layer");
      } else {
        cv.text(x, y, "one softmax per head:", 30);
        cv.text(x, y + 50 * k, "nothing is subtracted (λ = 0)", 30, col);
      }
      break;
    case 5: {
      const AttentionShare before = explained_share(e, e.a1, in.answer, in.question);
      const AttentionShare after = explained_share(e, e.a, in.answer, in.question);
      if (e.diff) {
        std::vector<Bar> over;
        for (size_t k = 0; k < e.keys.size(); ++k) {
          const double l2 = e.lambda * e.a2[k];
          over.push_back(e.a1[k] >= l2 ? Bar{e.a1[k], col, e.common[k]} : Bar{l2, kExcess, e.common[k]});
        }
        bar_chart(cv, x, y, w, row_h,
                  "A1 and λ·A2: grey = min(A1, λA2) cancels (" + fmt("%.3f", e.common_sum) + "), " +
                      col_name + " = A1 beyond, orange = λA2 beyond",
                  over, false, labels_for(e, tk, e.a1), span_bands(e, in));
        bar_chart(cv, x, y + row_h, w, row_h, "A = A1 − λ·A2  (sums to 1 − λ = " + fmt("%.3f", e.a_sum) + ")",
                  signed_bars(e.a), true, labels_for(e, tk, e.a), span_bands(e, in));
      } else {
        bar_chart(cv, x, y, w, row_h, "A (nothing cancels: sums to " + fmt("%.3f", e.a_sum) + ")",
                  plain_bars(e.a1, col), false, labels_for(e, tk, e.a1), span_bands(e, in));
      }
      const float ny = y + (e.diff ? 2 : 1) * row_h + 6;
      if (in.answer.begin >= 0) {
        // The noise as attention mass (share of the row's |A|) and as output share (what its keys add to o,
        // projected on o), before (A1 alone) and after the subtraction; the net share only with its budget.
        if (e.diff) {
          const float next =
              note(ny, "mass: answer (green) A1 " + fmt("%.3f", before.answer_mass) + " → A " +
                           fmt("%.3f", after.answer_mass) + ", noise A1 " + fmt("%.3f", before.noise_mass) +
                           " → A " + fmt("%.3f", after.noise_mass));
          note(next, "noise's output share A1 " + fmt("%.3f", before.noise_output) + " → A " +
                         fmt("%.3f", after.noise_output) + "; net " + fmt("%.3f", after.noise) +
                         " of budget " + fmt("%.3f", after.budget));
        } else {
          const float next = note(ny, "mass: answer (green) " + fmt("%.3f", after.answer_mass) +
                                          ", noise (keys outside the "
                                          "answer and the query) " +
                                          fmt("%.3f", after.noise_mass));
          note(next, "noise's output share " + fmt("%.3f", after.noise_output));
        }
      } else {
        note(ny, in.answer_hint + " to see the noise before and after");
      }
      break;
    }
    case 6:
      if (e.v2) {
        bar_chart(cv, x, y, w, row_h,
                  "o = (A1 − λA2)·V  (" + std::to_string(e.dv) + " wide),  |o| = " + fmt("%.4f", e.o_norm),
                  plain_bars(e.o, col), true);
        note(y + row_h + 6, "DIFF V2: no per-head norm, no scale: straight to o_proj");
      } else if (e.diff) {
        const float h3 = row_h;
        bar_chart(cv, x, y, w, h3,
                  "o = (A1 − λA2)·V  (" + std::to_string(e.dv) + " wide),  |o| = " + fmt("%.4f", e.o_norm),
                  plain_bars(e.o, col), true);
        bar_chart(cv, x, y + h3, w, h3, "RMSNorm(o)·w,  |·| = " + fmt("%.4f", e.normed_norm),
                  plain_bars(e.normed, col), true);
        bar_chart(
            cv, x, y + 2 * h3, w, h3,
            "× (1 − λ_init) = × " + fmt("%.4f", 1.0 - e.lambda_init) + ",  |·| = " + fmt("%.4f", e.out_norm),
            plain_bars(e.out, col), true);
        note(y + 3 * h3 + 6, "then o_proj mixes all heads' outputs back into the residual stream");
      } else {
        bar_chart(cv, x, y, w, row_h,
                  "o = A·V  (" + std::to_string(e.dv) + " wide),  |o| = " + fmt("%.4f", e.o_norm),
                  plain_bars(e.o, col), true);
        note(y + row_h + 6, "no norm, no scale: straight to o_proj");
      }
      break;
  }
}

}  // namespace

const char* explain_step_title(int step) {
  switch (step) {
    case 1:
      return "Queries and keys after the rotary embedding";
    case 2:
      return "Logits: each key's dot product with the query";
    case 3:
      return "Softmax: each logit row becomes attention that sums to 1";
    case 4:
      return "λ: how much of the second map is subtracted";
    case 5:
      return "A1 − λ·A2: attention both maps share cancels";
    case 6:
      return "Output: (A1 − λA2)·V, normalised per head and scaled by 1 − λ_init (DIFF V2: neither)";
  }
  return "";
}

viz::FigureScene explain_slide(const ExplainInput& in, int step, int width, int height, float min_text_px) {
  if (step < 1 || step > kExplainSteps)
    throw Error("explain: step " + std::to_string(step) + " is outside 1.." + std::to_string(kExplainSteps));
  if (width < 480 || height < 270 || width > 8192 || height > 8192)
    throw Error("explain: slides are 480x270 to 8192x8192 pixels, not " + std::to_string(width) + "x" +
                std::to_string(height));
  viz::FigureScene sc;
  sc.width = width;
  sc.height = height;
  // The smallest text is 17 units of the 1920-unit grid: scale every text up until it is min_text_px high.
  Canvas cv(sc, min_text_px / (17.0f * static_cast<float>(width) / 1920.0f));
  const float k = cv.k();
  const std::string head = "Step " + std::to_string(step) + " of " + std::to_string(kExplainSteps) + ":  " +
                           explain_step_title(step);
  float head_px = 42;  // a title wider than the slide gets smaller, down to the chart titles' size
  while (head_px > 24 && cv.text_width(head, head_px) > 1800) head_px -= 1;
  cv.text(60, 30, head, head_px);
  const ExplainSide& ref = in.diff.head ? in.diff : in.base;
  std::string sub;
  if (ref.head) {
    const HeadExplain& e = *ref.head;
    sub = "layer " + std::to_string(e.layer) + "   query " + key_label(ref.tokens, e.query);
    if (in.diff.head) sub += "   " + in.diff.model + " head " + std::to_string(in.diff.head->head);
    if (in.base.head) sub += "   " + in.base.model + " head " + std::to_string(in.base.head->head);
  }
  // A run under interventions says so on every slide, as the status line does.
  for (const ExplainSide* side : {&in.diff, &in.base})
    if (!side->interventions.empty()) sub += "   INTERVENED " + side->model + ": " + side->interventions;
  float sub_px = 26;  // a long list of interventions: smaller, down to the notes' size
  while (sub_px > 17 && cv.text_width(sub, sub_px) > 1800) sub_px -= 1;
  cv.text(60, 30 + 62 * k, sub, sub_px, kMuted);
  cv.rect(60, 145 * k, 1800, 2, kAxis);
  draw_column(cv, in, in.diff, true, step, 60, 1080);
  cv.rect(1190, 145 * k + 25, 2, 1030 - 145 * k - 25, kAxis);
  draw_column(cv, in, in.base, false, step, 1230, 630);
  return sc;
}

ExplainSide explain_side(const std::string& model, const Trace* trace, int layer, int head, int64_t query) {
  ExplainSide s;
  s.model = model;
  if (!trace) {
    s.why = "no trace in this slot";
    return s;
  }
  s.tokens = viz::display_tokens(trace->tokens, viz::Spaces::Visible);
  s.interventions = trace->written_interventions();
  if (trace->config.is_diff())
    for (const LayerTrace& l : trace->layers) s.layer_lambdas.push_back(l.lambda);
  try {
    s.head = explain_head(*trace, layer, head, query);
    if (trace->config.is_diff_v2())
      for (const LayerTrace& l : trace->layers)
        if (l.index == layer)
          for (int64_t t = 0; t <= query; ++t) s.token_lambdas.push_back(l.lambda_at(head, t));
  } catch (const std::exception& e) {
    s.why = e.what();
  }
  return s;
}

std::vector<std::string> export_explain_slides(const ExplainInput& in, const std::string& dir, int width,
                                               int height) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create the folder (" + ec.message() + ")");
  std::vector<std::string> files;
  for (int step = 1; step <= kExplainSteps; ++step) {
    const viz::FigureScene sc = explain_slide(in, step, width, height);
    const std::string base = (std::filesystem::path(dir) / ("explain-step-" + std::to_string(step))).string();
    const viz::Image img = viz::render_scene(sc);
    viz::write_png(base + ".png", img.rgb, img.width, img.height);
    write_file_atomically(base + ".svg", viz::scene_to_svg(sc));
    files.push_back(base + ".png");
    files.push_back(base + ".svg");
  }
  return files;
}

}  // namespace difflens::app
