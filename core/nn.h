// Internal to core (includes LibTorch): the DIFF and baseline decoder modules. Only core/model.cpp and
// core/train.cpp include this. Semantics: the README's "What the math is" and core/FORMATS.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/config.h"

namespace difflens::nn {

using at::Tensor;

inline Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
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

// Sets one of the thread-local dtypes below for the lifetime of a scope.
struct ScopedDtype {
  ScopedDtype(at::ScalarType& slot, at::ScalarType t) : slot(slot), previous(slot) { slot = t; }
  ~ScopedDtype() { slot = previous; }
  ScopedDtype(const ScopedDtype&) = delete;
  ScopedDtype& operator=(const ScopedDtype&) = delete;
  at::ScalarType& slot;
  at::ScalarType previous;
};

// The dtype projection and embedding weights are stored in, set while a model is being built: F32, or a
// half-precision checkpoint's own F16/BF16, converted to the activations' dtype one matrix at a time as the
// forward pass reaches it (half the memory; the arithmetic stays F32).
inline thread_local at::ScalarType g_weight_storage = at::kFloat;

inline Tensor as_compute(const Tensor& w, const Tensor& like) {
  return w.scalar_type() == like.scalar_type() ? w : w.to(like.scalar_type());
}

// Mixed-precision training (train.cpp sets it on its own thread, bf16 on CUDA): while set, projections and
// the two attention products multiply in this dtype and hand back F32; the weights (master copies),
// softmax, norms, RoPE, λ and the loss stay F32. Capture never sets it.
inline thread_local at::ScalarType g_matmul_dtype = at::kFloat;

// a · b (at::matmul), in the matmul precision in force.
inline Tensor product(const Tensor& a, const Tensor& b) {
  if (g_matmul_dtype == at::kFloat) return at::matmul(a, b);
  return at::matmul(a.to(g_matmul_dtype), b.to(g_matmul_dtype)).to(at::kFloat);
}

// Bias-free linear layer holding a [out, in] weight, named like Hugging Face's nn.Linear.
struct ProjectionImpl : torch::nn::Module {
  ProjectionImpl(int64_t in, int64_t out) {
    weight = register_parameter("weight", at::empty({out, in}, at::TensorOptions().dtype(g_weight_storage)));
  }
  Tensor forward(const Tensor& x) {
    if (g_matmul_dtype != at::kFloat)
      return at::linear(x.to(g_matmul_dtype), weight.to(g_matmul_dtype)).to(at::kFloat);
    return at::linear(x, as_compute(weight, x));
  }
  Tensor weight;
};
TORCH_MODULE(Projection);

// Rotary tables for positions 0..T-1: angle[t, i] = t · inv_freq[i], i < d/2 (θ^(-2i/d) unless scaled).
struct Rope {
  Tensor cos, sin;  // [T, d/2]
  RopeStyle style = RopeStyle::Interleaved;

  // Frequencies from the config: θ, head_dim and rope_scaling (rope_inv_freq).
  Rope(int64_t T, const ModelConfig& c, const at::Device& device) : style(c.rope_style) {
    auto opts = at::TensorOptions().dtype(at::kDouble);
    const std::vector<double> f = rope_inv_freq(c);
    Tensor inv_freq = at::tensor(f, opts);                    // [d/2]
    Tensor angle = at::outer(at::arange(T, opts), inv_freq);  // [T, d/2]
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

// What a blocked (long-prompt) capture needs of one attention block: rotated queries (scaled by
// d^-1/2) and keys, values, and λ. Keys and values are not repeated over GQA groups.
struct AttentionInputs {
  Tensor q1, q2;  // [B, H, T, d] (q2: DIFF only)
  Tensor k1, k2;  // [B, Hkv, T, d]
  Tensor v;       // [B, Hkv, T, dv] (DIFF: dv = 2d)
  Tensor lambda, lambda_exp1, lambda_exp2;
  double lambda_init = 0;
};

// Absmax quantization of attention logits to `bits` (the paper's Fig. 8 setting), per head and dynamic:
// s = max |l| over the head's causal entries / (2^(bits−1) − 1), l ↦ round(l / s) · s. bits ≤ 0 or ≥ 32
// leaves the logits exact. logits [B, H, T, T], future [T, T].
inline Tensor quantize_logits(const Tensor& logits, const Tensor& future, int bits) {
  if (bits <= 0 || bits >= 32) return logits;
  const double levels = std::pow(2.0, bits - 1) - 1;
  const Tensor amax =
      logits.masked_fill(future, 0).abs().amax({-2, -1}, true).clamp_min(1e-30);  // [B, H, 1, 1]
  const Tensor step = amax / levels;
  return at::round(logits / step) * step;
}

// Keys a query may not see, [T, T] bool: the future (key j > query i) and, with a sliding window of W
// (Mistral), keys at least W positions back (j <= i - W).
inline Tensor masked_keys(int64_t T, const ModelConfig& c, const at::Device& device) {
  Tensor ones = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(device));
  Tensor m = ones.triu(1);
  if (c.sliding_window > 0 && c.sliding_window < T) m = m.logical_or(ones.tril(-c.sliding_window));
  return m;
}

inline Tensor causal_softmax(const Tensor& logits, const Tensor& future) {
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
    r.l1 = quantize_logits(product(q, k.transpose(-2, -1)), future, logit_bits);  // [B, H, T, T]
    r.a = causal_softmax(r.l1, future);                                           // [B, H, T, T]
    Tensor o = product(r.a.to(v.scalar_type()), v);                               // [B, H, T, d]
    r.out = o_proj(o.transpose(1, 2).reshape({B, T, H * d}));
    return r;
  }

  AttentionInputs inputs(const Tensor& x, const Rope& rope) {
    const int64_t B = x.size(0), T = x.size(1), d = c.head_dim;
    AttentionInputs in;
    in.q1 = rope.apply(q_proj(x).view({B, T, c.num_attention_heads, d}).transpose(1, 2)) *
            (1.0 / std::sqrt(static_cast<double>(d)));
    in.k1 = rope.apply(k_proj(x).view({B, T, c.num_key_value_heads, d}).transpose(1, 2));
    in.v = v_proj(x).view({B, T, c.num_key_value_heads, d}).transpose(1, 2);
    return in;
  }
  // o [B, H, T, d] (the heads' outputs) -> [B, T, E]
  Tensor output(const Tensor& o) {
    return o_proj(o.transpose(1, 2).reshape({o.size(0), o.size(2), c.num_attention_heads * c.head_dim}));
  }

  ModelConfig c;
  int logit_bits = 0;  // quantize the logits before the softmax (0: exact)
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
    r.l1 = quantize_logits(product(q1, k1.transpose(-2, -1)), future, logit_bits);  // [B, H, T, T]
    r.l2 = quantize_logits(product(q2, k2.transpose(-2, -1)), future, logit_bits);  // [B, H, T, T]
    r.a1 = causal_softmax(r.l1, future);
    r.a2 = causal_softmax(r.l2, future);
    r.a = r.a1 - r.lambda * r.a2;                    // rows sum to 1 - λ
    Tensor o = product(r.a.to(v.scalar_type()), v);  // [B, H, T, 2d]
    o = rms_norm(o, subln ? subln->weight : Tensor(), c.subln_eps) * (1.0 - lambda_init);
    r.out = o_proj(o.transpose(1, 2).reshape({B, T, H * 2 * d}));
    return r;
  }

  AttentionInputs inputs(const Tensor& x, const Rope& rope) {
    const int64_t B = x.size(0), T = x.size(1), d = c.head_dim;
    const int64_t H = c.num_attention_heads / 2, Hkv = c.num_key_value_heads / 2;
    AttentionInputs in;
    auto [q1, q2] = components(q_proj(x), H);
    auto [k1, k2] = components(k_proj(x), Hkv);
    if (c.diff_pairing == DiffPairing::Adjacent) {
      in.v = v_proj(x).view({B, T, Hkv, 2 * d}).transpose(1, 2);
    } else {
      auto [v1, v2] = components(v_proj(x), Hkv);
      in.v = at::cat({v1, v2}, -1);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    in.q1 = rope.apply(q1) * scale;
    in.q2 = rope.apply(q2) * scale;
    in.k1 = rope.apply(k1);
    in.k2 = rope.apply(k2);
    in.lambda_init = lambda_init;
    in.lambda_exp1 = at::exp((lambda_q1.to(at::kFloat) * lambda_k1.to(at::kFloat)).sum());
    in.lambda_exp2 = at::exp((lambda_q2.to(at::kFloat) * lambda_k2.to(at::kFloat)).sum());
    in.lambda = in.lambda_exp1 - in.lambda_exp2 + lambda_init;
    return in;
  }
  // o [B, H, T, 2d] = (A1 - λA2)·V per head -> [B, T, E]
  Tensor output(const Tensor& o) {
    const Tensor n = rms_norm(o, subln ? subln->weight : Tensor(), c.subln_eps) * (1.0 - lambda_init);
    return o_proj(
        n.transpose(1, 2).reshape({o.size(0), o.size(2), (c.num_attention_heads / 2) * 2 * c.head_dim}));
  }

  ModelConfig c;
  double lambda_init;
  int logit_bits = 0;  // quantize both components' logits before their softmaxes (0: exact)
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
  void set_logit_bits(int bits) {
    if (diff_attn) diff_attn->logit_bits = bits;
    if (base_attn) base_attn->logit_bits = bits;
  }
  AttentionResult attend(const Tensor& x, const Rope& rope, const Tensor& future) {
    return diff_attn ? diff_attn->forward(x, rope, future) : base_attn->forward(x, rope, future);
  }
  // One block of query rows of a blocked forward: rows [row0, row0 + rows) against keys [0, row0 + rows).
  struct Block {
    int64_t row0 = 0, rows = 0;
    Tensor l1, l2;     // [H, rows, keys] scaled logits, hidden keys -inf (l2: DIFF)
    Tensor a1, a2, a;  // [H, rows, keys] (baseline: a only)
  };
  // The layer over h [1, T, E] with attention computed `block_rows` query rows at a time (memory
  // O(T · block) instead of O(T²)); `visit(block)` sees every block, `in` receives the inputs.
  template <typename Visit>
  Tensor forward_blocked(const Tensor& h, const Rope& rope, const ModelConfig& c, int64_t block_rows,
                         AttentionInputs& in, Visit&& visit) {
    const Tensor x = input_layernorm(h);
    in = diff_attn ? diff_attn->inputs(x, rope) : base_attn->inputs(x, rope);
    const int64_t T = h.size(1);
    const int64_t H = c.map_heads(), g = H / in.k1.size(1);
    const Tensor k1 = g > 1 ? in.k1.repeat_interleave(g, 1) : in.k1;
    const Tensor k2 = in.k2.defined() ? (g > 1 ? in.k2.repeat_interleave(g, 1) : in.k2) : Tensor();
    const Tensor v = g > 1 ? in.v.repeat_interleave(g, 1) : in.v;
    Tensor o = at::empty({1, H, T, v.size(-1)}, v.options());
    const auto opts = at::TensorOptions().dtype(at::kLong).device(h.device());
    const float neg_inf = -std::numeric_limits<float>::infinity();
    // Block [r0, r0 + rows) of query rows: its keys' mask and scaled logits (hidden keys -inf).
    auto block_logits = [&](int64_t r0, int64_t n, const Tensor& q, const Tensor& k, Tensor* hidden_out) {
      const int64_t K = r0 + n;
      const Tensor rows = at::arange(r0, K, opts).unsqueeze(1), cols = at::arange(K, opts).unsqueeze(0);
      Tensor hidden = cols.gt(rows);
      if (c.sliding_window > 0) hidden = hidden.logical_or(cols.le(rows - c.sliding_window));
      if (hidden_out) *hidden_out = hidden;
      return at::matmul(q[0].narrow(1, r0, n), k[0].narrow(1, 0, K).transpose(-2, -1))
          .masked_fill(hidden, neg_inf);
    };
    // Quantized logits (quantize_logits' absmax per head over the whole map): a first pass over the blocks
    // finds each head's largest |logit| among the keys it sees, the second quantizes with that step.
    const int bits = diff_attn ? diff_attn->logit_bits : base_attn->logit_bits;
    Tensor step1, step2;  // [H, 1, 1]
    if (bits > 0 && bits < 32) {
      const double levels = std::pow(2.0, bits - 1) - 1;
      auto amax = [&](const Tensor& q, const Tensor& k) {
        Tensor m;
        for (int64_t r0 = 0; r0 < T; r0 += block_rows) {
          Tensor hidden;
          const Tensor l = block_logits(r0, std::min(block_rows, T - r0), q, k, &hidden);  // [H, rows, K]
          const Tensor a = l.masked_fill(hidden, 0).abs().amax({-2, -1}, true);            // [H, 1, 1]
          m = m.defined() ? at::maximum(m, a) : a;
        }
        return m.clamp_min(1e-30) / levels;
      };
      step1 = amax(in.q1, k1);
      if (diff_attn) step2 = amax(in.q2, k2);
    }
    auto quantized = [](const Tensor& l, const Tensor& step) {
      return step.defined() ? at::round(l / step) * step : l;  // -inf stays -inf
    };
    for (int64_t r0 = 0; r0 < T; r0 += block_rows) {
      Block b;
      b.row0 = r0;
      b.rows = std::min(block_rows, T - r0);
      const int64_t K = r0 + b.rows;
      b.l1 = quantized(block_logits(r0, b.rows, in.q1, k1, nullptr), step1);
      if (diff_attn) {
        b.l2 = quantized(block_logits(r0, b.rows, in.q2, k2, nullptr), step2);
        b.a1 = at::softmax(b.l1, -1, at::kFloat);
        b.a2 = at::softmax(b.l2, -1, at::kFloat);
        b.a = b.a1 - in.lambda * b.a2;
      } else {
        b.a = at::softmax(b.l1, -1, at::kFloat);
      }
      o[0].narrow(1, r0, b.rows).copy_(at::matmul(b.a.to(v.scalar_type()), v[0].narrow(1, 0, K)));
      visit(b);
    }
    const Tensor out = diff_attn ? diff_attn->output(o) : base_attn->output(o);
    const Tensor y = h + out;
    return y + mlp(post_attention_layernorm(y));
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
    weight = register_parameter("weight", at::empty({vocab, E}, at::TensorOptions().dtype(g_weight_storage)));
  }
  Tensor forward(const Tensor& ids) {
    return weight.index_select(0, ids.flatten()).view({ids.size(0), ids.size(1), -1}).to(at::kFloat);
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
  // ids [B, T] → logits [B, T, V]: the training and evaluation path (nothing captured).
  Tensor forward(const Tensor& ids) {
    const int64_t T = ids.size(1);
    const Rope rope(T, c, ids.device());
    const Tensor future = masked_keys(T, c, ids.device());
    Tensor h = model->embed_tokens(ids);  // [B, T, E]
    for (auto& layer : model->layer_ptrs) {
      AttentionResult r;
      h = layer->forward(h, rope, future, r);
    }
    return unembed(model->norm(h));
  }
  Tensor unembed(const Tensor& h) {
    return lm_head ? lm_head(h) : at::linear(h, as_compute(model->embed_tokens->weight, h));
  }
  ModelConfig c;
  Transformer model{nullptr};
  Projection lm_head{nullptr};
};
TORCH_MODULE(CausalLm);

}  // namespace difflens::nn
