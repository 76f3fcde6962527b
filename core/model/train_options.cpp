// `difflens train`'s options: read from JSON, the schedule and phases, and the checks made before any work.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/formats/bounded_read.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/model/train.h"
#include "core/model/train_impl.h"

namespace difflens {

namespace fs = std::filesystem;
using training::read_text;

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

namespace training {

void check_train_options(const TrainOptions& o) {
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
}

at::ScalarType train_precision(const TrainOptions& o, const at::Device& dev) {
  if (o.precision == "fp32") return at::kFloat;
  if (o.precision == "bf16") return at::kBFloat16;
  if (o.precision == "auto") return dev.is_cuda() ? at::kBFloat16 : at::kFloat;
  throw Error("train: precision must be auto, fp32 or bf16 (got '" + o.precision + "')");
}

at::Device train_device(const TrainOptions& o) {
  return o.device == "cpu"                                                    ? at::Device(at::kCPU)
         : (parse_device(o.device) == DeviceChoice::Cuda || cuda_available()) ? at::Device(at::kCUDA, 0)
                                                                              : at::Device(at::kCPU);
}

std::pair<ModelConfig, ModelConfig> train_configs(const TrainOptions& o, const Tokenizer& tok) {
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
  return {diff_cfg, base_cfg};
}

void check_step_memory(const TrainOptions& o, const ModelConfig& diff_cfg, const ModelConfig& base_cfg,
                       const at::Device& dev) {
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

}  // namespace training
}  // namespace difflens
