// The difflens command line: the headless commands (capture, generate, train, needle, outliers, render,
// explain, ...) and the desktop app's options, read into GuiOptions for run_gui. Errors from core
// (difflens::Error) are caught in main() and printed; the exit status is non-zero.
#include "app/cli.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "app/cli_args.h"
#include "app/explain_slides.h"
#include "app/figures.h"
#include "app/gui.h"
#include "app/inference_worker.h"
#include "app/needle_report.h"
#include "app/outlier_report.h"
#include "core/checkpoint.h"
#include "core/config.h"
#include "core/error.h"
#include "core/explain.h"
#include "core/layout.h"
#include "core/metrics.h"
#include "core/model.h"
#include "core/needle.h"
#include "core/outliers.h"
#include "core/trace.h"
#include "core/trace_io.h"
#include "core/train.h"
#include "viz/export.h"
#include "viz/figure.h"

#include <csignal>
#include <cstdlib>

namespace difflens::cli {
namespace {

constexpr const char* kUsage = R"(DiffLens - Differential Transformer vs baseline attention explorer

usage: difflens [GUI options]        open the desktop app (bundled models by default)
       difflens COMMAND [options]    headless commands

GUI options:
  --models LEFT,RIGHT   model directories (default: the bundled diff-small, baseline-small)
  --prompt TEXT         initial prompt            --select LAYER,HEAD   initial layer and head
  --prompt-file F       initial prompt from a file (any bytes)
  --bundle DIR          open a trace bundle (capture --out) into the left slot at start, as its button does
  --screenshot F.png    write the window to F.png once both maps are shown, then exit
  --exit-after-frames N frames to render after the result before the screenshot (default 3)
  --size WxH            window size (default: the last one, or 90 % of the screen)   --font-scale X (HiDPI)
                        --lecture   --threads N
  --device auto|cpu|cuda  where the models run (auto: CUDA when this LibTorch build has a GPU)
  --view NAME           the view shown: maps, query-row (Figure 1), models, lambda, noise, lab, outliers or
                        explain (keys 1-8; --tab is the same; default: the last one, first query-row)
  --split off|below|beside  the view alone, below the maps or beside them (default: as last left; below)
  --head-metric maps|answer|noise|entropy|sink   the Model view's grid: maps, or each head coloured by
                        its attention to the answer, noise, entropy or first-token share
  --metric-rows query|question   ...over the selected query's row or the question's rows (query to end)
  --hover ROW,COL       headless: the mouse over this query row and key of the first map (else no hover)
  --settings FILE       layout settings read at start, written at exit (default ~/.config/difflens/layout.ini;
                        headless screenshots use none unless given)
  --explain-step N      the Explain view's step (1-6)   --present   start presenting its slides (Esc leaves)
  --export-all          export every shown map (PNG/NPY/CSV) and head view once, like Ctrl+E
  --export-dir DIR      export folder     --maps-height F   the maps' share of a split view (0.2-0.85)
  --logit-bits 8|6|4    show both models with absmax-quantized attention logits (0: exact)
  --needle T,D,N,R,S[,A]  start with a held-out needle prompt (T tokens, depth D %, N needles, R asked,
                        seed S; A=1 the prompt ends with the asked code, 0 before it), question and answer
                        marked, the heads that attend most to the answer selected. Without --prompt or
                        --needle the app starts with --needle 256,50,1,1,1,1
  --lab-lengths 128,256 --lab-depths 0,50,100 --lab-needles 1 --lab-queried 1 --lab-seeds 3
                        the Needle lab view's sweep grid; --lab-run starts it (a screenshot waits for it)
  --haystack FILE       haystack text for the needle builder and lab (default assets/haystack.txt)
  --pooled-budget MB    long prompts: pooled maps (mean/max) within MB per model once exact maps would not
                        fit (default 256; 0: always exact); rows and tiles are recomputed exactly
  --zoom R,C,N          head view zoomed to N tokens from query R, key C (wheel zooms, drag pans)
  --query I             selected query token (start of the question)   --answer B,E   answer span

commands:
  capture    run one model on a prompt and write a trace bundle (trace.json + maps.safetensors)
             --model DIR  (--prompt TEXT | --prompt-file F | --token-ids 1,2,3)  --out DIR
             [--layers 0,1] [--heads 0,3] [--no-maps] [--keep-logits] [--keep-hidden] [--keep-qkv] [--top-k N]
             [--no-bos] [--device auto|cpu|cuda] [--threads N]
             [--pooled-budget MB (long prompts: pooled maps within MB, exact tiles recomputable)]
  init-pair  write a seeded, untrained, parameter-matched DIFF + baseline pair
             --out DIR  [--hidden 256] [--layers 4] [--heads 4] [--kv-heads H] [--vocab 4096]
             [--seed 1]   (writes DIR/diff and DIR/baseline)
  generate   continue a prompt   --model DIR --prompt TEXT [--tokens 40] [--temperature 0.8]
             [--top-k 40] [--seed 1] [--samples 1]   (temperature 0 = greedy)
  tokenize   show the token ids, byte ranges and pieces a tokenizer gives a text
             --tokenizer DIR|tokenizer.json|tokenizer.model  (--text TEXT | --input FILE)
             [--lines (each line on its own)] [--format table|jsonl|ids] [--no-bos] [--bos ID]
             (a model directory adds its BOS unless --no-bos; a bare tokenizer.json adds --bos ID if given)
  info       print a checkpoint's configuration, architecture, dtype and parameter count   --model DIR
             (DiffLens's own directories and Hugging Face Llama, Mistral and DiffLlama ones)
  convert    rewrite a checkpoint   --from DIR --to NEW_DIR [--format native|official|hf] [--dtype f32|bf16|f16]
             native: DiffLens format, layout kept; official: adjacent DIFF components, interleaved RoPE;
             hf: DiffLlamaForCausalLM / LlamaForCausalLM that transformers reads (exact: the DIFF norm
             weight is folded into o_proj)
  train      train a matched DIFF + baseline pair on the prepared corpus (scripts/prepare-corpus)
             --corpus DIR --out DIR [--config train.json] [--steps N] [--seq-len 512] [--batch 8]
             [--lr 2e-3] [--warmup 100] [--hidden 128] [--layers 4] [--heads 4] [--seed 1]
             [--threads 2] [--eval-every 250] [--save-every 250] [--only diff|baseline] [--fresh]
             [--device auto|cpu|cuda] [--episode-fraction 0.5] [--drill-fraction 0] [--answer-weight 1]
             [--names single-token|original]   (these four set the config's last phase)
             [--precision auto|fp32|bf16 (auto: bf16 matmuls on CUDA)] [--data-workers N (batches built ahead)]
             [--max-seconds S (stop and save after S seconds; the same command resumes)]
             Resumes from DIR when a saved state is there; Ctrl-C saves.
  needle     needle-in-a-haystack sweep: accuracy, attention to answer and noise per model and cell
             --out DIR [--models DIR1,DIR2 (default: the bundled pair)] [--lengths 256,512]
             [--depths 0,25,50,75,100 (%)] [--needles 1,2,4] [--queried 1,2] [--seeds 3]
             [--haystack FILE (default assets/haystack.txt)] [--names single-token|original]
             [--cell 72 (heatmap PNG pixels per cell)] [--logit-bits 8|6|4 (quantized attention logits)]
             [--needle-template "The secret code of {name} is {code}."]
             [--question-template "Q: What is the secret code of {name}?\nA: The secret code of {name} is"]
             Writes needle.json, needle.csv, tables.md and PNG + SVG heatmaps; Ctrl-C stops.
  outliers   the paper's Table 5 over a whole text: k-th largest |attention logit| and |hidden state|
             --out DIR [--models DIR1,DIR2] [--text-file F (default assets/haystack.txt)]
             [--window 512] [--max-windows 0 (all)]   Writes tables.md, JSON, CSV, histogram PNGs.
  quantize   how far attention maps move when the logits are absmax-quantized (per head, dynamic)
             (--prompt TEXT | --prompt-file F) [--models DIR1,DIR2] [--bits 8,6,4]
             [--needle-seeds K --needle-length 256 (needle accuracy at each width)] [--out DIR]
  loss       next-token cross-entropy (nats/token) and perplexity of models over a text, in consecutive
             windows as training validates   --text-file F [--models DIR1,DIR2] [--window 512]
             [--max-windows 0 (all)]
  render     draw one head of a trace bundle with token labels and legends, PNG or SVG
             --trace DIR --out F.png|F.svg [--layer 0] [--head 0] [--map all|A1|A2|A] [--size 1024]
             [--scale linear|sqrt|log] [--pooling max|mean] [--clamp 99.5] [--per-map-scale]
             [--zoom ROW,COL,N] [--max-cells 256 (SVG cells per side)]
  explain    step-by-step slides (PNG + SVG) of one head of each model for one query, as the app's Explain view
             (--prompt TEXT | --prompt-file F) --out DIR [--models DIFF_DIR,BASELINE_DIR] [--layer L (last)]
             [--head H (0)] [--base-head H] [--query I (last token)] [--answer B,E] [--question B,E]
             [--size 1920x1080]
  bench      median prompt->Trace time of a matched pair, all maps kept
             [--lengths 128,512,2048] [--repeats 5] [--threads 2] [--hidden 256] [--layers 4]
             [--heads 4] [--vocab 4096] [--models DIFF_DIR,BASELINE_DIR] [--no-maps] [--no-stats]
             [--pooled-budget MB] [--device cpu|cuda|auto] [--pooling auto|host|device]
             (prints the peak resident memory after each row; long prompts' maps are pooled by the
             host's loops, or by tensor operations on the model's device: auto = device on a GPU)

  --layers/--heads choose whose maps are kept (statistics are kept for all); --keep-logits and
  --keep-hidden add the full pre-softmax logits and hidden states to the bundle; --keep-qkv the rotated
  queries and keys, values and output-norm weights the app's Explain view recomputes a head from.
)";

std::string read_file(const std::string& path, const char* what = "prompt file") {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the " + what);
  // Read whole: refuse a file that would take more than half the memory available.
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec), have = available_memory_bytes();
  if (!ec && have > 0 && size > have / 2)
    throw Error(path + ": the " + what + " is " + human_bytes(size) + ", more than half of the " +
                human_bytes(have) + " of memory available");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void apply_threads(const Args& a) {
  // Absent: LibTorch's default. Given: 1 or more (0 is not "default" when typed: it is refused).
  if (a.has("threads")) set_num_threads(a.get_int("threads", 0, 1, 4096));
}

std::vector<int64_t> prompt_ids(const Args& a, const Model& model) {
  const int sources = a.has("prompt") + a.has("prompt-file") + a.has("token-ids");
  if (sources != 1) throw Error("give exactly one of --prompt, --prompt-file, --token-ids");
  if (a.has("token-ids")) return parse_token_ids(a.get("token-ids"), model.config().vocab_size);
  const std::string text = a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
  if (text.empty()) throw Error("the prompt is empty: nothing to run");
  return model.tokenizer().encode(text, !a.has("no-bos")).ids;
}

std::string mb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::atomic<bool> g_stop{false};

void on_interrupt(int) {
  g_stop = true;
}

// Model::load with a progress line on a terminal's stderr for checkpoints with over 50 tensors, and
// Ctrl-C to stop; the previous handler comes back afterwards.
Model load_model(const std::string& dir, DeviceChoice device) {
  auto previous = std::signal(SIGINT, on_interrupt);
  bool shown = false;
  try {
    Model m = Model::load(
        dir, device,
        [&](int64_t done, int64_t total) {
          if (total < 50 || !isatty(2)) return;  // a live line for people, nothing for logs
          std::fprintf(stderr, "\rloading %s: %lld/%lld tensors", dir.c_str(), static_cast<long long>(done),
                       static_cast<long long>(total));
          shown = true;
        },
        &g_stop);
    if (shown) std::fprintf(stderr, "\n");
    std::signal(SIGINT, previous);
    return m;
  } catch (const Cancelled&) {
    std::signal(SIGINT, previous);
    throw Error("loading " + dir + " stopped by Ctrl-C");
  } catch (...) {
    if (shown) std::fprintf(stderr, "\n");
    std::signal(SIGINT, previous);
    throw;
  }
}

// --pooled-budget MB (long-prompt capture; 0: exact maps at any length).
size_t pooled_budget(const Args& a) {
  if (!a.has("pooled-budget")) return 0;
  double mbs = 0;
  try {
    mbs = std::stod(a.get("pooled-budget"));
  } catch (const std::exception&) {
    throw Error("--pooled-budget expects megabytes, e.g. 256");
  }
  if (!(mbs >= 0) || mbs > 1e6) throw Error("--pooled-budget expects megabytes between 0 and 1e6");
  return static_cast<size_t>(mbs * 1024 * 1024);
}

// Peak resident memory of this process so far (VmHWM), in KB; 0 when unknown.
int64_t peak_rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      int64_t kb = 0;
      in >> kb;
      return kb;
    }
    std::getline(in, key);
  }
  return 0;
}

int cmd_capture(const Args& a) {
  a.reject_unknown({"model", "prompt", "prompt-file", "token-ids", "out", "layers", "heads", "no-maps",
                    "pooled-budget", "keep-logits", "keep-hidden", "keep-qkv", "top-k", "no-bos", "device",
                    "threads"});
  apply_threads(a);
  const std::string out = a.require("out");
  Model model = load_model(a.require("model"), parse_device(a.get("device", "auto")));
  const std::vector<int64_t> ids = prompt_ids(a, model);
  CaptureOptions opt;
  opt.keep_maps = !a.has("no-maps");
  opt.pooled_budget_bytes = pooled_budget(a);
  opt.layers = a.get_int_list("layers");
  opt.heads = a.get_int_list("heads");
  opt.keep_logits = a.has("keep-logits");
  opt.keep_hidden = a.has("keep-hidden");
  opt.keep_qkv = a.has("keep-qkv");
  opt.next_token_top_k = a.get_int("top-k", 10, 1, 1000000);
  const Trace trace = model.capture(ids, opt);
  write_trace_bundle(trace, out);

  const ModelConfig& c = model.config();
  std::printf("model     %s (%s, %lld layers, %lld heads, %lld params) on %s\n", a.get("model").c_str(),
              to_string(c.attention), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.map_heads()), static_cast<long long>(model.parameter_count()),
              model.device_name().c_str());
  std::printf("tokens    %lld\n", static_cast<long long>(trace.length()));
  std::printf("capture   %.1f ms, trace %s\n", trace.elapsed_ms, mb(trace.byte_size()).c_str());
  if (c.is_diff()) {
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
  std::printf("\nwrote     %s/trace.json, %s/maps.safetensors\n", out.c_str(), out.c_str());
  return 0;
}

PairSpec pair_spec(const Args& a) {
  PairSpec s;
  s.hidden_size = a.get_int("hidden", static_cast<int>(s.hidden_size));
  s.num_layers = a.get_int("layers", static_cast<int>(s.num_layers));
  s.diff_heads = a.get_int("heads", static_cast<int>(s.diff_heads));
  s.diff_kv_heads = a.get_int("kv-heads", static_cast<int>(s.diff_heads));
  s.vocab_size = a.get_int("vocab", static_cast<int>(s.vocab_size));
  return s;
}

int cmd_init_pair(const Args& a) {
  a.reject_unknown({"out", "hidden", "layers", "heads", "kv-heads", "vocab", "seed"});
  const std::filesystem::path out = a.require("out");
  auto [diff_cfg, base_cfg] = make_matched_pair(pair_spec(a));
  const uint64_t seed = static_cast<uint64_t>(a.get_int("seed", 1));
  diff_cfg.name = "diff (untrained, seed " + std::to_string(seed) + ")";
  base_cfg.name = "baseline (untrained, seed " + std::to_string(seed) + ")";
  const Model diff = Model::random(diff_cfg, seed);
  const Model base = Model::random(base_cfg, seed);
  diff.save(out / "diff");
  base.save(out / "baseline");
  std::printf("wrote %s/diff (%lld params) and %s/baseline (%lld params): untrained, seeded random weights\n",
              out.c_str(), static_cast<long long>(diff.parameter_count()), out.c_str(),
              static_cast<long long>(base.parameter_count()));
  return 0;
}

int cmd_info(const Args& a) {
  a.reject_unknown({"model", "device"});
  const Model m = load_model(a.require("model"), parse_device(a.get("device", "cpu")));
  std::cout << config_to_json_text(m.config());
  const ModelConfig& c = m.config();
  std::printf(
      "architecture: %s\nattention: %s%s\nparameters: %lld\nweights on disk: %s (in memory: %s, %s)\n"
      "device: %s\n",
      c.architecture.c_str(), to_string(c.attention),
      c.is_diff() ? (c.diff_pairing == DiffPairing::Adjacent ? " (official layout: adjacent components)"
                                                             : " (DiffLlama layout: components in halves)")
                  : "",
      static_cast<long long>(m.parameter_count()), m.source_dtype().c_str(), m.weight_storage().c_str(),
      human_bytes(Model::weight_memory_bytes(c, m.weight_storage() != "F32")).c_str(),
      m.device_name().c_str());
  if (!m.tokenizer_note().empty()) std::printf("tokenizer: %s\n", m.tokenizer_note().c_str());
  return 0;
}

// Rewrites a checkpoint: DiffLens's own format (layout kept, or the official DIFF layout), or a Hugging
// Face directory (DiffLlama / Llama) that other tools read.
int cmd_convert(const Args& a) {
  a.reject_unknown({"from", "to", "format", "dtype"});
  const std::string from = a.require("from"), to = a.require("to");
  const std::string format = a.get("format", "native");
  const std::string dtype_name = a.get("dtype", "f32");
  const DType dtype = dtype_name == "f32"    ? DType::F32
                      : dtype_name == "f16"  ? DType::F16
                      : dtype_name == "bf16" ? DType::BF16
                                             : throw Error("--dtype must be f32, f16 or bf16");
  if (std::filesystem::exists(to) && !std::filesystem::is_empty(to))
    throw Error(to + ": exists and is not empty (choose a new folder)");
  const Model m = load_model(from, DeviceChoice::Cpu);
  if (format == "hf") {
    for (const std::string& note : save_hf(m, to, dtype)) std::printf("note: %s\n", note.c_str());
    std::printf("wrote %s (%s, %s)\n", to.c_str(), hf_layout(m.config()).architecture.c_str(),
                dtype_name.c_str());
    return 0;
  }
  if (format != "native" && format != "official") throw Error("--format must be native, official or hf");
  if (dtype != DType::F32) throw Error("the native format stores F32 weights (--dtype f32)");
  ModelConfig target = format == "official" ? official_layout(m.config()) : m.config();
  target.architecture = "difflens";
  const Model out = Model::from_tensors(target, convert_layout(m.config(), m.tensors(), target));
  out.save(to);
  std::error_code ec;
  const char* tok_file = m.tokenizer().is_sentencepiece()    ? "tokenizer.model"
                         : m.tokenizer().is_byte_level_bpe() ? "tokenizer.json"
                                                             : nullptr;
  if (tok_file) {
    std::filesystem::copy_file(std::filesystem::path(from) / tok_file, std::filesystem::path(to) / tok_file,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) throw Error(to + "/" + tok_file + ": cannot copy (" + ec.message() + ")");
  } else if (!m.tokenizer().can_encode() || target.tokenizer != TokenizerKind::Bytes) {
    std::printf("note: no tokenizer carried over (%s)\n",
                m.tokenizer_note().empty() ? "none usable" : m.tokenizer_note().c_str());
  }
  std::printf("wrote %s (DiffLens format, %s layout)\n", to.c_str(),
              !target.is_diff() ? (target.rope_style == RopeStyle::Half ? "rotate-half" : "interleaved")
              : target.diff_pairing == DiffPairing::Adjacent ? "official DIFF"
                                                             : "DiffLlama");
  return 0;
}

int cmd_generate(const Args& a) {
  a.reject_unknown(
      {"model", "prompt", "tokens", "temperature", "top-k", "seed", "samples", "threads", "device"});
  apply_threads(a);
  const Model m = load_model(a.require("model"), parse_device(a.get("device", "auto")));
  const std::string prompt = a.require("prompt");
  const auto ids = m.tokenizer().encode(prompt, true).ids;
  const double temperature = a.get_double("temperature", 0.8, 0, 100);
  const int samples = std::max(1, a.get_int("samples", 1));
  for (int s = 0; s < samples; ++s) {
    const auto out = m.generate(ids, a.get_int("tokens", 40), temperature, a.get_int("top-k", 40),
                                static_cast<uint64_t>(a.get_int("seed", 1) + s));
    std::vector<int64_t> all = ids;
    all.insert(all.end(), out.begin(), out.end());
    std::printf("%s\n", m.tokenizer().decode(all).c_str());
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int cmd_bench(const Args& a) {
  a.reject_unknown({"lengths", "repeats", "threads", "hidden", "layers", "heads", "kv-heads", "vocab",
                    "models", "no-maps", "no-stats", "pooled-budget", "device", "pooling"});
  const DeviceChoice device = parse_device(a.get("device", "cpu"));
  CaptureOptions opt;
  opt.keep_maps = !a.has("no-maps");
  opt.logit_stats = !a.has("no-stats");
  opt.pooled_budget_bytes = pooled_budget(a);
  const std::string pooling = a.get("pooling", "auto");
  if (pooling == "host")
    opt.pooling = PoolingPath::Host;
  else if (pooling == "device")
    opt.pooling = PoolingPath::Device;
  else if (pooling != "auto")
    throw Error("--pooling must be auto, host or device, got '" + pooling + "'");
  set_num_threads(a.get_int("threads", 2));
  std::vector<int> lengths = a.get_int_list("lengths");
  if (lengths.empty()) lengths = {128, 512, 2048};
  const int repeats = std::max(1, a.get_int("repeats", 5));

  std::vector<Model> models;
  if (a.has("models")) {
    const std::string list = a.get("models");
    const size_t comma = list.find(',');
    if (comma == std::string::npos) throw Error("--models expects DIFF_DIR,BASELINE_DIR");
    models.push_back(load_model(list.substr(0, comma), device));
    models.push_back(load_model(list.substr(comma + 1), device));
  } else {
    PairSpec spec = pair_spec(a);
    spec.max_position_embeddings = std::max<int64_t>(4096, *std::max_element(lengths.begin(), lengths.end()));
    auto [d, b] = make_matched_pair(spec);
    models.push_back(Model::random(d, 1, device));
    models.push_back(Model::random(b, 1, device));
  }
  const ModelConfig& c0 = models[0].config();
  std::printf(
      "bench: %lld layers, E=%lld, %lld DIFF heads / %lld baseline heads, vocab %lld, %s, %d threads, "
      "median of %d runs (after one untimed warm-up run unless a run takes over 60 s), %s + %s\n",
      static_cast<long long>(c0.num_hidden_layers), static_cast<long long>(c0.hidden_size),
      static_cast<long long>(models[0].config().map_heads()),
      static_cast<long long>(models[1].config().map_heads()), static_cast<long long>(c0.vocab_size),
      models[0].device_name().c_str(), num_threads(), repeats,
      opt.keep_maps ? "all maps kept" : "no maps kept",
      opt.logit_stats ? "logit statistics" : "no logit statistics");
  if (opt.pooled_budget_bytes)
    std::printf(
        "long prompts: pooled maps within %s per model once the exact maps would exceed it, pooled %s\n",
        mb(opt.pooled_budget_bytes).c_str(),
        opt.pooling == PoolingPath::Host     ? "by the host's loops"
        : opt.pooling == PoolingPath::Device ? "by tensor operations on the model's device"
        : models[0].device_name() == "cpu"   ? "by the host's loops (auto)"
                                             : "on the GPU (auto)");
  std::printf("%-9s %6s %12s %12s %12s %8s %12s\n", "model", "T", "median ms", "min ms", "trace", "pooled",
              "peak RSS");
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
      std::printf("%-9s %6d %12.1f %12.1f %12s %8s %12s\n", to_string(m.config().attention), T, median(ms),
                  *std::min_element(ms.begin(), ms.end()), mb(bytes).c_str(),
                  pooled_cells > 0 ? (std::to_string(pooled_cells) + "^2").c_str() : "exact",
                  mb(static_cast<size_t>(peak_rss_kb()) * 1024).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

// A bundled asset (e.g. "models/diff-small", "haystack.txt"): beside the source tree this binary was built
// from, or installed next to it. Returns the last candidate when none exists (its error names it).
std::string bundled_asset(const std::string& relative) {
  std::vector<std::filesystem::path> candidates;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    const std::filesystem::path dir =
        std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path();
    candidates.push_back(dir / "../share/difflens" / relative);
  }
#ifdef DIFFLENS_SOURCE_DIR
  candidates.push_back(std::filesystem::path(DIFFLENS_SOURCE_DIR) / "assets" / relative);
#endif
  for (const auto& c : candidates)
    if (std::filesystem::exists(c)) return std::filesystem::weakly_canonical(c).string();
  return candidates.empty() ? relative : candidates.back().string();
}

std::string bundled_model(const char* name) {
  return bundled_asset(std::string("models/") + name);
}

int cmd_render(const Args& a) {
  a.reject_unknown({"trace", "layer", "head", "map", "out", "size", "scale", "pooling", "clamp",
                    "per-map-scale", "zoom", "max-cells"});
  const std::string out = a.require("out");
  const std::string ext = std::filesystem::path(out).extension().string();
  if (ext != ".png" && ext != ".svg") throw Error("--out must end in .png or .svg");
  const Trace trace = read_trace_bundle(a.require("trace"));
  app::FigureOptions o;
  o.size = a.get_int("size", 1024);
  const std::string scale = a.get("scale", "sqrt");
  if (scale == "linear")
    o.scale = viz::ValueScale::Linear;
  else if (scale == "sqrt")
    o.scale = viz::ValueScale::Sqrt;
  else if (scale == "log")
    o.scale = viz::ValueScale::Log;
  else
    throw Error("--scale must be linear, sqrt or log");
  const std::string pooling = a.get("pooling", "max");
  if (pooling != "max" && pooling != "mean") throw Error("--pooling must be max or mean");
  o.pooling = pooling == "max" ? viz::Pooling::Max : viz::Pooling::Mean;
  o.clamp_percentile = a.get_double("clamp", o.clamp_percentile, 1e-9, 100);  // (0, 100]
  o.shared_scale = !a.has("per-map-scale");
  const std::string map = a.get("map", "all");
  if (map != "all") o.only = map;
  const std::vector<int> zoom = a.get_int_list("zoom");
  if (!zoom.empty()) {
    if (zoom.size() != 3) throw Error("--zoom expects ROW,COL,N");
    o.region = {zoom[0], zoom[1], zoom[2], zoom[2]};
    if (zoom[2] < 1) throw Error("--zoom: N must be at least 1");
  }
  const viz::HeadFigure fig = app::head_figure(trace, a.get_int("layer", 0), a.get_int("head", 0), o);
  if (ext == ".svg") {
    const std::string svg =
        viz::head_figure_svg(fig, viz::FigureFont::standard(), a.get_int("max-cells", 256));
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    if (!f || !(f << svg)) throw Error(out + ": cannot write");
    std::printf("wrote %s (%zu panels, %.1f KB)\n", out.c_str(), fig.panels.size(), svg.size() / 1024.0);
  } else {
    const viz::Image img = viz::render_head_figure(fig);
    viz::write_png(out, img.rgb, img.width, img.height);
    std::printf("wrote %s (%zu panels, %dx%d)\n", out.c_str(), fig.panels.size(), img.width, img.height);
  }
  return 0;
}

// --size WIDTHxHEIGHT into width and height; `example` goes into the message for anything else.
void read_size(const Args& a, int& width, int& height, const char* example) {
  const std::string sz = a.get("size");
  const size_t x = sz.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument("x");
    width = std::stoi(sz.substr(0, x));
    height = std::stoi(sz.substr(x + 1));
  } catch (const std::exception&) {
    throw Error(std::string("--size expects WIDTHxHEIGHT, e.g. ") + example);
  }
}

int cmd_gui(const Args& a) {
  a.reject_unknown({"models",        "prompt",      "select",      "screenshot",  "exit-after-frames",
                    "size",          "font-scale",  "threads",     "tab",         "query",
                    "answer",        "export-all",  "export-dir",  "lecture",     "zoom",
                    "maps-height",   "logit-bits",  "needle",      "lab-lengths", "lab-depths",
                    "lab-needles",   "lab-queried", "lab-seeds",   "lab-run",     "haystack",
                    "pooled-budget", "device",      "prompt-file", "bundle",      "explain-step",
                    "present",       "view",        "split",       "hover",       "settings",
                    "head-metric",   "metric-rows"});
  app::GuiOptions o;
  if (a.has("prompt") && a.has("prompt-file")) throw Error("give --prompt or --prompt-file, not both");
  if (a.has("models")) {
    const std::string list = a.get("models");
    const size_t comma = list.find(',');
    if (comma == std::string::npos) throw Error("--models expects LEFT_DIR,RIGHT_DIR");
    o.models[0] = list.substr(0, comma);
    o.models[1] = list.substr(comma + 1);
  } else {
    o.models[0] = bundled_model("diff-small");
    o.models[1] = bundled_model("baseline-small");
  }
  // A needle the bundled pair never saw in training (held-out name, code a multiple of 7); used as it is
  // when the left model has no SentencePiece tokenizer to build a whole needle episode with.
  o.prompt = a.has("prompt-file")
                 ? read_file(a.get("prompt-file"))
                 : a.get("prompt",
                         "The secret code of Rachel is 4823. The river was high that spring. "
                         "Q: What is the secret code of Rachel?\nA: The secret code of Rachel is");
  o.bundle = a.get("bundle");  // a trace bundle shown at start instead of running the prompt
  const std::vector<int> sel = a.get_int_list("select");
  if (!sel.empty()) {
    if (sel.size() != 2) throw Error("--select expects LAYER,HEAD");
    o.layer = sel[0];
    o.head = sel[1];
  }
  o.screenshot = a.get("screenshot");
  o.exit_after_frames = a.get_int("exit-after-frames", 3);
  if (a.has("size")) {
    read_size(a, o.width, o.height, "1600x1000");
    if (o.width < 320 || o.height < 240) throw Error("--size: the window must be at least 320x240");
    o.size_given = true;
  }
  auto fraction = [&](const char* key, const char* expects) {
    try {
      size_t used = 0;
      const std::string v = a.get(key);
      const float f = std::stof(v, &used);
      if (used != v.size()) throw std::invalid_argument(key);
      return f;
    } catch (const std::exception&) {
      throw Error(std::string("--") + key + " expects " + expects);
    }
  };
  if (a.has("font-scale")) {
    o.font_scale = fraction("font-scale", "a scale between 0.5 and 4, e.g. 1.5");
    if (!(o.font_scale >= 0.5f && o.font_scale <= 4.0f))
      throw Error("--font-scale expects a scale between 0.5 and 4, e.g. 1.5");
  }
  o.haystack = a.get("haystack", bundled_asset("haystack.txt"));
  o.lab_lengths = a.get("lab-lengths", o.lab_lengths);
  o.lab_depths = a.get("lab-depths", o.lab_depths);
  o.lab_needles = a.get("lab-needles", o.lab_needles);
  o.lab_queried = a.get("lab-queried", o.lab_queried);
  o.lab_seeds = a.get_int("lab-seeds", o.lab_seeds);
  o.lab_run = a.has("lab-run");
  if (o.lab_run)  // refuse a bad grid before a window opens
    (void)parse_needle_sweep(o.lab_lengths, o.lab_depths, o.lab_needles, o.lab_queried, o.lab_seeds);
  o.needle = a.get_int_list("needle");
  if (!o.needle.empty()) {
    const auto& n = o.needle;
    if (n.size() < 5 || n.size() > 6 || n[0] < 64 || n[1] < 0 || n[1] > 100 || n[2] < 1 || n[2] > 6 ||
        n[3] < 1 || n[3] > n[2] || (n.size() == 6 && n[5] != 0 && n[5] != 1))
      throw Error(
          "--needle expects TOKENS,DEPTH%,NEEDLES,ASKED,SEED[,ANSWER] with TOKENS >= 64, DEPTH in "
          "0..100, 1 <= ASKED <= NEEDLES <= 6 and ANSWER 1 (the prompt ends with the code, the default) "
          "or 0 (it stops before the code)");
  } else if (!a.has("prompt") && !a.has("prompt-file") && !a.has("bundle") &&
             std::filesystem::exists(std::filesystem::path(o.models[0]) / "tokenizer.model")) {
    o.needle = {app::kDefaultNeedle.begin(),
                app::kDefaultNeedle.end()};  // the first screen: a held-out needle episode
  }
  o.logit_bits = a.get_int("logit-bits", 0);
  if (o.logit_bits != 0 && o.logit_bits != 8 && o.logit_bits != 6 && o.logit_bits != 4)
    throw Error("--logit-bits must be 0 (exact), 8, 6 or 4");
  if (a.has("maps-height")) {
    const float f = fraction("maps-height", "a fraction of the window between 0.2 and 0.85");
    if (!(f >= 0.2f && f <= 0.85f))
      throw Error("--maps-height expects a fraction of the window between 0.2 and 0.85");
    o.split_fraction = f;
  }
  o.threads = a.get_int("threads", 0);
  o.device = a.get("device", "auto");
  (void)parse_device(o.device);  // refuse a typo before a window opens
  if (a.has("pooled-budget")) o.pooled_budget_mb = static_cast<double>(pooled_budget(a)) / (1024.0 * 1024.0);
  if (a.has("tab") && a.has("view")) throw Error("give --view or --tab (the same), not both");
  if (a.has("tab") || a.has("view")) {
    const std::string name = a.get(a.has("view") ? "view" : "tab");
    o.view = app::parse_view(name);
    if (!o.view) throw Error("--view must be " + app::view_names() + " (got '" + name + "')");
  }
  if (a.has("split")) {
    const std::string split = a.get("split");
    if (split != "off" && split != "below" && split != "beside")
      throw Error("--split must be off, below or beside (got '" + split + "')");
    o.split = split == "off" ? 0 : split == "below" ? 1 : 2;
  }
  if (a.has("head-metric")) {
    static const char* kMetrics[] = {"maps", "answer", "noise", "entropy", "sink"};
    const std::string m = a.get("head-metric");
    const auto it = std::find(std::begin(kMetrics), std::end(kMetrics), m);
    if (it == std::end(kMetrics))
      throw Error("--head-metric must be maps, answer, noise, entropy or sink (got '" + m + "')");
    o.head_metric = static_cast<int>(it - std::begin(kMetrics));
  }
  if (a.has("metric-rows")) {
    const std::string m = a.get("metric-rows");
    if (m != "query" && m != "question")
      throw Error("--metric-rows must be query or question (got '" + m + "')");
    o.metric_rows = m == "question" ? 1 : 0;
  }
  const std::vector<int> hover = a.get_int_list("hover");
  if (a.has("hover")) {
    if (hover.size() != 2 || hover[0] < 0 || hover[1] < 0 || hover[1] > hover[0])
      throw Error("--hover expects ROW,COL with 0 <= COL <= ROW (a query row and a key it sees)");
    o.hover[0] = hover[0];
    o.hover[1] = hover[1];
  }
  if (a.has("settings")) {
    o.settings_path = a.get("settings");
  } else if (!a.has("screenshot")) {  // a window for a person: remember its layout between runs
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    const char* home = std::getenv("HOME");
    if (xdg && *xdg)
      o.settings_path = (std::filesystem::path(xdg) / "difflens" / "layout.ini").string();
    else if (home && *home)
      o.settings_path = (std::filesystem::path(home) / ".config" / "difflens" / "layout.ini").string();
  }
  o.query = a.get_int("query", -1);
  o.explain_step = a.get_int("explain-step", 1);
  if (o.explain_step < 1 || o.explain_step > app::kExplainSteps)
    throw Error("--explain-step must be 1 to " + std::to_string(app::kExplainSteps));
  o.present = a.has("present");
  o.export_all = a.has("export-all");
  o.lecture = a.has("lecture");
  const std::vector<int> zoom = a.get_int_list("zoom");
  if (!zoom.empty()) {
    if (zoom.size() != 3 || zoom[0] < 0 || zoom[1] < 0 || zoom[2] < 1)
      throw Error("--zoom expects ROW0,COL0,SPAN");
    std::copy(zoom.begin(), zoom.end(), o.zoom);
  }
  o.export_dir = a.get("export-dir");
  const std::vector<int> answer = a.get_int_list("answer");
  if (!answer.empty()) {
    if (answer.size() != 2 || answer[0] < 0 || answer[1] <= answer[0])
      throw Error("--answer expects BEGIN,END tokens with BEGIN < END");
    o.answer_begin = answer[0];
    o.answer_end = answer[1];
  }
#ifdef DIFFLENS_GUI
  return app::run_gui(o);
#else
  throw Error(
      "this difflens was built without the desktop app (DIFFLENS_GUI=OFF); the commands work: difflens "
      "--help");
#endif
}

int cmd_train(const Args& a) {
  a.reject_unknown({"config",         "corpus",        "out",        "steps",
                    "seq-len",        "batch",         "lr",         "warmup",
                    "hidden",         "layers",        "heads",      "kv-heads",
                    "seed",           "threads",       "eval-every", "save-every",
                    "only",           "fresh",         "device",     "episode-fraction",
                    "drill-fraction", "answer-weight", "names",      "precision",
                    "data-workers",   "max-seconds"});
  TrainOptions o = a.has("config") ? train_options_from_json(a.get("config")) : TrainOptions{};
  if (a.has("corpus")) o.corpus_dir = a.get("corpus");
  if (a.has("out")) o.out_dir = a.get("out");
  if (o.corpus_dir.empty() || o.out_dir.empty())
    throw Error("train needs --corpus DIR and --out DIR (or a --config)");
  o.steps = a.get_int("steps", static_cast<int>(o.steps));
  o.seq_len = a.get_int("seq-len", static_cast<int>(o.seq_len));
  o.batch = a.get_int("batch", static_cast<int>(o.batch));
  o.warmup = a.get_int("warmup", static_cast<int>(o.warmup));
  o.model.hidden_size = a.get_int("hidden", static_cast<int>(o.model.hidden_size));
  o.model.num_layers = a.get_int("layers", static_cast<int>(o.model.num_layers));
  o.model.diff_heads = a.get_int("heads", static_cast<int>(o.model.diff_heads));
  o.model.diff_kv_heads = a.get_int("kv-heads", static_cast<int>(o.model.diff_heads));
  o.seed = static_cast<uint64_t>(a.get_int("seed", static_cast<int>(o.seed)));
  o.threads = a.get_int("threads", o.threads);
  o.eval_every = a.get_int("eval-every", static_cast<int>(o.eval_every));
  o.save_every = a.get_int("save-every", static_cast<int>(o.save_every));
  o.device = a.get("device", o.device);
  o.precision = a.get("precision", o.precision);
  o.data_workers = a.get_int("data-workers", o.data_workers);
  o.max_seconds = a.get_int("max-seconds", 0);
  if (o.max_seconds < 0) throw Error("--max-seconds must be 0 (no limit) or a number of seconds");
  o.lr = a.get_double("lr", o.lr, 1e-8, 10);
  TrainPhase& last = o.phases.back();
  last.mix.episode_fraction = a.get_double("episode-fraction", last.mix.episode_fraction, 0, 1);
  last.mix.drill_fraction = a.get_double("drill-fraction", last.mix.drill_fraction, 0, 1);
  last.answer_weight = a.get_double("answer-weight", last.answer_weight, 0, 1000);
  if (a.has("names")) last.mix.names = parse_name_set(a.get("names"));
  if (a.has("only")) {
    const std::string only = a.get("only");
    if (only != "diff" && only != "baseline") throw Error("--only must be diff or baseline");
    o.train_diff = only == "diff";
    o.train_baseline = only == "baseline";
  }
  o.resume = !a.has("fresh");
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  const bool tty = isatty(fileno(stderr));
  const int64_t reached = train_pair(o, &g_stop, [&](const TrainProgress& p) {
    const int width = 30, done = static_cast<int>(width * p.step / std::max<int64_t>(1, p.total));
    const int eta = static_cast<int>(p.eta_seconds);
    if (!p.has_loss || (!tty && p.step % 50 != 0 && p.step != p.total)) return;
    std::fprintf(stderr,
                 "%s[%.*s%*s] step %lld/%lld  loss diff %.3f baseline %.3f  %.0f tok/s  ETA %dh%02dm%02ds%s",
                 tty ? "\r" : "", done, "##############################", width - done, "",
                 static_cast<long long>(p.step), static_cast<long long>(p.total), p.loss_diff,
                 p.loss_baseline, p.tokens_per_second, eta / 3600, eta / 60 % 60, eta % 60, tty ? "" : "\n");
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\n");
  if (g_stop) {
    std::printf("interrupted: saved at step %lld in %s (run the same command to resume)\n",
                static_cast<long long>(reached), o.out_dir.c_str());
    return 130;
  }
  if (reached < o.steps) {
    std::printf(
        "time limit (--max-seconds %.0f) reached: saved at step %lld of %lld in %s (run the same command "
        "to resume)\n",
        o.max_seconds, static_cast<long long>(reached), static_cast<long long>(o.steps), o.out_dir.c_str());
    return 0;
  }
  std::printf("trained to step %lld: %s\n", static_cast<long long>(reached), o.out_dir.c_str());
  return 0;
}

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

std::vector<double> parse_doubles(const std::string& text, const char* flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error(std::string("--") + flag + " expects comma-separated numbers, got '" + item + "'");
    }
  }
  if (out.empty()) throw Error(std::string("--") + flag + " is empty");
  return out;
}

// --models DIR1,DIR2,... (default: the bundled pair).
std::vector<std::string> model_dirs(const Args& a) {
  std::vector<std::string> dirs;
  std::stringstream ss(a.get("models", bundled_model("diff-small") + "," + bundled_model("baseline-small")));
  for (std::string d; std::getline(ss, d, ',');)
    if (!d.empty()) dirs.push_back(d);
  if (dirs.empty()) throw Error("--models expects one or more model directories, comma-separated");
  return dirs;
}

int cmd_outliers(const Args& a) {
  a.reject_unknown({"models", "text-file", "out", "window", "max-windows", "threads", "device"});
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  const std::string out = a.require("out");
  const std::string text = read_file(a.get("text-file", bundled_asset("haystack.txt")), "text file");
  const int window = a.get_int("window", 512), max_windows = a.get_int("max-windows", 0);
  if (max_windows < 0) throw Error("--max-windows must be 0 (all) or more");
  std::signal(SIGINT, on_interrupt);
  std::vector<std::string> names;
  std::vector<OutlierStats> stats;
  for (const std::string& dir : dirs) {
    const Model model = load_model(dir, parse_device(a.get("device", "auto")));
    names.push_back(model.config().name.empty() ? dir : model.config().name);
    stats.push_back(measure_outliers(
        model, text, window, max_windows,
        [&](int64_t done, int64_t total) {
          std::fprintf(stderr, "\r%s: window %lld/%lld   ", names.back().c_str(),
                       static_cast<long long>(done), static_cast<long long>(total));
        },
        &g_stop));
    std::fprintf(stderr, "\n");
  }
  const std::string md = app::write_outlier_report(out, names, stats);
  std::printf("%s\nwrote %s/tables.md, outliers.json, outliers.csv, logits.png/.svg, hidden.png/.svg\n",
              md.c_str(), out.c_str());
  return 0;
}

int cmd_loss(const Args& a) {
  a.reject_unknown({"models", "text-file", "window", "max-windows", "threads", "device"});
  apply_threads(a);
  const std::string file = a.require("text-file");
  const std::string text = read_file(file, "text");
  const int window = a.get_int("window", 512), max_windows = a.get_int("max-windows", 0);
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
    const Model m = load_model(dir, parse_device(a.get("device", "auto")));
    const std::string name = m.config().name.empty() ? dir : m.config().name;
    TextLoss l;
    try {
      l = text_loss(
          m, text, window, max_windows,
          [&](int64_t done, int64_t total) {
            std::fprintf(stderr, "\r%s: window %lld/%lld   ", name.c_str(), static_cast<long long>(done),
                         static_cast<long long>(total));
          },
          &g_stop);
      std::fprintf(stderr, "\n");
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

int cmd_quantize(const Args& a) {
  a.reject_unknown({"models", "prompt", "prompt-file", "bits", "needle-length", "needle-seeds", "out",
                    "threads", "device", "haystack"});
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  std::vector<int> bits;
  for (double b : parse_doubles(a.get("bits", "8,6,4"), "bits")) {
    if (b != std::floor(b) || b < 2 || b > 32) throw Error("--bits: each must be an integer from 2 to 32");
    bits.push_back(static_cast<int>(b));
  }
  const int needle_seeds = a.get_int("needle-seeds", 0);
  const int needle_length = a.get_int("needle-length", 256);
  if (needle_seeds < 0) throw Error("--needle-seeds must be 0 (no needle runs) or more");
  const std::string hay_text =
      needle_seeds > 0 ? read_file(a.get("haystack", bundled_asset("haystack.txt")), "haystack text") : "";
  std::string md =
      "# Attention-logit quantization (absmax, per head, dynamic)\n\n| model | bits | max abs dA | "
      "mean abs dA | top-1 agreement |";
  if (needle_seeds > 0) md += " needle accuracy (" + std::to_string(needle_length) + " tokens) |";
  md += "\n|---|---|---|---|---|" + std::string(needle_seeds > 0 ? "---|" : "") + "\n";
  std::signal(SIGINT, on_interrupt);
  for (const std::string& dir : dirs) {
    Model model = load_model(dir, parse_device(a.get("device", "auto")));
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
    std::ofstream o(f, std::ios::trunc);
    if (!(o << md)) throw Error(f + ": cannot write");
    std::printf("wrote %s\n", f.c_str());
  }
  return 0;
}

int cmd_needle(const Args& a) {
  a.reject_unknown({"models", "lengths", "depths", "needles", "queried", "seeds", "out", "haystack",
                    "threads", "names", "device", "cell", "needle-template", "question-template",
                    "logit-bits"});
  const int logit_bits = a.get_int("logit-bits", 0);
  if (logit_bits != 0 && (logit_bits < 2 || logit_bits > 32))
    throw Error("--logit-bits takes 2 to 32 bits (0: exact)");
  const int cell = a.get_int("cell", 72);
  if (cell < 16 || cell > 512) throw Error("--cell: heatmap cells are 16 to 512 pixels");
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  const NeedleSweep sweep =
      parse_needle_sweep(a.get("lengths", "256,512"), a.get("depths", "0,25,50,75,100"),
                         a.get("needles", "1"), a.get("queried", "1"), a.get_int("seeds", 3));
  const std::vector<NeedleJob> jobs = expand(sweep);
  const std::string out = a.require("out");
  const NameSet names = parse_name_set(a.get("names", "single-token"));
  NeedleTemplate wording;
  wording.needle = unescape_newlines(a.get("needle-template", wording.needle));
  wording.question = unescape_newlines(a.get("question-template", wording.question));
  wording.validate();
  const std::string hay_text = read_file(a.get("haystack", bundled_asset("haystack.txt")), "haystack text");

  std::signal(SIGINT, on_interrupt);
  std::vector<std::vector<NeedleRun>> results;
  std::vector<std::string> model_names;
  const size_t total = dirs.size() * jobs.size();
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& dir : dirs) {
    Model model = load_model(dir, parse_device(a.get("device", "auto")));
    if (!model.tokenizer().can_encode())
      throw Error(dir + ": this model has no text tokenizer, so it cannot read a haystack");
    model.set_logit_bits(logit_bits);
    try {
      validate(sweep, model.config().max_position_embeddings);
    } catch (const Error& e) {
      throw Error(dir + ": " + e.what());
    }
    const Haystack hay(hay_text, model.tokenizer());
    const EpisodeBuilder builder(hay, model.tokenizer(), NeedleSplit::Eval, names, wording);
    model_names.push_back((model.config().name.empty() ? dir : model.config().name) +
                          (logit_bits > 0 ? " (logits " + std::to_string(logit_bits) + "-bit)" : ""));
    results.emplace_back();
    for (const NeedleJob& job : jobs) {
      if (g_stop) throw Error("stopped by Ctrl-C: nothing written");
      NeedleRun run = run_needle(model, builder, job.cell, job.seed, &g_stop);
      ++done;
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(
          stderr,
          "\r[%zu/%zu] %s  L=%lld depth=%3.0f%% N=%d R=%d seed=%d  %d/%d right  answer %.3f noise %.3f"
          "  ETA %.0f s   ",
          done, total, model_names.back().c_str(), static_cast<long long>(job.cell.length),
          job.cell.depth * 100, job.cell.needles, job.cell.queried, static_cast<int>(job.seed), run.answered,
          run.asked, run.attention.mean.answer, run.attention.mean.noise,
          el / static_cast<double>(done) * static_cast<double>(total - done));
      results.back().push_back(std::move(run));
    }
  }
  std::fprintf(stderr, "\n");
  const std::string tables = app::write_needle_report(out, model_names, results, cell);
  std::printf("%s\nwrote %s/needle.json, needle.csv, tables.md and PNG + SVG heatmaps\n", tables.c_str(),
              out.c_str());
  return 0;
}

// Shows how a tokenizer splits a text: ids, the bytes each token covers, pieces. `jsonl` is what
// scripts/tokenizer-reference compares against the Hugging Face tokenizers library.
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

// Step-by-step slides of one head of each model for one query: what the app's Explain view shows.
int cmd_explain(const Args& a) {
  a.reject_unknown({"models", "prompt", "prompt-file", "out", "layer", "head", "base-head", "query", "answer",
                    "question", "size", "threads", "device"});
  apply_threads(a);
  if (a.has("prompt") == a.has("prompt-file")) throw Error("explain: give --prompt TEXT or --prompt-file F");
  const std::string text = a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
  const std::string out = a.require("out");
  const std::vector<std::string> dirs = model_dirs(a);
  if (dirs.size() != 2) throw Error("--models expects DIFF_DIR,BASELINE_DIR");
  int width = 1920, height = 1080;
  if (a.has("size")) read_size(a, width, height, "1920x1080");
  auto span = [&](const char* key) {
    const std::vector<int> v = a.get_int_list(key);
    if (v.empty()) return TokenSpan{-1, -1};
    if (v.size() != 2 || v[0] < 0 || v[1] <= v[0])
      throw Error(std::string("--") + key + " expects BEGIN,END tokens with BEGIN < END");
    return TokenSpan{v[0], v[1]};
  };
  app::ExplainInput in;
  in.answer = span("answer");
  in.question = span("question");
  const DeviceChoice device = parse_device(a.get("device", "cpu"));
  for (int s = 0; s < 2; ++s) {
    const Model m = load_model(dirs[s], device);
    CaptureOptions o;
    o.keep_qkv = true;
    const Trace t = m.capture(app::encode_prompt(m, text).ids, o);
    const int layer = a.get_int("layer", static_cast<int>(m.config().num_hidden_layers) - 1);
    const int head = s == 0 ? a.get_int("head", 0) : a.get_int("base-head", a.get_int("head", 0));
    const int64_t query = a.get_int("query", static_cast<int>(t.length()) - 1);
    app::ExplainSide side = app::explain_side(m.config().name, &t, layer, head, query);
    if (!side.head) throw Error(dirs[s] + ": " + side.why);
    const HeadExplain& e = *side.head;
    std::printf("%s layer %d head %d query %lld: ", m.config().name.c_str(), layer, head,
                static_cast<long long>(query));
    if (e.diff)
      std::printf("lambda %.4f = %.4f - %.4f + %.4f; cancelled %.4f; row of A sums to %.4f; |out| %.4f\n",
                  e.lambda, e.lambda_exp1, e.lambda_exp2, e.lambda_init, e.common_sum, e.a_sum, e.out_norm);
    else
      std::printf("row of A sums to %.4f; |A.V| %.4f\n", e.a_sum, e.out_norm);
    (s == 0 ? in.diff : in.base) = std::move(side);
  }
  const std::vector<std::string> files = app::export_explain_slides(in, out, width, height);
  std::printf("wrote %zu files: %s ... %s\n", files.size(), files.front().c_str(), files.back().c_str());
  return 0;
}

int cmd_tokenize(const Args& a) {
  a.reject_unknown({"tokenizer", "text", "input", "lines", "format", "no-bos", "bos"});
  const std::filesystem::path where = a.require("tokenizer");
  const std::string format = a.get("format", "table");
  if (format != "table" && format != "jsonl" && format != "ids")
    throw Error("--format must be table, jsonl or ids");
  if (a.has("text") == a.has("input")) throw Error("give exactly one of --text, --input");
  if (a.has("bos") && (std::filesystem::is_directory(where) || where.extension() != ".json"))
    throw Error("--bos is for a bare tokenizer.json (model directories and .model files have their own BOS)");
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
  } else if (!std::filesystem::exists(where)) {
    throw Error(where.string() + ": no such file or directory");
  } else {
    throw Error(where.string() + ": not a model directory, tokenizer.json or SentencePiece .model file");
  }
  const std::string text = a.has("text") ? a.get("text") : read_file(a.get("input"), "input file");
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
    const Encoding e = tok.encode(texts[t], add_bos);
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

}  // namespace

int run(int argc, char** argv) {
  if (argc >= 2 &&
      (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" || std::string(argv[1]) == "help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc < 2 || std::string(argv[1]).rfind("--", 0) == 0)
    return cmd_gui(Args(argc, argv, 1, {"export-all", "lecture", "lab-run", "present"}));
  // The commands, once: their names, the options that take no value, and what runs them (the unknown-command
  // message lists them from here).
  struct Command {
    const char* name;
    std::set<std::string> flags;
    int (*run)(const Args&);
  };
  static const Command kCommands[] = {
      {"capture", {"no-maps", "keep-logits", "keep-hidden", "keep-qkv", "no-bos"}, cmd_capture},
      {"init-pair", {}, cmd_init_pair},
      {"generate", {}, cmd_generate},
      {"info", {}, cmd_info},
      {"tokenize", {"lines", "no-bos"}, cmd_tokenize},
      {"convert", {}, cmd_convert},
      {"outliers", {}, cmd_outliers},
      {"quantize", {}, cmd_quantize},
      {"loss", {}, cmd_loss},
      {"needle", {}, cmd_needle},
      {"render", {"per-map-scale"}, cmd_render},
      {"train", {"fresh"}, cmd_train},
      {"bench", {"no-maps", "no-stats"}, cmd_bench},
      {"explain", {}, cmd_explain},
  };
  const std::string cmd = argv[1];
  std::string names;
  for (const Command& c : kCommands) {
    if (cmd == c.name) return c.run(Args(argc, argv, 2, c.flags));
    names += std::string(names.empty() ? "" : ", ") + c.name;
  }
  throw Error("unknown command '" + cmd + "' (commands: " + names + "; difflens --help shows their options)");
}

}  // namespace difflens::cli
