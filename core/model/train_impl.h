// Internal to core/model (includes LibTorch, never included outside it): what `difflens train`'s files share.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/data.h"
#include "core/model/model_impl.h"
#include "core/model/train.h"

// The files of `difflens train`: train.cpp runs the loop; train_options.cpp reads and checks the options;
// train_data.cpp reads the corpus and makes each step's batch; train_optimizer.cpp is AdamW; train_state.cpp
// saves and resumes; train_eval.cpp evaluates.
namespace difflens::training {

// train_options.cpp: the options read and checked, and what they choose.

// Refuses, before any work, options a run cannot train with (a precision, phases, init_step, rows_out over
// a file); the per-model folders are checked later by check_train_output. Throws Error.
void check_train_options(const TrainOptions& o);
// The dtype the training forward multiplies in (nn::g_matmul_dtype).
at::ScalarType train_precision(const TrainOptions& o, const at::Device& dev);
// The device the options name ("cpu", "cuda" or "auto": CUDA when there is one).
at::Device train_device(const TrainOptions& o);
// The matched pair the options describe, {DIFF (V1 or V2), baseline}, named for their folders.
std::pair<ModelConfig, ModelConfig> train_configs(const TrainOptions& o, const Tokenizer& tok);
// Refuses a step the machine (or the GPU) cannot hold, naming the phase and how many rows would fit.
void check_step_memory(const TrainOptions& o, const ModelConfig& diff_cfg, const ModelConfig& base_cfg,
                       const at::Device& dev);

// train.cpp: the corpus read, and the loss every pass computes.

// A corpus file; a missing one names the script that makes it.
std::string read_text(const std::filesystem::path& p);
// The text's lines tokenized (no BOS) and concatenated.
std::vector<int64_t> encode_lines(const std::string& text, const Tokenizer& tok);

struct Loss {
  at::Tensor objective;  // what is minimised (weighted when weights are given)
  at::Tensor mean;  // 0-dim, detached: plain mean next-token cross-entropy, for the logs (read when logged,
                    // so that a CUDA step does not wait for the device)
};
// Next-token cross-entropy of a [B, L+1] batch.
Loss lm_loss(nn::CausalLm& net, const at::Tensor& batch, const at::Tensor& weights = {});

// train_data.cpp: the text a run trains and validates on, and each step's batch.

// The corpus of a run, read and tokenized once. Its TrainingData hold references to its haystacks (and to
// the tokenizer, which must outlive it): built where it stays, never copied or moved.
struct TrainCorpus {
  TrainCorpus(const TrainOptions& o, const Tokenizer& tok);
  TrainCorpus(const TrainCorpus&) = delete;
  TrainCorpus& operator=(const TrainCorpus&) = delete;

  const std::string train_text, val_text;
  const Haystack train_hay, eval_hay;
  const std::vector<int64_t> train_stream;
  const std::vector<TrainingData> phase_data;  // one per phase, with its mix
  const TrainingData val_data;
};

// A [B, n] token tensor of the rows' ids, on `dev`.
at::Tensor batch_tensor(const std::vector<TrainingRow>& rows, const at::Device& dev);

// The rows of one training step, on the CPU: ids [B, L+1] and loss weights [B, L] (undefined when all 1).
struct StepBatch {
  at::Tensor ids, weights;
};
// Step `step`'s rows, drawn from the phase in force with an RNG of (seed, step) alone; `pin`: in pinned
// memory, for a copy to the GPU that does not block.
StepBatch build_step_batch(const TrainOptions& o, const TrainCorpus& corpus, int64_t step, bool pin);
// Threads building batches ahead: data_workers, or by default 1 on the CPU and half the cores (up to 8) on
// CUDA.
int batch_workers(const TrainOptions& o, const at::Device& dev);

// Builds the batches of upcoming steps on worker threads while the models train on the current one
// (on a GPU, one thread building a batch of 64 episode rows kept the device idle). A step's rows depend
// only on (seed, step) (TrainingData's contract), so the batches are those a serial loop would build.
// take() is called from one thread, for consecutive steps; the destructor stops and joins the workers.
class BatchPrefetcher {
 public:
  using Build = std::function<StepBatch(int64_t step)>;
  BatchPrefetcher(Build build, int64_t first, int64_t end, int workers, int depth);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Blocks until `step` is built; rethrows a worker's failure.
  StepBatch take(int64_t step);

 private:
  void work();

  Build build_;
  std::mutex m_;
  std::condition_variable cv_;
  int64_t next_build_, next_take_, end_;
  int depth_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::map<int64_t, StepBatch> ready_;
  std::vector<std::thread> threads_;
};

// --rows-out: the file every step's rows are written to as JSON lines (TrainOptions::rows_out); null when
// the options name none.
using RowsFile = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
RowsFile open_rows_file(const TrainOptions& o);
void write_rows(std::FILE* file, const TrainOptions& o, int64_t step, const StepBatch& b);

// train_optimizer.cpp: a model in training and its optimizer step.

struct ModelState {
  std::string name;
  std::filesystem::path dir;
  Model model;
  std::map<std::string, at::Tensor> exp_avg, exp_avg_sq;  // AdamW moments by parameter name
  at::Tensor loss_sum;  // 0-dim on the training device: train losses since the last evaluation
  int64_t loss_count = 0;
  at::Tensor last_loss;  // 0-dim: the last step's train loss
};

// Clips the gradients by their global norm, then one AdamW update with decoupled weight decay of every
// parameter that has a gradient, which is then zeroed.
void adamw_step(ModelState& s, const TrainOptions& o, int64_t step, double lr);

// train_state.cpp: the resumable state saved, resumed from and kept.

// The models this run trains ({diff_cfg, base_cfg}, each if the options train it), each resumed from the
// newest step every one of them saved completely, else from init_from's weights, else new (--fresh removes
// the earlier run's steps); on `dev`, in training mode, with their logs cut back to the step they start
// from. Sets `start` (the first step to run) and `tokens` (tokens seen before it), and, when resumed,
// `wall_before` (the training time of the earlier runs).
std::vector<ModelState> start_models(const TrainOptions& o, const ModelConfig& diff_cfg,
                                     const ModelConfig& base_cfg, const at::Device& dev, int64_t& start,
                                     int64_t& tokens, double& wall_before);
// Saves step `step` of every model: each model's step folder first, then, with all of them complete, the
// older steps removed and the weights (and tokenizer) published in each model's folder.
void save_state(std::vector<ModelState>& models, const TrainOptions& o, int64_t step, int64_t tokens,
                double wall_seconds);
// train --keep-every: step `step`'s weights of every model kept as a model folder of their own (replacing a
// partial one of the same step that a stopped run left), step.json last.
void keep_checkpoints(const std::vector<ModelState>& models, const TrainOptions& o, int64_t step,
                      int64_t tokens);

// train_eval.cpp: evaluation during training.

// A run's fixed evaluation material (validation batches, held-out needle episodes per kind of needle in use)
// and the evaluation every eval_every steps, appended to each model's train_log.csv and eval_log.csv.
class TrainEvaluation {
 public:
  TrainEvaluation(const TrainOptions& o, const TrainCorpus& corpus, const Tokenizer& tok,
                  const at::Device& dev);
  // Evaluates the weights after `step` steps (`tokens` seen) and restarts each model's train-loss mean.
  void run(std::vector<ModelState>& models, int64_t step, int64_t tokens);

 private:
  const TrainOptions& o_;
  at::Device dev_;
  std::vector<at::Tensor> val_batches_;
  // By eval_kind, then by context length.
  std::map<std::string, std::map<int64_t, std::vector<Episode>>> episodes_;
};

}  // namespace difflens::training
