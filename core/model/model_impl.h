// Internal to core (includes LibTorch): Model's private state, shared by the files that implement Model
// (model.cpp, devices.cpp, capture.cpp, generate.cpp, cpu_pack.cpp) and by training (train*.cpp).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/model/nn.h"

namespace difflens {

struct CpuLayerPack;  // cpu_pack.cpp: a layer packed for the plain-C++ CPU passes

// Each CPU layer's packed weights, made by the first capture that needs them (cpu_pack.cpp cpu_layer).
struct CpuLayerCache {
  std::mutex mutex;
  std::vector<std::shared_ptr<const CpuLayerPack>> layers;
};

struct Model::Impl {
  ModelConfig config;
  Tokenizer tokenizer;
  std::filesystem::path path;
  at::Device device{at::kCPU};
  nn::CausalLm net{nullptr};
  int logit_bits = 0;  // attention-logit quantization applied to every forward (0: exact)
  std::string source_dtype = "F32";
  std::string tokenizer_note;

  // `storage`: the dtype of projection and embedding weights (F32, or a half-precision checkpoint's own).
  Impl(const ModelConfig& c, const Tokenizer& tok, at::Device dev, at::ScalarType storage = at::kFloat)
      : config(c), tokenizer(tok), device(dev) {
    tune_allocator();
    const nn::ScopedDtype scope(nn::g_weight_storage, storage);
    net = nn::CausalLm(c);
    net->eval();
  }

  std::map<std::string, at::Tensor> named() const {
    std::map<std::string, at::Tensor> m;
    for (const auto& item : net->named_parameters()) m[item.key()] = item.value();
    return m;
  }

  // Copies named tensors into the parameters; `source(name, shape)` returns one tensor's data or throws.
  template <typename Source>
  void bind(Source&& source) {
    at::NoGradGuard no_grad;
    for (auto& [name, param] : named()) {
      std::vector<int64_t> expected(param.sizes().begin(), param.sizes().end());
      std::vector<float> data = source(name, expected);
      at::Tensor t = at::from_blob(data.data(), expected, at::TensorOptions().dtype(at::kFloat));
      param.copy_(t);  // rounds to the parameter's dtype (exact for values read from that dtype)
    }
  }

  void to_device() { net->to(device); }
  // The next-token logits from the last hidden state [E], on whichever devices the final norm and the
  // output projection (or the tied embedding) sit (a model may be spread over several).
  at::Tensor next_logits(const at::Tensor& last) {
    at::Tensor x = last;
    for (const auto& p : net->model->norm->parameters()) x = x.to(p.device());
    x = net->model->norm(x);
    const auto out = net->lm_head ? net->lm_head->parameters() : net->model->embed_tokens->parameters();
    if (!out.empty()) x = x.to(out.front().device());
    // One row: a matrix-vector product (the matrix product would first copy the whole matrix).
    const at::Tensor& w = net->lm_head ? net->lm_head->weight : net->model->embed_tokens->weight;
    if (x.dim() == 1 && nn::g_matmul_dtype == at::kFloat) return at::mv(nn::as_compute(w, x), x);
    return net->unembed(x);
  }
  void apply_logit_bits(int bits);  // model.cpp
  mutable CpuLayerCache cpu_cache;
};

// Puts a run's interventions on each layer of `net` for the run's duration (capture, generation, probe)
// and takes them off after, whatever happens. `mean_positions`: the positions a mean ablation averages.
class InterventionScope {
 public:
  InterventionScope(nn::CausalLm& net, const Interventions& iv, int64_t mean_positions) : net_(net) {
    auto& layers = net_->model->layer_ptrs;
    if (iv.empty()) return;
    if (iv.layers.size() != layers.size())
      throw Error("interventions were resolved for a model of " + std::to_string(iv.layers.size()) +
                  " layers; this one has " + std::to_string(layers.size()));
    for (size_t i = 0; i < layers.size(); ++i) {
      layers[i]->edit = iv.layers[i].empty() ? nullptr : &iv.layers[i];
      layers[i]->mean_positions = iv.mean_positions > 0 ? iv.mean_positions : mean_positions;
      layers[i]->head_means.clear();
    }
  }
  ~InterventionScope() {
    for (auto& l : net_->model->layer_ptrs) {
      l->edit = nullptr;
      l->mean_positions = 0;
      l->head_means.clear();
    }
  }
  InterventionScope(const InterventionScope&) = delete;
  InterventionScope& operator=(const InterventionScope&) = delete;

 private:
  nn::CausalLm& net_;
};

struct ModelAccess {
  static Model::Impl& impl(const Model& m) { return *m.impl_; }
};

}  // namespace difflens
