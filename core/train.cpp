// Training loop for a matched DIFF/baseline pair: identical rows per step for both models, AdamW with
// decoupled weight decay (written here so its state is ours to save on any LibTorch version), linear
// warm-up then cosine decay, global-norm gradient clipping, periodic evaluation and resumable state.
#include "core/train.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/data.h"
#include "core/error.h"
#include "core/model_impl.h"
#include "core/safetensors.h"

namespace difflens {
namespace {

using at::Tensor;
namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open (run scripts/prepare-corpus first)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

// Mean next-token cross-entropy of a [B, L+1] batch.
Tensor lm_loss(nn::CausalLm& net, const Tensor& batch) {
  const int64_t L = batch.size(1) - 1;
  Tensor logits = net->forward(batch.narrow(1, 0, L));  // [B, L, V]
  Tensor logp = at::log_softmax(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), -1);
  return at::nll_loss(logp, batch.narrow(1, 1, L).reshape({-1}));
}

struct ModelState {
  std::string name;
  fs::path dir;
  Model model;
  std::map<std::string, Tensor> exp_avg, exp_avg_sq;  // AdamW moments by parameter name
  double loss_sum = 0;
  int64_t loss_count = 0;
  double last_loss = 0;
};

double learning_rate(const TrainOptions& o, int64_t step) {
  if (step < o.warmup) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup);
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup) /
                                            static_cast<double>(std::max<int64_t>(1, o.steps - o.warmup)));
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

void adamw_step(ModelState& s, const TrainOptions& o, int64_t step, double lr) {
  at::NoGradGuard no_grad;
  auto params = ModelAccess::impl(s.model).named();
  // Global-norm clipping.
  double total = 0;
  for (auto& [name, p] : params)
    if (p.grad().defined()) total += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(total);
  const double clip = (o.grad_clip > 0 && norm > o.grad_clip) ? o.grad_clip / (norm + 1e-6) : 1.0;
  const double t = static_cast<double>(step + 1);
  const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
  for (auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    Tensor g = p.grad() * clip;
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

void save_state(const ModelState& s, const TrainOptions& o, int64_t step, int64_t tokens,
                double wall_seconds) {
  s.model.save(s.dir);
  fs::copy_file(o.corpus_dir / "tokenizer.model", s.dir / "tokenizer.model",
                fs::copy_options::overwrite_existing);
  const fs::path st = s.dir / "train_state";
  fs::create_directories(st);
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
                      {"threads", o.threads},
                      {"device", cuda_available() && o.device != "cpu" ? "cuda" : "cpu"}};
  std::ofstream(st / "state.json") << j.dump(2) << "\n";
}

// Restores moments and returns the saved step, or 0 when there is nothing to resume.
int64_t load_state(ModelState& s, int64_t* tokens, double* wall_seconds) {
  const fs::path st = s.dir / "train_state";
  if (!fs::exists(st / "state.json") || !fs::exists(s.dir / "model.safetensors")) return 0;
  const auto j = nlohmann::json::parse(read_text(st / "state.json"));
  s.model = Model::load(s.dir, DeviceChoice::Cpu);
  const SafetensorsFile f(st / "optimizer.safetensors");
  for (const auto& info : f.tensors()) {
    const bool first = info.name.rfind("exp_avg.", 0) == 0;
    const std::string name = info.name.substr(first ? 8 : 11);
    std::vector<float> data = f.read_f32(info);
    Tensor t = at::from_blob(data.data(), info.shape, at::TensorOptions().dtype(at::kFloat)).clone();
    (first ? s.exp_avg : s.exp_avg_sq)[name] = t;
  }
  *tokens = j.at("tokens_seen").get<int64_t>();
  *wall_seconds = j.value("wall_seconds", 0.0);
  return j.at("step").get<int64_t>();
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
    if (!line.empty() && std::stoll(line.substr(0, line.find(','))) <= step) rows.push_back(line);
  }
  std::ofstream out(file, std::ios::trunc);
  out << header << "\n";
  for (const auto& r : rows) out << r << "\n";
}

// Fraction of episodes whose code the model reproduces exactly: every code token is the argmax given
// the true prefix (what greedy decoding would produce).
double needle_accuracy(nn::CausalLm& net, const std::vector<Episode>& episodes, const at::Device& dev) {
  c10::InferenceMode guard;
  int correct = 0;
  for (const Episode& ep : episodes) {
    Tensor ids = at::tensor(ep.ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(dev);
    Tensor pred = net->forward(ids).argmax(-1)[0].to(at::kCPU);  // [T]
    const Span a = ep.answer_spans.back();
    bool ok = true;
    for (int64_t i = a.begin; i < a.end; ++i)
      ok &= pred[i - 1].item<int64_t>() == ep.ids[static_cast<size_t>(i)];
    correct += ok;
  }
  return episodes.empty() ? 0 : static_cast<double>(correct) / static_cast<double>(episodes.size());
}

}  // namespace

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
    std::string corpus, out;
    get("corpus", corpus);
    get("out", out);
    if (!corpus.empty())
      o.corpus_dir = fs::path(corpus).is_absolute() ? fs::path(corpus) : file.parent_path() / corpus;
    if (!out.empty()) o.out_dir = fs::path(out).is_absolute() ? fs::path(out) : file.parent_path() / out;
    get("steps", o.steps);
    get("seq_len", o.seq_len);
    get("batch", o.batch);
    get("lr", o.lr);
    get("min_lr_ratio", o.min_lr_ratio);
    get("warmup", o.warmup);
    get("weight_decay", o.weight_decay);
    get("grad_clip", o.grad_clip);
    get("episode_fraction", o.episode_fraction);
    get("seed", o.seed);
    get("threads", o.threads);
    get("eval_every", o.eval_every);
    get("save_every", o.save_every);
    get("eval_episodes", o.eval_episodes);
    get("eval_lengths", o.eval_lengths);
    get("device", o.device);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": a field has the wrong type (" + e.what() + ")");
  }
  return o;
}

int64_t train_pair(const TrainOptions& o, const std::atomic<bool>* stop,
                   const std::function<void(const TrainProgress&)>& progress) {
  if (o.steps <= 0 || o.batch <= 0 || o.seq_len < 16)
    throw Error("train: steps, batch and seq_len must be positive");
  if (!o.train_diff && !o.train_baseline) throw Error("train: nothing to train");
  at::set_num_threads(std::max(1, o.threads));
  const Tokenizer tok = Tokenizer::sentencepiece(o.corpus_dir / "tokenizer.model");
  PairSpec spec = o.model;
  spec.vocab_size = tok.vocab_size();
  spec.tokenizer = TokenizerKind::SentencePiece;
  spec.max_position_embeddings = std::max<int64_t>(8192, o.seq_len);
  auto [diff_cfg, base_cfg] = make_matched_pair(spec);
  diff_cfg.bos_token_id = base_cfg.bos_token_id = tok.bos_id();
  diff_cfg.eos_token_id = base_cfg.eos_token_id = tok.eos_id();
  diff_cfg.name = "diff-small";
  base_cfg.name = "baseline-small";

  const std::string train_text = read_text(o.corpus_dir / "train.txt");
  const std::string val_text = read_text(o.corpus_dir / "val.txt");
  const Haystack train_hay(train_text, tok), eval_hay(val_text, tok);
  const TrainingData data(encode_lines(train_text, tok), train_hay, tok, o.episode_fraction);
  const TrainingData val_data(encode_lines(val_text, tok), eval_hay, tok, 0.0);
  const EpisodeBuilder eval_builder(eval_hay, tok, NeedleSplit::Eval);

  const at::Device dev = o.device == "cpu" ? at::Device(at::kCPU)
                         : (parse_device(o.device) == DeviceChoice::Cuda || cuda_available())
                             ? at::Device(at::kCUDA, 0)
                             : at::Device(at::kCPU);
  const DeviceChoice choice = dev.is_cuda() ? DeviceChoice::Cuda : DeviceChoice::Cpu;

  std::vector<ModelState> models;
  int64_t start = 0, tokens = 0;
  double wall_before = 0;  // training wall time of earlier runs of this schedule
  for (int k = 0; k < 2; ++k) {
    if ((k == 0 && !o.train_diff) || (k == 1 && !o.train_baseline)) continue;
    const ModelConfig& cfg = k == 0 ? diff_cfg : base_cfg;
    ModelState s{cfg.name, o.out_dir / cfg.name, Model::random(cfg, o.seed, DeviceChoice::Cpu), {}, {}, 0, 0,
                 0};
    int64_t resumed_tokens = 0;
    const int64_t resumed = o.resume ? load_state(s, &resumed_tokens, &wall_before) : 0;
    if (!models.empty() && resumed != start)
      throw Error("train: the two models were saved at different steps (" + std::to_string(start) + " vs " +
                  std::to_string(resumed) + "); remove one train_state to restart it");
    start = resumed;
    tokens = resumed_tokens;
    if (choice == DeviceChoice::Cuda)
      s.model = Model::from_tensors(s.model.config(), s.model.tensors(), choice);
    for (auto& [name, t] : s.exp_avg) t = t.to(dev);
    for (auto& [name, t] : s.exp_avg_sq) t = t.to(dev);
    fs::create_directories(s.dir);
    prepare_log(s.dir / "train_log.csv", "step,train_loss,val_loss,tokens_seen", start);
    std::string header = "step,tokens_seen";
    for (int64_t L : o.eval_lengths) header += ",needle_acc_" + std::to_string(L);
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
  std::map<int64_t, std::vector<Episode>> eval_episodes;
  {
    std::mt19937_64 rng(o.seed + 8888);
    for (int64_t L : o.eval_lengths)
      for (int64_t e = 0; e < o.eval_episodes; ++e) {
        EpisodeSpec es;
        es.context_tokens = L;
        es.depths = {static_cast<double>(e % 5) / 4.0};
        eval_episodes[L].push_back(eval_builder.build(es, rng));
      }
  }

  auto evaluate = [&](int64_t step) {
    for (auto& s : models) {
      auto& net = ModelAccess::impl(s.model).net;
      net->eval();
      double val = 0;
      {
        c10::InferenceMode guard;
        for (const Tensor& b : val_batches) val += lm_loss(net, b).item<double>();
      }
      val /= static_cast<double>(val_batches.size());
      const double train_loss = s.loss_count ? s.loss_sum / static_cast<double>(s.loss_count) : 0.0;
      std::ofstream(s.dir / "train_log.csv", std::ios::app)
          << step << "," << train_loss << "," << val << "," << tokens << "\n";
      std::ofstream ev(s.dir / "eval_log.csv", std::ios::app);
      ev << step << "," << tokens;
      for (int64_t L : o.eval_lengths) ev << "," << needle_accuracy(net, eval_episodes[L], dev);
      ev << "\n";
      s.loss_sum = 0;
      s.loss_count = 0;
      net->train();
    }
  };

  const auto t0 = std::chrono::steady_clock::now();
  int64_t step = start;
  for (; step < o.steps; ++step) {
    if (stop && stop->load()) break;
    std::mt19937_64 rng(o.seed * 1000003ull + static_cast<uint64_t>(step));
    std::vector<TrainingRow> rows;
    for (int64_t r = 0; r < o.batch; ++r) rows.push_back(data.row(o.seq_len, rng));
    const Tensor batch = batch_tensor(rows, dev);
    const double lr = learning_rate(o, step);
    TrainProgress p;
    for (auto& s : models) {
      auto& net = ModelAccess::impl(s.model).net;
      Tensor loss = lm_loss(net, batch);
      loss.backward();
      adamw_step(s, o, step, lr);
      s.last_loss = loss.item<double>();
      s.loss_sum += s.last_loss;
      ++s.loss_count;
      (s.model.config().is_diff() ? p.loss_diff : p.loss_baseline) = s.last_loss;
    }
    tokens += o.batch * o.seq_len;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    p.step = step + 1;
    p.total = o.steps;
    p.tokens_per_second =
        static_cast<double>((step + 1 - start) * o.batch * o.seq_len) / std::max(secs, 1e-9);
    p.eta_seconds = secs / static_cast<double>(step + 1 - start) * static_cast<double>(o.steps - step - 1);
    if (progress) progress(p);
    if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) evaluate(step + 1);
    if ((step + 1) % o.save_every == 0 || step + 1 == o.steps)
      for (auto& s : models) save_state(s, o, step + 1, tokens, wall_before + secs);
  }
  if (step < o.steps && step > start) {  // stopped early: keep what was learned
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& s : models) save_state(s, o, step, tokens, wall_before + secs);
  }
  return step;
}

}  // namespace difflens
