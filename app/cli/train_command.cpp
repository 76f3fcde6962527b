// The train command: a matched DIFF + baseline pair on the prepared corpus, resumable.
#include <csignal>
#include <cstdio>

#include <unistd.h>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/run_support.h"
#include "core/formats/error.h"
#include "core/model/train.h"

namespace difflens::cli {
namespace {

int cmd_train(const Args& a) {
  TrainOptions o = a.has("config") ? train_options_from_json(a.get("config")) : TrainOptions{};
  if (a.has("corpus")) o.corpus_dir = a.get("corpus");
  if (a.has("out")) o.out_dir = a.get("out");
  if (o.corpus_dir.empty() || o.out_dir.empty())
    throw Error("train needs --corpus DIR and --out DIR (or a --config)");
  // Each option overrides the config's value (or TrainOptions' default without a config).
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
  o.keep_every = a.get_int("keep-every", static_cast<int>(o.keep_every));
  o.device = a.get("device", o.device);
  o.precision = a.get("precision", o.precision);
  o.data_workers = a.get_int("data-workers", o.data_workers);
  o.max_seconds = a.get_int("max-seconds", 0);
  if (a.has("rows-out")) o.rows_out = a.get("rows-out");
  o.lr = a.get_double("lr", o.lr);
  TrainPhase& last = o.phases.back();
  last.mix.episode_fraction = a.get_double("episode-fraction", last.mix.episode_fraction);
  last.mix.drill_fraction = a.get_double("drill-fraction", last.mix.drill_fraction);
  last.answer_weight = a.get_double("answer-weight", last.answer_weight);
  if (a.has("names")) last.mix.names = parse_name_set(a.get("names"));
  if (a.has("arch")) o.diff_arch = a.get("arch") == "diff-v2" ? AttentionKind::DiffV2 : AttentionKind::Diff;
  if (a.has("only")) {
    o.train_diff = a.get("only") == "diff";
    o.train_baseline = a.get("only") == "baseline";
  }
  // DIFFLENS_QUICK: two short steps and a small evaluation, so that the documented command runs in seconds.
  o.steps = quick_cap("steps", o.steps, 2);
  o.batch = quick_cap("batch", o.batch, 2);
  o.seq_len = quick_cap("seq-len", o.seq_len, 64);
  o.keep_every = quick_cap("keep-every", o.keep_every, 1);  // so that the two steps are kept
  if (quick_mode())  // phases that name their own rows are capped alike
    for (TrainPhase& p : o.phases) {
      if (p.seq_len > 64) p.seq_len = 64;
      if (p.batch > 2) p.batch = 2;
    }
  o.eval_episodes = quick_cap("evaluation episodes per length", o.eval_episodes, 2);
  if (quick_mode() && o.eval_lengths.size() > 1) {
    std::fprintf(stderr, "DIFFLENS_QUICK: evaluated at %lld tokens only\n",
                 static_cast<long long>(o.eval_lengths[0]));
    o.eval_lengths.resize(1);
  }
  o.resume = !a.has("fresh");
  o.overwrite = a.has("overwrite");
  std::printf("training into %s (resumes from a train_state there; Ctrl-C saves)\n", o.out_dir.c_str());
  std::fflush(stdout);
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

// The help of an option whose default is the config's value, else TrainOptions' own.
std::string or_default(const std::string& help, double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return help + " (default: the config's, else " + buf + ")";
}

Command train_command() {
  const TrainOptions d;
  const TrainPhase& p = d.phases.back();
  return {
      "train",
      "train a matched DIFF + baseline pair on the prepared corpus (scripts/prepare-corpus); resumes from "
      "--out when a saved state is there, Ctrl-C saves",
      {text(
           "config", "train.json",
           "a training configuration (e.g. the bundled models/train-fair.json: assets/ in the source, share/difflens/ when installed)"),
       text("corpus", "DIR", "the prepared corpus (required unless the config names it)"),
       text("out", "DIR", "where both models and their logs go (required unless the config names it)"),
       integer("steps", "N", 1, 1e9, "", or_default("optimizer steps", d.steps)),
       integer("seq-len", "T", 8, 1 << 20, "", or_default("tokens per row", d.seq_len)),
       integer("batch", "B", 1, 1 << 16, "", or_default("rows per step", d.batch)),
       number("lr", "LR", 1e-8, 10, "", or_default("peak learning rate", d.lr)),
       integer("warmup", "N", 0, 1e9, "", or_default("warm-up steps", d.warmup)),
       integer("hidden", "E", 8, 65536, "", or_default("hidden size", d.model.hidden_size)),
       integer("layers", "N", 1, 1024, "", or_default("layers", d.model.num_layers)),
       integer("heads", "H", 1, 1024, "",
               or_default("DIFF heads (the baseline gets 2H)", d.model.diff_heads)),
       integer("kv-heads", "H", 1, 1024, "", "DIFF key/value heads (default: --heads)"),
       integer("seed", "S", 0, 2147483647, "", or_default("random seed", d.seed)),
       integer("threads", "N", 1, 4096, "", "CPU threads (default: the config's, else every core)"),
       integer("eval-every", "N", 1, 1e9, "", or_default("steps between evaluations", d.eval_every)),
       integer("save-every", "N", 1, 1e9, "", or_default("steps between saves", d.save_every)),
       integer("keep-every", "N", 0, 1e9, "",
               "keep each N-th step's weights in MODEL/checkpoints/step-N/, a model folder each (0: none)"),
       choice("only", "diff|baseline", "", "train one model of the pair"),
       choice("arch", "diff|diff-v2", "",
              "the differential model: DIFF V1 (out/diff-small) or DIFF V2 matched to the baseline "
              "(out/diff-v2-small; --heads still sets the baseline's 2H heads)"),
       flag("fresh", "start over instead of resuming (in folders train wrote; see --overwrite)"),
       flag("overwrite",
            "replace model folders under --out that hold weights train did not write (no train_state/); "
            "without it train refuses them"),
       device_option(""),
       number("episode-fraction", "F", 0, 1, "",
              or_default("last phase: share of rows that are needle episodes", p.mix.episode_fraction)),
       number("drill-fraction", "F", 0, 1, "",
              or_default("last phase: share of rows that are retrieval drills", p.mix.drill_fraction)),
       number("answer-weight", "W", 0, 1000, "",
              or_default("last phase: loss weight of answer tokens", p.answer_weight)),
       choice("names", "single-token|original", "", "last phase: the names needles use"),
       choice("precision", "auto|fp32|bf16", "", "matmul precision (auto: bf16 on CUDA, fp32 on the CPU)"),
       integer("data-workers", "N", 0, 256, "", "threads building batches ahead (0: 1 on the CPU)"),
       integer("max-seconds", "S", 0, 1e9, "", "stop and save after S seconds; the same command resumes"),
       text("rows-out", "FILE",
            "also write every step's rows (token ids, loss weights) to FILE as JSON lines; refused when FILE "
            "exists (a resumed run needs a new FILE: it writes the rows of its own steps)")},
      "",
      cmd_train};
}

}  // namespace

std::vector<Command> train_commands() {
  return {train_command()};
}

}  // namespace difflens::cli
