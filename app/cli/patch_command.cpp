// difflens patch: activation patching (core/formats/patch_site.h) of a clean and a corrupt prompt on each
// model given: every head's output, A1 and A2 map (DIFF V2: λ) and every MLP at the chosen positions, and the
// residual stream at every layer and position, each copied alone from one run into the other; the normalised
// logit difference of each as CSV, the largest on standard output.
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
#include "app/common/files.h"
#include "app/reports/needle_report.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/patch_site.h"
#include "core/model/batch.h"

namespace difflens::cli {
namespace {

std::string num(double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The clean or corrupt prompt as a batch item (text or ids) with its answer text.
BatchItem item_of(const Args& a, const char* text_flag, const char* file_flag, const char* ids_flag,
                  const std::string& answer, const Model& m) {
  BatchItem it;
  it.id = text_flag;
  const int sources = a.has(text_flag) + a.has(file_flag) + a.has(ids_flag);
  if (sources != 1)
    throw Error(std::string("give exactly one of --") + text_flag + ", --" + file_flag + ", --" + ids_flag);
  if (a.has(ids_flag))
    it.token_ids = parse_token_ids(a.get(ids_flag), m.config().vocab_size);
  else
    it.prompt = a.has(text_flag) ? a.get(text_flag) : read_file(a.get(file_flag));
  if (it.prompt && it.prompt->empty()) throw Error(std::string("the ") + text_flag + " prompt is empty");
  it.answer = answer;
  return it;
}

std::vector<int64_t> ids_of(const BatchItem& it, const Model& m, const Args& a) {
  if (!it.prompt) return it.token_ids;
  PromptInput in;  // the one prompt -> ids rule (core/formats/tokenizer.h): BOS, specials, no text tokenizer
  in.text = *it.prompt;
  in.specials = prompt_specials(a);
  return encode_prompt(m, in, "give --token-ids and --corrupt-ids").ids;
}

std::vector<int64_t> positions_of(const std::string& text, int64_t query) {
  if (text == "all") return {};
  if (text == "query") return {query};
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long p = std::stoll(item, &used);
      if (used != item.size() || p < 0) throw std::invalid_argument(item);
      out.push_back(p);
    } catch (const std::exception&) {
      throw Error("--positions takes all, query or positions like 3,17 (got '" + text + "')");
    }
  }
  if (out.empty()) throw Error("--positions takes all, query or positions like 3,17 (got '" + text + "')");
  return out;
}

int cmd_patch(const Args& a) {
  const std::string out = a.require("out");
  check_output_file(out, "--out", {".csv"});
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  std::signal(SIGINT, on_interrupt);
  if (a.has("target") != a.has("alternative"))
    throw Error("give both --target and --alternative (the clean and the corrupt answer), or neither");
  std::vector<PatchComponent> components;
  {
    std::stringstream ss(a.get("components"));
    std::string c;
    while (std::getline(ss, c, ',')) components.push_back(parse_patch_component(c));
    if (components.empty()) throw Error("--components names none");
  }
  const bool denoise = a.get("direction") == "denoise";
  std::ostringstream csv;
  csv << "model,direction,component,layer,head,positions,logit_diff,normalized\n";
  for (const std::string& dir : dirs) {
    const Model m = load_model(dir, device(a));
    const std::string name = m.config().name.empty() ? dir : m.config().name;
    std::vector<int64_t> clean, corrupt;
    PatchOptions o;
    o.denoise = denoise;
    if (a.has("target")) {
      const PatchPair p =
          patch_pair(m, item_of(a, "prompt", "prompt-file", "token-ids", a.get("target"), m),
                     item_of(a, "corrupt", "corrupt-file", "corrupt-ids", a.get("alternative"), m));
      clean = p.clean;
      corrupt = p.corrupt;
      o.target = p.target;
      o.alternative = p.alternative;
      if (p.shared > 0)
        std::fprintf(stderr, "difflens: %s: the answers' first %lld token(s) added to both prompts\n",
                     name.c_str(), static_cast<long long>(p.shared));
    } else {
      clean = ids_of(item_of(a, "prompt", "prompt-file", "token-ids", "", m), m, a);
      corrupt = ids_of(item_of(a, "corrupt", "corrupt-file", "corrupt-ids", "", m), m, a);
    }
    const int64_t T = static_cast<int64_t>(clean.size());
    o.query = a.has("query") ? a.get_int("query") : -1;
    if (o.query >= T)
      throw Error("--query " + std::to_string(o.query) + " is beyond the " + std::to_string(T) +
                  "-token prompts");
    o.interventions = interventions_of(a, m.config(), T);
    const std::vector<int64_t> positions = positions_of(a.get("positions"), o.query < 0 ? T - 1 : o.query);
    std::vector<std::vector<PatchSite>> runs;
    std::vector<std::string> left_out;
    for (const PatchComponent k : components) {
      std::vector<PatchSite> sites;
      if (k == PatchComponent::Resid)
        sites = resid_sweep(m.config(), T);
      else if (k == PatchComponent::Mlp)
        for (int64_t l = 0; l < m.config().num_hidden_layers; ++l) sites.push_back({k, l, -1, positions});
      else
        sites = head_sweep(m.config(), k, positions);
      if (sites.empty()) left_out.push_back(to_string(k));
      for (PatchSite& s : sites) runs.push_back({s});
    }
    progress("%s: %zu patched runs of %lld tokens", name.c_str(), runs.size(), static_cast<long long>(T));
    const PatchReport r = m.patch(clean, corrupt, runs, o, &g_stop);
    progress_done();
    for (const PatchResult& pr : r.results) {
      const PatchSite& s = pr.sites.front();
      std::string where = "all";
      if (!s.positions.empty()) {
        where.clear();
        for (size_t i = 0; i < s.positions.size(); ++i)
          where += (i ? " " : "") + std::to_string(s.positions[i]);
      }
      csv << app::csv_field(name) << "," << (denoise ? "denoise" : "noise") << "," << to_string(s.component)
          << "," << s.layer << "," << (s.head >= 0 ? std::to_string(s.head) : "") << "," << where << ","
          << num(pr.logit_diff) << "," << num(pr.normalized) << "\n";
    }
    std::printf("%s: %lld tokens, query %lld; logit difference '%s' - '%s': clean %.3f, corrupt %.3f (%s)\n",
                name.c_str(), static_cast<long long>(T), static_cast<long long>(r.query),
                r.target_text.c_str(), r.alternative_text.c_str(), r.clean_diff, r.corrupt_diff,
                denoise ? "clean copied into the corrupt run" : "corrupt copied into the clean run");
    if (!o.interventions.empty()) std::printf("  %s\n", interventions_line(o.interventions.applied).c_str());
    for (const std::string& note : r.notes) std::printf("  note: %s\n", note.c_str());
    for (const std::string& k : left_out)
      std::printf("  %s: %s\n", k.c_str(),
                  k == "lambda" && m.config().is_diff()
                      ? "left out (DIFF's lambda is a weight of the layer, the same in both runs)"
                      : "left out (this model has none)");
    // The largest effects, by component.
    for (const PatchComponent k : components) {
      std::vector<const PatchResult*> of;
      for (const PatchResult& pr : r.results)
        if (pr.sites.front().component == k && !std::isnan(pr.normalized)) of.push_back(&pr);
      if (of.empty()) continue;
      std::sort(of.begin(), of.end(), [&](const PatchResult* x, const PatchResult* y) {
        return std::fabs(x->normalized - (denoise ? 0 : 1)) > std::fabs(y->normalized - (denoise ? 0 : 1));
      });
      std::printf("  %-6s largest:", to_string(k).c_str());
      for (size_t i = 0; i < std::min<size_t>(4, of.size()); ++i) {
        const PatchSite& s = of[i]->sites.front();
        std::printf("%s L%lld", i ? "," : "", static_cast<long long>(s.layer));
        if (s.head >= 0) std::printf(" H%lld", static_cast<long long>(s.head));
        if (k == PatchComponent::Resid) std::printf(" @%lld", static_cast<long long>(s.positions.front()));
        std::printf(" %.3f", of[i]->normalized);
      }
      std::printf("\n");
    }
  }
  write_file_atomically(out, csv.str());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

std::vector<Command> patch_commands() {
  return {
      {"patch",
       "activation patching: each head's output, A1/A2 map (DIFF V2: lambda), MLP and the residual stream "
       "copied from a clean into a corrupt run, with the normalised logit difference",
       {required(text("out", "F.csv", "one row per model and patched site")),
        models_option("the models patched, each on its own"), prompt_option(), prompt_file_option(),
        text("token-ids", "1,2,3", "the clean prompt as token ids"),
        text("corrupt", "TEXT", "the corrupt prompt (as many tokens as the clean one)"),
        text("corrupt-file", "F", "the corrupt prompt from a file"),
        text("corrupt-ids", "1,2,3", "the corrupt prompt as token ids"),
        text("target", "TEXT", "the clean answer (with --alternative; default: each run's greedy token)"),
        text("alternative", "TEXT", "the corrupt answer"),
        text("components", "LIST", "what is patched: head,a1,a2,lambda,mlp,resid",
             "head,a1,a2,lambda,mlp,resid"),
        text("positions", "all|query|LIST", "the rows copied for heads, maps, lambda and MLPs", "all"),
        choice("direction", "denoise|noise", "denoise",
               "denoise: clean into the corrupt run; noise: corrupt into the clean run"),
        specials_option(), query_option(), intervene_option(), answer_option(), device_option("auto"),
        threads_option()},
       "Normalised logit difference: (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt), LD = logit(target) - "
       "logit(alternative) at the query: 0 is the corrupt run, 1 the clean one (noising: 1 means the site "
       "changed nothing). With --target and --alternative the difference is taken at the first token where "
       "the two answers differ (their common first tokens are added to both prompts). The residual stream is "
       "patched at each layer and position alone; every other component at --positions.",
       cmd_patch}};
}

}  // namespace difflens::cli
