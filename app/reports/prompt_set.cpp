// A prompt set run into a folder (prompt_set.h).
#include "app/reports/prompt_set.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "app/reports/needle_report.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/stats.h"
#include "viz/chart.h"
#include "viz/export.h"
#include "viz/figure.h"

namespace difflens::app {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr size_t kLineLimit = 64u << 20;  // one item: 64 MB of JSON at most (a book as a prompt fits)

}  // namespace

ItemReader::ItemReader(const std::string& path) : in_(path, std::ios::binary), path_(path) {
  if (!in_) throw Error("--items " + path + ": cannot be read");
}

bool ItemReader::next(std::string& text, int64_t& line) {
  while (true) {
    text.clear();
    char c;
    bool any = false;
    while (in_.get(c)) {
      any = true;
      if (c == '\n') break;
      if (text.size() >= kLineLimit)
        throw Error("--items " + path_ + ": line " + std::to_string(line_ + 1) + " is over " +
                    std::to_string(kLineLimit >> 20) + " MB");
      text += c;
    }
    if (!any) return false;
    ++line_;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    line = line_;
    return true;
  }
}

int64_t count_items(const std::string& path) {
  ItemReader r(path);
  std::string text;
  int64_t line = 0, n = 0;
  while (r.next(text, line)) ++n;
  return n;
}

namespace {

// The first `n` fields of a CSV row (RFC 4180 quoting).
std::vector<std::string> csv_fields(const std::string& row, size_t n) {
  std::vector<std::string> out;
  std::string f;
  bool quoted = false;
  for (size_t i = 0; i < row.size() && out.size() < n; ++i) {
    const char c = row[i];
    if (quoted) {
      if (c == '"' && i + 1 < row.size() && row[i + 1] == '"') {
        f += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(f);
      f.clear();
    } else {
      f += c;
    }
  }
  if (out.size() < n) out.push_back(f);
  return out;
}

// items.jsonl's complete records: each line that ends with a newline and parses (a run killed while writing
// leaves at most a part of its last line, which is dropped here and by --resume).
std::vector<json> read_records(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) break;  // no newline: cut short
    try {
      json j = json::parse(text.substr(start, nl - start));
      if (j.is_object() && j.contains("line") && j.contains("model")) out.push_back(std::move(j));
    } catch (const json::exception&) {
    }
    start = nl + 1;
  }
  return out;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// The summary: per model, the items' accuracy (Wilson) and means with bootstrap intervals; each later model
// against the first on the items both ran (McNemar, paired bootstrap). Read back from items.jsonl, so that a
// resumed run's summary covers every item.
std::string write_summary(const fs::path& out, const std::vector<std::string>& models, json* summary_out) {
  struct Row {
    bool right = false;
    double p = 0, ld = 0, noise = NAN, answer = NAN, noise_out = NAN;
  };
  std::map<std::string, std::map<int64_t, Row>> by_model;  // model -> line -> row
  for (const json& j : read_records(out / "items.jsonl")) {
    auto num = [&](const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN; };
    Row r;
    r.right = j.value("greedy_right", false);
    r.p = num("p_answer");
    r.ld = num("logit_diff");
    r.noise = num("noise_mass");
    r.answer = num("answer_mass");
    r.noise_out = num("noise_output");
    by_model[j.at("model").get<std::string>()][j.at("line").get<int64_t>()] = r;
  }
  json summary = json::object();
  std::string md =
      "| model | items | accuracy (greedy) | P(answer) | logit difference | attention mass on the answer "
      "| attention noise (mass) | noise (output share) |\n|---|---|---|---|---|---|---|---|\n";
  auto mean_of = [](const std::map<int64_t, Row>& rows, double Row::*f) {
    std::vector<double> v;
    for (const auto& [line, r] : rows)
      if (std::isfinite(r.*f)) v.push_back(r.*f);
    return bootstrap_mean(v);
  };
  for (const std::string& m : models) {
    const auto& rows = by_model[m];
    int64_t right = 0;
    for (const auto& [line, r] : rows) right += r.right;
    Interval acc = wilson_interval(right, static_cast<int64_t>(rows.size()));
    if (rows.empty()) acc = {NAN, NAN, NAN};  // no item ran: no accuracy, not "0.00 [0, 1]"
    const Interval p = mean_of(rows, &Row::p), ld = mean_of(rows, &Row::ld),
                   ans = mean_of(rows, &Row::answer), noise = mean_of(rows, &Row::noise),
                   nout = mean_of(rows, &Row::noise_out);
    auto cell = [](const Interval& i, int digits) {
      return std::isfinite(i.estimate) ? format_interval(i, digits) : std::string("-");
    };
    md += "| " + m + " | " + std::to_string(rows.size()) + " | " + cell(acc, 2) + " | " + cell(p, 3) + " | " +
          cell(ld, 2) + " | " + cell(ans, 3) + " | " + cell(noise, 3) + " | " + cell(nout, 3) + " |\n";
    auto iv = [](const Interval& i) {
      return json{{"estimate", i.estimate}, {"low", i.low}, {"high", i.high}};
    };
    summary[m] = {{"items", rows.size()},    {"accuracy", iv(acc)},    {"p_answer", iv(p)},
                  {"logit_diff", iv(ld)},    {"answer_mass", iv(ans)}, {"noise_mass", iv(noise)},
                  {"noise_output", iv(nout)}};
  }
  if (models.size() > 1) {
    md +=
        "\nEach model against " + models[0] +
        " on the items both ran: McNemar's exact test (accuracy), a paired bootstrap of the mean difference "
        "(the rest); p < 0.05 is called a difference.\n\n| model | items | accuracy: only it / only " +
        models[0] +
        " (p) | logit difference: difference [95 %] (p) | noise mass: difference [95 %] (p) |\n"
        "|---|---|---|---|---|\n";
    const auto& first = by_model[models[0]];
    for (size_t k = 1; k < models.size(); ++k) {
      const auto& other = by_model[models[k]];
      std::vector<bool> a, b;
      std::vector<double> la, lb, na, nb;
      for (const auto& [line, r] : other) {
        const auto it = first.find(line);
        if (it == first.end()) continue;
        a.push_back(r.right);
        b.push_back(it->second.right);
        la.push_back(r.ld);
        lb.push_back(it->second.ld);
        if (std::isfinite(r.noise) && std::isfinite(it->second.noise)) {
          na.push_back(r.noise);
          nb.push_back(it->second.noise);
        }
      }
      auto pword = [](double p) {
        char b[48];
        if (p < 0.001) return std::string("p < 0.001");
        std::snprintf(b, sizeof b, "p = %.3g%s", p, p < 0.05 ? "" : ", no significant difference");
        return std::string(b);
      };
      const PairedTest acc = mcnemar(a, b);
      std::string row = "| " + models[k] + " | " + std::to_string(a.size()) + " | " +
                        std::to_string(acc.only_a) + " / " + std::to_string(acc.only_b) + " (" +
                        pword(acc.p) + ") | ";
      json pj = {{"items", a.size()},
                 {"accuracy", {{"only_it", acc.only_a}, {"only_first", acc.only_b}, {"p", acc.p}}}};
      for (const auto& [name, va, vb] :
           {std::tuple<const char*, std::vector<double>*, std::vector<double>*>{"logit_diff", &la, &lb},
            {"noise_mass", &na, &nb}}) {
        if (va->size() < 2) {
          row += "- | ";
          continue;
        }
        const PairedTest t = paired_bootstrap(*va, *vb);
        row += format_interval(t.difference, 3) + " (" + pword(t.p) + ") | ";
        pj[name] = {{"difference", t.difference.estimate},
                    {"low", t.difference.low},
                    {"high", t.difference.high},
                    {"p", t.p}};
      }
      md += row.substr(0, row.size() - 1) + "\n";
      summary["paired"][models[k] + " vs " + models[0]] = pj;
    }
  }
  // Activation patching: per model and head, the mean normalised logit difference over the items with a
  // corrupt prompt (bootstrap interval), the largest first.
  if (fs::exists(out / "patch.csv")) {
    std::map<std::string, std::map<std::pair<int, int>, std::vector<double>>> effects;
    std::ifstream in(out / "patch.csv", std::ios::binary);
    std::string row;
    std::getline(in, row);
    while (std::getline(in, row)) {
      const std::vector<std::string> f = csv_fields(row, 7);
      if (f.size() < 7 || f[6].empty()) continue;
      try {
        effects[f[2]][{std::stoi(f[3]), std::stoi(f[4])}].push_back(std::stod(f[6]));
      } catch (const std::exception&) {
      }
    }
    md +=
        "\nActivation patching, on the items with a corrupt prompt: each head's output copied from the clean "
        "run into the corrupt one; the normalised logit difference (0: the corrupt run, 1: the clean one), "
        "mean over items with a bootstrap interval; the six largest per model.\n\n"
        "| model | head | items | normalised logit difference |\n|---|---|---|---|\n";
    for (const std::string& m : models) {
      std::vector<std::tuple<double, std::pair<int, int>, Interval, size_t>> heads;
      for (const auto& [lh, v] : effects[m]) {
        const Interval i = bootstrap_mean(v);
        heads.emplace_back(std::fabs(i.estimate), lh, i, v.size());
      }
      std::sort(heads.begin(), heads.end(),
                [](const auto& x, const auto& y) { return std::get<0>(x) > std::get<0>(y); });
      json list = json::array();
      for (size_t k = 0; k < heads.size(); ++k) {
        const auto& [size, lh, i, count] = heads[k];
        list.push_back({{"layer", lh.first},
                        {"head", lh.second},
                        {"items", count},
                        {"estimate", i.estimate},
                        {"low", i.low},
                        {"high", i.high}});
        if (k < 6)
          md += "| " + m + " | L" + std::to_string(lh.first) + " H" + std::to_string(lh.second) + " | " +
                std::to_string(count) + " | " + format_interval(i, 3) + " |\n";
      }
      if (!list.empty()) summary["patching"][m] = list;
    }
    // A figure per model: layers x heads of the mean, every model on one colour scale (the largest |mean|).
    double most = 1e-9;
    for (const auto& [m, heads] : effects)
      for (const auto& [lh, v] : heads) most = std::max(most, std::fabs(bootstrap_mean(v).estimate));
    for (const std::string& m : models) {
      const auto& heads = effects[m];
      if (heads.empty()) continue;
      int L = 0, H = 0;
      for (const auto& [lh, v] : heads) L = std::max(L, lh.first + 1), H = std::max(H, lh.second + 1);
      viz::GridFigure g;
      size_t items = 0;
      for (const auto& [lh, v] : heads) items = std::max(items, v.size());
      g.title = m + ": each head's output patched in, mean normalised logit difference (" +
                std::to_string(items) + " items)";
      g.row_title = "layer";
      g.col_title = "head";
      for (int l = 0; l < L; ++l) g.row_labels.push_back("L" + std::to_string(l));
      for (int h = 0; h < H; ++h) g.col_labels.push_back("H" + std::to_string(h));
      for (int l = 0; l < L; ++l)
        for (int h = 0; h < H; ++h) {
          const auto it = heads.find({l, h});
          g.values.push_back(it == heads.end() ? NAN : bootstrap_mean(it->second).estimate);
        }
      g.lo = -most;
      g.hi = most;
      g.diverging = true;
      g.cell = 56;
      const viz::Image img = viz::render_grid_figure(g);
      const std::string file = "patch-" + app::file_name(m);
      viz::write_png(out / (file + ".png"), img.rgb, img.width, img.height);
      write_file_atomically(out / (file + ".svg"), viz::grid_figure_svg(g));
    }
  }
  write_file_atomically(out / "summary.md",
                        "# Prompt set\n\nIntervals: Wilson (accuracy), bootstrap over items "
                        "(the rest; 2,000 resamples, seeded). Attention measures over every "
                        "layer and head, on the items with an answer span.\n\n" +
                            md);
  write_file_atomically(out / "summary.json", summary.dump(2) + "\n");
  if (summary_out) *summary_out = summary;
  return md;
}

}  // namespace

// steps.csv and steps.png/.svg: per run and step, accuracy (Wilson) and the attention measures (bootstrap),
// from the summary; the figure's bars coloured by architecture (DIFF purple, the baseline teal, DIFF V2
// olive, as the app's slots), a run's second seed in the light shade, whiskers the 95 % intervals.
void write_steps(const fs::path& out, const std::vector<StepModel>& steps,
                 const std::vector<std::string>& names, const json& summary) {
  std::string csv =
      "run,step,items,accuracy,accuracy_low,accuracy_high,p_answer,p_answer_low,p_answer_high,answer_mass,"
      "answer_mass_low,answer_mass_high,noise_mass,noise_mass_low,noise_mass_high,noise_output,"
      "noise_output_low,noise_output_high\n";
  std::vector<std::string> runs;
  std::vector<AttentionKind> kinds;
  std::set<int64_t> all_steps;
  for (const StepModel& s : steps) {
    if (std::find(runs.begin(), runs.end(), s.run) == runs.end()) {
      runs.push_back(s.run);
      kinds.push_back(s.kind);
    }
    all_steps.insert(s.step);
  }
  const std::vector<int64_t> xs(all_steps.begin(), all_steps.end());
  auto at = [&](const std::string& name, const char* key, const char* part) {
    if (!summary.contains(name) || !summary[name].contains(key)) return std::nan("");
    const json& v = summary[name][key][part];
    return v.is_number() ? v.get<double>() : std::nan("");
  };
  viz::ChartPanel acc, noise;
  acc.title = "accuracy (greedy)";
  noise.title = "attention noise (mass)";
  std::map<AttentionKind, int> seen;
  for (size_t r = 0; r < runs.size(); ++r) {
    const int arch = kinds[r] == AttentionKind::Diff ? 0 : kinds[r] == AttentionKind::DiffV2 ? 2 : 1;
    const int nth = seen[kinds[r]]++;
    viz::ChartSeries sa, sn;
    sa.name = sn.name = runs[r];
    sa.color = sn.color =
        nth < 2 ? viz::model_colour(static_cast<size_t>(arch), nth == 1) : viz::model_colour(3);
    for (int64_t x : xs) {
      std::string name;
      for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i].run == runs[r] && steps[i].step == x) name = names[i];
      for (const auto& [series, key] : {std::pair{&sa, "accuracy"}, std::pair{&sn, "noise_mass"}}) {
        series->values.push_back(name.empty() ? std::nan("") : at(name, key, "estimate"));
        series->low.push_back(name.empty() ? std::nan("") : at(name, key, "low"));
        series->high.push_back(name.empty() ? std::nan("") : at(name, key, "high"));
      }
      if (name.empty()) continue;
      csv += csv_field(runs[r]) + "," + std::to_string(x) + "," +
             (summary.contains(name) ? std::to_string(summary[name].value("items", 0)) : std::string("0"));
      for (const char* key : {"accuracy", "p_answer", "answer_mass", "noise_mass", "noise_output"})
        for (const char* part : {"estimate", "low", "high"}) csv += "," + number(at(name, key, part));
      csv += "\n";
    }
    acc.series.push_back(std::move(sa));
    noise.series.push_back(std::move(sn));
  }
  for (int64_t x : xs) {
    acc.groups.push_back("step " + std::to_string(x));
    noise.groups.push_back("step " + std::to_string(x));
  }
  write_file_atomically(out / "steps.csv", csv);
  viz::ChartFigure f;
  f.title = "The prompt set at each kept step of each run";
  f.y_title = "mean over items";
  f.x_title = "training step";
  f.shared_y = false;
  f.panels = {std::move(acc), std::move(noise)};
  f.footnote =
      "Whiskers: 95 % intervals over the items (Wilson for accuracy, bootstrap for the noise). Attention noise: "
      "the share of the answer rows' |A| on keys outside the answer and the question, mean over layers and "
      "heads (core/formats/metrics.h).";
  const viz::Image img = viz::render_chart_figure(f);
  viz::write_png(out / "steps.png", img.rgb, img.width, img.height);
  write_file_atomically(out / "steps.svg", viz::chart_figure_svg(f));
}

PromptSetWriter::PromptSetWriter(const fs::path& out, bool resume, const std::string& label,
                                 const std::string& hint)
    : out_(out) {
  if (!resume)
    for (const char* f : {"items.jsonl", "items.csv", "heads.csv", "patch.csv"})
      if (fs::exists(out / f)) throw Error(label + ": " + f + " is there already; " + hint);
  fs::create_directories(out);
  // What a resumed run has done already: (line, model) pairs in items.jsonl.
  // items.jsonl is written last for each item: what it holds is done; rows of the CSVs beyond it (a run
  // killed between the files) are dropped, so that the item runs again whole.
  if (resume && fs::exists(out / "items.jsonl")) {
    std::string kept;
    for (const json& j : read_records(out / "items.jsonl")) {
      done_.insert({j.at("line").get<int64_t>(), j.at("model").get<std::string>()});
      kept += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    }
    write_file_atomically(out / "items.jsonl", kept);
    for (const char* f : {"items.csv", "heads.csv", "patch.csv"}) {
      if (!fs::exists(out / f)) continue;
      std::ifstream in(out / f, std::ios::binary);
      std::string row, text;
      bool header = true;
      while (std::getline(in, row)) {
        if (in.eof()) break;  // no newline after it: cut short
        const std::vector<std::string> fields = csv_fields(row, 3);
        bool keep = header;
        if (!header && fields.size() == 3) {
          try {
            keep = done_.count({std::stoll(fields[0]), fields[2]}) > 0;
          } catch (const std::exception&) {
          }
        }
        header = false;
        if (keep) text += row + "\n";
      }
      in.close();
      write_file_atomically(out / f, text);
    }
  }
  jsonl_ = open_append("items.jsonl", nullptr);
  items_csv_ = open_append(
      "items.csv",
      "line,id,model,prompt_tokens,prompt_trimmed,answer_tokens,p_answer,first,p_first,rank_first,alternative,"
      "logit_diff,greedy_right,answer_begin,answer_end,query_begin,query_end,answer_mass,noise_mass,"
      "answer_output,noise_output,interventions,tags\n");
  heads_csv_ = open_append("heads.csv",
                           "line,id,model,layer,head,answer_mass,noise_mass,answer_output,noise_output\n");
}

std::unique_ptr<std::ofstream> PromptSetWriter::open_append(const char* f, const char* header) const {
  const bool fresh = !fs::exists(out_ / f);
  auto s = std::make_unique<std::ofstream>(out_ / f, std::ios::app | std::ios::binary);
  if (!*s) throw Error((out_ / f).string() + ": cannot be written");
  if (fresh && header) *s << header;
  return s;
}

bool PromptSetWriter::done(int64_t line, const std::string& model) const {
  return done_.count({line, model}) > 0;
}

void PromptSetWriter::error(int64_t at, const std::string& id, const std::string& model,
                            const std::string& what) {
  if (!errors_.is_open()) {
    const bool fresh = !fs::exists(out_ / "errors.csv");
    errors_.open(out_ / "errors.csv", std::ios::app | std::ios::binary);
    if (fresh) errors_ << "line,id,model,error\n";
  }
  errors_ << at << ',' << csv_field(id) << ',' << csv_field(model) << ',' << csv_field(what) << '\n';
  errors_.flush();
}

void PromptSetWriter::write(const BatchItem& item, const BatchOutcome& o, const std::string& model) {
  const BatchIds& ids = o.ids;
  const BatchResult& r = o.result;
  const int64_t line = item.line;
  std::string applied;
  for (const auto& [written, as_run] : r.interventions) applied += (applied.empty() ? "" : "; ") + as_run;
  const bool span = r.answer_span.begin >= 0;
  *items_csv_ << line << ',' << csv_field(item.id) << ',' << csv_field(model) << ',' << r.prompt_tokens << ','
              << ids.prompt_trimmed << ',' << r.answer_tokens << ',' << number(r.p_answer) << ',' << r.first
              << ',' << number(r.p_first) << ',' << r.rank_first << ',' << csv_field(r.alternative_text)
              << ',' << number(r.logit_diff) << ',' << (r.greedy_right ? 1 : 0) << ','
              << (span ? std::to_string(r.answer_span.begin) : "") << ','
              << (span ? std::to_string(r.answer_span.end) : "") << ',' << r.query.begin << ',' << r.query.end
              << ',' << (span ? number(r.mean.answer_mass) : "") << ','
              << (span ? number(r.mean.noise_mass) : "") << ',' << (span ? number(r.mean.answer_output) : "")
              << ',' << (span ? number(r.mean.noise_output) : "") << ',' << csv_field(applied) << ','
              << csv_field(item.tags) << '\n';
  if (!o.patch_error.empty()) {  // the readouts stand; the patching could not run
    error(line, item.id, model, "patching: " + o.patch_error);
    ++unpatched_;
  }
  if (o.patch) {
    if (!patch_csv_)
      patch_csv_ = open_append("patch.csv", "line,id,model,layer,head,logit_diff,normalized\n");
    for (const PatchResult& res : o.patch->results)
      *patch_csv_ << line << ',' << csv_field(item.id) << ',' << csv_field(model) << ',' << res.sites[0].layer
                  << ',' << res.sites[0].head << ',' << number(res.logit_diff) << ','
                  << number(res.normalized) << '\n';
    patch_csv_->flush();
  }
  for (const BatchHead& h : r.heads)
    *heads_csv_ << line << ',' << csv_field(item.id) << ',' << csv_field(model) << ',' << h.layer << ','
                << h.head << ',' << number(h.share.answer_mass) << ',' << number(h.share.noise_mass) << ','
                << number(h.share.answer_output) << ',' << number(h.share.noise_output) << '\n';
  heads_csv_->flush();
  items_csv_->flush();
  // Last: the record that says the item is done (--resume trusts it, and drops CSV rows without it).
  *jsonl_ << batch_record_json(item, o, model) << '\n';
  jsonl_->flush();
}

PromptSetWriter::Outcome PromptSetWriter::run(const Model& model, const std::string& name,
                                              const std::string& text, int64_t line,
                                              const std::vector<std::string>& specs,
                                              std::vector<std::string>& refused,
                                              const std::atomic<bool>* cancel) {
  if (done(line, name)) return Outcome::Skipped;
  std::string id = std::to_string(line);
  try {
    const BatchItem item = parse_batch_item(text, line);
    id = item.id;
    write(item, run_batch_entry(model, item, specs, refused, cancel), name);
    return Outcome::Written;
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    error(line, id, name, e.what());
    return Outcome::Failed;
  }
}

std::string PromptSetWriter::finish(const std::vector<std::string>& models, json* summary_out) const {
  return write_summary(out_, models, summary_out);
}

}  // namespace difflens::app
