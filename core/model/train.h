// `difflens train`: trains a parameter-matched DIFF + baseline pair (or one of them) on identical data
// (same rows in the same order, same seed, same optimiser and schedule). LibTorch-free interface.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/data.h"

namespace difflens {

class Model;

// From `from_step` on, rows of `seq_len` tokens, `batch` a step (0: TrainOptions' seq_len and batch), are
// drawn from `mix` and retrieval answer tokens weigh `answer_weight` in the training loss (validation loss
// is never weighted). A phase with `lr` > 0 restarts the learning-rate schedule: linear warm-up over
// `warmup` steps (-1: TrainOptions' warmup) from its first step, then, with `flat`, that rate to the next
// restart, else a cosine decay that reaches lr · min_lr_ratio at step `lr_horizon` (0: the last step); a
// phase without continues the one before.
struct TrainPhase {
  int64_t from_step = 0;
  DataMix mix;
  double answer_weight = 1.0;
  double lr = 0;
  int64_t lr_horizon = 0;
  bool flat = false;
  int64_t warmup = -1;
  int64_t seq_len = 0, batch = 0;
};

struct TrainOptions {
  PairSpec model;                    // width, depth, heads, vocab (vocab is taken from the tokenizer)
  std::filesystem::path corpus_dir;  // train.txt, val.txt, tokenizer.model (scripts/prepare-corpus)
  std::filesystem::path out_dir;     // out/diff-small, out/baseline-small
  bool train_diff = true;
  bool train_baseline = true;
  // The differential model: DIFF V1 (out/diff-small, matched to the baseline as make_matched_pair) or DIFF
  // V2 (out/diff-v2-small, make_matched_diff_v2: the baseline's heads, twice the query sub-heads).
  AttentionKind diff_arch = AttentionKind::Diff;
  int64_t steps = 2000;
  int64_t seq_len = 512;
  int64_t batch = 8;
  double lr = 2e-3;           // the first phase's schedule (phases[0].lr, when set, takes precedence)
  int64_t lr_horizon = 0;     // step where the first cosine ends (0: the last step)
  double min_lr_ratio = 0.1;  // cosine decays to lr · ratio
  int64_t warmup = 100;       // warm-up steps of every schedule (re)start
  double weight_decay = 0.1;  // on matrices; not on norms or λ
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;
  std::vector<TrainPhase> phases = {TrainPhase{}};  // sorted by from_step; the first starts at 0
  uint64_t seed = 1;
  int threads = 0;           // CPU threads; 0: every core (the config or --threads may name a number)
  int64_t eval_every = 250;  // val loss + needle accuracy
  int64_t save_every = 250;
  // > 0: each keep_every-th step's weights are kept in MODEL/checkpoints/step-NNNNNNNN/ (config.json,
  // model.safetensors, tokenizer.model, step.json; no optimizer state): a model folder per step, which the
  // resumable save (one step, replaced) does not give. --fresh removes them with the rest of the run.
  int64_t keep_every = 0;
  int64_t eval_episodes = 40;  // per context length
  std::vector<int64_t> eval_lengths = {128, 256, 512};
  std::string device = "auto";
  // Matmul precision of the training forward/backward: "fp32", "bf16" (projections and attention products
  // in bf16, everything else and the weights in fp32), or "auto" (bf16 on CUDA, fp32 on the CPU).
  std::string precision = "auto";
  int data_workers = 0;  // threads building batches ahead (0: 1 on the CPU, half the cores up to 8 on CUDA)
  // > 0: stop (saving the resumable state, as Ctrl-C does) once a step ends this many seconds after this
  // run started, so that a machine lent for a fixed time returns a state to resume from.
  double max_seconds = 0;
  // Non-empty: every step's rows are written there as JSON lines, one per row: {"step", "row", "ids" (the
  // row's L+1 token ids), "weights" (the L loss weights; absent when the phase's answer_weight is 1)}, so
  // that another trainer (tests/bench/train_vs_eager.py) or a reader can take exactly the rows this run
  // trained on. Refused when the file exists (a resumed run writes the rows of its own steps to a new file).
  std::filesystem::path rows_out;
  bool resume = true;  // continue from out_dir's train_state when present
  // Non-empty: a new run (no train_state yet) starts from the weights in init_from/<model name>/ (the same
  // shape, e.g. the shipped trio) at step `init_step`, with a fresh optimizer whose moments count from there;
  // steps before init_step are not run. Resuming such a run later reads its own train_state as usual.
  std::filesystem::path init_from;
  int64_t init_step = 0;
  // A model folder that holds weights train did not write (no train_state/, e.g. the shipped pair) is
  // refused unless this is set; see check_train_output.
  bool overwrite = false;
};

struct TrainProgress {
  int64_t step = 0, total = 0;
  // The step's train losses (0 for a model not trained), read only when has_loss: reading one waits for
  // the device, so a CUDA run reads them about twice a second, at every 50th step and at the last.
  bool has_loss = false;
  double loss_diff = 0, loss_baseline = 0;
  double tokens_per_second = 0;  // per model
  double eta_seconds = 0;
};

// The learning rate of step `step` (0-based) under the options' schedule and phases.
double learning_rate(const TrainOptions& options, int64_t step);

// The phase in force at `step`, and its row length and rows per step.
size_t phase_at(const TrainOptions& options, int64_t step);
int64_t phase_seq_len(const TrainOptions& options, size_t phase);
int64_t phase_batch(const TrainOptions& options, size_t phase);

// Mean next-token cross-entropy of a model over a text, read the way training validates: the text's lines
// tokenized (no BOS) and concatenated, then cut into consecutive windows of `window` + 1 tokens (the last,
// shorter remainder is dropped); every target of every window counts once. `max_windows` > 0 reads only the
// first that many. Throws Error when the text has fewer than `window` + 1 tokens.
struct TextLoss {
  double nats_per_token = 0;
  int64_t tokens = 0;  // targets scored
  int64_t windows = 0;
  int64_t planned = 0;  // windows the text (and max_windows) asked for; more than `windows` when stopped
};
// `progress(done, planned)` after every pass of windows; `*stop` turning true ends the run after the pass in
// progress with the loss of the windows scored so far (planned > windows). Throws Cancelled when it stops
// before any window was scored.
TextLoss text_loss(const Model& model, const std::string& text, int64_t window, int64_t max_windows = 0,
                   const std::function<void(int64_t, int64_t)>& progress = nullptr,
                   const std::atomic<bool>* stop = nullptr);

// Reads a JSON training config (same keys as the command-line options); throws ConfigError.
TrainOptions train_options_from_json(const std::filesystem::path& file);

// Refuses, before any work, an output that would overwrite what train did not write or cannot continue:
// `out_dir` a file; a model folder (out_dir/diff-small, ...) that holds weights without train_state/ (weights
// someone else made: the shipped pair, a converted checkpoint) unless `overwrite`; when resuming, a
// train_state whose model has another configuration than `config` (named key by key). `configs` are the
// models about to be trained, their `name` the folder. Throws Error.
void check_train_output(const TrainOptions& options, const std::vector<ModelConfig>& configs);

// Trains until `steps` or until `*stop` turns true (then saves and returns). Writes, per model,
// config.json, model.safetensors, tokenizer.model, train_log.csv and eval_log.csv, plus
// train_state/ for resuming. `progress` is called after every step (losses only when has_loss). Returns the
// last step reached.
int64_t train_pair(const TrainOptions& options, const std::atomic<bool>* stop,
                   const std::function<void(const TrainProgress&)>& progress);

}  // namespace difflens
