// Commands on one model or checkpoint: capture, init-pair, generate, tokenize, info, convert.
#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/cli/run_support.h"
#include "app/common/files.h"
#include "app/remote/client.h"
#include "core/formats/checkpoint.h"
#include "core/formats/config.h"
#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/formats/remote.h"
#include "core/formats/trace.h"
#include "core/formats/trace_io.h"
#include "core/model/capture_plan.h"
#include "core/model/checkpoint_layout.h"

namespace difflens::cli {
namespace {

// What a capture printed after its model and timing lines, local or remote: λ per layer (DIFF), the
// |logit| and |hidden| statistics, the next-token top 5 and the files written.
void print_trace_summary(const Trace& trace, const std::string& out) {
  if (trace.config.is_diff_v2()) {  // λ per head and token: each layer's mean and range
    std::printf("lambda   ");
    for (const auto& l : trace.layers) {
      const auto [lo, hi] = std::minmax_element(l.lambda_rows.data.begin(), l.lambda_rows.data.end());
      std::printf(" L%d=%.4f [%.4f, %.4f]", l.index, l.lambda, l.lambda_rows.data.empty() ? 0.0f : *lo,
                  l.lambda_rows.data.empty() ? 0.0f : *hi);
    }
    std::printf("  (mean [range] of sigma(x_t . w_lambda,h) over tokens and heads)\n");
  } else if (trace.config.is_diff()) {
    std::printf("lambda   ");
    for (const auto& l : trace.layers) std::printf(" L%d=%.4f", l.index, l.lambda);
    std::printf("\n");
  }
  const ValueStats logits = pooled_logit_stats(trace), hidden = pooled_hidden_stats(trace);
  std::printf("|logits|  top-1 %.3f  top-10 %.3f  median %.3f\n", logits.top_k(1), logits.top_k(10),
              logits.median);
  std::printf("|hidden|  top-1 %.3f  top-10 %.3f  median %.3f\n", hidden.top_k(1), hidden.top_k(10),
              hidden.median);
  std::printf("next      ");
  for (size_t i = 0; i < std::min<size_t>(5, trace.next_token.size()); ++i)
    std::printf("%s%s %.3f", i ? ", " : "", trace.next_token[i].text.c_str(),
                trace.next_token[i].probability);
  const std::filesystem::path dir(out);
  std::printf("\nwrote     %s, %s\n", (dir / "trace.json").string().c_str(),
              (dir / "maps.safetensors").string().c_str());
  if (const std::string bad = trace.nonfinite_summary(); !bad.empty())
    std::fprintf(stderr, "difflens: warning: the trace holds values that are not finite (%s)\n", bad.c_str());
}

// capture --model remote://HOST:PORT/N: the same request to `difflens serve`, the reply written as a bundle.
int capture_remote(const Args& a) {
  const std::string out = a.require("out");
  app::RemoteAddress addr = app::parse_remote(a.get("model"));
  if (addr.model < 0) addr.model = 0;
  const app::RemoteClient client(addr);
  const app::RemoteModelInfo info = client.model_info();
  remote::CaptureRequest q;
  const int sources = a.has("prompt") + a.has("prompt-file") + a.has("token-ids");
  if (sources != 1) throw Error("give exactly one of --prompt, --prompt-file, --token-ids");
  if (a.has("token-ids"))
    q.token_ids = parse_token_ids(a.get("token-ids"), info.config.vocab_size);
  else
    q.prompt = a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
  if (q.prompt && q.prompt->empty()) throw Error("the prompt is empty: nothing to run");
  q.bos = !a.has("no-bos");
  q.specials = prompt_specials(a);
  if (a.has("token-ids") && q.specials == Specials::text)
    throw Error("--specials is for a text prompt, not --token-ids");
  q.keep_maps = !a.has("no-maps");
  for (int l : a.get_int_list("layers")) q.layers.push_back(l);
  for (int h : a.get_int_list("heads")) q.heads.push_back(h);
  q.keep_logits = a.has("keep-logits");
  q.keep_hidden = a.has("keep-hidden");
  q.keep_qkv = a.has("keep-qkv");
  q.pooled_budget_bytes = pooled_budget_bytes(a);  // the server's limits apply; exact maps unless given
  q.top_k = a.get_int("top-k");
  q.position_top_k = a.get_int("position-top-k");
  q.interventions = a.get_all("intervene");  // the server resolves them against its model
  if (a.has("answer")) {
    q.answer_begin = a.get_int_list("answer")[0];
    q.answer_end = a.get_int_list("answer")[1];
  }
  if (a.has("query")) q.query = a.get_int("query");
  const app::RemoteCapture c = client.capture(q, &g_stop);
  write_trace_bundle(*c.trace, out);
  std::printf("model     %s (%s on %s: %s)\n", addr.text().c_str(), info.path.c_str(), addr.host.c_str(),
              info.description.c_str());
  std::printf("tokens    %lld\n", static_cast<long long>(c.trace->length()));
  std::printf("capture   %.1f ms on the server, round trip %.1f ms, reply %s\n", c.server_ms, c.round_trip_ms,
              mb(c.bytes).c_str());
  if (!c.trace->interventions.empty())
    std::printf("%s\n", interventions_line(c.trace->interventions).c_str());
  print_trace_summary(*c.trace, out);
  return 0;
}

// The capture's budget for exact maps (the app's default, 256 MB, unless --pooled-budget names one): beyond
// it long prompts are pooled, as in the app, rather than writing gigabytes unasked (4K tokens of a 98 M
// model: 13.8 GB). Full logits have no pooled form: over the default budget they are refused, with the size.
// A model run with quantized logits keeps exact maps (pooling does not combine with it). Returns the exact
// maps' size.
double capture_budget(const Args& a, const Model& model, const std::vector<int64_t>& ids,
                      CaptureOptions& opt) {
  CaptureOptions exact = opt;
  exact.pooled_budget_bytes = 0;
  const CapturePlan plan = plan_capture(model.config(), ids, exact, 0, CaptureMachine{});
  if (a.has("pooled-budget") || model.logit_bits() > 0) return plan.exact_map_bytes;
  const size_t budget = kDefaultPooledBudgetMb << 20;
  if (opt.keep_logits && plan.exact_map_bytes + plan.logits_bytes > static_cast<double>(budget))
    throw Error("--keep-logits: this prompt's exact maps and logits take " +
                mb(static_cast<size_t>(plan.exact_map_bytes + plan.logits_bytes)) +
                ", over the default budget of " + mb(budget) +
                " (full logits have no pooled form); give --pooled-budget 0 to write them all the same, or "
                "leave out --keep-logits for pooled maps");
  // Only the maps' size decides: without maps (or with few kept) nothing is pooled unasked.
  if (!opt.keep_logits && opt.keep_maps && plan.exact_map_bytes > static_cast<double>(budget))
    opt.pooled_budget_bytes = budget;
  return plan.exact_map_bytes;
}

int cmd_capture(const Args& a) {
  const std::string out = a.require("out");
  check_output_dir(out, "--out");
  apply_threads(a);
  if (app::is_remote(a.get("model"))) return capture_remote(a);
  Model model = load_model(a.require("model"), device(a));
  const std::vector<int64_t> ids = prompt_ids(a, model);
  CaptureOptions opt;
  opt.keep_maps = !a.has("no-maps");
  opt.pooled_budget_bytes = pooled_budget_bytes(a);
  opt.layers = a.get_int_list("layers");
  opt.heads = a.get_int_list("heads");
  opt.keep_logits = a.has("keep-logits");
  opt.keep_hidden = a.has("keep-hidden");
  opt.keep_qkv = a.has("keep-qkv");
  opt.next_token_top_k = a.get_int("top-k");
  opt.position_top_k = a.get_int("position-top-k");
  opt.interventions = interventions_of(a, model.config(), static_cast<int64_t>(ids.size()));
  const double exact_bytes = capture_budget(a, model, ids, opt);
  const Trace trace = model.capture(ids, opt);
  write_trace_bundle(trace, out);
  if (trace.pooled_budget > 0 && !trace.layers.empty())
    std::fprintf(
        stderr,
        "capture: exact maps of %lld tokens would take %s: pooled maps written instead (mean and max, "
        "%lld x %lld cells a map, within %s; rows and tiles are recomputed exactly from the kept "
        "queries and keys); --pooled-budget 0 keeps them exact\n",
        static_cast<long long>(trace.length()), mb(static_cast<size_t>(exact_bytes)).c_str(),
        static_cast<long long>(trace.layers.front().pooled),
        static_cast<long long>(trace.layers.front().pooled), mb(trace.pooled_budget).c_str());

  const ModelConfig& c = model.config();
  std::printf("model     %s (%s, %lld layers, %lld heads, %lld params) on %s\n", a.get("model").c_str(),
              to_string(c.attention), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.map_heads()), static_cast<long long>(model.parameter_count()),
              model.device_name().c_str());
  std::printf("tokens    %lld\n", static_cast<long long>(trace.length()));
  const std::string where = model.device_name().rfind("cpu", 0) == 0
                                ? "on " + std::to_string(num_threads()) + " CPU threads"
                                : "on " + model.device_name();
  std::printf("capture   %.1f ms %s, trace %s\n", trace.elapsed_ms, where.c_str(),
              mb(trace.byte_size()).c_str());
  if (!trace.interventions.empty()) std::printf("%s\n", interventions_line(trace.interventions).c_str());
  print_trace_summary(trace, out);
  return 0;
}

Command capture_command() {
  return {
      "capture",
      "run one model on a prompt and write a trace bundle (trace.json + maps.safetensors)",
      {required(
           text("model", "DIR", "the model directory, or remote://HOST:PORT/N?token=T (difflens serve)")),
       prompt_option(),
       prompt_file_option(),
       specials_option(),
       text("token-ids", "1,2,3", "the prompt as token ids"),
       required(text("out", "DIR", "the bundle's folder")),
       int_list("layers", "0,1", 0, 1e6, 0, 0, "the layers whose maps are kept (default all)"),
       int_list("heads", "0,3", 0, 1e6, 0, 0, "the heads whose maps are kept (default all)"),
       flag("no-maps", "keep no maps (statistics, lambda and the next token only)"),
       flag("keep-logits", "add the full pre-softmax attention logits"),
       flag("keep-hidden", "add the hidden states"),
       flag("keep-qkv",
            "add the rotated queries and keys, values and output-norm weights (what Explain "
            "recomputes a head from)"),
       integer("top-k", "N", 1, 1e6, "10", "next-token candidates kept"),
       integer("position-top-k", "K", 0, 100, "5",
               "every position's K likeliest next tokens and the actual next token's probability and rank "
               "(0: none)"),
       flag("no-bos", "do not start the prompt with the tokenizer's BOS"),
       intervene_option(),
       answer_option(),
       query_option(),
       device_option("auto"),
       threads_option(),
       pooled_budget_option(std::to_string(kDefaultPooledBudgetMb))},
      "Give exactly one of --prompt, --prompt-file, --token-ids. Statistics are kept for every layer and head "
      "whatever --layers/--heads keep. Exact maps over the budget (--pooled-budget, 256 MB unless given) are "
      "pooled, as in the app, and the command says so; --keep-logits over it is refused with the size unless "
      "--pooled-budget 0 asks for everything exact.",
      cmd_capture};
}

int cmd_init_pair(const Args& a) {
  const std::filesystem::path out = a.require("out");
  const PairSpec spec = pair_spec(a);
  auto [diff_cfg, base_cfg] = make_matched_pair(spec);
  const bool v2 = a.get("arch") == "diff-v2";
  if (v2) diff_cfg = make_matched_diff_v2(spec);
  const std::string name = v2 ? "diff-v2" : "diff";
  for (const std::string& sub : {name, std::string("baseline")}) {
    std::error_code ec;
    if (std::filesystem::exists(out / sub, ec) && !std::filesystem::is_empty(out / sub, ec) &&
        !a.has("overwrite"))
      throw Error((out / sub).string() +
                  ": exists and is not empty; refusing to overwrite it (choose a new --out, or --overwrite)");
  }
  check_output_dir(out.string(), "--out");
  const uint64_t seed = static_cast<uint64_t>(a.get_int("seed"));
  diff_cfg.name = name + " (untrained, seed " + std::to_string(seed) + ")";
  base_cfg.name = "baseline (untrained, seed " + std::to_string(seed) + ")";
  const Model diff = Model::random(diff_cfg, seed);
  const Model base = Model::random(base_cfg, seed);
  diff.save(out / name);
  base.save(out / "baseline");
  std::printf("wrote %s/%s (%lld params) and %s/baseline (%lld params): untrained, seeded random weights\n",
              out.c_str(), name.c_str(), static_cast<long long>(diff.parameter_count()), out.c_str(),
              static_cast<long long>(base.parameter_count()));
  return 0;
}

Command init_pair_command() {
  Command c{
      "init-pair",
      "write a seeded, untrained, parameter-matched DIFF + baseline pair (DIR/diff and DIR/baseline)",
      {required(text("out", "DIR", "the folder for both models")),
       choice("arch", "diff|diff-v2", "diff",
              "diff: DIFF V1 with H heads beside the baseline's 2H; diff-v2 (written to DIR/diff-v2): DIFF "
              "V2 with the baseline's 2H heads, twice the query sub-heads and a lambda_proj"),
       flag("overwrite", "replace DIR/diff and DIR/baseline when they hold files (refused without it)")},
      "",
      cmd_init_pair};
  for (Option& o : pair_shape_options()) c.options.push_back(std::move(o));
  c.options.push_back(integer("seed", "S", 0, 2147483647, "1", "random seed"));
  return c;
}

int cmd_info(const Args& a) {
  const Model m = load_model(a.require("model"), device(a));
  std::cout << config_to_json_text(m.config());
  const ModelConfig& c = m.config();
  std::printf(
      "architecture: %s\nattention: %s%s\nparameters: %lld\nweights on disk: %s (in memory: %s, %s)\n"
      "device: %s\n",
      c.architecture.c_str(), to_string(c.attention),
      c.is_diff_v2() ? " (Differential Attention V2: lambda per token and head, query sub-heads 2h and 2h+1 "
                       "share a key/value head)"
      : c.is_diff()  ? (c.diff_pairing == DiffPairing::Adjacent ? " (official layout: adjacent components)"
                                                                : " (DiffLlama layout: components in halves)")
                     : "",
      static_cast<long long>(m.parameter_count()), m.source_dtype().c_str(), m.weight_storage().c_str(),
      human_bytes(Model::weight_memory_bytes(c, m.weight_storage() != "F32")).c_str(),
      m.device_name().c_str());
  if (c.architecture == "diff-mlx")
    std::printf(
        "embeddings: tied (diff-mlx's model.py ties the output to the embedding whatever its "
        "tie_embeddings says)\n");
  if (c.trained_positions > 0)
    std::printf("positions: trained to %lld tokens (block_size); longer prompts run, with a note\n",
                static_cast<long long>(c.trained_positions));
  if (!m.tokenizer_note().empty()) std::printf("tokenizer: %s\n", m.tokenizer_note().c_str());
  return 0;
}

Command info_command() {
  return {"info",
          "print a checkpoint's configuration, architecture, dtype and parameter count (DiffLens's own "
          "directories and Hugging Face Llama, Mistral and DiffLlama ones)",
          {required(text("model", "DIR", "the model directory")), device_option("cpu")},
          "",
          cmd_info};
}

// Rewrites a checkpoint: DiffLens's own format (layout kept, or the official DIFF layout), or a Hugging
// Face directory (DiffLlama / Llama) that other tools read.
int cmd_convert(const Args& a) {
  const std::string from = a.require("from"), to = a.require("to");
  const std::string format = a.get("format"), dtype_name = a.get("dtype");
  const DType dtype = std::array<DType, 3>{DType::F32, DType::F16, DType::BF16}[a.choice_index("dtype")];
  if (std::filesystem::exists(to) && !std::filesystem::is_empty(to))
    throw Error(to + ": exists and is not empty (choose a new folder)");
  check_output_dir(to, "--to");
  const Model m = load_model(from, DeviceChoice::Cpu);
  if (format == "hf") {
    for (const std::string& note : save_hf(m, to, dtype)) std::printf("note: %s\n", note.c_str());
    std::printf("wrote %s (%s, %s)\n", to.c_str(), hf_layout(m.config()).architecture.c_str(),
                dtype_name.c_str());
    return 0;
  }
  ModelConfig target = format == "official" ? official_layout(m.config()) : m.config();
  target.architecture = "difflens";
  const Model out = Model::from_tensors(target, convert_layout(m.config(), m.tensors(), target));
  out.save(to, dtype);
  std::error_code ec;
  // The tokenizer's own file, under the name the native format reads it by (a diff-mlx model's
  // cl100k_base.tiktoken may have come from beside its folder or tiktoken's cache).
  const Tokenizer& tok = m.tokenizer();
  const char* tok_file = tok.is_sentencepiece()    ? "tokenizer.model"
                         : tok.is_tiktoken()       ? "cl100k_base.tiktoken"
                         : tok.is_byte_level_bpe() ? "tokenizer.json"
                                                   : nullptr;
  if (tok_file && !tok.source_file().empty()) {
    std::filesystem::copy_file(tok.source_file(), std::filesystem::path(to) / tok_file,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) throw Error(to + "/" + tok_file + ": cannot copy (" + ec.message() + ")");
  } else if (!m.tokenizer().can_encode() || target.tokenizer != TokenizerKind::Bytes) {
    std::printf("note: no tokenizer carried over (%s)\n",
                m.tokenizer_note().empty() ? "none usable" : m.tokenizer_note().c_str());
  }
  std::printf("wrote %s (DiffLens format, %s layout)\n", to.c_str(),
              !target.is_diff() ? (target.rope_style == RopeStyle::Half ? "rotate-half" : "interleaved")
              : target.is_diff_v2()
                  ? (target.rope_style == RopeStyle::Half ? "DIFF V2, rotate-half" : "official DIFF V2")
              : target.diff_pairing == DiffPairing::Adjacent ? "official DIFF"
                                                             : "DiffLlama");
  return 0;
}

Command convert_command() {
  return {
      "convert",
      "rewrite a checkpoint in DiffLens's format, the official DIFF layout, or a Hugging Face directory",
      {required(text("from", "DIR", "the checkpoint to read")),
       required(text("to", "NEW_DIR", "a new (or empty) folder")),
       choice("format", "native|official|hf", "native",
              "native: DiffLens format, layout kept; official: adjacent DIFF components, interleaved RoPE; "
              "hf: DiffLlamaForCausalLM / LlamaForCausalLM that transformers reads (exact: the DIFF norm "
              "weight is folded into o_proj)"),
       choice("dtype", "f32|f16|bf16", "f32",
              "weights' type on disk (f16 and bf16 round to nearest even; read back by every format)")},
      "",
      cmd_convert};
}

// `generate --bench`: the same greedy continuation with every token re-running the whole sequence, then with
// the key/value cache: the time and tokens/s of each, their ratio, and whether the tokens agree.
void bench_generation(const Model& m, const std::vector<int64_t>& ids, int tokens) {
  GenerateOptions o;
  o.max_new = tokens;
  o.temperature = 0;
  double seconds[2] = {0, 0};
  Generation runs[2];
  for (int k = 0; k < 2; ++k) {
    o.cache = k == 1;
    const auto t0 = std::chrono::steady_clock::now();
    runs[k] = m.generate(ids, o, &g_stop);
    seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double n = static_cast<double>(runs[1].ids.size());
  std::printf("%s: %zu tokens after a %zu-token prompt (greedy, %d threads)\n", m.config().name.c_str(),
              runs[1].ids.size(), ids.size(), num_threads());
  std::printf("  every token re-runs the sequence  %8.3f s  %9.1f tokens/s\n", seconds[0],
              static_cast<double>(runs[0].ids.size()) / std::max(seconds[0], 1e-9));
  if (runs[1].cached)
    std::printf("  key/value cache                   %8.3f s  %9.1f tokens/s  (%.1fx)\n", seconds[1],
                n / std::max(seconds[1], 1e-9), seconds[0] / std::max(seconds[1], 1e-9));
  else
    std::printf("  key/value cache: not used (quantized attention logits re-run the sequence)\n");
  std::printf("  the same tokens: %s\n", runs[0].ids == runs[1].ids ? "yes" : "NO");
}

int cmd_generate(const Args& a) {
  apply_threads(a);
  if (a.has("trace")) check_output_dir(a.get("trace"), "--trace");
  const Model m = load_model(a.require("model"), device(a));
  const std::vector<int64_t> ids = prompt_ids(a, m);
  const int64_t positions = m.config().max_position_embeddings;
  if (static_cast<int64_t>(ids.size()) + a.get_int("tokens") > positions)
    throw Error("--tokens " + std::to_string(a.get_int("tokens")) + ": the prompt's " +
                std::to_string(ids.size()) + " tokens and the new ones pass the " +
                std::to_string(positions) + " positions the model reads; give --tokens " +
                std::to_string(std::max<int64_t>(0, positions - static_cast<int64_t>(ids.size()))) +
                " or less");
  std::signal(SIGINT, on_interrupt);
  if (a.has("bench")) {
    bench_generation(m, ids, a.get_int("tokens"));
    return 0;
  }
  GenerateOptions o;
  o.max_new = a.get_int("tokens");
  o.temperature = a.get_double("temperature");
  o.top_k = a.get_int("top-k");
  o.cache = !a.has("no-cache");
  o.interventions = interventions_of(a, m.config(), static_cast<int64_t>(ids.size()));
  if (!o.interventions.empty())
    std::fprintf(stderr, "%s\n", interventions_line(o.interventions.applied).c_str());
  std::vector<int64_t> first;
  for (int s = 0; s < a.get_int("samples"); ++s) {
    o.seed = static_cast<uint64_t>(a.get_int("seed")) + static_cast<uint64_t>(s);
    const Generation g = m.generate(ids, o, &g_stop);
    std::vector<int64_t> all = ids;
    all.insert(all.end(), g.ids.begin(), g.ids.end());
    std::printf("%s\n", m.tokenizer().decode(all).c_str());
    if (s == 0) first = all;
  }
  if (a.has("trace")) {  // the first continuation's whole text, as `capture --out` writes it
    CaptureOptions opt;
    opt.keep_qkv = true;  // the app's Explain view reads them from a bundle
    opt.pooled_budget_bytes = pooled_budget_bytes(a);
    opt.interventions = o.interventions;  // as the text was written: means over the prompt's positions
    opt.interventions.mean_positions = static_cast<int64_t>(ids.size());
    const Trace t = m.capture(first, opt, &g_stop);
    write_trace_bundle(t, a.get("trace"));
    std::printf("wrote %s (%zu tokens: the prompt's %zu and %zu written)\n", a.get("trace").c_str(),
                first.size(), ids.size(), first.size() - ids.size());
  }
  return 0;
}

Command generate_command() {
  return {
      "generate",
      "continue a prompt",
      {required(text("model", "DIR", "the model directory")), prompt_option(), prompt_file_option(),
       specials_option(), integer("tokens", "N", 0, 1e6, "40", "tokens to add"),
       number("temperature", "T", 0, 100, "0.8", "sampling temperature (0: greedy)"),
       integer("top-k", "K", 1, 1e7, "40", "sample among the K likeliest tokens"),
       integer("seed", "S", 0, 2147483647, "1", "random seed of the first sample (the next add 1)"),
       integer("samples", "N", 1, 10000, "1", "continuations to print"),
       text("trace", "DIR", "also write the trace bundle of the prompt and its first continuation"),
       pooled_budget_option(""),
       flag("no-cache", "every new token re-runs the whole sequence (no key/value cache)"),
       flag("bench", "time --tokens greedy tokens with and without the key/value cache, and compare them"),
       intervene_option(), answer_option(), query_option(), device_option("auto"), threads_option()},
      "Give exactly one of --prompt, --prompt-file.",
      cmd_generate};
}

// How a tokenizer shows a piece on one line: control bytes escaped.
std::string shown_piece(const std::string& piece) {
  std::string out;
  for (unsigned char c : piece) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", c);
      out += buf;
    } else
      out += static_cast<char>(c);
  }
  return out;
}

// Shows how a tokenizer splits a text: ids, the bytes each token covers, pieces. `jsonl` is what
// scripts/tokenizer-reference compares against the Hugging Face tokenizers library.
int cmd_tokenize(const Args& a) {
  const std::filesystem::path where = a.require("tokenizer");
  const std::string format = a.get("format");
  if (a.has("text") == a.has("input")) throw Error("give exactly one of --text, --input");
  if (a.has("bos") && (std::filesystem::is_directory(where) ||
                       (where.extension() != ".json" && where.extension() != ".tiktoken")))
    throw Error(
        "--bos is for a bare tokenizer.json or .tiktoken file (model directories and .model files have their "
        "own BOS)");
  const auto load_start = std::chrono::steady_clock::now();
  Tokenizer tok = Tokenizer::bytes(259);
  bool add_bos = false;
  if (std::filesystem::is_directory(where)) {
    std::string note;
    tok = Model::load_tokenizer(where, note);
    if (!tok.can_encode()) throw Error(where.string() + ": " + note);
    add_bos = !a.has("no-bos");
  } else if (where.extension() == ".json") {
    const int bos = a.get_int("bos", -1);
    tok = Tokenizer::byte_level_bpe(where, bos, -1);
    add_bos = bos >= 0 && !a.has("no-bos");
  } else if (where.extension() == ".model") {
    tok = Tokenizer::sentencepiece(where);
    add_bos = !a.has("no-bos");
  } else if (where.extension() == ".tiktoken") {  // a rank file named by its encoding (cl100k_base.tiktoken)
    const int bos = a.get_int("bos", -1);
    tok = Tokenizer::tiktoken(where, where.stem().string(), bos, -1);
    add_bos = bos >= 0 && !a.has("no-bos");
  } else if (!std::filesystem::exists(where)) {
    throw Error(where.string() + ": no such file or directory");
  } else {
    throw Error(
        where.string() +
        ": not a model directory, tokenizer.json, tiktoken rank file (NAME.tiktoken) or SentencePiece "
        ".model file");
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const std::string text = a.has("text") ? a.get("text") : read_file(a.get("input"), "input file");
  if (a.has("bench")) {  // the text whole, three times: the best, after the tokenizer is read
    double best = 1e300;
    size_t tokens = 0;
    for (int run = 0; run < 3; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      tokens = tok.encode(text, add_bos, prompt_specials(a)).ids.size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("read the tokenizer in %.3f s; %zu bytes -> %zu tokens in %.4f s (best of 3; %.1f MB/s)\n",
                load_s, text.size(), tokens, best,
                static_cast<double>(text.size()) / 1e6 / std::max(best, 1e-9));
    return 0;
  }
  std::vector<std::string> texts;
  if (a.has("lines")) {
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      if (nl == std::string::npos) nl = text.size();
      texts.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
  } else {
    texts.push_back(text);
  }
  size_t total = 0;
  for (size_t t = 0; t < texts.size(); ++t) {
    const Encoding e = tok.encode(texts[t], add_bos, prompt_specials(a));
    total += e.ids.size();
    if (format == "jsonl") {
      std::string line = "{\"ids\":[";
      for (size_t i = 0; i < e.ids.size(); ++i) line += (i ? "," : "") + std::to_string(e.ids[i]);
      line += "],\"offsets\":[";
      for (size_t i = 0; i < e.offsets.size(); ++i)
        line += (i ? ",[" : "[") + std::to_string(e.offsets[i].first) + "," +
                std::to_string(e.offsets[i].second) + "]";
      std::printf("%s]}\n", line.c_str());
    } else if (format == "ids") {
      std::string line;
      for (size_t i = 0; i < e.ids.size(); ++i) line += (i ? "," : "") + std::to_string(e.ids[i]);
      std::printf("%s\n", line.c_str());
    } else {
      if (texts.size() > 1) std::printf("%s# line %zu: %zu tokens\n", t ? "\n" : "", t + 1, e.ids.size());
      for (size_t i = 0; i < e.ids.size(); ++i)
        std::printf("%6zu %8lld  [%zu, %zu)  %s\n", i, static_cast<long long>(e.ids[i]), e.offsets[i].first,
                    e.offsets[i].second, shown_piece(tok.piece(e.ids[i])).c_str());
    }
  }
  if (format == "table") std::printf("%zu tokens from %zu bytes\n", total, text.size());
  return 0;
}

Command tokenize_command() {
  return {
      "tokenize",
      "show the token ids, byte ranges and pieces a tokenizer gives a text",
      {required(text("tokenizer", "PATH",
                     "a model directory, tokenizer.json, a tiktoken rank file named by its encoding "
                     "(cl100k_base.tiktoken) or a SentencePiece .model")),
       text("text", "TEXT", "the text"), text("input", "FILE", "the text read from a file"),
       flag("lines", "tokenize each line on its own"),
       choice("format", "table|jsonl|ids", "table", "what is printed"), flag("no-bos", "no BOS token first"),
       choice("specials", "match|text", "match",
              "special tokens written in the text: matched as their ids (tiktoken's encode(text, "
              "allowed_special=\"all\")), or read as text (encode_ordinary)"),
       integer("bos", "ID", 0, 1e9, "", "the BOS id a bare tokenizer.json adds (it has none of its own)"),
       flag("bench",
            "time it instead: the tokenizer's reading, then the whole text encoded three times (the best)")},
      "Give exactly one of --text, --input. A model directory adds its BOS unless --no-bos.",
      cmd_tokenize};
}

}  // namespace

std::vector<Command> model_commands() {
  return {capture_command(),  init_pair_command(), generate_command(),
          tokenize_command(), info_command(),      convert_command()};
}

}  // namespace difflens::cli
