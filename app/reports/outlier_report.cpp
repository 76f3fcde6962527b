// Outlier reports.
#include "app/reports/outlier_report.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "viz/colormap.h"
#include "viz/export.h"
#include "viz/figure.h"

namespace difflens::app {
namespace {

const int kTopK[] = {1, 2, 3, 10, 100};

std::string row(const std::string& what, const std::string& model, const ValueStats& s) {
  std::string r = "| " + what + " | " + model + " |";
  char b[48];
  for (int k : kTopK) {
    std::snprintf(b, sizeof b, " %.2f |", s.top_k(k));
    r += b;
  }
  std::snprintf(b, sizeof b, " %.3f |\n", s.median);
  return r + b;
}

nlohmann::json stats_json(const ValueStats& s) {
  nlohmann::json j = {{"count", s.count}, {"median", s.median}, {"mean", s.mean}};
  for (int k : kTopK) j["top_" + std::to_string(k)] = s.top_k(k);
  return j;
}

}  // namespace

std::string top_k_line(const std::string& model, const ValueStats& st) {
  char line[256];
  std::snprintf(line, sizeof line,
                "%s: top-1 %.3g, top-2 %.3g, top-3 %.3g, top-10 %.3g, top-100 %.3g, median %.3g",
                model.c_str(), st.top_k(1), st.top_k(2), st.top_k(3), st.top_k(10), st.top_k(100), st.median);
  return line;
}

std::string write_outlier_report(const std::filesystem::path& out, const std::vector<std::string>& models,
                                 const std::vector<OutlierStats>& stats) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw Error(out.string() + ": cannot create the folder (" + ec.message() + ")");
  std::string md = "# Activation outliers\n\n";
  md +=
      "Largest |values| (k-th largest, k = 1, 2, 3, 10, 100) and the median of the pool, over every "
      "layer and every window of the text, as the paper's Table 5: attention logits = |Q K^T / sqrt(d)| "
      "over causal entries (DIFF: both components pooled), hidden states = each layer's output. Top-k are "
      "exact; the pooled median is read from the 64-bins-per-decade histogram (within 3.7 %).\n\n";
  md +=
      "| activation | model | top-1 | top-2 | top-3 | top-10 | top-100 | median |\n|---|---|---|---|---|---|---|---|\n";
  for (size_t m = 0; m < models.size(); ++m) md += row("attention logits", models[m], stats[m].logits);
  for (size_t m = 0; m < models.size(); ++m) md += row("hidden states", models[m], stats[m].hidden);
  md += "\n";
  for (size_t m = 0; m < models.size(); ++m)
    md += models[m] + ": " + std::to_string(stats[m].tokens) + " tokens in " +
          std::to_string(stats[m].windows) + " windows.\n";
  md +=
      "\nPaper (Ye et al., ICLR 2025, Table 5; 3B models): attention logits top-1/2/3/10/100/median "
      "Transformer 318.0 308.2 304.9 284.7 251.5 5.4, DIFF 38.8 38.8 37.3 32.0 27.4 3.3; hidden states "
      "Transformer 3608.6 3607.4 3603.6 3552.1 2448.2 0.6, DIFF 1688.2 1672.5 1672.1 1624.3 740.9 1.2.\n";
  write_file_atomically(out / "tables.md", md);
  nlohmann::json j;
  std::ostringstream csv;
  csv << "model,activation,layer,count,top_1,top_2,top_3,top_10,top_100,median,mean\n";
  auto csv_row = [&](const std::string& model, const char* what, const std::string& layer,
                     const ValueStats& s) {
    csv << "\"" << model << "\"," << what << "," << layer << "," << s.count;
    for (int k : kTopK) csv << "," << s.top_k(k);
    csv << "," << s.median << "," << s.mean << "\n";
  };
  for (size_t m = 0; m < models.size(); ++m) {
    const OutlierStats& s = stats[m];
    nlohmann::json jm = {{"model", models[m]},
                         {"tokens", s.tokens},
                         {"windows", s.windows},
                         {"attention_logits", stats_json(s.logits)},
                         {"hidden_states", stats_json(s.hidden)}};
    csv_row(models[m], "attention_logits", "all", s.logits);
    csv_row(models[m], "hidden_states", "all", s.hidden);
    for (size_t l = 0; l < s.logits_per_layer.size(); ++l) {
      jm["per_layer"].push_back({{"layer", l},
                                 {"attention_logits", stats_json(s.logits_per_layer[l])},
                                 {"hidden_states", stats_json(s.hidden_per_layer[l])}});
      csv_row(models[m], "attention_logits", std::to_string(l), s.logits_per_layer[l]);
      csv_row(models[m], "hidden_states", std::to_string(l), s.hidden_per_layer[l]);
    }
    j["models"].push_back(jm);
  }
  write_file_atomically(out / "outliers.csv", csv.str());
  write_file_atomically(out / "outliers.json", j.dump(1) + "\n");
  const viz::Rgb8* colors = viz::kModelColours;  // the models' identity colours, 4 (then again)
  for (const bool logits : {true, false}) {
    viz::HistogramFigure h;
    h.title = logits ? "|attention logits|, all layers pooled" : "|hidden states|, all layers pooled";
    h.x_label = logits ? "|q k / sqrt(d)|" : "|hidden state|";
    h.x0 = LogHistogram::kLogMin;
    h.bin_width = 1.0 / LogHistogram::kBinsPerDecade;
    for (size_t m = 0; m < models.size(); ++m) {
      const LogHistogram& hist = logits ? stats[m].logits.histogram : stats[m].hidden.histogram;
      h.series.push_back(
          {models[m], colors[m % 4], std::vector<double>(hist.counts.begin(), hist.counts.end())});
    }
    // The readout travels with the figure: each model's top-k and median (tables.md's row), the text's
    // size, and the paper's numbers, which come from 3B models (ours are ~2 M parameters).
    for (size_t m = 0; m < models.size(); ++m) {
      const ValueStats& st = logits ? stats[m].logits : stats[m].hidden;
      h.footnote += (h.footnote.empty() ? "" : "\n") + top_k_line(models[m], st) + " (" +
                    std::to_string(stats[m].tokens) + " tokens, all layers)";
    }
    h.footnote +=
        logits
            ? "\nThe paper's (Table 5, 3B models): Transformer top-1 318.0, median 5.4; DIFF 38.8, 3.3. "
              "Both models here are small: compare their shapes, not the paper's magnitudes."
            : "\nThe paper's (Table 5, 3B models): Transformer top-1 3608.6, median 0.6; DIFF 1688.2, 1.2. "
              "Both models here are small: compare their shapes, not the paper's magnitudes.";
    const viz::Image img = viz::render_histogram_figure(h);
    viz::write_png(out / (logits ? "logits.png" : "hidden.png"), img.rgb, img.width, img.height);
    write_file_atomically(out / (logits ? "logits.svg" : "hidden.svg"), viz::histogram_figure_svg(h));
  }
  return md;
}

}  // namespace difflens::app
