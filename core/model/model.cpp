// Model: construction (seeded, from named tensors, from a checkpoint directory), binding the checkpoint's
// tensors to the modules of core/model/nn.h, saving, and the accessors. The model's other jobs have their own
// files: devices.cpp, cpu_pack.cpp, capture.cpp, generate.cpp, model_tokenizer.cpp (docs/development.md).
// Semantics: docs/views.md's "What the math is" and the checkpoint layouts of core/FORMATS.md.
#include "core/model/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randn.h>

#include <cmath>
#include <map>

#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/formats/safetensors.h"
#include "core/model/capture_plan.h"
#include "core/model/devices.h"
#include "core/model/model_impl.h"
#include "core/model/model_tokenizer.h"
#include "core/model/to_host.h"

namespace difflens {

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

namespace {
// Refuses, before anything is allocated, a model whose F32 weights the machine cannot hold.
void refuse_unless_weights_fit(const ModelConfig& config, const char* what) {
  const uint64_t need = Model::weight_memory_bytes(config, false), have = available_memory_bytes();
  if (have > 0 && need > have)
    throw Error(std::string(what) + ": the weights (" + std::to_string(parameter_count(config)) +
                " parameters) need " + human_bytes(need) + " of memory as F32, only " + human_bytes(have) +
                " is available");
}
}  // namespace

Model Model::random(const ModelConfig& config, uint64_t seed, DeviceChoice device) {
  config.validate();
  refuse_unless_weights_fit(config, "a random model");
  auto impl = std::make_unique<Impl>(config, Tokenizer::without_files(config), resolve_device(device));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.num_hidden_layers));
  at::NoGradGuard no_grad;
  for (auto& [name, param] : impl->named()) {
    const bool is_norm =
        name.find("norm.weight") != std::string::npos || name.find("subln") != std::string::npos;
    const bool is_lambda = name.find("lambda_") != std::string::npos;
    const bool is_out =
        name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
    if (is_norm) {
      param.fill_(1.0);
    } else {
      const double std = is_lambda ? 0.1 : is_out ? out_std : 0.02;
      param.copy_(at::randn(param.sizes(), gen, at::TensorOptions().dtype(at::kFloat)) * std);
    }
  }
  impl->to_device();
  return Model(std::move(impl));
}

Model Model::from_tensors(const ModelConfig& config, const std::vector<NamedTensor>& tensors,
                          DeviceChoice device) {
  config.validate();
  refuse_unless_weights_fit(config, "a model from tensors");
  auto impl = std::make_unique<Impl>(config, Tokenizer::without_files(config), resolve_device(device));
  std::map<std::string, const NamedTensor*> by_name;
  for (const auto& t : tensors) by_name[t.name] = &t;
  const auto known = impl->named();
  for (const auto& t : tensors)
    if (!known.count(t.name)) throw FormatError("tensor '" + t.name + "' is not a parameter of this model");
  impl->bind([&](const std::string& name, const std::vector<int64_t>& expected) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw FormatError("tensor '" + name + "' is missing");
    if (it->second->shape != expected)
      throw FormatError("tensor '" + name + "' is " + shape_string(it->second->shape) + ", config expects " +
                        shape_string(expected));
    if (static_cast<int64_t>(it->second->data.size()) != TensorInfo{name, DType::F32, expected, 0, 0}.numel())
      throw FormatError("tensor '" + name + "' has " + std::to_string(it->second->data.size()) +
                        " values for shape " + shape_string(expected));
    return it->second->data;
  });
  impl->to_device();
  return Model(std::move(impl));
}

uint64_t Model::weight_memory_bytes(const ModelConfig& config, bool half_storage) {
  const uint64_t n = static_cast<uint64_t>(difflens::parameter_count(config));
  if (!half_storage) return n * sizeof(float);
  // Norms and λ stay F32; everything else (projections, embeddings) 2 bytes.
  const int64_t per_layer =
      2 * config.hidden_size + (config.attention == AttentionKind::Diff
                                    ? 4 * config.head_dim + (config.subln_weight ? 2 * config.head_dim : 0)
                                    : 0);  // DIFF V1's λ vectors and norm (V2's lambda_proj is a projection)
  const uint64_t small = static_cast<uint64_t>(config.num_hidden_layers * per_layer + config.hidden_size);
  return (n - small) * 2 + small * 4;
}

Model Model::load(const std::filesystem::path& given, DeviceChoice device,
                  const std::function<void(int64_t, int64_t)>& progress, const std::atomic<bool>* cancel) {
  if (!std::filesystem::is_directory(given)) throw Error(given.string() + ": not a model directory");
  std::string run_note;  // a Trainer run: which checkpoint was taken
  const std::filesystem::path dir = resolve_model_folder(given, &run_note);  // a hub cache: its snapshot
  ModelConfig config = read_model_config(dir);
  std::string note;
  Tokenizer tokenizer = directory_tokenizer(dir, config, note);
  if (config.name.empty()) {
    // A snapshot folder is named by its commit: the cache folder's models--ORG--NAME says more.
    config.name = tidy(std::filesystem::absolute(dir != given ? given : dir)).filename().string();
    if (config.architecture == "diff-mlx")  // "diff" and "vanilla" alone say little
      config.name = "diff-mlx " + config.name;
    if (!run_note.empty()) config.name += " " + dir.filename().string();  // a Trainer run: which save
  }
  if (config.name.empty()) config.name = dir.string();
  const CheckpointFiles files = open_model_weights(dir, config);
  // Half-precision checkpoints stay half precision in memory (converted per matrix as the forward pass
  // reaches it); F32 ones stay F32. Refuse before allocating what the machine does not have.
  const std::string dtypes = files.dtype_summary();
  const bool half = dtypes.rfind("BF16", 0) == 0 || dtypes.rfind("F16", 0) == 0;
  const at::ScalarType storage = dtypes.rfind("BF16", 0) == 0 ? at::kBFloat16 : half ? at::kHalf : at::kFloat;
  const uint64_t need = weight_memory_bytes(config, half), have = available_memory_bytes();
  if (have > 0 && need > have)
    throw Error(dir.string() + ": the weights need " + human_bytes(need) + " of memory as " +
                (half ? dtypes.substr(0, dtypes.find('+')) : std::string("F32")) + " (" +
                human_bytes(files.bytes()) + " on disk as " + dtypes + "), only " + human_bytes(have) +
                " is available");
  auto impl = std::make_unique<Impl>(config, tokenizer, resolve_device(device), storage);
  impl->path = dir;
  impl->source_dtype = files.dtype_summary();
  impl->tokenizer_note = note;
  const auto known = impl->named();
  for (const std::string& name : files.names()) {
    if (known.count(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // saved tied copy
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;   // recomputed from config
    throw FormatError(files.describe_source(name) + ": unexpected tensor '" + name +
                      "' (config.json says a " + to_string(config.attention) + " model with " +
                      std::to_string(config.num_hidden_layers) + " layers)");
  }
  const int64_t total = static_cast<int64_t>(known.size());
  int64_t done = 0;
  impl->bind([&](const std::string& name, const std::vector<int64_t>& expected) {
    if (cancel && cancel->load()) throw Cancelled();
    const CheckpointFiles::Entry* e = files.find(name);
    if (!e)
      throw FormatError(dir.string() + ": tensor '" + name + "' is missing (config.json says a " +
                        to_string(config.attention) + " model" +
                        (config.is_diff() && config.subln_weight && name.find("subln") != std::string::npos
                             ? " with a per-head norm weight"
                             : "") +
                        ")");
    if (e->info->shape != expected)
      throw FormatError(e->file->path().string() + ": tensor '" + e->info->name + "' is " +
                        shape_string(e->info->shape) + ", config expects " + shape_string(expected));
    std::vector<float> data = e->file->read_f32(*e->info);
    if (progress) progress(++done, total);
    return data;
  });
  impl->to_device();
  return Model(std::move(impl));
}

void Model::save(const std::filesystem::path& dir, DType dtype) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create directory (" + ec.message() + ")");
  const std::vector<NamedTensor> all = tensors();
  std::vector<TensorToWrite> out;
  for (const auto& t : all) out.push_back({t.name, t.shape, t.data.data(), dtype});
  write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}, {"producer", "difflens"}});
  save_config(impl_->config, dir / "config.json");
}

std::vector<NamedTensor> Model::tensors() const {
  std::vector<NamedTensor> out;
  for (const auto& [name, param] : impl_->named())
    out.push_back(
        {name, std::vector<int64_t>(param.sizes().begin(), param.sizes().end()), to_vector(param.detach())});
  return out;
}

const ModelConfig& Model::config() const {
  return impl_->config;
}
const std::string& Model::source_dtype() const {
  return impl_->source_dtype;
}
std::string Model::weight_storage() const {
  return impl_->net->model->embed_tokens->weight.scalar_type() == at::kBFloat16 ? "BF16"
         : impl_->net->model->embed_tokens->weight.scalar_type() == at::kHalf   ? "F16"
                                                                                : "F32";
}
const std::string& Model::tokenizer_note() const {
  return impl_->tokenizer_note;
}
const Tokenizer& Model::tokenizer() const {
  return impl_->tokenizer;
}
const std::filesystem::path& Model::path() const {
  return impl_->path;
}

// Every attention module quantizes its logits to `bits` from now on (0: exact).
void Model::Impl::apply_logit_bits(int bits) {
  logit_bits = bits;
  for (auto& layer : net->model->layer_ptrs) layer->logit_bits = bits;
}

void Model::set_logit_bits(int bits) {
  if (bits < 0 || bits > 32) throw Error("logit quantization: bits must be between 2 and 32 (0: off)");
  if (bits == 1) throw Error("logit quantization: 1 bit leaves no level but zero; use 2 or more");
  impl_->apply_logit_bits(bits);
}

int Model::logit_bits() const {
  return impl_->logit_bits;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : impl_->net->parameters()) n += p.numel();
  return n;
}

}  // namespace difflens
