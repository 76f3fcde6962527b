// `difflens train`: trains a parameter-matched DIFF + baseline pair (or one of them) on identical data
// (same rows in the same order, same seed, same optimiser and schedule). LibTorch-free interface.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"

namespace difflens {

struct TrainOptions {
  PairSpec model;                    // width, depth, heads, vocab (vocab is taken from the tokenizer)
  std::filesystem::path corpus_dir;  // train.txt, val.txt, tokenizer.model (scripts/prepare-corpus)
  std::filesystem::path out_dir;     // out/diff-small, out/baseline-small
  bool train_diff = true;
  bool train_baseline = true;
  int64_t steps = 2000;
  int64_t seq_len = 512;
  int64_t batch = 8;
  double lr = 2e-3;
  double min_lr_ratio = 0.1;  // cosine decays to lr · ratio
  int64_t warmup = 100;
  double weight_decay = 0.1;  // on matrices; not on norms or λ
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;
  double episode_fraction = 0.5;  // rows packed with retrieval episodes
  uint64_t seed = 1;
  int threads = 2;
  int64_t eval_every = 250;  // val loss + needle accuracy
  int64_t save_every = 250;
  int64_t eval_episodes = 40;  // per context length
  std::vector<int64_t> eval_lengths = {128, 256, 512};
  std::string device = "auto";
  bool resume = true;  // continue from out_dir's train_state when present
};

struct TrainProgress {
  int64_t step = 0, total = 0;
  double loss_diff = 0, loss_baseline = 0;  // last step's train loss (0 for a model not trained)
  double tokens_per_second = 0;             // per model
  double eta_seconds = 0;
};

// Reads a JSON training config (same keys as the command-line options); throws ConfigError.
TrainOptions train_options_from_json(const std::filesystem::path& file);

// Trains until `steps` or until `*stop` turns true (then saves and returns). Writes, per model,
// config.json, model.safetensors, tokenizer.model, train_log.csv and eval_log.csv, plus
// train_state/ for resuming. `progress` is called after every step. Returns the last step reached.
int64_t train_pair(const TrainOptions& options, const std::atomic<bool>* stop,
                   const std::function<void(const TrainProgress&)>& progress);

}  // namespace difflens
