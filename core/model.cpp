// The DIFF and baseline decoders (LibTorch modules), checkpoint binding and Trace capture.
// The one translation unit of the inference path that includes LibTorch (see build notes: ~15 s each).
// Semantics: ../shared/docs/diff-attention.md, restated in docs/checkpoint-format.md.
#include "core/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"

namespace difflens {
namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------------
// Building blocks

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  // fp32 statistics even when activations are half precision (reference semantics).
  Tensor xf = x.to(at::kFloat);
  Tensor y = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (weight.defined()) y = y * weight.to(at::kFloat);
  return y.to(x.scalar_type());
}

struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t dim, double eps) : eps(eps) { weight = register_parameter("weight", at::ones({dim})); }
  Tensor forward(const Tensor& x) { return rms_norm(x, weight, eps); }
  Tensor weight;
  double eps;
};
TORCH_MODULE(RmsNorm);

// Bias-free linear layer holding a [out, in] weight, named like Hugging Face's nn.Linear.
struct ProjectionImpl : torch::nn::Module {
  ProjectionImpl(int64_t in, int64_t out) { weight = register_parameter("weight", at::empty({out, in})); }
  Tensor forward(const Tensor& x) { return at::linear(x, weight); }
  Tensor weight;
};
TORCH_MODULE(Projection);

// Rotary tables for positions 0..T-1: angle[t, i] = t · θ^(-2i/d), i < d/2.
struct Rope {
  Tensor cos, sin;  // [T, d/2]
  RopeStyle style = RopeStyle::Interleaved;

  Rope(int64_t T, int64_t d, double theta, RopeStyle style, const at::Device& device) : style(style) {
    auto opts = at::TensorOptions().dtype(at::kDouble);
    Tensor inv_freq = at::pow(theta, -at::arange(0, d, 2, opts) / static_cast<double>(d));  // [d/2]
    Tensor angle = at::outer(at::arange(T, opts), inv_freq);                                // [T, d/2]
    cos = angle.cos().to(at::kFloat).to(device);
    sin = angle.sin().to(at::kFloat).to(device);
  }

  // x: [B, heads, T, d]
  Tensor apply(const Tensor& x) const {
    const int64_t d = x.size(-1);
    Tensor xf = x.to(at::kFloat);
    Tensor out;
    if (style == RopeStyle::Interleaved) {
      Tensor pairs = xf.unflatten(-1, {d / 2, 2});  // [B, h, T, d/2, 2]
      Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
      out = at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).flatten(-2);
    } else {
      Tensor x0 = xf.narrow(-1, 0, d / 2), x1 = xf.narrow(-1, d / 2, d / 2);
      out = at::cat({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1);
    }
    return out.to(x.scalar_type());
  }
};

// What an attention block hands back besides its output; tensors are [B, heads, T, T].
struct AttentionResult {
  Tensor out;                               // [B, T, E]
  Tensor a1, a2, a;                         // DIFF: component softmaxes and A1 - λA2; baseline: only a
  Tensor l1, l2;                            // scaled logits, masked positions -inf (DIFF: both; baseline: l1)
  Tensor lambda, lambda_exp1, lambda_exp2;  // 0-dim (DIFF only)
  double lambda_init = 0;
};

Tensor causal_softmax(const Tensor& logits, const Tensor& future) {
  return at::softmax(logits.masked_fill(future, -std::numeric_limits<float>::infinity()), -1, at::kFloat);
}

// Baseline multi-head attention: 2H heads of width d, GQA by head groups.
struct BaselineAttentionImpl : torch::nn::Module {
  explicit BaselineAttentionImpl(const ModelConfig& c) : c(c) {
    const int64_t E = c.hidden_size, d = c.head_dim;
    q_proj = register_module("q_proj", Projection(E, c.num_attention_heads * d));
    k_proj = register_module("k_proj", Projection(E, c.num_key_value_heads * d));
    v_proj = register_module("v_proj", Projection(E, c.num_key_value_heads * d));
    o_proj = register_module("o_proj", Projection(c.num_attention_heads * d, E));
  }

  AttentionResult forward(const Tensor& x, const Rope& rope, const Tensor& future) {
    const int64_t B = x.size(0), T = x.size(1), d = c.head_dim;
    const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads;
    Tensor q = q_proj(x).view({B, T, H, d}).transpose(1, 2);    // [B, H, T, d]
    Tensor k = k_proj(x).view({B, T, Hkv, d}).transpose(1, 2);  // [B, Hkv, T, d]
    Tensor v = v_proj(x).view({B, T, Hkv, d}).transpose(1, 2);  // [B, Hkv, T, d]
    q = rope.apply(q) * (1.0 / std::sqrt(static_cast<double>(d)));
    k = rope.apply(k);
    if (H != Hkv) {
      k = k.repeat_interleave(H / Hkv, 1);
      v = v.repeat_interleave(H / Hkv, 1);
    }
    AttentionResult r;
    r.l1 = at::matmul(q, k.transpose(-2, -1));          // [B, H, T, T]
    r.a = causal_softmax(r.l1, future);                 // [B, H, T, T]
    Tensor o = at::matmul(r.a.to(v.scalar_type()), v);  // [B, H, T, d]
    r.out = o_proj(o.transpose(1, 2).reshape({B, T, H * d}));
    return r;
  }

  ModelConfig c;
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(BaselineAttention);

// Differential attention: H heads, each the difference of two softmax maps over d-wide components,
// values 2d wide, λ re-parameterised per layer, per-head RMSNorm × (1 - λ_init).
struct DiffAttentionImpl : torch::nn::Module {
  DiffAttentionImpl(const ModelConfig& c, int64_t layer) : c(c), lambda_init(difflens::lambda_init(layer)) {
    const int64_t E = c.hidden_size, d = c.head_dim;
    q_proj = register_module("q_proj", Projection(E, c.num_attention_heads * d));
    k_proj = register_module("k_proj", Projection(E, c.num_key_value_heads * d));
    v_proj = register_module("v_proj", Projection(E, c.num_key_value_heads * d));
    o_proj = register_module("o_proj", Projection(c.num_attention_heads * d, E));
    lambda_q1 = register_parameter("lambda_q1", at::zeros({d}));
    lambda_k1 = register_parameter("lambda_k1", at::zeros({d}));
    lambda_q2 = register_parameter("lambda_q2", at::zeros({d}));
    lambda_k2 = register_parameter("lambda_k2", at::zeros({d}));
    if (c.subln_weight) subln = register_module("subln", RmsNorm(2 * d, c.subln_eps));
  }

  // Splits a projection [B, T, 2n·d] into its two components, each [B, n, T, d].
  std::pair<Tensor, Tensor> components(const Tensor& p, int64_t n) const {
    const int64_t B = p.size(0), T = p.size(1), d = c.head_dim;
    if (c.diff_pairing == DiffPairing::Adjacent) {
      Tensor v = p.view({B, T, n, 2, d});
      return {v.select(3, 0).transpose(1, 2), v.select(3, 1).transpose(1, 2)};
    }
    Tensor v = p.view({B, T, 2, n, d});
    return {v.select(2, 0).transpose(1, 2), v.select(2, 1).transpose(1, 2)};
  }

  AttentionResult forward(const Tensor& x, const Rope& rope, const Tensor& future) {
    const int64_t B = x.size(0), T = x.size(1), d = c.head_dim;
    const int64_t H = c.num_attention_heads / 2, Hkv = c.num_key_value_heads / 2;
    auto [q1, q2] = components(q_proj(x), H);    // [B, H, T, d] each
    auto [k1, k2] = components(k_proj(x), Hkv);  // [B, Hkv, T, d] each
    Tensor v;                                    // [B, Hkv, T, 2d]
    if (c.diff_pairing == DiffPairing::Adjacent) {
      v = v_proj(x).view({B, T, Hkv, 2 * d}).transpose(1, 2);
    } else {
      auto [v1, v2] = components(v_proj(x), Hkv);
      v = at::cat({v1, v2}, -1);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));  // component width, not 2d
    q1 = rope.apply(q1) * scale;
    q2 = rope.apply(q2) * scale;
    k1 = rope.apply(k1);
    k2 = rope.apply(k2);
    if (H != Hkv) {  // head h uses kv group h / (H/Hkv); component 1 with 1, 2 with 2
      k1 = k1.repeat_interleave(H / Hkv, 1);
      k2 = k2.repeat_interleave(H / Hkv, 1);
      v = v.repeat_interleave(H / Hkv, 1);
    }
    AttentionResult r;
    r.lambda_init = lambda_init;
    r.lambda_exp1 = at::exp((lambda_q1.to(at::kFloat) * lambda_k1.to(at::kFloat)).sum());
    r.lambda_exp2 = at::exp((lambda_q2.to(at::kFloat) * lambda_k2.to(at::kFloat)).sum());
    r.lambda = r.lambda_exp1 - r.lambda_exp2 + lambda_init;
    r.l1 = at::matmul(q1, k1.transpose(-2, -1));  // [B, H, T, T]
    r.l2 = at::matmul(q2, k2.transpose(-2, -1));  // [B, H, T, T]
    r.a1 = causal_softmax(r.l1, future);
    r.a2 = causal_softmax(r.l2, future);
    r.a = r.a1 - r.lambda * r.a2;                       // rows sum to 1 - λ
    Tensor o = at::matmul(r.a.to(v.scalar_type()), v);  // [B, H, T, 2d]
    o = rms_norm(o, subln ? subln->weight : Tensor(), c.subln_eps) * (1.0 - lambda_init);
    r.out = o_proj(o.transpose(1, 2).reshape({B, T, H * 2 * d}));
    return r;
  }

  ModelConfig c;
  double lambda_init;
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Tensor lambda_q1, lambda_k1, lambda_q2, lambda_k2;
  RmsNorm subln{nullptr};
};
TORCH_MODULE(DiffAttention);

struct SwiGluImpl : torch::nn::Module {
  SwiGluImpl(int64_t E, int64_t F) {
    gate_proj = register_module("gate_proj", Projection(E, F));
    up_proj = register_module("up_proj", Projection(E, F));
    down_proj = register_module("down_proj", Projection(F, E));
  }
  Tensor forward(const Tensor& x) { return down_proj(at::silu(gate_proj(x)) * up_proj(x)); }
  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(SwiGlu);

struct DecoderLayerImpl : torch::nn::Module {
  DecoderLayerImpl(const ModelConfig& c, int64_t layer) {
    if (c.is_diff())
      diff_attn = register_module("self_attn", DiffAttention(c, layer));
    else
      base_attn = register_module("self_attn", BaselineAttention(c));
    mlp = register_module("mlp", SwiGlu(c.hidden_size, c.intermediate_size));
    input_layernorm = register_module("input_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  }
  AttentionResult attend(const Tensor& x, const Rope& rope, const Tensor& future) {
    return diff_attn ? diff_attn->forward(x, rope, future) : base_attn->forward(x, rope, future);
  }
  // h: [B, T, E] → [B, T, E]; the attention details stay in `r`.
  Tensor forward(const Tensor& h, const Rope& rope, const Tensor& future, AttentionResult& r) {
    r = attend(input_layernorm(h), rope, future);
    Tensor y = h + r.out;
    return y + mlp(post_attention_layernorm(y));
  }
  DiffAttention diff_attn{nullptr};
  BaselineAttention base_attn{nullptr};
  SwiGlu mlp{nullptr};
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

struct TokenEmbeddingImpl : torch::nn::Module {
  TokenEmbeddingImpl(int64_t vocab, int64_t E) {
    weight = register_parameter("weight", at::empty({vocab, E}));
  }
  Tensor forward(const Tensor& ids) {
    return weight.index_select(0, ids.flatten()).view({ids.size(0), ids.size(1), -1});
  }
  Tensor weight;
};
TORCH_MODULE(TokenEmbedding);

struct TransformerImpl : torch::nn::Module {
  explicit TransformerImpl(const ModelConfig& c) {
    embed_tokens = register_module("embed_tokens", TokenEmbedding(c.vocab_size, c.hidden_size));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      DecoderLayer layer(c, i);
      layers->push_back(layer);
      layer_ptrs.push_back(layer);
    }
    norm = register_module("norm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  }
  TokenEmbedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<DecoderLayer> layer_ptrs;
  RmsNorm norm{nullptr};
};
TORCH_MODULE(Transformer);

struct CausalLmImpl : torch::nn::Module {
  explicit CausalLmImpl(const ModelConfig& c) : c(c) {
    model = register_module("model", Transformer(c));
    if (!c.tie_word_embeddings) lm_head = register_module("lm_head", Projection(c.hidden_size, c.vocab_size));
  }
  Tensor unembed(const Tensor& h) {
    return lm_head ? lm_head(h) : at::linear(h, model->embed_tokens->weight);
  }
  ModelConfig c;
  Transformer model{nullptr};
  Projection lm_head{nullptr};
};
TORCH_MODULE(CausalLm);

// ---------------------------------------------------------------------------------------------------
// Capture helpers

std::vector<float> to_vector(const Tensor& t) {
  Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  std::vector<float> v(static_cast<size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.data_ptr<float>(), v.size() * sizeof(float));
  return v;
}

FloatArray to_array(const Tensor& t) {
  FloatArray a;
  a.shape.assign(t.sizes().begin(), t.sizes().end());
  a.data = to_vector(t);
  return a;
}

// Exact statistics of |values| over several tensors of one shape, skipping the cells where `skip` is
// true (the causal future), without gathering the pool: every value gets its log10 bin in one vectorised
// pass (skipped cells go to a discard bucket), bincount gives the histogram, and the exact top-k and
// lower median are then read from the few values inside the bins where they must lie.
ValueStats value_stats(const std::vector<Tensor>& parts, const Tensor& skip = Tensor()) {
  constexpr int64_t kBelow = 0, kAbove = LogHistogram::kBins + 1, kDiscard = LogHistogram::kBins + 2;
  std::vector<Tensor> values, buckets;  // per part: |v| and its bucket (0 below, 1..kBins, kBins+1 above)
  std::vector<int64_t> counts(kDiscard + 1, 0);
  double sum = 0;
  for (const Tensor& p : parts) {
    Tensor v = p.to(at::kFloat).abs();
    v = at::where(at::isnan(v), at::zeros_like(v), v);  // NaN counts as "below" rather than poisoning
    Tensor b = ((at::log10(v) - LogHistogram::kLogMin) * LogHistogram::kBinsPerDecade)
                   .floor()
                   .clamp(-1, LogHistogram::kBins)  // -inf (zeros) → -1, +inf → kBins
                   .to(at::kShort) +
               1;  // 1027 buckets fit int16: a quarter of int64's memory
    if (skip.defined()) {
      b.masked_fill_(skip, kDiscard);
      sum += v.masked_fill(skip, 0.0f).sum(at::kDouble).item<double>();
    } else {
      sum += v.sum(at::kDouble).item<double>();
    }
    Tensor c = at::bincount(b.flatten().to(at::kCPU), {}, kDiscard + 1).contiguous();
    const int64_t* cp = c.data_ptr<int64_t>();
    for (int64_t i = 0; i <= kDiscard; ++i) counts[i] += cp[i];
    values.push_back(std::move(v));
    buckets.push_back(std::move(b));
  }
  ValueStats s;
  const int64_t n = std::accumulate(counts.begin(), counts.begin() + kDiscard, int64_t{0});
  s.count = static_cast<uint64_t>(n);
  if (n == 0) return s;
  s.histogram.below = static_cast<uint64_t>(counts[kBelow]);
  s.histogram.above = static_cast<uint64_t>(counts[kAbove]);
  for (int i = 0; i < LogHistogram::kBins; ++i) s.histogram.counts[i] = static_cast<uint64_t>(counts[i + 1]);
  s.mean = static_cast<float>(sum / static_cast<double>(n));

  // The values whose bucket lies in [lo, hi], gathered from every part (a small set by construction).
  auto gather = [&](int64_t lo, int64_t hi) {
    std::vector<Tensor> sel;
    for (size_t i = 0; i < values.size(); ++i)
      sel.push_back(
          values[i].masked_select(lo == hi ? buckets[i] == lo : (buckets[i] >= lo) & (buckets[i] <= hi)));
    return sel.size() == 1 ? sel[0] : at::cat(sel);
  };
  // Top-k: the lowest bucket from which the buckets above hold at least k values.
  const int64_t k = std::min<int64_t>(ValueStats::kTopK, n);
  int64_t top_bucket = kAbove, above_count = 0;
  for (; top_bucket > kBelow; --top_bucket)
    if ((above_count += counts[top_bucket]) >= k) break;
  s.top =
      to_vector(std::get<0>(at::topk(gather(top_bucket, kAbove), k, 0, /*largest=*/true, /*sorted=*/true)));
  // Lower median: rank (n+1)/2 from the bottom, found inside its bucket.
  const int64_t rank = (n + 1) / 2;
  int64_t below_count = 0, median_bucket = kBelow;
  for (; median_bucket < kAbove; ++median_bucket) {
    if (below_count + counts[median_bucket] >= rank) break;
    below_count += counts[median_bucket];
  }
  s.median =
      std::get<0>(at::kthvalue(gather(median_bucket, median_bucket), rank - below_count)).item<float>();
  return s;
}

// glibc serves every block over 32 MB with a fresh mmap and unmaps it on free, so each [H, T, T] map
// of a capture is page-faulted in anew: measured here at T=1024, 3.5-5.6 s per capture with more system
// than user time, against 0.42 s when large blocks come from the heap and stay there. A 512 MB trim
// threshold still let DIFF captures (≈0.5 GB transient) bounce between 0.41 and 1.15 s, so up to 2 GB of
// freed heap is kept for reuse. Process-wide; applied once, before the first model exists.
void tune_allocator_once() {
#if defined(__GLIBC__)
  static const bool done = [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 2047 * 1024 * 1024);
    mallopt(M_TOP_PAD, 64 * 1024 * 1024);
    return true;
  }();
  (void)done;
#endif
}

at::Device resolve_device(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::Cpu:
      return at::Device(at::kCPU);
    case DeviceChoice::Cuda:
      if (!torch::cuda::is_available())
        throw Error("CUDA was requested but this LibTorch build has no usable CUDA device");
      return at::Device(at::kCUDA, 0);
    case DeviceChoice::Auto:
      break;
  }
  return torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

}  // namespace

// -----------------------------------------------------------------------------------------------------

struct Model::Impl {
  ModelConfig config;
  Tokenizer tokenizer;
  std::filesystem::path path;
  at::Device device{at::kCPU};
  CausalLm net{nullptr};

  Impl(const ModelConfig& c, const Tokenizer& tok, at::Device dev) : config(c), tokenizer(tok), device(dev) {
    tune_allocator_once();
    net = CausalLm(c);
    net->eval();
  }

  std::map<std::string, Tensor> named() const {
    std::map<std::string, Tensor> m;
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
      Tensor t = at::from_blob(data.data(), expected, at::TensorOptions().dtype(at::kFloat));
      param.copy_(t);
    }
  }

  void to_device() { net->to(device); }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

DeviceChoice parse_device(const std::string& text) {
  if (text == "auto") return DeviceChoice::Auto;
  if (text == "cpu") return DeviceChoice::Cpu;
  if (text == "cuda") return DeviceChoice::Cuda;
  throw Error("device must be auto, cpu or cuda, got '" + text + "'");
}

bool cuda_available() {
  return torch::cuda::is_available();
}
void set_num_threads(int threads) {
  at::set_num_threads(std::max(1, threads));
}
int num_threads() {
  return at::get_num_threads();
}

Model Model::random(const ModelConfig& config, uint64_t seed, DeviceChoice device) {
  config.validate();
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

Model Model::load(const std::filesystem::path& dir, DeviceChoice device) {
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": not a model directory");
  const ModelConfig config = load_config(dir / "config.json");
  Tokenizer tokenizer = Tokenizer::for_model(dir, config);
  const std::filesystem::path weights = dir / "model.safetensors";
  SafetensorsFile file(weights);
  auto impl = std::make_unique<Impl>(config, tokenizer, resolve_device(device));
  impl->path = dir;
  const auto known = impl->named();
  for (const auto& t : file.tensors()) {
    if (known.count(t.name)) continue;
    if (t.name == "lm_head.weight" && config.tie_word_embeddings) continue;  // saved tied copy
    if (t.name.find("rotary_emb.inv_freq") != std::string::npos) continue;   // recomputed from config
    throw FormatError(weights.string() + ": unexpected tensor '" + t.name + "' (config.json says a " +
                      to_string(config.attention) + " model with " +
                      std::to_string(config.num_hidden_layers) + " layers)");
  }
  impl->bind([&](const std::string& name, const std::vector<int64_t>& expected) {
    const TensorInfo* t = file.find(name);
    if (!t)
      throw FormatError(weights.string() + ": tensor '" + name + "' is missing (config.json says a " +
                        to_string(config.attention) + " model)");
    if (t->shape != expected)
      throw FormatError(weights.string() + ": tensor '" + name + "' is " + shape_string(t->shape) +
                        ", config expects " + shape_string(expected));
    return file.read_f32(*t);
  });
  impl->to_device();
  return Model(std::move(impl));
}

void Model::save(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create directory (" + ec.message() + ")");
  const std::vector<NamedTensor> all = tensors();
  std::vector<TensorToWrite> out;
  for (const auto& t : all) out.push_back({t.name, t.shape, t.data.data()});
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
const Tokenizer& Model::tokenizer() const {
  return impl_->tokenizer;
}
const std::filesystem::path& Model::path() const {
  return impl_->path;
}
std::string Model::device_name() const {
  return impl_->device.str();
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : impl_->net->parameters()) n += p.numel();
  return n;
}

Trace Model::capture(const std::vector<int64_t>& ids, const CaptureOptions& options,
                     const std::atomic<bool>* cancel) const {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = impl_->config;
  const int64_t T = static_cast<int64_t>(ids.size());
  if (T == 0) throw Error("the prompt is empty: nothing to run");
  if (T > c.max_position_embeddings)
    throw Error("the prompt has " + std::to_string(T) + " tokens; this model supports at most " +
                std::to_string(c.max_position_embeddings));
  for (int64_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
  const int64_t heads_total = c.map_heads();
  for (int h : options.heads)
    if (h < 0 || h >= heads_total)
      throw Error("head " + std::to_string(h) + " does not exist (model has " + std::to_string(heads_total) +
                  ")");
  for (int l : options.layers)
    if (l < 0 || l >= c.num_hidden_layers)
      throw Error("layer " + std::to_string(l) + " does not exist (model has " +
                  std::to_string(c.num_hidden_layers) + ")");

  c10::InferenceMode inference;  // thread-local: set on whichever thread captures
  const at::Device dev = impl_->device;
  Trace trace;
  trace.config = c;
  trace.model_path = impl_->path.string();
  trace.token_ids = ids;
  for (int64_t id : ids) trace.tokens.push_back(impl_->tokenizer.piece(id));

  std::vector<int64_t> keep_heads;
  if (options.heads.empty())
    for (int64_t h = 0; h < heads_total; ++h) keep_heads.push_back(h);
  else
    keep_heads.assign(options.heads.begin(), options.heads.end());
  const std::set<int> keep_layers(options.layers.begin(), options.layers.end());
  Tensor head_index = at::tensor(keep_heads, at::TensorOptions().dtype(at::kLong)).to(dev);

  const Rope rope(T, c.head_dim, c.rope_theta, c.rope_style, dev);
  Tensor future =
      at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(dev)).triu(1);  // key j > query i

  Tensor id_tensor = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).to(dev);
  Tensor h = impl_->net->model->embed_tokens(id_tensor.unsqueeze(0));  // [1, T, E]
  auto& layers = impl_->net->model->layer_ptrs;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
    AttentionResult r;
    h = layers[i]->forward(h, rope, future, r);
    LayerTrace lt;
    lt.index = static_cast<int>(i);
    if (c.is_diff()) {
      lt.lambda = r.lambda.item<double>();
      lt.lambda_exp1 = r.lambda_exp1.item<double>();
      lt.lambda_exp2 = r.lambda_exp2.item<double>();
      lt.lambda_init = r.lambda_init;
    }
    const bool keep = options.keep_maps && (keep_layers.empty() || keep_layers.count(static_cast<int>(i)));
    if (keep) {
      lt.heads.assign(keep_heads.begin(), keep_heads.end());
      const bool all_heads = static_cast<int64_t>(keep_heads.size()) == heads_total;
      auto kept = [&](const Tensor& maps) {
        return to_array(all_heads ? maps[0] : maps[0].index_select(0, head_index));
      };
      lt.a = kept(r.a);
      if (c.is_diff()) {
        lt.a1 = kept(r.a1);
        lt.a2 = kept(r.a2);
      }
    }
    if (options.logit_stats) {
      // Causal entries of every head (DIFF: both components pooled).
      lt.logit_stats =
          r.l2.defined() ? value_stats({r.l1[0], r.l2[0]}, future) : value_stats({r.l1[0]}, future);
    }
    if (options.keep_logits) {
      lt.logits1 = to_array(r.l1[0].masked_fill(future, -std::numeric_limits<float>::infinity()));
      if (r.l2.defined())
        lt.logits2 = to_array(r.l2[0].masked_fill(future, -std::numeric_limits<float>::infinity()));
    }
    lt.hidden_stats = value_stats({h[0]});
    if (options.keep_hidden) lt.hidden = to_array(h[0]);
    trace.layers.push_back(std::move(lt));
  }
  Tensor last = impl_->net->model->norm(h[0][T - 1]);
  Tensor probs = at::softmax(impl_->net->unembed(last).to(at::kFloat), -1);  // [vocab]
  const int64_t k = std::min<int64_t>(std::max(options.next_token_top_k, 0), c.vocab_size);
  if (k > 0) {
    auto [p, idx] = at::topk(probs, k);
    std::vector<float> pv = to_vector(p);
    Tensor idx_cpu = idx.to(at::kCPU);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t id = idx_cpu[j].item<int64_t>();
      trace.next_token.push_back({id, impl_->tokenizer.piece(id), pv[j]});
    }
  }
  trace.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return trace;
}

LayerTrace Model::attention_probe(int layer, const std::vector<float>& x, int64_t T,
                                  std::vector<float>* output) const {
  const ModelConfig& c = impl_->config;
  if (layer < 0 || layer >= c.num_hidden_layers)
    throw Error("layer " + std::to_string(layer) + " does not exist");
  if (T <= 0 || static_cast<int64_t>(x.size()) != T * c.hidden_size)
    throw Error("attention_probe: x must hold T x hidden_size values");
  c10::InferenceMode inference;
  const at::Device dev = impl_->device;
  std::vector<float> copy = x;
  Tensor xt = at::from_blob(copy.data(), {1, T, c.hidden_size}, at::TensorOptions().dtype(at::kFloat))
                  .to(dev)
                  .clone();
  const Rope rope(T, c.head_dim, c.rope_theta, c.rope_style, dev);
  Tensor future = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(dev)).triu(1);
  AttentionResult r = impl_->net->model->layer_ptrs[layer]->attend(xt, rope, future);
  LayerTrace lt;
  lt.index = layer;
  for (int64_t hd = 0; hd < c.map_heads(); ++hd) lt.heads.push_back(static_cast<int>(hd));
  lt.a = to_array(r.a[0]);
  lt.logits1 = to_array(r.l1[0].masked_fill(future, -std::numeric_limits<float>::infinity()));
  if (c.is_diff()) {
    lt.a1 = to_array(r.a1[0]);
    lt.a2 = to_array(r.a2[0]);
    lt.logits2 = to_array(r.l2[0].masked_fill(future, -std::numeric_limits<float>::infinity()));
    lt.lambda = r.lambda.item<double>();
    lt.lambda_exp1 = r.lambda_exp1.item<double>();
    lt.lambda_exp2 = r.lambda_exp2.item<double>();
    lt.lambda_init = r.lambda_init;
  }
  if (output) *output = to_vector(r.out[0]);
  return lt;
}

}  // namespace difflens
