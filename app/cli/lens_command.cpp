// difflens lens: why each model answers as it does (core/model/lens.h): the logit lens at every position as
// CSV, each head's and MLP's direct share of the target's logit at the query as CSV, and a summary per model
// on standard output; under --intervene too.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/cli/run_support.h"
#include "app/reports/needle_report.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"

namespace difflens::cli {
namespace {

std::string num(double v, const char* format = "%.6g") {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

int cmd_lens(const Args& a) {
  const std::string out = a.require("out");
  check_output_file(out, "--out", {".csv"});
  if (a.has("attribution")) check_output_file(a.get("attribution"), "--attribution", {".csv"});
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  std::signal(SIGINT, on_interrupt);
  std::ostringstream lens, shares;
  lens << "model,layer,position,token,target,target_text,target_probability,target_rank";
  const int K = a.get_int("top-k");
  for (int k = 1; k <= K; ++k) lens << ",top" << k << ",p" << k;
  lens << "\n";
  shares << "model,part,layer,head,share,a1_part,minus_lambda_a2_part\n";
  for (const std::string& dir : dirs) {
    const Model m = load_model(dir, device(a));
    const std::vector<int64_t> ids = prompt_ids(a, m);
    const int64_t T = static_cast<int64_t>(ids.size());
    LensOptions o;
    o.top_k = K;
    o.query = a.has("query") ? a.get_int("query") : -1;
    if (o.query >= T)
      throw Error("--query " + std::to_string(o.query) + " is beyond the " + std::to_string(T) +
                  "-token prompt");
    o.target = a.has("target") ? a.get_int("target") : -1;
    o.interventions = interventions_of(a, m.config(), T);
    const AnswerExplanation e = m.explain_answer(ids, o, &g_stop);
    const std::string name = app::csv_field(m.config().name.empty() ? dir : m.config().name);
    for (size_t l = 0; l < e.layers.size(); ++l) {
      const LensLayer& layer = e.layers[l];
      for (int64_t t = 0; t < T; ++t) {
        const size_t p = static_cast<size_t>(t);
        const int64_t target = e.targets[p];
        lens << name << "," << l << "," << t << "," << app::csv_field(m.tokenizer().piece(ids[p])) << ","
             << (target >= 0 ? std::to_string(target) : "") << ","
             << (target >= 0 ? app::csv_field(m.tokenizer().piece(target)) : "") << ","
             << num(layer.target_probability[p]) << ","
             << (target >= 0 ? std::to_string(layer.target_rank[p]) : "");
        for (const TokenProbability& c : layer.top[p])
          lens << "," << app::csv_field(c.text) << "," << num(c.probability);
        lens << "\n";
      }
    }
    const LogitAttribution& at = e.attribution;
    shares << name << ",embedding,,," << num(at.embedding) << ",,\n";
    for (size_t l = 0; l < at.heads.size(); ++l) {
      for (size_t h = 0; h < at.heads[l].size(); ++h) {
        shares << name << ",head," << l << "," << h << "," << num(at.heads[l][h]) << ",";
        if (!at.heads_a1.empty())
          shares << num(at.heads_a1[l][h]) << "," << num(at.heads_a2[l][h]);
        else
          shares << ",";
        shares << "\n";
      }
      shares << name << ",mlp," << l << ",," << num(at.mlps[l]) << ",,\n";
    }
    shares << name << ",logit,,," << num(at.logit) << ",,\n";

    // The summary: what the query's target does layer by layer, and the largest direct shares.
    const size_t q = static_cast<size_t>(at.query);
    std::printf("%s: query %lld '%s', target '%s' (id %lld), logit %.3f\n", m.config().name.c_str(),
                static_cast<long long>(at.query), m.tokenizer().piece(ids[q]).c_str(), at.target_text.c_str(),
                static_cast<long long>(at.target), at.logit);
    if (!e.interventions.empty()) std::printf("  %s\n", interventions_line(e.interventions).c_str());
    std::printf("  lens at the query:");
    for (size_t l = 0; l < e.layers.size(); ++l)
      std::printf(" L%zu %.3f (rank %lld)", l, e.layers[l].target_probability[q],
                  static_cast<long long>(e.layers[l].target_rank[q]));
    std::printf("\n");
    std::vector<std::tuple<double, std::string>> parts;
    for (size_t l = 0; l < at.heads.size(); ++l) {
      for (size_t h = 0; h < at.heads[l].size(); ++h) {
        std::string what = "L" + std::to_string(l) + " H" + std::to_string(h);
        if (!at.heads_a1.empty() && !std::isnan(at.heads_a1[l][h]))
          what +=
              " (A1 " + num(at.heads_a1[l][h], "%+.3f") + ", -λA2 " + num(at.heads_a2[l][h], "%+.3f") + ")";
        parts.emplace_back(at.heads[l][h], what);
      }
      parts.emplace_back(at.mlps[l], "L" + std::to_string(l) + " MLP");
    }
    parts.emplace_back(at.embedding, "embedding");
    std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) {
      return std::fabs(std::get<0>(x)) > std::fabs(std::get<0>(y));
    });
    std::printf("  largest direct shares of the logit:");
    for (size_t i = 0; i < std::min<size_t>(5, parts.size()); ++i)
      std::printf("%s %s %+.3f", i ? "," : "", std::get<1>(parts[i]).c_str(), std::get<0>(parts[i]));
    std::printf("\n");
  }
  write_file_atomically(out, lens.str());
  std::printf("wrote %s", out.c_str());
  if (a.has("attribution")) {
    write_file_atomically(a.get("attribution"), shares.str());
    std::printf(" and %s", a.get("attribution").c_str());
  }
  std::printf("\n");
  return 0;
}

}  // namespace

std::vector<Command> lens_commands() {
  return {
      {"lens",
       "why a model answers: the logit lens at every position, each head's and MLP's direct share of the "
       "target's logit at the query",
       {required(text("out", "F.csv", "the lens: one row per model, layer and position")),
        text("attribution", "F.csv", "also write each head's, MLP's and the embedding's direct share"),
        models_option("the models read"), prompt_option(), prompt_file_option(), specials_option(),
        text("token-ids", "1,2,3", "the prompt as token ids (e.g. a needle episode's, episode.json)"),
        query_option(),
        integer("target", "ID", 0, 1e9, "",
                "the token attributed at the query (default: the token after it, else the model's top-1)"),
        integer("top-k", "K", 1, 100, "5", "candidates per position and layer"), intervene_option(),
        answer_option(), device_option("auto"), threads_option()},
       "Give exactly one of --prompt, --prompt-file, --token-ids. The lens reads each layer's residual stream through the "
       "final norm and the unembedding; the shares freeze the final norm's scale at its value in the run "
       "(and a DIFF head's per-head norm likewise) and add up to the logit.",
       cmd_lens}};
}

}  // namespace difflens::cli
