// Training loop for a matched DIFF/baseline pair: identical rows per step for both models, AdamW with
// decoupled weight decay, linear warm-up then cosine decay, global-norm gradient clipping, periodic
// evaluation and resumable state. The loop is here; its parts have files of their own (train_impl.h names
// them).
#include "core/model/train.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/formats/bounded_read.h"
#include "core/formats/error.h"
#include "core/model/train_impl.h"

namespace difflens {
namespace training {

using at::Tensor;
namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec) && !ec) throw Error(p.string() + ": cannot open (run scripts/prepare-corpus first)");
  return read_bounded(p, "file", kTextLimit);
}

std::vector<int64_t> encode_lines(const std::string& text, const Tokenizer& tok) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) {
      const auto ids = tok.encode(text.substr(start, end - start), false).ids;
      out.insert(out.end(), ids.begin(), ids.end());
    }
    start = end + 1;
  }
  return out;
}

// Next-token cross-entropy of a [B, L+1] batch.
Loss lm_loss(nn::CausalLm& net, const Tensor& batch, const Tensor& weights) {
  const int64_t L = batch.size(1) - 1;
  Tensor logits = net->forward(batch.narrow(1, 0, L));  // [B, L, V]
  Tensor logp = at::log_softmax(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), -1);
  const Tensor targets = batch.narrow(1, 1, L).reshape({-1});
  if (!weights.defined()) {
    Tensor l = at::nll_loss(logp, targets);
    return {l, l.detach()};
  }
  Tensor per_token = at::nll_loss(logp, targets, {}, at::Reduction::None);
  const Tensor w = weights.reshape({-1});
  return {(per_token * w).sum() / w.sum(), per_token.mean().detach()};
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// On CUDA the copy does not block: the batches come in pinned memory.
Tensor to_device(const Tensor& t, const at::Device& dev) {
  return t.defined() ? t.to(at::TensorOptions().device(dev), /*non_blocking=*/dev.is_cuda()) : t;
}

// Step `step` of every model on the same rows: forward, backward and AdamW; the loss stays on the device.
void train_step(std::vector<ModelState>& models, const TrainOptions& o, int64_t step, const Tensor& batch,
                const Tensor& weights) {
  const double lr = learning_rate(o, step);
  for (auto& s : models) {
    auto& net = ModelAccess::impl(s.model).net;
    Loss loss = lm_loss(net, batch, weights);
    loss.objective.backward();
    adamw_step(s, o, step, lr);
    s.last_loss = loss.mean;
    s.loss_sum = s.loss_sum.defined() ? s.loss_sum + loss.mean : loss.mean;
    ++s.loss_count;
  }
}

// The progress after step `step` of a run that started at step `start` `secs` ago and has trained on
// `run_tokens` tokens per model since. `last_report`: when the losses were last read.
TrainProgress step_progress(const std::vector<ModelState>& models, const TrainOptions& o, int64_t step,
                            int64_t start, int64_t run_tokens, double secs, double& last_report) {
  TrainProgress p;
  p.step = step + 1;
  p.total = o.steps;
  p.tokens_per_second = static_cast<double>(run_tokens) / std::max(secs, 1e-9);
  p.eta_seconds = secs / static_cast<double>(step + 1 - start) * static_cast<double>(o.steps - step - 1);
  // Reading a loss waits for the device: only twice a second, every 50th step and the last.
  p.has_loss = secs - last_report >= 0.5 || (step + 1) % 50 == 0 || step + 1 == o.steps;
  if (p.has_loss) {
    last_report = secs;
    for (auto& s : models)
      (s.model.config().is_diff() ? p.loss_diff : p.loss_baseline) = s.last_loss.item<double>();
  }
  return p;
}

}  // namespace
}  // namespace training

int64_t train_pair(const TrainOptions& o, const std::atomic<bool>* stop,
                   const std::function<void(const TrainProgress&)>& progress) {
  using namespace training;  // NOLINT: the loop's parts (train_impl.h)
  check_train_options(o);
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const Tokenizer tok = Tokenizer::sentencepiece(o.corpus_dir / "tokenizer.model");
  const auto [diff_cfg, base_cfg] = train_configs(o, tok);
  {
    std::vector<ModelConfig> trained;
    if (o.train_diff) trained.push_back(diff_cfg);
    if (o.train_baseline) trained.push_back(base_cfg);
    check_train_output(o, trained);
  }

  const TrainCorpus corpus(o, tok);
  const at::Device dev = train_device(o);
  check_step_memory(o, diff_cfg, base_cfg, dev);

  int64_t start = 0, tokens = 0;
  double wall_before = 0;  // training wall time of earlier runs of this schedule
  std::vector<ModelState> models = start_models(o, diff_cfg, base_cfg, dev, start, tokens, wall_before);
  TrainEvaluation evaluation(o, corpus, tok, dev);

  // Batches are built ahead on worker threads; on CUDA in pinned memory, copied without blocking.
  const int workers = batch_workers(o, dev);
  BatchPrefetcher prefetch([&](int64_t step) { return build_step_batch(o, corpus, step, dev.is_cuda()); },
                           start, o.steps, workers, 2 * workers + 1);
  const nn::ScopedDtype precision(nn::g_matmul_dtype, train_precision(o, dev));
  const RowsFile rows_file = open_rows_file(o);

  const auto t0 = std::chrono::steady_clock::now();
  const int64_t tokens_before = tokens;
  double last_report = -1;
  int64_t step = start;
  for (; step < o.steps; ++step) {
    if (stop && stop->load()) break;
    if (o.max_seconds > 0 && step > start && seconds_since(t0) >= o.max_seconds) break;
    const StepBatch host = prefetch.take(step);
    if (rows_file) write_rows(rows_file.get(), o, step, host);
    const Tensor batch = to_device(host.ids, dev), weights = to_device(host.weights, dev);
    train_step(models, o, step, batch, weights);
    tokens += phase_batch(o, phase_at(o, step)) * phase_seq_len(o, phase_at(o, step));
    const double secs = seconds_since(t0);
    const TrainProgress p = step_progress(models, o, step, start, tokens - tokens_before, secs, last_report);
    if (progress) progress(p);
    if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) evaluation.run(models, step + 1, tokens);
    if ((step + 1) % o.save_every == 0 || step + 1 == o.steps)
      save_state(models, o, step + 1, tokens, wall_before + secs);
    if (o.keep_every > 0 && (step + 1) % o.keep_every == 0) keep_checkpoints(models, o, step + 1, tokens);
  }
  if (step < o.steps && step > start) {  // stopped early: keep what was learned
    const double secs = seconds_since(t0);
    save_state(models, o, step, tokens, wall_before + secs);
  }
  return step;
}

}  // namespace difflens
