// Training loop for a matched DIFF/baseline pair: identical rows per step for both models, AdamW with
// decoupled weight decay (written here so its state is ours to save on any LibTorch version), linear
// warm-up then cosine decay, global-norm gradient clipping, periodic evaluation and resumable state.
#include "core/model/train.h"
#include "core/formats/bounded_read.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/checkpoint.h"
#include "core/formats/data.h"
#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "core/model/model_impl.h"

namespace difflens {
namespace {

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

Tensor batch_tensor(const std::vector<TrainingRow>& rows, const at::Device& dev) {
  const int64_t B = static_cast<int64_t>(rows.size()), n = static_cast<int64_t>(rows[0].ids.size());
  Tensor t = at::empty({B, n}, at::TensorOptions().dtype(at::kLong));
  auto acc = t.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) acc[b][i] = rows[static_cast<size_t>(b)].ids[static_cast<size_t>(i)];
  return t.to(dev);
}

// Per-token loss weights [B, L] for targets ids[1..L]: `answer_weight` where the target is a retrieval
// answer token, 1 elsewhere; undefined when every weight is 1.
Tensor loss_weights(const std::vector<TrainingRow>& rows, double answer_weight, const at::Device& dev) {
  if (answer_weight == 1.0) return {};
  const int64_t B = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(rows[0].ids.size()) - 1;
  Tensor w = at::ones({B, L}, at::TensorOptions().dtype(at::kFloat));
  auto acc = w.accessor<float, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t pos : rows[static_cast<size_t>(b)].answers)
      if (pos >= 1 && pos <= L) acc[b][pos - 1] = static_cast<float>(answer_weight);
  return w.to(dev);
}

struct Loss {
  Tensor objective;  // what is minimised (weighted when weights are given)
  Tensor mean;       // 0-dim, detached: plain mean next-token cross-entropy, for the logs (read when logged,
                     // so that a CUDA step does not wait for the device)
};

// Next-token cross-entropy of a [B, L+1] batch.
Loss lm_loss(nn::CausalLm& net, const Tensor& batch, const Tensor& weights = {}) {
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

// The rows of one training step, on the CPU: ids [B, L+1] and loss weights [B, L] (undefined when all 1).
struct StepBatch {
  Tensor ids, weights;
};

// Builds the batches of upcoming steps on worker threads while the models train on the current one
// (on a GPU, one thread building a batch of 64 episode rows kept the device idle). A step's rows depend
// only on (seed, step) (TrainingData's contract), so the batches are those a serial loop would build.
// take() is called from one thread, for consecutive steps; the destructor stops and joins the workers.
class BatchPrefetcher {
 public:
  using Build = std::function<StepBatch(int64_t step)>;
  BatchPrefetcher(Build build, int64_t first, int64_t end, int workers, int depth)
      : build_(std::move(build)), next_build_(first), next_take_(first), end_(end), depth_(depth) {
    for (int i = 0; i < std::max(1, workers); ++i) threads_.emplace_back([this] { work(); });
  }
  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Blocks until `step` is built; rethrows a worker's failure.
  StepBatch take(int64_t step) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return ready_.count(step) || error_; });
    if (error_) std::rethrow_exception(error_);
    StepBatch b = std::move(ready_[step]);
    ready_.erase(step);
    next_take_ = step + 1;
    cv_.notify_all();
    return b;
  }

 private:
  void work() {
    for (;;) {
      int64_t step;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] {
          return stop_ || error_ || (next_build_ < end_ && next_build_ < next_take_ + depth_);
        });
        if (stop_ || error_) return;
        step = next_build_++;
      }
      try {
        StepBatch b = build_(step);
        std::lock_guard<std::mutex> lock(m_);
        ready_[step] = std::move(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
      }
      cv_.notify_all();
    }
  }

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

struct ModelState {
  std::string name;
  fs::path dir;
  Model model;
  std::map<std::string, Tensor> exp_avg, exp_avg_sq;  // AdamW moments by parameter name
  Tensor loss_sum;  // 0-dim on the training device: train losses since the last evaluation
  int64_t loss_count = 0;
  Tensor last_loss;  // 0-dim: the last step's train loss
};

void adamw_step(ModelState& s, const TrainOptions& o, int64_t step, double lr) {
  at::NoGradGuard no_grad;
  auto params = ModelAccess::impl(s.model).named();
  // Global-norm clipping. The factor stays a 0-dim device tensor: no host round trip per parameter.
  std::vector<Tensor> squares;
  for (auto& [name, p] : params)
    if (p.grad().defined()) squares.push_back(p.grad().to(at::kDouble).pow(2).sum());
  Tensor clip;  // undefined: no clipping
  if (o.grad_clip > 0 && !squares.empty()) {
    const Tensor norm = at::stack(squares).sum().sqrt();
    clip = at::where(norm > o.grad_clip, o.grad_clip / (norm + 1e-6), at::ones_like(norm)).to(at::kFloat);
  }
  // The moments count from the run's first step (init_step when it started from other weights).
  const double t = static_cast<double>(step + 1 - (o.init_from.empty() ? 0 : o.init_step));
  const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
  for (auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    Tensor g = clip.defined() ? p.grad() * clip : p.grad();
    Tensor& m = s.exp_avg[name];
    Tensor& v = s.exp_avg_sq[name];
    if (!m.defined()) {
      m = at::zeros_like(p);
      v = at::zeros_like(p);
    }
    if (p.dim() >= 2 && o.weight_decay > 0)
      p.mul_(1 - lr * o.weight_decay);  // decoupled decay, matrices only
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    p.addcdiv_(m / bc1, (v / bc2).sqrt_().add_(o.adam_eps), -lr);
    p.grad().zero_();
  }
}

// A model's training state is kept by step: train_state/step-NNNNNNNN/ holds the weights (config.json,
// model.safetensors), the optimizer's moments and state.json, written in that order, state.json last: a
// folder without it is a save that was cut short (a full disk, a kill) and is never resumed from. Once every
// model of the run has a complete step, older steps are removed; the weights are then published beside
// train_state/ for the user. A run is resumed from the newest step that every model saved completely.
fs::path step_dir(const fs::path& model_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return model_dir / "train_state" / name;
}

// The steps saved completely under `model_dir`, oldest first.
std::vector<int64_t> complete_steps(const fs::path& model_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir / "train_state", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() != 13 || !fs::exists(e.path() / "state.json", ec))
      continue;
    try {
      steps.push_back(std::stoll(name.substr(5)));
    } catch (const std::exception&) {
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Writes step `step` of one model completely (its folder; nothing outside it changes).
void save_step(const ModelState& s, const TrainOptions& o, int64_t step, int64_t tokens,
               double wall_seconds) {
  const fs::path st = step_dir(s.dir, step);
  std::error_code ec;
  remove_tree(st, ec);  // a save of this step cut short earlier
  s.model.save(st);
  std::vector<std::vector<float>> keep;
  std::vector<TensorToWrite> out;
  for (const auto* moments : {&s.exp_avg, &s.exp_avg_sq}) {
    const std::string prefix = moments == &s.exp_avg ? "exp_avg." : "exp_avg_sq.";
    for (const auto& [name, t] : *moments) {
      Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
      keep.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      out.push_back(
          {prefix + name, std::vector<int64_t>(c.sizes().begin(), c.sizes().end()), keep.back().data()});
    }
  }
  write_safetensors(st / "optimizer.safetensors", out);
  nlohmann::json j = {{"step", step},
                      {"tokens_seen", tokens},
                      {"seed", o.seed},
                      {"steps", o.steps},
                      {"wall_seconds", wall_seconds},
                      {"threads", at::get_num_threads()},
                      {"precision", o.precision},
                      {"device", cuda_available() && o.device != "cpu" ? "cuda" : "cpu"}};
  write_file_atomically(st / "state.json", j.dump(2) + "\n");  // last: the step is complete
}

// Saves step `step` of every model: each model's step folder first, then, with all of them complete, the
// older steps removed and the weights (and tokenizer) published in each model's folder.
void save_state(std::vector<ModelState>& models, const TrainOptions& o, int64_t step, int64_t tokens,
                double wall_seconds) {
  for (const ModelState& s : models) save_step(s, o, step, tokens, wall_seconds);
  for (const ModelState& s : models) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(s.dir / "train_state", ec)) {
      const std::string name = e.path().filename().string();
      if (e.path() != step_dir(s.dir, step) && (name.rfind("step-", 0) == 0 || name == "state.json" ||
                                                name == "optimizer.safetensors"))  // (and an older layout's)
        remove_tree(e.path(), ec);
    }
    s.model.save(s.dir);
    fs::copy_file(o.corpus_dir / "tokenizer.model", s.dir / "tokenizer.model",
                  fs::copy_options::overwrite_existing);
  }
}

// train --keep-every: step `step`'s weights of every model kept as a model folder of their own (replacing a
// partial one of the same step that a stopped run left), step.json last.
void keep_checkpoints(const std::vector<ModelState>& models, const TrainOptions& o, int64_t step,
                      int64_t tokens) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  for (const ModelState& s : models) {
    const fs::path dir = s.dir / "checkpoints" / name;
    std::error_code ec;
    remove_tree(dir, ec);
    s.model.save(dir);
    fs::copy_file(o.corpus_dir / "tokenizer.model", dir / "tokenizer.model",
                  fs::copy_options::overwrite_existing);
    write_file_atomically(
        dir / "step.json",
        nlohmann::json{{"step", step}, {"tokens_seen", tokens}, {"seed", o.seed}}.dump(2) + "\n");
  }
}

// The newest step every model of the run saved completely; 0 when there is none to resume from.
int64_t common_step(const std::vector<fs::path>& model_dirs) {
  std::vector<int64_t> common;
  for (size_t k = 0; k < model_dirs.size(); ++k) {
    const std::vector<int64_t> steps = complete_steps(model_dirs[k]);
    if (k == 0) {
      common = steps;
    } else {
      std::vector<int64_t> both;
      std::set_intersection(common.begin(), common.end(), steps.begin(), steps.end(),
                            std::back_inserter(both));
      common = both;
    }
  }
  return common.empty() ? 0 : common.back();
}

// Restores the weights and moments of step `step` (complete_steps'); returns it, or 0 for none.
int64_t load_state(ModelState& s, int64_t step, int64_t* tokens, double* wall_seconds) {
  if (step <= 0) return 0;
  const fs::path st = step_dir(s.dir, step);
  int64_t saved_step = 0, saved_tokens = 0;
  double saved_wall = 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_text(st / "state.json"));
    saved_tokens = j.at("tokens_seen").get<int64_t>();
    saved_step = j.at("step").get<int64_t>();
    saved_wall = j.value("wall_seconds", 0.0);
  } catch (const nlohmann::json::exception& e) {
    throw Error((st / "state.json").string() + ": not a training state this version can resume (" + e.what() +
                "); start over with --fresh or remove " + st.string());
  }
  if (saved_step != step)
    throw Error((st / "state.json").string() + ": says step " + std::to_string(saved_step) + ", its folder " +
                std::to_string(step) + "; start over with --fresh or remove " + st.string());
  s.model = Model::load(st, DeviceChoice::Cpu);
  const SafetensorsFile f(st / "optimizer.safetensors");
  for (const auto& info : f.tensors()) {
    const bool first = info.name.rfind("exp_avg.", 0) == 0;
    const std::string tensor = info.name.substr(first ? 8 : 11);
    std::vector<float> data = f.read_f32(info);
    Tensor t = at::from_blob(data.data(), info.shape, at::TensorOptions().dtype(at::kFloat)).clone();
    (first ? s.exp_avg : s.exp_avg_sq)[tensor] = t;
  }
  *tokens = saved_tokens;
  *wall_seconds = saved_wall;
  return saved_step;
}

// Keeps the CSV rows with step <= `step` (so a resumed run continues the same file), or starts it.
void prepare_log(const fs::path& file, const std::string& header, int64_t step) {
  std::vector<std::string> rows;
  std::ifstream in(file);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first) {
      first = false;
      continue;
    }
    // A row whose step cannot be read (a line cut short by a crash) is dropped.
    char* end = nullptr;
    const std::string first_field = line.substr(0, line.find(','));
    const long long row_step = std::strtoll(first_field.c_str(), &end, 10);
    if (!first_field.empty() && end && *end == '\0' && row_step <= step) rows.push_back(line);
  }
  // Rows written before a column was added get empty fields for it.
  const auto columns = [](const std::string& l) { return std::count(l.begin(), l.end(), ',') + 1; };
  for (auto& r : rows)
    for (auto c = columns(r); c < columns(header); ++c) r += ",";
  std::string text = header + "\n";
  for (const auto& r : rows) text += r + "\n";
  write_file_atomically(file, text);
}

struct NeedleScore {
  double exact = 0;   // fraction of episodes whose whole code is reproduced
  double digits = 0;  // fraction of code tokens predicted right (chance: 0.1)
};

// Scores the final answer of each episode: a code token counts when it is the argmax given the true
// prefix; an episode counts when all of them do (what greedy decoding would produce).
NeedleScore needle_accuracy(nn::CausalLm& net, const std::vector<Episode>& episodes, const at::Device& dev) {
  c10::InferenceMode guard;
  int correct = 0;
  int64_t digits = 0, digit_total = 0;
  for (const Episode& ep : episodes) {
    Tensor ids = at::tensor(ep.ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(dev);
    Tensor pred = net->forward(ids).argmax(-1)[0].to(at::kCPU);  // [T]
    const Span a = ep.answer_spans.back();
    bool ok = true;
    for (int64_t i = a.begin; i < a.end; ++i) {
      const bool hit = pred[i - 1].item<int64_t>() == ep.ids[static_cast<size_t>(i)];
      ok &= hit;
      digits += hit;
      ++digit_total;
    }
    // The code must also end where it ends: the token after it (its full stop) is the model's choice too.
    if (a.end < static_cast<int64_t>(ep.ids.size()))
      ok &= pred[a.end - 1].item<int64_t>() == ep.ids[static_cast<size_t>(a.end)];
    correct += ok;
  }
  NeedleScore s;
  if (!episodes.empty()) s.exact = static_cast<double>(correct) / static_cast<double>(episodes.size());
  if (digit_total) s.digits = static_cast<double>(digits) / static_cast<double>(digit_total);
  return s;
}

}  // namespace

double learning_rate(const TrainOptions& o, int64_t step) {
  // The schedule in force: that of the last phase at or before `step` which (re)starts one.
  int64_t start = 0, horizon = o.lr_horizon > 0 ? o.lr_horizon : o.steps;
  double peak = o.phases.front().lr > 0 ? o.phases.front().lr : o.lr;
  size_t from = 0;
  for (size_t k = 1; k < o.phases.size() && o.phases[k].from_step <= step; ++k)
    if (o.phases[k].lr > 0) {
      from = k;
      start = o.phases[k].from_step;
      horizon = o.phases[k].lr_horizon > 0 ? o.phases[k].lr_horizon : o.steps;
      peak = o.phases[k].lr;
    }
  const int64_t warmup = o.phases.empty() || o.phases[from].warmup < 0 ? o.warmup : o.phases[from].warmup;
  const int64_t s = step - start;
  if (s < warmup) return peak * static_cast<double>(s + 1) / static_cast<double>(warmup);
  if (!o.phases.empty() && o.phases[from].flat) return peak;
  const double progress =
      std::min(1.0, static_cast<double>(s - warmup) /
                        static_cast<double>(std::max<int64_t>(1, horizon - start - warmup)));
  return peak * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

size_t phase_at(const TrainOptions& o, int64_t step) {
  size_t k = 0;
  while (k + 1 < o.phases.size() && o.phases[k + 1].from_step <= step) ++k;
  return k;
}

int64_t phase_seq_len(const TrainOptions& o, size_t phase) {
  return o.phases[phase].seq_len > 0 ? o.phases[phase].seq_len : o.seq_len;
}

int64_t phase_batch(const TrainOptions& o, size_t phase) {
  return o.phases[phase].batch > 0 ? o.phases[phase].batch : o.batch;
}

TextLoss text_loss(const Model& model, const std::string& text, int64_t window, int64_t max_windows,
                   const std::function<void(int64_t, int64_t)>& progress, const std::atomic<bool>* stop) {
  if (window < 1) throw Error("text loss: the window must be at least 1 token");
  const std::vector<int64_t> ids = encode_lines(text, model.tokenizer());
  const int64_t n = static_cast<int64_t>(ids.size()) / (window + 1);
  if (n == 0)
    throw Error("text loss: the text has " + std::to_string(ids.size()) +
                " tokens, fewer than one window of " + std::to_string(window + 1));
  const int64_t windows = max_windows > 0 ? std::min(n, max_windows) : n;
  auto& impl = ModelAccess::impl(model);
  c10::InferenceMode guard;
  const Tensor all = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + windows * (window + 1)),
                                at::TensorOptions().dtype(at::kLong))
                         .view({windows, window + 1});  // [W, window + 1]
  double sum = 0;
  int64_t done = 0;
  constexpr int64_t kRowsPerPass = 8;  // bounds the [rows, window, V] logits
  for (int64_t w0 = 0; w0 < windows; w0 += kRowsPerPass) {
    if (stop && *stop) break;
    const Tensor batch = all.narrow(0, w0, std::min(kRowsPerPass, windows - w0)).to(impl.device);
    sum += lm_loss(impl.net, batch).mean.item<double>() * static_cast<double>(batch.size(0) * window);
    done += batch.size(0);
    if (progress) progress(done, windows);
  }
  if (done == 0) throw Cancelled();
  TextLoss r;
  r.windows = done;
  r.planned = windows;
  r.tokens = done * window;
  r.nats_per_token = sum / static_cast<double>(r.tokens);
  return r;
}

TrainOptions train_options_from_json(const fs::path& file) {
  TrainOptions o;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(file));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
  try {
    auto get = [&](const char* k, auto& v) {
      if (j.contains(k)) v = j.at(k).get<std::decay_t<decltype(v)>>();
    };
    get("hidden", o.model.hidden_size);
    get("layers", o.model.num_layers);
    get("heads", o.model.diff_heads);
    o.model.diff_kv_heads = o.model.diff_heads;
    get("kv_heads", o.model.diff_kv_heads);
    std::string corpus, out, arch = to_string(o.diff_arch);
    get("arch", arch);
    if (arch != "diff" && arch != "diff-v2")
      throw Error(file.string() + ": 'arch' must be \"diff\" or \"diff-v2\", got \"" + arch + "\"");
    o.diff_arch = arch == "diff-v2" ? AttentionKind::DiffV2 : AttentionKind::Diff;
    get("corpus", corpus);
    get("out", out);
    std::string init;
    get("init_from", init);
    if (!init.empty())
      o.init_from =
          fs::path(init).is_absolute() ? fs::path(init) : (file.parent_path() / init).lexically_normal();
    get("init_step", o.init_step);
    if (!corpus.empty())
      o.corpus_dir = fs::path(corpus).is_absolute() ? fs::path(corpus)
                                                    : (file.parent_path() / corpus).lexically_normal();
    if (!out.empty())
      o.out_dir = fs::path(out).is_absolute() ? fs::path(out) : (file.parent_path() / out).lexically_normal();
    get("steps", o.steps);
    get("seq_len", o.seq_len);
    get("batch", o.batch);
    get("lr", o.lr);
    get("min_lr_ratio", o.min_lr_ratio);
    get("lr_horizon", o.lr_horizon);
    get("warmup", o.warmup);
    get("weight_decay", o.weight_decay);
    get("grad_clip", o.grad_clip);
    // What a phase (or the top level, for the first) may name about its rows and schedule.
    auto read_phase = [&](const nlohmann::json& pj, TrainPhase& p) {
      DataMix& m = p.mix;
      auto pair = [&](const char* k, auto& lo, auto& hi) {
        if (!pj.contains(k)) return;
        const auto v = pj.at(k).get<std::vector<int64_t>>();
        if (v.size() != 2) throw ConfigError(file.string() + ": '" + k + "' must be [min, max]");
        lo = static_cast<std::decay_t<decltype(lo)>>(v[0]);
        hi = static_cast<std::decay_t<decltype(hi)>>(v[1]);
      };
      if (pj.contains("episode_fraction")) m.episode_fraction = pj.at("episode_fraction").get<double>();
      if (pj.contains("drill_fraction")) m.drill_fraction = pj.at("drill_fraction").get<double>();
      if (pj.contains("names")) m.names = parse_name_set(pj.at("names").get<std::string>());
      pair("drill_needles", m.drill_needles_min, m.drill_needles_max);
      if (pj.contains("drill_gap")) m.drill_gap = pj.at("drill_gap").get<int>();
      pair("episode_tokens", m.episode_tokens_min, m.episode_tokens_max);
      if (pj.contains("episode_needles")) m.episode_needles = pj.at("episode_needles").get<int>();
      if (pj.contains("far_fraction")) m.far_fraction = pj.at("far_fraction").get<double>();
      if (pj.contains("far_depth")) m.far_depth = pj.at("far_depth").get<double>();
      if (pj.contains("zipf_fraction")) m.zipf_fraction = pj.at("zipf_fraction").get<double>();
      if (pj.contains("varied_wording")) m.varied_wording = pj.at("varied_wording").get<bool>();
      if (pj.contains("wide_wording")) m.wide_wording = pj.at("wide_wording").get<bool>();
      if (pj.contains("wider_wording")) m.wider_wording = pj.at("wider_wording").get<bool>();
      if (pj.contains("noun_wording")) m.noun_wording = pj.at("noun_wording").get<bool>();
      pair("code_digits", m.code_digits_min, m.code_digits_max);
      if (pj.contains("answer_weight")) p.answer_weight = pj.at("answer_weight").get<double>();
      if (pj.contains("schedule")) {
        const std::string sched = pj.at("schedule").get<std::string>();
        if (sched != "cosine" && sched != "flat")
          throw ConfigError(file.string() + ": 'schedule' must be \"cosine\" or \"flat\", got \"" + sched +
                            "\"");
        p.flat = sched == "flat";
      }
      m.validate();
    };
    TrainPhase first;
    read_phase(j, first);
    o.phases = {first};
    if (j.contains("phases"))
      for (const auto& pj : j.at("phases")) {
        TrainPhase p = o.phases.back();  // a phase changes only what it names
        p.from_step = pj.at("from_step").get<int64_t>();
        read_phase(pj, p);
        if ((pj.contains("schedule") || pj.contains("warmup") || pj.contains("lr_horizon")) &&
            !(pj.value("lr", 0.0) > 0))
          throw ConfigError(file.string() +
                            ": a phase's 'schedule', 'warmup' and 'lr_horizon' restart the rate: "
                            "that phase must name its 'lr' too");
        if (pj.contains("seq_len")) p.seq_len = pj.at("seq_len").get<int64_t>();
        if (pj.contains("batch")) p.batch = pj.at("batch").get<int64_t>();
        p.lr = pj.value("lr", 0.0);  // a schedule restart belongs to the phase that names it
        p.lr_horizon = pj.value("lr_horizon", int64_t{0});
        p.warmup = pj.value("warmup", int64_t{-1});
        if (p.from_step <= o.phases.back().from_step)
          throw ConfigError(file.string() + ": phases must have increasing from_step (> 0)");
        if (p.seq_len < 0 || (p.seq_len > 0 && p.seq_len < 16) || p.batch < 0)
          throw ConfigError(file.string() + ": a phase's seq_len must be >= 16 and its batch positive");
        o.phases.push_back(p);
      }
    get("seed", o.seed);
    get("threads", o.threads);
    get("eval_every", o.eval_every);
    get("save_every", o.save_every);
    get("keep_every", o.keep_every);
    get("eval_episodes", o.eval_episodes);
    get("eval_lengths", o.eval_lengths);
    get("device", o.device);
    get("precision", o.precision);
    get("data_workers", o.data_workers);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": a field has the wrong type (" + e.what() + ")");
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(file.string() + ": " + e.what());
  }
  return o;
}

namespace {
// The dtype the training forward multiplies in (nn::g_matmul_dtype).
at::ScalarType train_precision(const TrainOptions& o, const at::Device& dev) {
  if (o.precision == "fp32") return at::kFloat;
  if (o.precision == "bf16") return at::kBFloat16;
  if (o.precision == "auto") return dev.is_cuda() ? at::kBFloat16 : at::kFloat;
  throw Error("train: precision must be auto, fp32 or bf16 (got '" + o.precision + "')");
}
}  // namespace

void check_train_output(const TrainOptions& o, const std::vector<ModelConfig>& configs) {
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec))
    throw Error("train: --out " + o.out_dir.string() + " is a file, not a folder");
  for (const ModelConfig& cfg : configs) {
    const fs::path dir = o.out_dir / cfg.name;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
      throw Error("train: " + dir.string() + " is a file, not a folder");
    const bool has_weights = fs::exists(dir / "model.safetensors", ec) || fs::exists(dir / "config.json", ec);
    if (!has_weights) continue;
    const bool has_state = fs::exists(dir / "train_state", ec);
    if (!has_state) {
      if (o.overwrite) continue;
      throw Error(
          "train: " + dir.string() +
          " holds a model that train did not write (no train_state/ to resume from: weights made "
          "elsewhere, or a run stopped before its first save finished); refusing to overwrite it. Give "
          "another --out, or --overwrite to replace it");
    }
    if (!o.resume) continue;  // --fresh over train's own earlier run
    ModelConfig saved;
    try {
      saved = load_config(dir / "config.json");
    } catch (const Error& e) {
      throw Error("train: cannot resume from " + dir.string() + ": " + e.what() +
                  "; start over with --fresh or give another --out");
    }
    const nlohmann::json want = nlohmann::json::parse(config_to_json_text(cfg));
    const nlohmann::json have = nlohmann::json::parse(config_to_json_text(saved));
    std::string differences;
    for (const auto& [key, value] : want.items()) {
      if (key == "name" || key == "max_position_embeddings") continue;  // not the shape of the weights
      const auto it = have.find(key);
      if (it != have.end() && *it == value) continue;
      differences += (differences.empty() ? "" : ", ") + key + " " +
                     (it == have.end() ? std::string("missing") : it->dump()) + " there, " + value.dump() +
                     " asked";
    }
    if (!differences.empty())
      throw Error("train: " + dir.string() + " holds a training state of another model (" + differences +
                  "); start over there with --fresh or give another --out");
  }
}

int64_t train_pair(const TrainOptions& o, const std::atomic<bool>* stop,
                   const std::function<void(const TrainProgress&)>& progress) {
  if (o.steps <= 0 || o.batch <= 0 || o.seq_len < 16)
    throw Error("train: steps, batch and seq_len must be positive");
  if (o.keep_every < 0) throw Error("train: keep_every must be 0 (none) or a number of steps");
  if (!o.train_diff && !o.train_baseline) throw Error("train: nothing to train");
  {  // the output before any work (the per-model folders are checked once their configuration is known)
    std::error_code ec;
    if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec))
      throw Error("train: --out " + o.out_dir.string() + " is a file, not a folder");
    if (!o.rows_out.empty() && fs::exists(o.rows_out, ec))
      throw Error("train: " + o.rows_out.string() +
                  " exists; refusing to overwrite it (give another --rows-out)");
  }
  (void)train_precision(o, at::Device(at::kCPU));  // refuse a bad precision before any work
  if (o.phases.empty() || o.phases.front().from_step != 0)
    throw Error("train: the first training phase must start at step 0");
  if (!o.init_from.empty() && (o.init_step < 0 || o.init_step >= o.steps))
    throw Error("train: init_step must lie in [0, steps) (got " + std::to_string(o.init_step) + ")");
  for (size_t i = 1; i < o.phases.size(); ++i)
    if (o.phases[i].from_step <= o.phases[i - 1].from_step)
      throw Error("train: training phases must have increasing from_step");
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const Tokenizer tok = Tokenizer::sentencepiece(o.corpus_dir / "tokenizer.model");
  PairSpec spec = o.model;
  spec.vocab_size = tok.vocab_size();
  spec.tokenizer = TokenizerKind::SentencePiece;
  int64_t longest = o.seq_len;
  for (size_t k = 0; k < o.phases.size(); ++k) longest = std::max(longest, phase_seq_len(o, k));
  spec.max_position_embeddings = std::max<int64_t>(8192, longest);
  auto [diff_cfg, base_cfg] = make_matched_pair(spec);
  if (o.diff_arch == AttentionKind::DiffV2)
    diff_cfg = make_matched_diff_v2(spec);
  else if (o.diff_arch != AttentionKind::Diff)
    throw Error("train: the differential model is diff or diff-v2");
  diff_cfg.bos_token_id = base_cfg.bos_token_id = tok.bos_id();
  diff_cfg.eos_token_id = base_cfg.eos_token_id = tok.eos_id();
  diff_cfg.name = o.diff_arch == AttentionKind::DiffV2 ? "diff-v2-small" : "diff-small";
  base_cfg.name = "baseline-small";
  {
    std::vector<ModelConfig> trained;
    if (o.train_diff) trained.push_back(diff_cfg);
    if (o.train_baseline) trained.push_back(base_cfg);
    check_train_output(o, trained);
  }

  const std::string train_text = read_text(o.corpus_dir / "train.txt");
  const std::string val_text = read_text(o.corpus_dir / "val.txt");
  const Haystack train_hay(train_text, tok), eval_hay(val_text, tok);
  const std::vector<int64_t> train_stream = encode_lines(train_text, tok);
  std::vector<TrainingData> phase_data;
  for (const TrainPhase& p : o.phases) phase_data.emplace_back(train_stream, train_hay, tok, p.mix);
  auto phase_of = [&](int64_t step) { return phase_at(o, step); };
  const TrainingData val_data(encode_lines(val_text, tok), eval_hay, tok,
                              DataMix{0.0, 0.0, NameSet::SingleToken});

  const at::Device dev = o.device == "cpu" ? at::Device(at::kCPU)
                         : (parse_device(o.device) == DeviceChoice::Cuda || cuda_available())
                             ? at::Device(at::kCUDA, 0)
                             : at::Device(at::kCPU);
  const DeviceChoice choice = dev.is_cuda() ? DeviceChoice::Cuda : DeviceChoice::Cpu;
  {
    // One model's forward and backward keep every layer's attention maps (DIFF: both logits, both softmaxes
    // and A per head) and the logits; measured on the bundled shape: 205 MB per 512-token row, 0.55 GB
    // besides (this estimate: 225 MB). Refuse a batch the machine (or the GPU, whose free memory is read
    // before either model is there) cannot hold rather than be killed or run out of memory half-way.
    // The phase whose step needs the most (rows of its length times its batch). LibTorch's fused attention
    // (2.1 and later; no sliding window, no quantized logits) makes no map: then only the logits count.
    const bool fused = nn::kFusedAttention && diff_cfg.sliding_window <= 0;
    size_t heaviest = 0;
    double row = 0, need = 0;
    const double base = 0.6e9;
    for (size_t k = 0; k < o.phases.size(); ++k) {
      const auto per_row = [&](const ModelConfig& c) {
        const double T = static_cast<double>(phase_seq_len(o, k)), maps = c.is_diff() ? 5.0 : 2.0;
        return (fused ? 0.0
                      : 2.5 * static_cast<double>(c.num_hidden_layers * c.map_heads()) * maps * T * T * 4.0) +
               3.0 * T * static_cast<double>(c.vocab_size) * 4.0;
      };
      const double r = std::max(per_row(diff_cfg), per_row(base_cfg));
      if (base + r * static_cast<double>(phase_batch(o, k)) > need) {
        heaviest = k;
        row = r;
        need = base + r * static_cast<double>(phase_batch(o, k));
      }
    }
    uint64_t have = 0, total = 0;
    if (!dev.is_cuda())
      have = available_memory_bytes();
    else if (!cuda_memory(have, total))
      have = 0;  // no CUDA runtime to ask: not estimated
    if (have > 0 && need > static_cast<double>(have))
      throw Error(
          "train: a step of " + std::to_string(phase_batch(o, heaviest)) + " rows of " +
          std::to_string(phase_seq_len(o, heaviest)) + " tokens needs about " +
          human_bytes(static_cast<uint64_t>(need)) + (dev.is_cuda() ? " of GPU memory (" : " of memory (") +
          human_bytes(static_cast<uint64_t>(row)) +
          " per row for one model's attention maps and logits), "
          "and " +
          human_bytes(have) + " is available: lower " +
          (o.phases[heaviest].batch > 0 || o.phases[heaviest].seq_len > 0
               ? "the batch of the config's phase from step " + std::to_string(o.phases[heaviest].from_step)
               : std::string("--batch")) +
          " (about " +
          std::to_string(static_cast<int64_t>(std::max(0.0, (static_cast<double>(have) - base) / row))) +
          " rows fit) or its row length");
  }

  std::vector<ModelState> models;
  int64_t start = 0, tokens = 0;
  double wall_before = 0;  // training wall time of earlier runs of this schedule
  // Resumed from the newest step every model saved completely (a save cut short is skipped).
  std::vector<fs::path> dirs;
  if (o.train_diff) dirs.push_back(o.out_dir / diff_cfg.name);
  if (o.train_baseline) dirs.push_back(o.out_dir / base_cfg.name);
  const int64_t resume_step = o.resume ? common_step(dirs) : 0;
  for (int k = 0; k < 2; ++k) {
    if ((k == 0 && !o.train_diff) || (k == 1 && !o.train_baseline)) continue;
    const ModelConfig& cfg = k == 0 ? diff_cfg : base_cfg;
    ModelState s{cfg.name, o.out_dir / cfg.name, Model::random(cfg, o.seed, DeviceChoice::Cpu), {}, {}, {}, 0,
                 {}};
    int64_t resumed_tokens = 0;
    start = load_state(s, resume_step, &resumed_tokens, &wall_before);
    tokens = resumed_tokens;
    if (start == 0 && !o.init_from.empty()) {  // a new run that continues other weights
      const fs::path from = o.init_from / cfg.name;
      Model init = Model::load(from, DeviceChoice::Cpu);
      const nlohmann::json want = nlohmann::json::parse(config_to_json_text(cfg));
      const nlohmann::json have = nlohmann::json::parse(config_to_json_text(init.config()));
      for (const auto& [key, value] : want.items())
        if (key != "name" && key != "max_position_embeddings" &&
            (!have.contains(key) || have.at(key) != value))
          throw Error("train: " + from.string() + " is another model than this recipe trains ('" + key +
                      "' is " + (have.contains(key) ? have.at(key).dump() : std::string("missing")) +
                      " there, " + value.dump() + " here)");
      s.model = Model::from_tensors(cfg, init.tensors(), DeviceChoice::Cpu);
      start = o.init_step;
    }
    if (!o.resume) {  // --fresh: the earlier run's steps go, so that none is resumed later by mistake
      std::error_code ec;
      remove_tree(s.dir / "train_state", ec);
      remove_tree(s.dir / "checkpoints", ec);
    }
    if (choice == DeviceChoice::Cuda)
      s.model = Model::from_tensors(s.model.config(), s.model.tensors(), choice);
    for (auto& [name, t] : s.exp_avg) t = t.to(dev);
    for (auto& [name, t] : s.exp_avg_sq) t = t.to(dev);
    fs::create_directories(s.dir);
    prepare_log(s.dir / "train_log.csv", "step,train_loss,val_loss,tokens_seen", start);
    std::string header = "step,tokens_seen";
    for (int64_t L : o.eval_lengths) header += ",needle_acc_" + std::to_string(L);
    for (int64_t L : o.eval_lengths) header += ",digit_acc_" + std::to_string(L);
    header += ",names";
    prepare_log(s.dir / "eval_log.csv", header, start);
    models.push_back(std::move(s));
  }
  for (auto& s : models) ModelAccess::impl(s.model).net->train();

  // Fixed evaluation material: validation batches and held-out needle episodes.
  std::vector<Tensor> val_batches;
  {
    std::mt19937_64 rng(o.seed + 7777);
    for (int b = 0; b < 4; ++b) {
      std::vector<TrainingRow> rows;
      for (int64_t r = 0; r < o.batch; ++r) rows.push_back(val_data.text_row(o.seq_len, rng));
      val_batches.push_back(batch_tensor(rows, dev));
    }
  }
  // Held-out episodes per kind of needle in use (names, wordings, code lengths), each drawn from the same
  // seed. Varied wordings are evaluated on the held-out ones.
  auto eval_kind = [](const DataMix& m) {
    std::string k = to_string(m.names);
    if (m.varied_wording) k += " held-out wording";
    if (m.code_digits_min != 4 || m.code_digits_max != 4)
      k += " " + std::to_string(m.code_digits_min) + "-" + std::to_string(m.code_digits_max) + " digits";
    return k;
  };
  std::map<std::string, std::map<int64_t, std::vector<Episode>>> eval_episodes;
  for (const TrainPhase& p : o.phases) {
    const std::string kind = eval_kind(p.mix);
    if (eval_episodes.count(kind)) continue;
    EpisodeBuilder eval_builder(eval_hay, tok, NeedleSplit::Eval, p.mix.names);
    if (p.mix.varied_wording) eval_builder.set_wordings(needle_wordings(NeedleSplit::Eval));
    eval_builder.set_code_digits(p.mix.code_digits_min, p.mix.code_digits_max);
    std::mt19937_64 rng(o.seed + 8888);
    for (int64_t L : o.eval_lengths)
      for (int64_t e = 0; e < o.eval_episodes; ++e) {
        EpisodeSpec es;
        es.context_tokens = L;
        es.depths = {static_cast<double>(e % 5) / 4.0};
        es.depth_by_tokens = false;  // the placement the bundled pair's logs were measured with
        eval_episodes[kind][L].push_back(eval_builder.build(es, rng));
      }
  }

  auto evaluate = [&](int64_t step) {
    for (auto& s : models) {
      auto& net = ModelAccess::impl(s.model).net;
      net->eval();
      double val = 0;
      {
        c10::InferenceMode guard;
        for (const Tensor& b : val_batches) val += lm_loss(net, b).mean.item<double>();
      }
      val /= static_cast<double>(val_batches.size());
      const double train_loss =
          s.loss_count ? s.loss_sum.item<double>() / static_cast<double>(s.loss_count) : 0.0;
      std::ofstream(s.dir / "train_log.csv", std::ios::app)
          << step << "," << train_loss << "," << val << "," << tokens << "\n";
      // Evaluated with the names of the phase that produced these weights.
      const std::string kind = eval_kind(o.phases[phase_of(step - 1)].mix);
      std::vector<NeedleScore> scores;
      for (int64_t L : o.eval_lengths) scores.push_back(needle_accuracy(net, eval_episodes[kind][L], dev));
      std::ofstream ev(s.dir / "eval_log.csv", std::ios::app);
      ev << step << "," << tokens;
      for (const auto& sc : scores) ev << "," << sc.exact;
      for (const auto& sc : scores) ev << "," << sc.digits;
      ev << "," << kind << "\n";
      s.loss_sum = Tensor();
      s.loss_count = 0;
      net->train();
    }
  };

  // Batches are built ahead on worker threads; on CUDA in pinned memory, copied without blocking.
  const int workers = o.data_workers > 0 ? o.data_workers
                      : dev.is_cuda()
                          ? static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u))
                          : 1;
  BatchPrefetcher prefetch(
      [&](int64_t step) {
        std::mt19937_64 rng(o.seed * 1000003ull + static_cast<uint64_t>(step));
        const size_t phase = phase_of(step);
        std::vector<TrainingRow> rows;
        for (int64_t r = 0; r < phase_batch(o, phase); ++r)
          rows.push_back(phase_data[phase].row(phase_seq_len(o, phase), rng));
        const at::Device cpu(at::kCPU);
        StepBatch b{batch_tensor(rows, cpu), loss_weights(rows, o.phases[phase].answer_weight, cpu)};
        if (dev.is_cuda()) {
          b.ids = b.ids.pin_memory();
          if (b.weights.defined()) b.weights = b.weights.pin_memory();
        }
        return b;
      },
      start, o.steps, workers, 2 * workers + 1);
  auto to_device = [&](const Tensor& t) {
    return t.defined() ? t.to(at::TensorOptions().device(dev), /*non_blocking=*/dev.is_cuda()) : t;
  };
  const nn::ScopedDtype precision(nn::g_matmul_dtype, train_precision(o, dev));

  // Opened only if absent ("wx": never over a file, even one made since the check at the start).
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> rows_file(nullptr, &std::fclose);
  if (!o.rows_out.empty()) {
    rows_file.reset(std::fopen(o.rows_out.c_str(), "wx"));
    if (!rows_file)
      throw Error("train: cannot write " + o.rows_out.string() + ": " +
                  (errno == EEXIST
                       ? std::string("it exists; refusing to overwrite it (give another --rows-out)")
                       : std::string(std::strerror(errno))));
  }
  const auto write_rows = [&](int64_t step, const StepBatch& b) {
    const Tensor ids = b.ids.to(at::kLong).contiguous();
    const Tensor w = b.weights.defined() ? b.weights.to(at::kFloat).contiguous() : Tensor();
    std::ostringstream line;
    for (int64_t r = 0; r < ids.size(0); ++r) {
      line << "{\"step\":" << step << ",\"row\":" << r << ",\"ids\":[";
      const int64_t* p = ids.data_ptr<int64_t>() + r * ids.size(1);
      for (int64_t i = 0; i < ids.size(1); ++i) line << (i ? "," : "") << p[i];
      line << "]";
      if (w.defined()) {
        line << ",\"weights\":[";
        const float* q = w.data_ptr<float>() + r * w.size(1);
        for (int64_t i = 0; i < w.size(1); ++i) line << (i ? "," : "") << q[i];
        line << "]";
      }
      line << "}\n";
    }
    const std::string text = line.str();
    if (std::fwrite(text.data(), 1, text.size(), rows_file.get()) != text.size())
      throw Error("train: writing " + o.rows_out.string() + " failed: " + std::strerror(errno));
  };

  const auto t0 = std::chrono::steady_clock::now();
  const int64_t tokens_before = tokens;
  double last_report = -1;
  int64_t step = start;
  for (; step < o.steps; ++step) {
    if (stop && stop->load()) break;
    if (o.max_seconds > 0 && step > start &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= o.max_seconds)
      break;
    const StepBatch host = prefetch.take(step);
    if (rows_file) write_rows(step, host);
    const Tensor batch = to_device(host.ids), weights = to_device(host.weights);
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
    tokens += phase_batch(o, phase_of(step)) * phase_seq_len(o, phase_of(step));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    TrainProgress p;
    p.step = step + 1;
    p.total = o.steps;
    p.tokens_per_second = static_cast<double>(tokens - tokens_before) / std::max(secs, 1e-9);
    p.eta_seconds = secs / static_cast<double>(step + 1 - start) * static_cast<double>(o.steps - step - 1);
    // Reading a loss waits for the device: only twice a second, every 50th step and the last.
    p.has_loss = secs - last_report >= 0.5 || (step + 1) % 50 == 0 || step + 1 == o.steps;
    if (p.has_loss) {
      last_report = secs;
      for (auto& s : models)
        (s.model.config().is_diff() ? p.loss_diff : p.loss_baseline) = s.last_loss.item<double>();
    }
    if (progress) progress(p);
    if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) evaluate(step + 1);
    if ((step + 1) % o.save_every == 0 || step + 1 == o.steps)
      save_state(models, o, step + 1, tokens, wall_before + secs);
    if (o.keep_every > 0 && (step + 1) % o.keep_every == 0) keep_checkpoints(models, o, step + 1, tokens);
  }
  if (step < o.steps && step > start) {  // stopped early: keep what was learned
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    save_state(models, o, step, tokens, wall_before + secs);
  }
  return step;
}

}  // namespace difflens
