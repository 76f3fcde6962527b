// The resumable training state: step folders saved, resumed from and published; checkpoints kept; logs cut.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "core/model/train_impl.h"

namespace difflens::training {
namespace {

using at::Tensor;
namespace fs = std::filesystem;

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

}  // namespace

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

std::vector<ModelState> start_models(const TrainOptions& o, const ModelConfig& diff_cfg,
                                     const ModelConfig& base_cfg, const at::Device& dev, int64_t& start,
                                     int64_t& tokens, double& wall_before) {
  const DeviceChoice choice = dev.is_cuda() ? DeviceChoice::Cuda : DeviceChoice::Cpu;
  std::vector<ModelState> models;
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
  return models;
}

}  // namespace difflens::training
