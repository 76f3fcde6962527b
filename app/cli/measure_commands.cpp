// Commands that measure models over many prompts: needle, outliers, quantize, loss, bench.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/cli/run_support.h"
#include "app/common/files.h"
#include "app/reports/needle_report.h"
#include "app/reports/outlier_report.h"
#include "core/cpu/attention_cpu.h"
#include "core/cpu/layer_cpu.h"
#include "core/cpu/qkv_layout.h"
#include "core/formats/atomic_file.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/formats/head_scores.h"
#include "core/formats/intervention.h"
#include "core/formats/metrics.h"
#include "core/formats/trace.h"
#include "core/model/capture_plan.h"
#include "core/model/lens.h"
#include "core/model/needle.h"
#include "core/model/outliers.h"
#include "core/model/train.h"

namespace difflens::cli {
namespace {

// "\n" typed in a shell argument becomes a newline (templates put the answer on its own line).
std::string unescape_newlines(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string escape_newlines(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

// What the needle sweep and `episodes` build their episodes from: the sweep, the names, the wording, the code
// lengths and the haystack text, from the options both take (episode_options()).
struct EpisodeSetup {
  NeedleSweep sweep;
  NameSet names = NameSet::SingleToken;
  NeedleTemplate wording;
  bool held_out_wording = false;
  int code_min = 4, code_max = 4;
  std::string hay_text;
  // The builder of held-out episodes for a model's tokenizer.
  EpisodeBuilder builder(const Haystack& hay, const Model& model) const {
    EpisodeBuilder b(hay, model.tokenizer(), NeedleSplit::Eval, names, wording);
    if (held_out_wording) b.set_wordings(needle_wordings(NeedleSplit::Eval));
    b.set_code_digits(code_min, code_max);
    return b;
  }
};

EpisodeSetup episode_setup(const Args& a) {
  EpisodeSetup e;
  e.sweep = parse_needle_sweep(a.get("lengths"), a.get("depths"), a.get("needles"), a.get("queried"),
                               a.get_int("seeds"), a.get_int("first-seed"));
  e.names = parse_name_set(a.get("names"));
  e.wording.needle = unescape_newlines(a.get("needle-template"));
  e.wording.question = unescape_newlines(a.get("question-template"));
  e.wording.validate();
  e.held_out_wording = a.get("wording") == "held-out";
  if (e.held_out_wording && (a.has("needle-template") || a.has("question-template")))
    throw Error("--wording held-out uses its own sentences: give it or the templates, not both");
  const std::string d = a.get("code-digits");
  const size_t dash = d.find('-');
  try {
    size_t used = 0;
    e.code_min = std::stoi(d.substr(0, dash), &used);
    if (used != (dash == std::string::npos ? d.size() : dash)) throw std::invalid_argument(d);
    e.code_max = dash == std::string::npos ? e.code_min : std::stoi(d.substr(dash + 1), &used);
    if (dash != std::string::npos && used != d.size() - dash - 1) throw std::invalid_argument(d);
  } catch (const std::exception&) {
    throw Error("option --code-digits takes N or MIN-MAX (e.g. 3-6), got '" + d + "'");
  }
  e.hay_text =
      read_file((a.has("haystack") ? a.get("haystack") : bundled_asset("haystack.txt")), "haystack text");
  return e;
}

int cmd_needle(const Args& a) {
  const int logit_bits = a.get_int("logit-bits");
  if (logit_bits == 1) throw Error("option --logit-bits takes 2 to 32 bits (0: exact), got '1'");
  const int cell = a.get_int("cell");
  check_output_dir(a.require("out"), "--out");
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  const EpisodeSetup setup = episode_setup(a);
  const NeedleSweep& sweep = setup.sweep;
  const std::vector<NeedleJob> jobs = expand(sweep);
  const std::string out = a.require("out");
  const std::string keep = a.has("keep-traces") ? a.get("keep-traces") : std::string();
  if (!keep.empty()) check_output_dir(keep, "--keep-traces");
  std::signal(SIGINT, on_interrupt);
  std::vector<std::vector<NeedleRun>> results;
  std::vector<std::string> model_names;
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // With --intervene every model runs twice: as trained, then under the interventions (its own rows).
  const std::vector<std::string> specs = a.get_all("intervene");
  std::vector<std::vector<std::string>> variants = {{}};
  if (!specs.empty()) variants.push_back(specs);
  const size_t total = dirs.size() * variants.size() * jobs.size();
  for (const std::string& dir : dirs) {
    Model model = load_model(dir, device(a));
    if (!model.tokenizer().can_encode())
      throw Error(dir + ": this model has no text tokenizer, so it cannot read a haystack");
    model.set_logit_bits(logit_bits);
    try {
      validate(sweep, model.config().max_position_embeddings);
      if (!specs.empty()) {  // layers, heads and kinds checked now, not after the first model's sweep
        // Against a prompt of the sweep's shortest length (each episode resolves them against its own
        // prompt): key ranges inside it are taken (a 2-token stand-in refused knockout=drop:5-10).
        PromptMarks marks;
        marks.answer = {0, 1};
        marks.query = 1;
        (void)resolve_interventions(specs, model.config(), marks,
                                    *std::min_element(sweep.lengths.begin(), sweep.lengths.end()));
      }
    } catch (const Error& e) {
      throw Error(dir + ": " + e.what());
    }
    const Haystack hay(setup.hay_text, model.tokenizer());
    const EpisodeBuilder builder = setup.builder(hay, model);
    for (const std::vector<std::string>& edits : variants) {
      model_names.push_back((model.config().name.empty() ? dir : model.config().name) +
                            under_interventions(edits) +
                            (logit_bits > 0 ? " (logits " + std::to_string(logit_bits) + "-bit)" : ""));
      results.emplace_back();
      for (const NeedleJob& job : jobs) {
        if (g_stop) throw Error("stopped by Ctrl-C: nothing written");
        NeedleRun run = run_needle(model, builder, job.cell, job.seed, &g_stop, edits, !keep.empty());
        if (!keep.empty()) {  // written as it comes, then let go: a long sweep keeps no capture in memory
          char name[96];
          std::snprintf(name, sizeof name, "L%lld-d%.0f-N%dR%d-s%llu",
                        static_cast<long long>(job.cell.length), job.cell.depth * 100, job.cell.needles,
                        job.cell.queried, static_cast<unsigned long long>(job.seed));
          app::write_kept_episode(std::filesystem::path(keep) / app::file_name(model_names.back()) / name,
                                  model_names.back(), run);
          run.trace.reset();
        }
        ++done;
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        progress(
            "[%zu/%zu] %s  L=%lld depth=%3.0f%% N=%d R=%d seed=%d  %d/%d right  mass: answer %.3f noise %.3f"
            "  ETA %.0f s",
            done, total, model_names.back().c_str(), static_cast<long long>(job.cell.length),
            job.cell.depth * 100, job.cell.needles, job.cell.queried, static_cast<int>(job.seed),
            run.answered, run.asked, run.attention.mean.answer_mass, run.attention.mean.noise_mass,
            el / static_cast<double>(done) * static_cast<double>(total - done));
        results.back().push_back(std::move(run));
      }
    }
  }
  progress_done();
  const std::string tables = app::write_needle_report(out, model_names, results, cell);
  std::printf("%s\nwrote %s/needle.json, needle.csv, episodes.csv, tables.md and PNG + SVG heatmaps\n",
              tables.c_str(), out.c_str());
  return 0;
}

// The options the needle sweep and `episodes` share: the sweep and what its episodes are made of.
std::vector<Option> episode_options() {
  const NeedleTemplate wording;
  return {
      text("lengths", "256,512", "prompt lengths in tokens", "256,512"),
      text("depths", "0,25,50,75,100", "needle depths, % of the haystack", "0,25,50,75,100"),
      text("needles", "1,2,4", "needles per prompt", "1"),
      text("queried", "1,2", "needles asked for", "1"),
      integer("seeds", "N", 1, 10000, "3", "episodes per cell"),
      integer("first-seed", "S", 1, 1000000, "1",
              "the first episode's seed (fresh episodes: one not used before)"),
      haystack_option(),
      choice("names", "single-token|original|given-names", "single-token",
             "the names needles use (given-names: held-out given names of 3-4 pieces)"),
      choice("wording", "template|held-out", "template",
             "template: the two templates below; held-out: the varied recipe's held-out wordings"),
      text("code-digits", "4", "code lengths in digits, N or MIN-MAX (e.g. 3-6)", "4"),
      text("needle-template", "TEXT", "how a needle reads ({name}, {code})", escape_newlines(wording.needle)),
      text("question-template", "TEXT", "how the question reads ({name}; \\n is a newline)",
           escape_newlines(wording.question))};
}

std::vector<Option> joined(std::initializer_list<std::vector<Option>> parts) {
  std::vector<Option> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Command needle_command() {
  return {
      "needle", "needle-in-a-haystack sweep: accuracy, attention to the answer and noise per model and cell",
      joined(
          {{required(text("out", "DIR", "the report's folder")), models_option("the models swept")},
           episode_options(),
           {integer("cell", "PX", 16, 512, "72", "heatmap PNG pixels per cell"),
            integer("logit-bits", "B", 0, 32, "0", "absmax-quantized attention logits of B bits (0: exact)"),
            text("keep-traces", "DIR",
                 "also write each episode's capture (a trace bundle, q/k/v kept) and episode.json under "
                 "DIR/MODEL/"),
            intervene_option(), device_option("auto"), threads_option()}}),
      "Writes needle.json, needle.csv, episodes.csv, tables.md (the paper's Table 3 layout) and PNG + SVG heatmaps; "
      "Ctrl-C stops. With --intervene each model runs as trained and under the interventions (the asked "
      "needle's code is the answer, the question's first token the query).",
      cmd_needle};
}

// difflens episodes: the needle sweep's held-out episodes as a prompt set for `batch` (core/FORMATS.md
// "Prompt sets"): the prompt up to the asked code, the code as the answer, the cell as tags; with --corrupt
// the same prompt with the needle's code changed digit by digit (d -> d + 5 mod 10: as many digits, so as
// many tokens), for activation patching.
int cmd_episodes(const Args& a) {
  const std::string out = a.require("out");
  check_output_file(out, "--out", {".jsonl"});
  if (std::filesystem::exists(out))
    throw Error("--out " + out + " is there already: give another name (it is not written over)");
  EpisodeSetup setup = episode_setup(a);
  setup.sweep.seeds = static_cast<int>(quick_cap("seeds", setup.sweep.seeds, 2));  // DIFFLENS_QUICK
  for (const auto& [n, r] : setup.sweep.needles_queried)
    if (r != 1) throw Error("episodes: an item asks one question (--queried 1)");
  const std::vector<std::string> dirs = model_dirs(a);
  const Model model = load_model(dirs.front(), DeviceChoice::Cpu);  // its tokenizer counts the tokens
  if (!model.tokenizer().can_encode())
    throw Error(dirs.front() + ": this model has no text tokenizer, so it cannot read a haystack");
  validate(setup.sweep, model.config().max_position_embeddings);
  const Haystack hay(setup.hay_text, model.tokenizer());
  const EpisodeBuilder builder = setup.builder(hay, model);
  const bool corrupt = a.has("corrupt");
  std::string text;
  int64_t items = 0, plain = 0;
  for (const NeedleJob& job : expand(setup.sweep)) {
    const Episode ep = needle_episode(builder, job.cell, job.seed);
    const Needle& asked = ep.needles[static_cast<size_t>(ep.queried.front())];
    std::string prompt = ep.text.substr(0, ep.text.rfind(asked.code));
    while (!prompt.empty() && prompt.back() == ' ') prompt.pop_back();
    char id[96];
    std::snprintf(id, sizeof id, "L%lld-d%.0f-N%d-s%llu", static_cast<long long>(job.cell.length),
                  job.cell.depth * 100, job.cell.needles, static_cast<unsigned long long>(job.seed));
    nlohmann::json item = {{"id", id},
                           {"prompt", prompt},
                           {"answer", " " + asked.code},
                           {"length", job.cell.length},
                           {"depth", job.cell.depth},
                           {"needles", job.cell.needles},
                           {"seed", job.seed},
                           {"name", asked.name},
                           {"digits", asked.code.size()}};
    if (corrupt) {
      // The needle's code, the one place it stands in the prompt (else the item is left unpatched).
      const size_t at = prompt.rfind(asked.code);
      if (at != std::string::npos && prompt.find(asked.code) == at) {
        std::string other = asked.code;
        for (char& ch : other) ch = static_cast<char>('0' + (ch - '0' + 5) % 10);
        std::string bad = prompt;
        bad.replace(at, other.size(), other);
        item["corrupt"] = bad;
        item["corrupt_answer"] = " " + other;
      } else {
        ++plain;
      }
    }
    text += item.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    ++items;
  }
  write_file_atomically(out, text);
  std::printf(
      "wrote %s: %lld items (%s's tokenizer)%s\n", out.c_str(), static_cast<long long>(items),
      model.config().name.c_str(),
      corrupt ? (", " + std::to_string(items - plain) + " with a corrupt prompt" +
                 (plain ? " (" + std::to_string(plain) + " whose code stands twice: left unpatched)" : ""))
                    .c_str()
              : "");
  return 0;
}

Command episodes_command() {
  return {
      "episodes",
      "the needle sweep's held-out episodes as a prompt set for batch (JSON lines), with corrupt prompts for "
      "patching",
      joined({{required(text("out", "F.jsonl", "the prompt set")),
               models_option("the model whose tokenizer counts the tokens (the first)")},
              episode_options(),
              {flag("corrupt", "also a corrupt prompt per item: the needle's code changed digit by digit")}}),
      "Each episode of the sweep (lengths x depths x needles x seeds, one question) becomes an item: the prompt "
      "up to the asked code, the code as the answer, length/depth/needles/seed/name/digits as tags. "
      "The episodes are those `needle` runs with the same options.",
      cmd_episodes};
}

int cmd_outliers(const Args& a) {
  const std::string out = a.require("out");
  check_output_dir(out, "--out");
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  const std::string text =
      read_file((a.has("text-file") ? a.get("text-file") : bundled_asset("haystack.txt")), "text file");
  std::signal(SIGINT, on_interrupt);
  std::vector<std::string> names;
  std::vector<OutlierStats> stats;
  for (const std::string& dir : dirs) {
    const Model model = load_model(dir, device(a));
    names.push_back(model.config().name.empty() ? dir : model.config().name);
    // A window given is refused beyond the model's positions (by measure_outliers, with the limit); the
    // default 512 fits the model when it reads fewer.
    const int64_t window =
        a.has("window") ? a.get_int("window")
                        : std::min<int64_t>(a.get_int("window"), model.config().max_position_embeddings);
    stats.push_back(measure_outliers(
        model, text, window, a.get_int("max-windows"),
        [&](int64_t done, int64_t total) {
          progress("%s: window %lld/%lld", names.back().c_str(), static_cast<long long>(done),
                   static_cast<long long>(total));
        },
        &g_stop));
    progress_done();
  }
  const std::string md = app::write_outlier_report(out, names, stats);
  std::printf("%s\nwrote %s/tables.md, outliers.json, outliers.csv, logits.png/.svg, hidden.png/.svg\n",
              md.c_str(), out.c_str());
  return 0;
}

// --window and --max-windows (how outliers and loss cut a text), --device and --threads, after `c`'s own.
Command with_text_options(Command c, const std::string& window_help) {
  c.options.push_back(integer("window", "N", 2, 1 << 20, "512", window_help));
  c.options.push_back(integer("max-windows", "N", 0, 1 << 30, "0", "windows read at most (0: all)"));
  c.options.push_back(device_option("auto"));
  c.options.push_back(threads_option());
  return c;
}

Command outliers_command() {
  return with_text_options(
      {"outliers",
       "the paper's Table 5 over a whole text: k-th largest |attention logit| and |hidden state|",
       {required(text("out", "DIR", "the report's folder")), models_option("the models measured"),
        text("text-file", "F",
             "the text (default: the bundled haystack.txt, share/difflens/ when installed)")},
       "Writes tables.md, outliers.json, outliers.csv and histograms (PNG + SVG).",
       cmd_outliers},
      "tokens per window (each starts with BOS)");
}

int cmd_loss(const Args& a) {
  apply_threads(a);
  const std::string file = a.require("text-file");
  const std::string text = read_file(file, "text");
  const int window = a.get_int("window"), max_windows = a.get_int("max-windows");
  std::printf(
      "next-token cross-entropy over %s (consecutive windows of %d tokens, no BOS, as training validates)\n",
      file.c_str(), window);
  std::printf("%-24s %10s %8s %12s %12s\n", "model", "tokens", "windows", "nats/token", "perplexity");
  std::fflush(stdout);
  // Ctrl-C ends the model being scored after its current windows, with what they give; later models are
  // skipped.
  std::signal(SIGINT, on_interrupt);
  for (const std::string& dir : model_dirs(a)) {
    if (g_stop) break;
    const Model m = load_model(dir, device(a));
    const std::string name = m.config().name.empty() ? dir : m.config().name;
    TextLoss l;
    try {
      l = text_loss(
          m, text, window, max_windows,
          [&](int64_t done, int64_t total) {
            progress("%s: window %lld/%lld", name.c_str(), static_cast<long long>(done),
                     static_cast<long long>(total));
          },
          &g_stop);
      progress_done();
    } catch (const Cancelled&) {
      throw Error("stopped by Ctrl-C before " + name + " scored a window");
    }
    std::printf("%-24s %10lld %8lld %12.4f %12.2f%s\n", name.c_str(), static_cast<long long>(l.tokens),
                static_cast<long long>(l.windows), l.nats_per_token, std::exp(l.nats_per_token),
                l.windows < l.planned ? (" (stopped by Ctrl-C after " + std::to_string(l.windows) + " of " +
                                         std::to_string(l.planned) + " windows)")
                                            .c_str()
                                      : "");
    std::fflush(stdout);
  }
  if (g_stop) {
    std::printf("stopped by Ctrl-C: the figures above cover the windows scored\n");
    return 130;
  }
  return 0;
}

Command loss_command() {
  return with_text_options(
      {"loss",
       "next-token cross-entropy (nats/token) and perplexity of models over a text, in consecutive "
       "windows as training validates",
       {required(text("text-file", "F", "the text")), models_option("the models scored")},
       "Ctrl-C ends the model being scored with the windows scored so far.",
       cmd_loss},
      "tokens per window (no BOS, as training validates)");
}

int cmd_quantize(const Args& a) {
  if (a.has("out")) check_output_dir(a.get("out"), "--out");
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  const std::vector<int> bits = a.get_int_list("bits");
  const int needle_seeds = a.get_int("needle-seeds");
  const int needle_length = a.get_int("needle-length");
  const std::string hay_text =
      needle_seeds > 0 ? read_file((a.has("haystack") ? a.get("haystack") : bundled_asset("haystack.txt")),
                                   "haystack text")
                       : "";
  std::string md =
      "# Attention-logit quantization (absmax, per head, dynamic)\n\n| model | bits | max abs dA | "
      "mean abs dA | top-1 agreement |";
  if (needle_seeds > 0) md += " needle accuracy (" + std::to_string(needle_length) + " tokens) |";
  md += "\n|---|---|---|---|---|" + std::string(needle_seeds > 0 ? "---|" : "") + "\n";
  std::signal(SIGINT, on_interrupt);
  for (const std::string& dir : dirs) {
    Model model = load_model(dir, device(a));
    const std::string name = model.config().name.empty() ? dir : model.config().name;
    const std::vector<int64_t> ids = prompt_ids(a, model);
    CaptureOptions opt;
    opt.logit_stats = false;
    const Trace exact = model.capture(ids, opt, &g_stop);
    auto needle_accuracy = [&]() {
      const Haystack hay(hay_text, model.tokenizer());
      const EpisodeBuilder builder(hay, model.tokenizer(), NeedleSplit::Eval);
      int answered = 0, asked = 0;
      for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0})
        for (int s = 1; s <= needle_seeds; ++s) {
          const NeedleRun r =
              run_needle(model, builder, {needle_length, depth, 1, 1}, static_cast<uint64_t>(s), &g_stop);
          answered += r.answered;
          asked += r.asked;
        }
      return static_cast<double>(answered) / std::max(1, asked);
    };
    char b[256];
    if (needle_seeds > 0) {
      std::snprintf(b, sizeof b, "| %s | exact | 0 | 0 | 1.000 | %.2f |\n", name.c_str(), needle_accuracy());
      md += b;
    }
    for (int q : bits) {
      model.set_logit_bits(q);
      const Trace t = model.capture(ids, opt, &g_stop);
      const MapDrift d = map_drift(exact, t);
      std::snprintf(b, sizeof b, "| %s | %d | %.4f | %.6f | %.3f |", name.c_str(), q, d.max_abs, d.mean_abs,
                    d.top1_agreement);
      md += b;
      if (needle_seeds > 0) {
        std::snprintf(b, sizeof b, " %.2f |", needle_accuracy());
        md += b;
      }
      md += "\n";
      std::fprintf(stderr, "%s: %d bits done\n", name.c_str(), q);
    }
    model.set_logit_bits(0);
  }
  md +=
      "\ndA: the change of A (DIFF: A1 - lambda A2; baseline: its softmax map) over every layer, head and "
      "causal entry of the prompt; top-1 agreement: query rows whose most-attended key stays the same. "
      "Paper (Fig. 8, 3B): 4-bit DIFF behaves about like 6-bit Transformer.\n";
  std::printf("%s", md.c_str());
  if (a.has("out")) {
    std::filesystem::create_directories(a.get("out"));
    const std::string f = (std::filesystem::path(a.get("out")) / "quantize.md").string();
    write_file_atomically(f, md);
    std::printf("wrote %s\n", f.c_str());
  }
  return 0;
}

Command quantize_command() {
  return {"quantize",
          "how far attention maps move when the logits are absmax-quantized (per head, dynamic)",
          {prompt_option(), prompt_file_option(), specials_option(), models_option("the models measured"),
           defaulted(int_list("bits", "8,6,4", 2, 32, 1, 0, "logit widths in bits"), "8,6,4"),
           integer("needle-seeds", "K", 0, 10000, "0",
                   "also needle accuracy at each width over K seeds (0: none)"),
           integer("needle-length", "T", 64, 1 << 20, "256", "the needle prompts' length in tokens"),
           haystack_option(), text("out", "DIR", "also write DIR/quantize.md"), device_option("auto"),
           threads_option()},
          "Give exactly one of --prompt, --prompt-file.",
          cmd_quantize};
}

// `difflens heads`: every head's TransformerLens scores (and spread, sink) on a prompt or on repeated random
// tokens, as CSV, with each model's strongest head per score.
int cmd_heads(const Args& a) {
  const std::string out = a.require("out");
  check_output_file(out, "--out", {".csv"});
  const int repeated = a.get_int("repeated");
  if ((repeated > 0) + a.has("prompt") + a.has("prompt-file") != 1)
    throw Error("give exactly one of --prompt, --prompt-file, --repeated N");
  apply_threads(a);
  std::string csv = "model,layer,head,previous_token,duplicate_token,induction,entropy_norm,sink\n";
  std::signal(SIGINT, on_interrupt);
  for (const std::string& dir : model_dirs(a)) {
    Model model = load_model(dir, device(a));
    const std::string name = model.config().name.empty() ? dir : model.config().name;
    const Tokenizer& tok = model.tokenizer();
    // Repeated random tokens as TransformerLens's demos draw them (uniform ids after BOS), kept to ids whose
    // text reads back as themselves: the GUI's "repeated random tokens" prompt is the same sequence.
    const std::vector<int64_t> ids =
        repeated > 0 ? repeated_random_prompt(tok, repeated, static_cast<uint64_t>(a.get_int("seed"))).ids
                     : prompt_ids(a, model);
    CaptureOptions opt;
    opt.logit_stats = false;
    const Trace t = model.capture(ids, opt, &g_stop);
    if (t.layers.empty() || t.layers[0].pooled > 0)
      throw Error(name + ": " + std::to_string(ids.size()) +
                  " tokens were captured as pooled maps; head scores need exact maps (a shorter prompt)");
    std::vector<int64_t> rows(ids.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    const HeadSummaries r = head_summaries(t, rows, {}, {});
    struct Best {
      double score = -2;
      int layer = -1, head = -1;
    };
    std::array<Best, 3> best;
    char line[256];
    for (size_t l = 0; l < r.layers.size(); ++l)
      for (size_t h = 0; h < r.heads[l].size(); ++h) {
        const HeadSummary& s = r.per_head[l][h];
        std::snprintf(line, sizeof line, ",%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f\n", r.layers[l], r.heads[l][h],
                      s.previous_token, s.duplicate_token, s.induction, s.entropy_norm, s.sink);
        csv += app::csv_field(name) + line;
        const std::array<double, 3> v = {s.previous_token, s.duplicate_token, s.induction};
        for (size_t k = 0; k < 3; ++k)
          if (v[k] > best[k].score) best[k] = {v[k], r.layers[l], r.heads[l][h]};
      }
    std::printf("%s (%zu tokens%s):", name.c_str(), ids.size(),
                repeated > 0 ? (", " + std::to_string(repeated) + " random tokens twice").c_str() : "");
    for (size_t k = 0; k < 3; ++k)
      std::printf("%s %s L%d H%d %.3f", k ? "," : "",
                  head_pattern_name(std::array<HeadPattern, 3>{
                      HeadPattern::PreviousToken, HeadPattern::DuplicateToken, HeadPattern::Induction}[k]),
                  best[k].layer, best[k].head, best[k].score);
    std::printf("\n");
  }
  write_file_atomically(out, csv);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

Command heads_command() {
  return {
      "heads",
      "every head's previous-token, duplicate-token and induction scores (TransformerLens's head detector) "
      "on a prompt or on repeated random tokens, as CSV",
      {required(text("out", "FILE.csv", "the CSV: model, layer, head, the three scores, entropy_norm, sink")),
       prompt_option(), prompt_file_option(), specials_option(),
       integer("repeated", "N", 0, 4096, "0",
               "N random tokens after BOS, then the same N again (the induction score's prompt, as the Model "
               "view's; 0: none)"),
       integer("seed", "S", 0, 1000000000, "1", "the random tokens' seed"),
       models_option("the models scored"), device_option("auto"), threads_option()},
      "Give exactly one of --prompt, --prompt-file, --repeated. Scores: sum of A over the pattern's cells / "
      "sum of |A| over the whole map (A = A1 - lambda A2 for DIFF: weight taken away counts against).",
      cmd_heads};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// --threads and --isa of bench, in force for this thread.
void set_bench_cpu(const Args& a) {
  set_num_threads(a.get_int("threads"));
  const CpuIsa isa =
      std::array<CpuIsa, 4>{CpuIsa::Auto, CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Plain}[a.choice_index("isa")];
  if (!set_cpu_isa(isa)) throw Error("--isa " + a.get("isa") + ": this CPU does not have it");
}

// The four products of a layer of `c` as the CPU's layer passes run them: name, output columns N and depth K
// of y [T, N] = x [T, K] · Wᵀ.
struct LayerProduct {
  const char* name;
  int64_t N, K;
};
std::vector<LayerProduct> layer_products(const ModelConfig& c) {
  const QkvLayout l = qkv_layout(c);
  const int64_t E = c.hidden_size, F = c.intermediate_size;
  return {{"qkv", l.width(), E}, {"o", E, l.q.heads * l.dv()}, {"gate_up", 2 * F, E}, {"down", E, F}};
}

// A positive number to three significant digits, never in exponent form (0.00197, 42.0, 1330).
std::string three_digits(double v) {
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(std::max(v, 1e-9)))));
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// bench --matmul: each product of a layer of the bundled DIFF model and of a 1B-class model (Llama 3.2 1B's
// widths) computed as the layer passes compute it (blocks of rows spread over the threads, one call per
// block) by the hand-written kernel and by cblas_sgemm, alternating run by run; medians and their ratio.
int bench_matmul(const Args& a) {
  if (!blas_available())
    throw Error("bench --matmul: this build has no OpenBLAS (install libopenblas-openmp-dev, reconfigure)");
  set_bench_cpu(a);
  std::vector<int> tokens = a.get_int_list("matmul");
  for (int& T : tokens) T = static_cast<int>(quick_cap("matmul tokens", T, 64));  // DIFFLENS_QUICK
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  const int repeats = static_cast<int>(quick_cap("repeats", a.get_int("repeats"), 2));
  PairSpec spec;  // Llama 3.2 1B's widths: 32 heads of 64, 8 key/value heads, E 2048, MLP 8192
  spec.hidden_size = 2048;
  spec.diff_heads = 16;
  spec.diff_kv_heads = 4;
  ModelConfig one_b = make_matched_pair(spec).second;
  one_b.intermediate_size = 8192;
  one_b.name = "1B-class";
  ModelConfig bundled = load_config(std::filesystem::path(bundled_model("diff-small")) / "config.json");
  bundled.name = "bundled DIFF";
  const int workers = num_threads();
  std::printf(
      "bench --matmul: y = x W^T as the CPU layer passes compute it (rows in blocks over %d threads), "
      "hand-written kernel (%s) against OpenBLAS's cblas_sgemm (its %s kernels), F32, median of at least %d "
      "runs each (short products: 50 ms of runs), alternating, after one warm-up\n\n",
      workers, cpu_isa_name(), blas_core_name().c_str(), repeats);
  std::printf(
      "| model | product | N x K | T | rows per call | kernel ms | cblas_sgemm ms | sgemm / kernel |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  uint64_t seed = 1;
  auto fill = [&seed](std::vector<float>& v) {  // uniform in [-1, 1): a cheap generator, any values do
    for (float& x : v) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      x = static_cast<float>(static_cast<int64_t>(seed >> 40) - (int64_t{1} << 23)) /
          static_cast<float>(1 << 23);
    }
  };
  for (const ModelConfig* c : {&bundled, &one_b})
    for (const LayerProduct& p : layer_products(*c)) {
      std::vector<float> w(static_cast<size_t>(p.N * p.K));
      fill(w);
      set_matmul_code(MatmulCode::Blas);  // packed with W's rows too
      const PackedMatrix packed = pack_matrix({{w.data(), WeightDtype::F32, p.N}}, p.K);
      for (const int T : tokens) {
        std::vector<float> x(static_cast<size_t>(T) * static_cast<size_t>(p.K)),
            y(static_cast<size_t>(T * p.N));
        fill(x);
        const int64_t rows = layer_block_rows(T, workers), blocks = (T + rows - 1) / rows;
        auto timed = [&](MatmulCode code) {
          set_matmul_code(code);
          const auto t0 = std::chrono::steady_clock::now();
          cpu_parallel()(blocks, [&](int64_t b0, int64_t b1, int) {
            for (int64_t b = b0; b < b1; ++b) {
              const int64_t r0 = b * rows, n = std::min<int64_t>(rows, T - r0);
              matmul_cpu(x.data() + r0 * p.K, n, p.K, packed, y.data() + r0 * p.N, p.N, false);
            }
          });
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        };
        timed(MatmulCode::Kernel);
        timed(MatmulCode::Blas);
        // Alternating, each first every other run, so that drift hits both; short products run until each
        // code has taken 50 ms (at most 200 runs): on a shared machine one parallel region in a few waits a
        // scheduler tick (4-8 ms) for its second thread, and a median of a few runs can be all ticks.
        std::vector<double> kernel, blas;
        double spent = 0;
        for (int r = 0; r < repeats || (spent < 50 && r < 200); ++r) {
          if (r % 2) blas.push_back(timed(MatmulCode::Blas));
          kernel.push_back(timed(MatmulCode::Kernel));
          if (r % 2 == 0) blas.push_back(timed(MatmulCode::Blas));
          spent += std::min(kernel.back(), blas.back());
        }
        const double k = median(kernel), b = median(blas);
        std::printf("| %s | %s | %lld x %lld | %d | %lld | %s | %s | %.2f |\n", c->name.c_str(), p.name,
                    static_cast<long long>(p.N), static_cast<long long>(p.K), T,
                    static_cast<long long>(std::min<int64_t>(rows, T)), three_digits(k).c_str(),
                    three_digits(b).c_str(), b / k);
        std::fflush(stdout);
      }
    }
  set_matmul_code(MatmulCode::Auto);
  return 0;
}

// bench --why: what one change in the Why view costs against a capture of the same prompt: the app's
// capture (queries, keys and values kept) alone, then with the explanation under an intervention (the lens
// and the attribution), the as-trained explanation of that prompt and query reused from the first run.
int bench_why(const Args& a, std::vector<Model>& models, const std::vector<int>& lengths, int repeats) {
  CaptureOptions opt;
  opt.keep_qkv = true;
  opt.position_top_k = 5;
  std::printf(
      "bench --why: median of %d runs after a warm-up; capture as the app runs it (maps, queries, keys "
      "and values kept, each position's top 5), explain = the logit lens and the direct attribution at "
      "the last token under the intervention (the app reuses the as-trained one); a knockout runs the "
      "attention without the fused kernel (LibTorch's scaled_dot_product_attention) wherever it applies\n",
      repeats);
  std::printf("%-9s %6s %-20s %12s %12s %12s %8s\n", "model", "T", "intervention", "capture ms", "explain ms",
              "change ms", "change/capture");
  (void)a;
  for (int T : lengths)
    for (const Model& m : models) {
      if (T > m.config().max_position_embeddings) continue;
      const ModelConfig& c = m.config();
      std::vector<int64_t> ids(static_cast<size_t>(T));
      for (int i = 0; i < T; ++i) ids[i] = 3 + (i * 7919) % (c.vocab_size - 3);
      // As trained, the change the Why view's slider makes, and a knockout of three keys in every layer.
      double plain = 0;
      for (const std::string& spec : {std::string(), std::string(c.is_diff() ? "lambda=0" : "ablate:0:0"),
                                      std::string("knockout=drop:1-4@4-")}) {
        CaptureOptions edited = opt;
        if (!spec.empty())
          edited.interventions = resolve_interventions(std::vector<std::string>{spec}, c, {}, T);
        LensOptions lo;  // as the Why view asks: the lens at the query
        lo.interventions = edited.interventions;
        lo.lens_at_query_only = true;
        auto ms_of = [](auto&& f) {
          const auto t0 = std::chrono::steady_clock::now();
          f();
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        };
        std::vector<double> cap, exp;
        (void)m.capture(ids, edited);
        (void)m.explain_answer(ids, lo);
        for (int r = 0; r < repeats; ++r) {
          cap.push_back(ms_of([&] { (void)m.capture(ids, edited); }));
          exp.push_back(ms_of([&] { (void)m.explain_answer(ids, lo); }));
        }
        const double cm = median(cap), em = median(exp);
        if (spec.empty()) plain = cm;
        std::printf("%-9s %6d %-20s %12.1f %12.1f %12.1f %8.2f\n", to_string(c.attention), T,
                    spec.empty() ? "none" : spec.c_str(), cm, em, cm + em, (cm + em) / plain);
        std::fflush(stdout);
      }
    }
  return 0;
}

int cmd_bench(const Args& a) {
  if (a.has("matmul")) return bench_matmul(a);
  const DeviceChoice where = device(a);
  CaptureOptions opt;
  opt.keep_maps = !a.has("no-maps");
  opt.logit_stats = !a.has("no-stats");
  opt.pooled_budget_bytes = pooled_budget_bytes(a);
  opt.pooling = std::array<PoolingPath, 4>{PoolingPath::Auto, PoolingPath::Host, PoolingPath::Kernel,
                                           PoolingPath::Products}[a.choice_index("pooling")];
  set_bench_cpu(a);
  std::vector<int> lengths = a.get_int_list("lengths");
  for (int& T : lengths) T = static_cast<int>(quick_cap("bench length", T, 2048));  // DIFFLENS_QUICK
  const int repeats = static_cast<int>(quick_cap("repeats", a.get_int("repeats"), 2));

  std::vector<Model> models;
  if (a.has("models")) {
    for (const std::string& dir : model_dirs(a, 2, "DIFF_DIR,BASELINE_DIR"))
      models.push_back(load_model(dir, where));
  } else {
    PairSpec spec = pair_spec(a);
    spec.max_position_embeddings = std::max<int64_t>(4096, *std::max_element(lengths.begin(), lengths.end()));
    auto [d, b] = make_matched_pair(spec);
    models.push_back(Model::random(d, 1, where));
    models.push_back(Model::random(b, 1, where));
  }
  if (a.has("why")) return bench_why(a, models, lengths, repeats);
  const ModelConfig& c0 = models[0].config();
  std::printf(
      "bench: %lld layers, E=%lld, %lld DIFF heads / %lld baseline heads, vocab %lld, %s (%s), %d threads, "
      "median of %d runs (after one untimed warm-up run unless a run takes over 60 s), %s + %s\n",
      static_cast<long long>(c0.num_hidden_layers), static_cast<long long>(c0.hidden_size),
      static_cast<long long>(models[0].config().map_heads()),
      static_cast<long long>(models[1].config().map_heads()), static_cast<long long>(c0.vocab_size),
      models[0].device_name().c_str(), cpu_isa_name(), num_threads(), repeats,
      opt.keep_maps ? "all maps kept" : "no maps kept",
      opt.logit_stats ? "logit statistics" : "no logit statistics");
  const std::string no_kernels = kernel_pooling_unsupported(models[0].config());
  if (opt.pooled_budget_bytes)
    std::printf(
        "long prompts: pooled maps within %s per model once the exact maps would exceed it, pooled %s\n",
        mb(opt.pooled_budget_bytes).c_str(),
        opt.pooling == PoolingPath::Host ? "on the host (a CPU model's fused pass as rows are made; a GPU "
                                           "model's blocks of maps copied there)"
        : opt.pooling == PoolingPath::Kernel ? "by the CUDA kernels from the queries and keys (no map made)"
        : opt.pooling == PoolingPath::Products
            ? "by the CUDA kernels from logits that cuBLAS matrix products write, a chunk of rows at a time"
        : models[0].device_name() == "cpu" ? "by the CPU's fused pass as rows are made (auto)"
        : no_kernels.empty()               ? "by the CUDA kernels from the queries and keys (auto)"
                                           : ("on the host (auto: " + no_kernels + ")").c_str());
  const size_t resident_before =
      static_cast<size_t>(static_cast<int64_t>(process_memory_kb("VmRSS:"))) * 1024;
  std::printf("resident before the captures (process, libraries, weights): %s\n",
              mb(resident_before).c_str());
  std::printf(
      "(peak RSS: the process's high-water mark so far; plan: what the capture plan expects a capture to add to "
      "what was resident before it)\n");
  std::printf("%-9s %6s %12s %12s %12s %8s %12s %12s\n", "model", "T", "median ms", "min ms", "trace",
              "pooled", "peak RSS", "plan");
  for (int T : lengths) {
    std::vector<int64_t> ids(static_cast<size_t>(T));
    for (int i = 0; i < T; ++i) ids[i] = 3 + (i * 7919) % (c0.vocab_size - 3);  // deterministic pseudo-text
    for (const Model& m : models) {
      if (T > m.config().max_position_embeddings) {
        std::printf("%-9s %6d  (longer than the model's %lld positions)\n", to_string(m.config().attention),
                    T, static_cast<long long>(m.config().max_position_embeddings));
        continue;
      }
      size_t bytes = 0;
      int64_t pooled_cells = 0;
      auto timed_capture = [&] {
        const auto t0 = std::chrono::steady_clock::now();
        const Trace t = m.capture(ids, opt);
        const double run_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        bytes = t.byte_size();
        pooled_cells = t.layers.empty() ? 0 : t.layers[0].pooled;
        return run_ms;
      };
      // The first run warms caches and the allocator (page faults of fresh buffers). That effect is
      // small beside a run of over a minute (~1 s measured at 1K tokens), so such a run counts as the first
      // timed one (a 64K prompt is not captured twice for nothing); a shorter one is discarded.
      std::vector<double> ms;
      if (const double first = timed_capture(); first >= 60000.0) ms.push_back(first);
      while (static_cast<int>(ms.size()) < repeats) ms.push_back(timed_capture());
      CaptureMachine machine;  // what the plan expects (nothing refused: the capture above ran)
      machine.cuda = m.device_name() != "cpu";
      if (machine.cuda) {
        machine.no_kernels = kernel_pooling_unsupported(m.config());
        machine.no_products = "";  // the capture above ran, so whatever --pooling asked for is there
      }
      const CapturePlan plan = plan_capture(m.config(), ids, opt, 0, machine);
      std::printf("%-9s %6d %12.1f %12.1f %12s %8s %12s %12s\n", to_string(m.config().attention), T,
                  median(ms), *std::min_element(ms.begin(), ms.end()), mb(bytes).c_str(),
                  pooled_cells > 0 ? (std::to_string(pooled_cells) + "^2").c_str() : "exact",
                  mb(static_cast<size_t>(static_cast<int64_t>(process_memory_kb("VmHWM:"))) * 1024).c_str(),
                  ("+" + mb(static_cast<size_t>(plan.host_bytes))).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

Command bench_command() {
  Command c{
      "bench",
      "median prompt->Trace time of a matched pair, all maps kept",
      {defaulted(int_list("lengths", "128,512", 2, 1 << 20, 1, 0, "prompt lengths in tokens"),
                 "128,512,2048"),
       integer("repeats", "N", 1, 1000, "5", "timed runs per length"),
       integer("threads", "N", 1, 4096, "2", "CPU threads"),
       text("models", "DIFF_DIR,BASELINE_DIR", "a pair to time (default: a random pair of the shape below)")},
      "Prints the memory resident before the captures and the peak after each row; long prompts' maps are "
      "pooled on the host (on the CPU by the fused attention pass as rows are made), or on a GPU by the CUDA "
      "kernels straight from the queries and keys (--pooling auto = kernel on a GPU when this build has them "
      "and they take the model's head width, else host), or by those kernels from logits that cuBLAS matrix "
      "products write a chunk of rows at a time (--pooling products, any head width). --matmul times the CPU layers' matrix "
      "products instead, the hand-written kernel against cblas_sgemm, each as the layer passes call it.",
      cmd_bench};
  for (Option& o : pair_shape_options()) c.options.push_back(std::move(o));
  c.options.push_back(flag("no-maps", "keep no maps"));
  c.options.push_back(flag("no-stats", "no logit statistics"));
  c.options.push_back(flag("why",
                           "instead: one change of the Why view (a capture and the explanation under an "
                           "intervention) against the capture alone"));
  c.options.push_back(pooled_budget_option(""));
  c.options.push_back(device_option("cpu"));
  c.options.push_back(choice("pooling", "auto|host|kernel|products", "auto", "who pools long prompts' maps"));
  c.options.push_back(
      choice("isa", "auto|avx512|avx2|x86-64", "auto",
             "the CPU's attention pass compiled for this instruction set (auto: the widest there is)"));
  c.options.push_back(
      int_list("matmul", "T,...", 1, 65536, 1, 0,
               "instead of captures: the CPU layers' matrix kernel against OpenBLAS's "
               "cblas_sgemm on the bundled and 1B-class layers' products at these token counts"));
  return c;
}

}  // namespace

std::vector<Command> measure_commands() {
  return {needle_command(), episodes_command(), outliers_command(), quantize_command(),
          loss_command(),   bench_command(),    heads_command()};
}

}  // namespace difflens::cli
