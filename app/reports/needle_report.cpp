// Needle sweep reports.
#include "app/reports/needle_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/remote.h"
#include "core/formats/trace_io.h"
#include "viz/export.h"
#include "viz/figure.h"

namespace difflens::app {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double depth) {
  return depth < 0 ? "random" : fmt("%.0f%%", depth * 100);
}

}  // namespace

std::string file_name(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
    if (keep)
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "model" : out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

namespace {

// needle.json: everything, every run and every cell of each model.
nlohmann::json needle_json(const std::vector<std::string>& models,
                           const std::vector<std::vector<NeedleRun>>& runs,
                           const std::vector<std::vector<NeedleCellSummary>>& cells) {
  nlohmann::json j;
  j["definition"] = kAttentionShareDefinition;
  j["answer_span"] = "the code tokens of the needle the last question asks about";
  j["query_rows"] = "the tokens of the last question";
  j["answering_rows"] =
      "answering_*: the tokens whose next token is a code token of the last answer (the true code given); "
      "keys of the question and of the answer so far are neither answer nor noise";
  for (size_t m = 0; m < models.size(); ++m) {
    nlohmann::json jm;
    jm["model"] = models[m];
    for (const NeedleRun& r : runs[m])
      jm["runs"].push_back(nlohmann::json::parse(remote::needle_run_to_json(r, remote::NeedleJson::Report)));
    for (const auto& c : cells[m])
      jm["cells"].push_back({{"length", c.cell.length},
                             {"depth", c.cell.depth},
                             {"placed_depth", c.placed_depth},
                             {"needles", c.cell.needles},
                             {"queried", c.cell.queried},
                             {"runs", c.runs},
                             {"accuracy", c.accuracy},
                             {"answer_mass", c.attention.answer_mass},
                             {"noise_mass", c.attention.noise_mass},
                             {"noise_output", c.attention.noise_output},
                             {"answer_net", c.attention.answer},
                             {"noise_net", c.attention.noise},
                             {"net_budget", c.attention.budget},
                             {"answering_answer_mass", c.answering.answer_mass},
                             {"answering_noise_mass", c.answering.noise_mass},
                             {"answering_strongest_head", c.answering_head}});
    j["models"].push_back(jm);
  }
  return j;
}

// needle.csv: one row per model and cell.
std::string needle_csv(const std::vector<std::string>& models,
                       const std::vector<std::vector<NeedleCellSummary>>& cells) {
  std::ostringstream csv;
  // The measures (core/FORMATS.md): the net shares under their own names, then the while-answering masses,
  // then the attention masses, output shares and intervals.
  csv << "model,length,depth,needles,queried,runs,accuracy,answer_net,noise_net,"
         "answering_answer_mass,answering_noise_mass,answering_strongest_head,placed_depth,"
         "accuracy_low,accuracy_high,answer_mass,noise_mass,noise_mass_low,noise_mass_high,answer_output,"
         "noise_output,noise_output_low,noise_output_high,net_budget\n";
  for (size_t m = 0; m < models.size(); ++m)
    for (const auto& c : cells[m])
      csv << csv_field(models[m]) << "," << c.cell.length << "," << c.cell.depth << "," << c.cell.needles
          << "," << c.cell.queried << "," << c.runs << "," << c.accuracy << "," << c.attention.answer << ","
          << c.attention.noise << "," << c.answering.answer_mass << "," << c.answering.noise_mass << ","
          << c.answering_head << "," << c.placed_depth << "," << c.accuracy_ci.low << ","
          << c.accuracy_ci.high << "," << c.attention.answer_mass << "," << c.attention.noise_mass << ","
          << c.noise_mass_ci.low << "," << c.noise_mass_ci.high << "," << c.attention.answer_output << ","
          << c.attention.noise_output << "," << c.noise_output_ci.low << "," << c.noise_output_ci.high << ","
          << c.attention.budget << "\n";
  return csv.str();
}

// episodes.csv: one row per episode and model, the last question's rows (means over the rows, then heads,
// then layers), so that each number can be recomputed from the episode's kept bundle (needle --keep-traces).
std::string episodes_csv(const std::vector<std::string>& models,
                         const std::vector<std::vector<NeedleRun>>& runs) {
  std::ostringstream csv;
  csv.precision(9);
  csv << "model,length,depth,needles,queried,seed,accuracy,answer_mass,noise_mass,answer_output,noise_output,"
         "noise_net,net_budget,a1_noise_mass,a1_noise_output\n";
  for (size_t m = 0; m < models.size(); ++m)
    for (const NeedleRun& r : runs[m]) {
      const AttentionShare& a = r.attention.mean;
      csv << csv_field(models[m]) << "," << r.cell.length << "," << r.cell.depth << "," << r.cell.needles
          << "," << r.cell.queried << "," << r.seed << ","
          << (r.asked ? static_cast<double>(r.answered) / r.asked : 0.0) << "," << a.answer_mass << ","
          << a.noise_mass << "," << a.answer_output << "," << a.noise_output << "," << a.noise << ","
          << a.budget << "," << a.a1_noise_mass << "," << a.a1_noise_output << "\n";
    }
  return csv.str();
}

// The sweep's axes as its cells have them: lengths, depths and (N, R).
struct SweepAxes {
  std::set<int64_t> lengths;
  std::set<double> depths;
  std::set<std::pair<int, int>> nrs;
};

SweepAxes axes_of(const std::vector<std::vector<NeedleCellSummary>>& cells) {
  SweepAxes a;
  for (const auto& cm : cells)
    for (const auto& c : cm) {
      a.lengths.insert(c.cell.length);
      a.depths.insert(c.cell.depth);
      a.nrs.insert({c.cell.needles, c.cell.queried});
    }
  return a;
}

// A model's cell at (length, depth, (N, R)), or nullptr.
const NeedleCellSummary* find_cell(const std::vector<NeedleCellSummary>& cells, int64_t L, double d,
                                   std::pair<int, int> nr) {
  for (const auto& c : cells)
    if (c.cell.length == L && c.cell.depth == d && c.cell.needles == nr.first && c.cell.queried == nr.second)
      return &c;
  return nullptr;
}

// tables.md: the paper's Table 3 layout per (N, R) and length, the while-answering table, multi-needle
// accuracy.
std::string needle_tables(const std::vector<std::string>& models,
                          const std::vector<std::vector<NeedleCellSummary>>& cells, const SweepAxes& axes) {
  const auto& lengths = axes.lengths;
  const auto& depths = axes.depths;
  const auto& nrs = axes.nrs;
  auto find = [&](size_t m, int64_t L, double d, std::pair<int, int> nr) {
    return find_cell(cells[m], L, d, nr);
  };
  std::string md = "# Needle-in-a-haystack sweep\n\n";
  md += std::string("Definitions: ") + kAttentionShareDefinition +
        ". Answer span: the code tokens of the needle the last question asks about; query rows: the tokens "
        "of that question. Accuracy: questions whose whole code the model produced greedily. Depth: the "
        "share of the haystack's tokens before the needle, asked (column) and placed (last row, mean over "
        "seeds): a needle sits between sentences, at the boundary nearest the asked depth.\n\n";
  for (const auto& nr : nrs)
    for (int64_t L : lengths) {
      md +=
          "## Attention mass on the answer / attention noise (mass) by depth (N=" + std::to_string(nr.first) +
          ", R=" + std::to_string(nr.second) + ", " + std::to_string(L) + " tokens)\n\n| model |";
      for (double d : depths) md += " " + pct(d) + " |";
      md += " accuracy |\n|---|";
      for (size_t k = 0; k <= depths.size(); ++k) md += "---|";
      md += "\n";
      for (size_t m = 0; m < models.size(); ++m) {
        md += "| " + models[m] + " |";
        double acc = 0;
        int n = 0;
        for (double d : depths)
          if (const auto* c = find(m, L, d, nr)) {
            md += " " + fmt("%.3f", c->attention.answer_mass) + " / " + fmt("%.3f", c->attention.noise_mass) +
                  " |";
            acc += c->accuracy;
            ++n;
          } else {
            md += " – |";
          }
        md += " " + (n ? fmt("%.2f", acc / n) : std::string("–")) + " |\n";
      }
      // Where the needles went: a needle sits between sentences, at the boundary nearest the depth asked
      // (the same episodes for every model with this tokenizer, so the first model's runs say it).
      md += "| *placed at* |";
      for (double d : depths) {
        const auto* c = models.empty() ? nullptr : find(0, L, d, nr);
        md +=
            " " + (c && d >= 0 ? "*" + fmt("%.0f%%", c->placed_depth * 100) + "*" : std::string("–")) + " |";
      }
      md += " |\n\n";
    }
  // While answering: mean over depths, per length.
  md +=
      "## Attention while answering: mass on the answer / on the noise / strongest head (mean over depths and "
      "seeds)\n\n"
      "Query rows: the tokens that produce the asked code (the true code given); the question and the answer "
      "so far are neither answer nor noise. Strongest head: the attention mass on the answer of the head that "
      "gives it the most, per episode.\n\n| model | N, R |";
  for (int64_t L : lengths) md += " " + std::to_string(L) + " tokens |";
  md += "\n|---|---|";
  for (size_t k = 0; k < lengths.size(); ++k) md += "---|";
  md += "\n";
  for (size_t m = 0; m < models.size(); ++m)
    for (const auto& nr : nrs) {
      md += "| " + models[m] + " | " + std::to_string(nr.first) + ", " + std::to_string(nr.second) + " |";
      for (int64_t L : lengths) {
        const AnsweringMean a = answering_over_depths(cells[m], L, nr.first, nr.second);
        md += a.cells ? " " + fmt("%.3f", a.share.answer_mass) + " / " + fmt("%.3f", a.share.noise_mass) +
                            " / " + fmt("%.2f", a.strongest_head) + " |"
                      : std::string(" – |");
      }
      md += "\n";
    }
  md += "\n";
  if (nrs.size() > 1) {
    md += "## Multi-needle accuracy (N needles, R asked; mean over lengths, depths and seeds)\n\n| model |";
    for (const auto& nr : nrs)
      md += " N=" + std::to_string(nr.first) + " R=" + std::to_string(nr.second) + " |";
    md += "\n|---|";
    for (size_t k = 0; k < nrs.size(); ++k) md += "---|";
    md += "\n";
    for (size_t m = 0; m < models.size(); ++m) {
      md += "| " + models[m] + " |";
      for (const auto& nr : nrs) {
        double acc = 0;
        int n = 0;
        for (const auto& c : cells[m])
          if (c.cell.needles == nr.first && c.cell.queried == nr.second) acc += c.accuracy, ++n;
        md += " " + (n ? fmt("%.2f", acc / n) : std::string("–")) + " |";
      }
      md += "\n";
    }
    md += "\n";
  }
  md +=
      "Paper (Ye et al., ICLR 2025, Table 3; 3B models, 4K context), attention to answer by depth "
      "0/25/50/75/100 %: Transformer .03 .03 .03 .07 .09, DIFF .27 .30 .31 .32 .40; attention noise: "
      "Transformer .51 .54 .52 .49 .49, DIFF .01 .02 .02 .02 .01. Multi-needle accuracy at 4K "
      "(Transformer vs DIFF): N=1 R=1 1.00/1.00, N=2 R=2 .85/.92, N=4 R=2 .62/.84, N=6 R=2 .55/.85. The paper "
      "does not say how a signed DIFF map's shares are counted: the tables above give the attention mass (equal "
      "to the softmax weight for a Transformer), the measures table below the output and net shares as well.\n";
  return md;
}

// Heatmaps (PNG at `cell` pixels a cell, and SVG): accuracy and attention to the answer, depth rows ×
// length columns, per model and (N, R).
void write_needle_heatmaps(const std::filesystem::path& out, const std::vector<std::string>& models,
                           const std::vector<std::vector<NeedleCellSummary>>& cells, const SweepAxes& axes,
                           int cell) {
  const auto& lengths = axes.lengths;
  const auto& depths = axes.depths;
  const auto& nrs = axes.nrs;
  auto find = [&](size_t m, int64_t L, double d, std::pair<int, int> nr) {
    return find_cell(cells[m], L, d, nr);
  };
  // Heatmaps: accuracy and attention to answer, depth rows × length columns, per model and (N, R). The
  // attention heatmaps of every model and (N, R) share one colour scale (as the app's lab), so that a
  // model's weak retrieval does not look like another's strong one: its bounds span every cell's share.
  double attention_lo = 0, attention_hi = 0;
  for (size_t m = 0; m < models.size(); ++m)
    for (const auto& c : cells[m])
      if (!std::isnan(c.attention.answer_mass))
        attention_lo = std::min(attention_lo, c.attention.answer_mass),
        attention_hi = std::max(attention_hi, c.attention.answer_mass);
  if (!(attention_hi > attention_lo)) attention_hi = attention_lo + 1;
  for (size_t m = 0; m < models.size(); ++m)
    for (const auto& nr : nrs)
      for (const bool accuracy : {true, false}) {
        viz::GridFigure g;
        g.title = models[m] + (accuracy ? ": retrieval accuracy" : ": attention mass on the answer") +
                  " (N=" + std::to_string(nr.first) + ", R=" + std::to_string(nr.second) + ")";
        g.row_title = "depth";
        g.col_title = "context length (tokens)";
        for (double d : depths) g.row_labels.push_back(pct(d));
        for (int64_t L : lengths) g.col_labels.push_back(std::to_string(L));
        for (double d : depths)
          for (int64_t L : lengths) {
            const auto* c = find(m, L, d, nr);
            g.values.push_back(!c         ? std::numeric_limits<double>::quiet_NaN()
                               : accuracy ? c->accuracy
                                          : c->attention.answer_mass);
          }
        g.lo = 0;
        g.hi = 1;
        g.cell = cell;
        if (!accuracy) {  // attention shares are small for small models (and DIFF's can be < 0): span them
          g.lo = attention_lo;
          g.hi = attention_hi;
          g.diverging = attention_lo < 0;  // DIFF's shares below 0: the sign scale, as every view
          g.format = "%.3f";
        }
        const viz::Image img = viz::render_grid_figure(g);
        const std::string file = file_name(models[m]) + (accuracy ? "-accuracy" : "-attention") + "-N" +
                                 std::to_string(nr.first) + "R" + std::to_string(nr.second);
        viz::write_png(out / (file + ".png"), img.rgb, img.width, img.height);
        write_file_atomically(out / (file + ".svg"), viz::grid_figure_svg(g));
      }
}

// The measures per length with their intervals (pooled over the length's cells), then each model against the
// first on the same episodes: McNemar for accuracy, a paired bootstrap for the noise's mass and output share.
std::string measures_tables(const std::vector<std::string>& models,
                            const std::vector<std::vector<NeedleRun>>& runs, const SweepAxes& axes) {
  std::string md =
      "\n## Attention noise as mass, as output share and as net share, with 95 % intervals\n\n"
      "The last question's rows, every cell of each length pooled. Attention noise is the noise's attention mass; "
      "the output share is what the noise keys add to the head's output; the net share is the signed sum, shown "
      "with its budget (what the three net shares sum to: (1 - lambda)/sum|A| for DIFF, 1 for the baseline). "
      "Intervals: Wilson (accuracy), bootstrap over episodes (the rest).\n\n"
      "| model | tokens | episodes | accuracy | noise (mass) | noise (output share) | A1 alone: noise mass / output "
      "| answer (mass) | net noise / budget |\n|---|---|---|---|---|---|---|---|---|\n";
  auto of_length = [&](size_t m, int64_t L) {
    std::vector<const NeedleRun*> out;
    for (const NeedleRun& r : runs[m])
      if (r.cell.length == L) out.push_back(&r);
    return out;
  };
  for (int64_t L : axes.lengths)
    for (size_t m = 0; m < models.size(); ++m) {
      const auto rs = of_length(m, L);
      if (rs.empty()) continue;
      int64_t right = 0, asked = 0;
      std::vector<double> mass, output, answer, net, budget, a1_mass, a1_output;
      for (const NeedleRun* r : rs) {
        right += r->answered;
        asked += r->asked;
        mass.push_back(r->attention.mean.noise_mass);
        output.push_back(r->attention.mean.noise_output);
        answer.push_back(r->attention.mean.answer_mass);
        net.push_back(r->attention.mean.noise);
        budget.push_back(r->attention.mean.budget);
        a1_mass.push_back(r->attention.mean.a1_noise_mass);
        a1_output.push_back(r->attention.mean.a1_noise_output);
      }
      const Interval b = bootstrap_mean(budget);
      // A1 alone (DIFF, the same run): what the subtraction starts from; "-" for a softmax model.
      const double m1 = bootstrap_mean(a1_mass).estimate, o1 = bootstrap_mean(a1_output).estimate;
      const std::string a1 = std::isnan(m1) ? "–" : fmt("%.3f", m1) + " / " + fmt("%.3f", o1);
      md += "| " + models[m] + " | " + std::to_string(L) + " | " + std::to_string(rs.size()) + " | " +
            format_interval(wilson_interval(right, asked)) + " | " +
            format_interval(bootstrap_mean(mass), 3) + " | " + format_interval(bootstrap_mean(output), 3) +
            " | " + a1 + " | " + format_interval(bootstrap_mean(answer), 3) + " | " +
            fmt("%.3f", bootstrap_mean(net).estimate) + " / " + fmt("%.3f", b.estimate) + " |\n";
    }
  if (models.size() < 2) return md;
  md += "\n## Each model against " + models[0] +
        " on the same episodes\n\nMcNemar's exact test (accuracy: the episodes only one of the two answers) "
        "and a paired bootstrap of the mean difference (noise mass, noise output share); a difference is "
        "called one where p < 0.05.\n\n| model | tokens | accuracy: only it / only " +
        models[0] +
        " (p) | noise mass: difference [95 %] (p) | noise output share: difference [95 %] (p) |\n"
        "|---|---|---|---|---|\n";
  // The bootstrap resolves p to 1/2000: none of its draws on the other side reads p < 0.001, not 0.
  auto verdict = [](double p) {
    return (p < 0.001 ? std::string("p < 0.001") : "p = " + fmt("%.3g", p)) +
           (p < 0.05 ? std::string("") : std::string(", no significant difference"));
  };
  for (size_t m = 1; m < models.size(); ++m)
    for (int64_t L : axes.lengths) {
      const auto a = of_length(m, L), b = of_length(0, L);
      if (a.empty() || a.size() != b.size()) continue;
      std::vector<bool> ra, rb;
      std::vector<double> ma, mb, oa, ob;
      for (size_t i = 0; i < a.size(); ++i) {
        ra.push_back(a[i]->asked > 0 && a[i]->answered == a[i]->asked);
        rb.push_back(b[i]->asked > 0 && b[i]->answered == b[i]->asked);
        ma.push_back(a[i]->attention.mean.noise_mass);
        mb.push_back(b[i]->attention.mean.noise_mass);
        oa.push_back(a[i]->attention.mean.noise_output);
        ob.push_back(b[i]->attention.mean.noise_output);
      }
      const PairedTest acc = mcnemar(ra, rb), mass = paired_bootstrap(ma, mb), out = paired_bootstrap(oa, ob);
      md += "| " + models[m] + " | " + std::to_string(L) + " | " + std::to_string(acc.only_a) + " / " +
            std::to_string(acc.only_b) + " (" + verdict(acc.p) + ") | " +
            format_interval(mass.difference, 3) + " (" + verdict(mass.p) + ") | " +
            format_interval(out.difference, 3) + " (" + verdict(out.p) + ") |\n";
    }
  return md;
}

}  // namespace

void write_kept_episode(const std::filesystem::path& dir, const std::string& model, const NeedleRun& r) {
  if (!r.trace) throw Error("needle: the episode's capture was not kept");
  write_trace_bundle(*r.trace, dir);
  nlohmann::json j = nlohmann::json::parse(remote::needle_run_to_json(r, remote::NeedleJson::Episode));
  j["model"] = model;
  write_file_atomically(dir / "episode.json", j.dump(1) + "\n");
}

std::string write_needle_report(const std::filesystem::path& out, const std::vector<std::string>& models,
                                const std::vector<std::vector<NeedleRun>>& runs, int cell) {
  if (models.size() != runs.size()) throw Error("needle report: one list of runs per model");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw Error(out.string() + ": cannot create the folder (" + ec.message() + ")");
  std::vector<std::vector<NeedleCellSummary>> cells;
  for (const auto& r : runs) cells.push_back(summarize(r));
  // Replies of a model that produced broken UTF-8 are kept with U+FFFD in their place.
  write_file_atomically(
      out / "needle.json",
      needle_json(models, runs, cells).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_file_atomically(out / "needle.csv", needle_csv(models, cells));
  write_file_atomically(out / "episodes.csv", episodes_csv(models, runs));
  const SweepAxes axes = axes_of(cells);
  const std::string md = needle_tables(models, cells, axes) + measures_tables(models, runs, axes);
  write_file_atomically(out / "tables.md", md);
  write_needle_heatmaps(out, models, cells, axes, cell);
  return md;
}

}  // namespace difflens::app
