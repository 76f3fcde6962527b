// Internal to core (includes LibTorch): the DIFF and baseline decoder modules. Only the Model's files
// (through core/model/model_impl.h) and training (core/model/train*.cpp) include this. Semantics:
// docs/views.md's "What the math is" and core/FORMATS.md; which projection columns feed which head:
// core/cpu/qkv_layout.h.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>
#include <torch/version.h>
// LibTorch 2.1 and later: the fused scaled-dot-product attention with an explicit scale (fused_attention).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#include <ATen/ops/scaled_dot_product_attention.h>
#define DIFFLENS_FUSED_ATTENTION 1
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "core/cpu/qkv_layout.h"
#include "core/formats/config.h"
#include "core/formats/error.h"
#include "core/formats/intervention.h"

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

// A layer's attention inputs, made once per layer by its architecture (inputs() below): rotated queries
// scaled by d^-1/2, rotated keys, values, and λ (DIFF). Keys and values are not repeated over GQA groups.
// Shapes [B, heads, T, width].
struct AttentionInputs {
  Tensor q1, q2;                            // [B, H, T, d] (q2: DIFF only)
  Tensor k1, k2;                            // [B, Hkv, T, d] (DIFF V2: k2 is k1)
  Tensor v;                                 // [B, Hkv, T, dv] (DIFF V1: dv = 2d)
  Tensor lambda, lambda_exp1, lambda_exp2;  // 0-dim (DIFF V1 only): λ = exp1 − exp2 + λ_init
  double lambda_init = 0;
  // DIFF V2: λ per head and query token, σ(z) with z = x_t · w_λ,h (x the attention's normed input):
  // lambda_rows = σ(z) and lambda_logits = z, [B, H, T]. When defined, A = A1 − λ_rows[t] · A2 row by row.
  Tensor lambda_rows, lambda_logits;
  // The position of q1's, q2's and lambda_rows' first row: 0, except in a generation step with cached keys
  // and values, where they hold only the new tokens' rows [q_row0, T) and the keys and values all T.
  int64_t q_row0 = 0;
  // The run's interventions in this layer (core/formats/intervention.h; null: none): its knockouts are
  // applied by attend_rows and the CPU's fused pass; its λ is already in lambda / lambda_rows
  // (apply_lambda_edit).
  const LayerEdit* edit = nullptr;
  bool diff() const { return q2.defined(); }
  bool knocks_out() const { return edit && !edit->knockouts.empty(); }
};

// A layer's λ edit into its inputs: DIFF V1 a layer-wide value replaces λ; per-head values become λ rows
// [B, H, rows] (every row of a head the same, as DIFF V2's rows); DIFF V2 the edited heads' rows become the
// value (lambda_logits stay the projection's own z).
inline void apply_lambda_edit(AttentionInputs& in, const LayerEdit& e) {
  if (!in.diff() || (!e.lambda && e.head_lambda.empty())) return;
  const int64_t B = in.q1.size(0), H = in.q1.size(1), rows = in.q1.size(2);
  const auto f = at::TensorOptions().dtype(at::kFloat).device(in.q1.device());
  if (!in.lambda_rows.defined()) {
    const double own = e.lambda ? *e.lambda : in.lambda.item<double>();
    in.lambda = at::scalar_tensor(own, f);
    if (e.head_lambda.empty()) return;
    std::vector<float> per_head(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h)
      per_head[static_cast<size_t>(h)] = static_cast<float>(e.lambda_of(h, own));
    in.lambda_rows = at::tensor(per_head, f).view({1, H, 1}).expand({B, H, rows}).contiguous();
    return;
  }
  in.lambda_rows = in.lambda_rows.clone();
  for (int64_t h = 0; h < H; ++h)
    if (e.lambda_changed(h)) in.lambda_rows.select(1, h).fill_(e.lambda_of(h, 0.0));
}

// The keys a knockout removes from query rows [row0, row0 + rows) against keys [0, row0 + rows), per head:
// [H, rows, keys] bool (true: removed before the softmax), on `device`.
inline Tensor knocked_keys(const LayerEdit& e, int64_t H, int64_t row0, int64_t rows,
                           const at::Device& device) {
  const int64_t keys = row0 + rows;
  const auto b = at::TensorOptions().dtype(at::kBool);
  Tensor removed = at::zeros({H, rows, keys}, b);
  for (const KeyKnockout& k : e.knockouts) {
    Tensor in_ranges = at::zeros({keys}, b);
    for (const TokenRange& r : k.ranges) {
      const int64_t a = std::min(r.first, keys), z = std::min(r.second, keys);
      if (a < z) in_ranges.narrow(0, a, z - a).fill_(true);
    }
    const Tensor key_mask = k.keep ? in_ranges.logical_not() : in_ranges;  // [keys]
    Tensor row_mask = at::zeros({rows}, b);
    const int64_t a = std::clamp(k.rows.first - row0, int64_t{0}, rows),
                  z = std::clamp(k.rows.second == kToEnd ? rows : k.rows.second - row0, int64_t{0}, rows);
    if (a < z) row_mask.narrow(0, a, z - a).fill_(true);
    Tensor head_mask = at::zeros({H}, b);
    if (k.head < 0)
      head_mask.fill_(true);
    else if (k.head < H)
      head_mask[k.head] = true;
    removed = removed.logical_or(head_mask.view({H, 1, 1})
                                     .logical_and(row_mask.view({1, rows, 1}))
                                     .logical_and(key_mask.view({1, 1, keys})));
  }
  return removed.to(device);
}

// One block of query rows [row0, row0 + rows) against the keys [0, row0 + rows) they may see.
struct AttentionBlock {
  int64_t row0 = 0, rows = 0;
  Tensor l1, l2;     // [B, H, rows, keys] scaled (and quantized) logits, hidden keys -inf (l2: DIFF)
  Tensor a1, a2, a;  // [B, H, rows, keys] DIFF: component softmaxes and A1 − λA2; baseline: only a
  Tensor o;          // [B, H, rows, dv] = a · v
};

// Keys the query rows [row0, row0 + rows) may not see, [rows, row0 + rows] bool: the future (key j > query
// i) and, with a sliding window of W (Mistral), keys at least W positions back (j <= i - W).
inline Tensor hidden_keys(int64_t row0, int64_t rows, const ModelConfig& c, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  const Tensor r = at::arange(row0, row0 + rows, opts).unsqueeze(1),
               k = at::arange(row0 + rows, opts).unsqueeze(0);
  Tensor hidden = k.gt(r);
  if (c.sliding_window > 0) hidden = hidden.logical_or(k.le(r - c.sliding_window));
  return hidden;
}

// The queries' keys and values repeated over GQA groups, so head h reads kv group h / (H / Hkv).
inline AttentionInputs expand_groups(const AttentionInputs& in) {
  AttentionInputs g = in;
  const int64_t groups = in.q1.size(1) / in.k1.size(1);
  if (groups > 1) {
    g.k1 = in.k1.repeat_interleave(groups, 1);
    if (in.k2.defined()) g.k2 = in.k2.is_same(in.k1) ? g.k1 : in.k2.repeat_interleave(groups, 1);
    g.v = in.v.repeat_interleave(groups, 1);
  }
  return g;
}

// Scaled logits of query rows [row0, row0 + rows) against keys [0, row0 + rows), hidden keys -inf. q's
// first row is position q_row0 (AttentionInputs::q_row0).
inline Tensor block_logits(const Tensor& q, const Tensor& k, int64_t row0, int64_t rows, const Tensor& hidden,
                           int64_t q_row0 = 0) {
  return product(q.narrow(2, row0 - q_row0, rows), k.narrow(2, 0, row0 + rows).transpose(-2, -1))
      .masked_fill(hidden, -std::numeric_limits<float>::infinity());
}

// Absmax quantization of attention logits to `bits` (the paper's Fig. 8 setting), per head and dynamic:
// s = max |l| over the head's visible entries / (2^(bits−1) − 1), l ↦ round(l / s) · s; hidden entries stay
// -inf. The steps [B, H, 1, 1] of both components come from a pass over the map in blocks of `block_rows`
// (undefined when bits ≤ 0 or ≥ 32: exact logits).
inline std::pair<Tensor, Tensor> logit_steps(const AttentionInputs& g, const ModelConfig& c, int bits,
                                             int64_t block_rows) {
  if (bits <= 0 || bits >= 32) return {};
  if (g.q_row0 != 0) throw Error("quantized attention logits need every query row (q_row0 is not 0)");
  const double levels = std::pow(2.0, bits - 1) - 1;
  const int64_t T = g.q1.size(2);
  auto step = [&](const Tensor& q, const Tensor& k) {
    Tensor m;
    for (int64_t r0 = 0; r0 < T; r0 += block_rows) {
      const int64_t n = std::min(block_rows, T - r0);
      const Tensor hidden = hidden_keys(r0, n, c, q.device());
      const Tensor a = block_logits(q, k, r0, n, hidden).masked_fill(hidden, 0).abs().amax({-2, -1}, true);
      m = m.defined() ? at::maximum(m, a) : a;
    }
    return m.clamp_min(1e-30) / levels;
  };
  return {step(g.q1, g.k1), g.diff() ? step(g.q2, g.k2) : Tensor()};
}

// A block's A from its A1 and A2 (DIFF: A1 − λA2, row by row for DIFF V2; a baseline's A is its softmax)
// and its output A·V: the end of attend_rows(), and of a block whose maps were patched
// (core/model/patch.cpp).
inline void finish_block(AttentionBlock& b, const AttentionInputs& g) {
  if (g.diff()) {
    if (g.lambda_rows.defined())  // V2: row t of head h subtracts σ(z_h,t) · A2; rows sum to 1 − σ(z)
      b.a = b.a1 - g.lambda_rows.narrow(2, b.row0 - g.q_row0, b.rows).unsqueeze(-1) * b.a2;
    else
      b.a = b.a1 - g.lambda * b.a2;  // rows sum to 1 − λ
  }
  b.o = product(b.a.to(g.v.scalar_type()), g.v.narrow(2, 0, b.row0 + b.rows));
}

// The attention of one block of query rows: the one implementation of the attention math (logits, their
// quantization, the causal and sliding-window softmax, A1 − λA2, A·V) that forward, capture, generation
// and training share. `g`: inputs with keys and values expanded over groups; `steps`: logit_steps().
inline AttentionBlock attend_rows(const AttentionInputs& g, const ModelConfig& c, int64_t row0, int64_t rows,
                                  const std::pair<Tensor, Tensor>& steps) {
  AttentionBlock b;
  b.row0 = row0;
  b.rows = rows;
  const Tensor hidden = hidden_keys(row0, rows, c, g.q1.device());
  auto quantized = [](const Tensor& l, const Tensor& step) {
    return step.defined() ? at::round(l / step) * step : l;  // -inf stays -inf
  };
  b.l1 = quantized(block_logits(g.q1, g.k1, row0, rows, hidden, g.q_row0), steps.first);
  // A knockout removes keys before the softmax (the logits kept are the model's own); a row left with no key
  // attends to nothing.
  Tensor knocked;
  if (g.knocks_out()) knocked = knocked_keys(*g.edit, g.q1.size(1), row0, rows, g.q1.device()).unsqueeze(0);
  auto softmax = [&](const Tensor& l) {
    if (!knocked.defined()) return at::softmax(l, -1, at::kFloat);
    const Tensor a =
        at::softmax(l.masked_fill(knocked, -std::numeric_limits<float>::infinity()), -1, at::kFloat);
    return a.masked_fill(a.isnan(), 0);
  };
  if (g.diff()) {
    b.l2 = quantized(block_logits(g.q2, g.k2, row0, rows, hidden, g.q_row0), steps.second);
    b.a1 = softmax(b.l1);
    b.a2 = softmax(b.l2);
  } else {
    b.a = softmax(b.l1);
  }
  finish_block(b, g);
  return b;
}

// Whether this LibTorch has the fused scaled-dot-product attention (2.1 and later).
#ifdef DIFFLENS_FUSED_ATTENTION
constexpr bool kFusedAttention = true;
#else
constexpr bool kFusedAttention = false;
#endif

// Whether fused_attention() can give a layer's heads' outputs: this LibTorch has the fused operation, the
// attention is causal over every query row, and nothing the fused kernels lack is asked for (a sliding
// window, quantized logits, a knockout).
inline bool can_fuse_attention(const AttentionInputs& in, const ModelConfig& c, int logit_bits) {
#ifdef DIFFLENS_FUSED_ATTENTION
  return in.q_row0 == 0 && c.sliding_window <= 0 && (logit_bits <= 0 || logit_bits >= 32) && !in.knocks_out();
#else
  (void)in, (void)c, (void)logit_bits;
  return false;
#endif
}

// The heads' outputs o [B, H, T, dv] without their maps, by LibTorch's fused scaled-dot-product attention
// (on a GPU its flash or memory-efficient kernels: no T x T map, in training too): softmax(q1 k1ᵀ)·V, and for
// DIFF minus λ·softmax(q2 k2ᵀ)·V, which is attend_rows()'s (A1 − λA2)·V. `heads_per_call` > 0 runs that many
// heads at a time (so that a fallback to LibTorch's plain path holds that many T x T maps). Only where
// can_fuse_attention().
inline Tensor fused_attention(const AttentionInputs& in, int64_t heads_per_call = 0) {
#ifdef DIFFLENS_FUSED_ATTENTION
  const AttentionInputs g = expand_groups(in);
  // The products in the matmul precision (bf16 in training on a GPU: LibTorch's flash kernels take it),
  // the outputs back in the values' type, as attend_rows' product() gives them.
  const auto out = g.v.scalar_type();
  const auto type = g_matmul_dtype != at::kFloat ? g_matmul_dtype : out;
  const Tensor v = g.v.to(type);
  auto sdpa = [&](const Tensor& q, const Tensor& k) {
    const int64_t H = q.size(1), step = heads_per_call > 0 ? heads_per_call : H;
    if (step >= H)
      return at::scaled_dot_product_attention(q.to(type), k.to(type), v, {}, 0.0, true, 1.0).to(out);
    std::vector<Tensor> parts;
    for (int64_t x = 0; x < H; x += step) {
      const int64_t n = std::min(step, H - x);
      parts.push_back(at::scaled_dot_product_attention(q.narrow(1, x, n).to(type), k.narrow(1, x, n).to(type),
                                                       v.narrow(1, x, n), {}, 0.0, true, 1.0)
                          .to(out));
    }
    return at::cat(parts, 1);
  };
  const Tensor o1 = sdpa(g.q1, g.k1);
  if (!in.diff()) return o1;
  const Tensor o2 = sdpa(g.q2, g.k2);
  if (in.lambda_rows.defined()) return o1 - in.lambda_rows.unsqueeze(-1).to(out) * o2;
  return o1 - in.lambda.to(out) * o2;
#else
  (void)heads_per_call;
  throw Error("fused attention needs LibTorch 2.1 or later (this one is " + std::string(TORCH_VERSION) + ")");
  return in.q1;
#endif
}

// Component `which` of every head of a projection p [B, T, s.width()] laid out as `s` says
// (core/cpu/qkv_layout.h) -> [B, s.heads, T, d], a view.
inline Tensor head_component(const Tensor& p, const HeadColumns& s, int64_t which) {
  const int64_t B = p.size(0), T = p.size(1);
  if (s.components == 1) return p.view({B, T, s.heads, s.d}).transpose(1, 2);
  if (s.component_major) return p.view({B, T, s.components, s.heads, s.d}).select(2, which).transpose(1, 2);
  return p.view({B, T, s.heads, s.components, s.d}).select(3, which).transpose(1, 2);
}

// Every head's components side by side -> [B, s.heads, T, components · d] (a view unless component-major).
inline Tensor head_values(const Tensor& p, const HeadColumns& s) {
  const int64_t B = p.size(0), T = p.size(1);
  if (!s.component_major) return p.view({B, T, s.heads, s.components * s.d}).transpose(1, 2);
  std::vector<Tensor> parts;
  for (int64_t which = 0; which < s.components; ++which) parts.push_back(head_component(p, s, which));
  return at::cat(parts, -1);
}

// The attention's inputs from the q, k and v projections of the normed input, as `l` lays them out:
// queries rotated and scaled by d^-1/2 (the component width), keys rotated, values. λ is the caller's.
inline AttentionInputs split_inputs(const QkvLayout& l, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Rope& rope) {
  AttentionInputs in;
  const double scale = 1.0 / std::sqrt(static_cast<double>(l.q.d));
  in.q1 = rope.apply(head_component(q, l.q, 0)) * scale;  // [B, H, T, d]
  if (l.q.components == 2) in.q2 = rope.apply(head_component(q, l.q, 1)) * scale;
  in.k1 = rope.apply(head_component(k, l.k, 0));  // [B, Hkv, T, d]
  if (l.two_keys())
    in.k2 = rope.apply(head_component(k, l.k, 1));
  else if (in.q2.defined())
    in.k2 = in.k1;             // DIFF V2: both components read one set of keys
  in.v = head_values(v, l.v);  // [B, Hkv, T, dv]
  return in;
}

// Baseline multi-head attention: 2H heads of width d, GQA by head groups.
struct BaselineAttentionImpl : torch::nn::Module {
  explicit BaselineAttentionImpl(const ModelConfig& c) : c(c), layout(qkv_layout(c)) {
    const int64_t E = c.hidden_size, d = c.head_dim;
    q_proj = register_module("q_proj", Projection(E, layout.q.width()));
    k_proj = register_module("k_proj", Projection(E, layout.k.width()));
    v_proj = register_module("v_proj", Projection(E, layout.v.width()));
    o_proj = register_module("o_proj", Projection(c.num_attention_heads * d, E));
  }

  // x [B, T, E] (normed) -> the attention's inputs.
  AttentionInputs inputs(const Tensor& x, const Rope& rope) {
    return split_inputs(layout, q_proj(x), k_proj(x), v_proj(x), rope);
  }
  // o [B, H, T, d] (the heads' outputs) -> [B, T, E]
  Tensor output(const Tensor& o) { return project(o); }
  Tensor head_outputs(const Tensor& o) { return o; }  // what o_proj reads of each head
  Tensor project(const Tensor& n) {
    return o_proj(n.transpose(1, 2).reshape({n.size(0), n.size(2), c.num_attention_heads * c.head_dim}));
  }

  ModelConfig c;
  QkvLayout layout;
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(BaselineAttention);

// Differential attention: H heads, each the difference of two softmax maps over d-wide components,
// values 2d wide, λ re-parameterised per layer, per-head RMSNorm × (1 - λ_init).
struct DiffAttentionImpl : torch::nn::Module {
  DiffAttentionImpl(const ModelConfig& c, int64_t layer)
      : c(c), layout(qkv_layout(c)), lambda_init(difflens::lambda_init(layer)) {
    const int64_t E = c.hidden_size, d = c.head_dim;
    q_proj = register_module("q_proj", Projection(E, layout.q.width()));
    k_proj = register_module("k_proj", Projection(E, layout.k.width()));
    v_proj = register_module("v_proj", Projection(E, layout.v.width()));
    o_proj = register_module("o_proj", Projection(c.num_attention_heads * d, E));
    lambda_q1 = register_parameter("lambda_q1", at::zeros({d}));
    lambda_k1 = register_parameter("lambda_k1", at::zeros({d}));
    lambda_q2 = register_parameter("lambda_q2", at::zeros({d}));
    lambda_k2 = register_parameter("lambda_k2", at::zeros({d}));
    if (c.subln_weight) subln = register_module("subln", RmsNorm(2 * d, c.subln_eps));
  }

  // x [B, T, E] (normed) -> the attention's inputs (values [B, Hkv, T, 2d]), λ included.
  AttentionInputs inputs(const Tensor& x, const Rope& rope) {
    AttentionInputs in = split_inputs(layout, q_proj(x), k_proj(x), v_proj(x), rope);
    set_lambda(in);
    return in;
  }
  // λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init and its parts, into `in`.
  void set_lambda(AttentionInputs& in) const {
    in.lambda_init = lambda_init;
    in.lambda_exp1 = at::exp((lambda_q1.to(at::kFloat) * lambda_k1.to(at::kFloat)).sum());
    in.lambda_exp2 = at::exp((lambda_q2.to(at::kFloat) * lambda_k2.to(at::kFloat)).sum());
    in.lambda = in.lambda_exp1 - in.lambda_exp2 + lambda_init;
  }
  // o [B, H, T, 2d] = (A1 - λA2)·V per head -> RMSNorm per head × (1 − λ_init) -> [B, T, E]
  Tensor output(const Tensor& o) { return project(head_outputs(o)); }
  // What o_proj reads of each head: its normed and scaled output [B, H, T, 2d].
  Tensor head_outputs(const Tensor& o) {
    return rms_norm(o, subln ? subln->weight : Tensor(), c.subln_eps) * (1.0 - lambda_init);
  }
  Tensor project(const Tensor& n) {
    return o_proj(
        n.transpose(1, 2).reshape({n.size(0), n.size(2), (c.num_attention_heads / 2) * 2 * c.head_dim}));
  }

  ModelConfig c;
  QkvLayout layout;
  double lambda_init;
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Tensor lambda_q1, lambda_k1, lambda_q2, lambda_k2;
  RmsNorm subln{nullptr};
};
TORCH_MODULE(DiffAttention);

// Differential attention V2: 2H query sub-heads (sub-head 2h is component 1 of head h, 2h + 1 component
// 2), Hkv key/value heads of width d shared by both components of a head (sub-head j reads key/value head
// j / (2H / Hkv)), λ per head and token σ(x_t · w_λ,h) from lambda_proj [H, E], output heads d wide, no
// per-head norm and no scale.
struct DiffV2AttentionImpl : torch::nn::Module {
  explicit DiffV2AttentionImpl(const ModelConfig& c) : c(c), layout(qkv_layout(c)) {
    const int64_t E = c.hidden_size, d = c.head_dim, H = c.map_heads();
    q_proj = register_module("q_proj", Projection(E, layout.q.width()));
    k_proj = register_module("k_proj", Projection(E, layout.k.width()));
    v_proj = register_module("v_proj", Projection(E, layout.v.width()));
    o_proj = register_module("o_proj", Projection(H * d, E));
    lambda_proj = register_module("lambda_proj", Projection(E, layout.lambda_logits));
  }

  // x [B, T, E] (normed) -> the attention's inputs, λ per token included.
  AttentionInputs inputs(const Tensor& x, const Rope& rope) {
    AttentionInputs in = split_inputs(layout, q_proj(x), k_proj(x), v_proj(x), rope);
    in.lambda_logits = lambda_proj(x).to(at::kFloat).transpose(1, 2).contiguous();  // [B, H, T]
    in.lambda_rows = at::sigmoid(in.lambda_logits);
    return in;
  }
  // o [B, H, T, d] = (A1 − σ(λ) A2)·V per head -> [B, T, E]
  Tensor output(const Tensor& o) { return project(o); }
  Tensor head_outputs(const Tensor& o) { return o; }
  Tensor project(const Tensor& n) {
    return o_proj(n.transpose(1, 2).reshape({n.size(0), n.size(2), c.map_heads() * c.head_dim}));
  }

  ModelConfig c;
  QkvLayout layout;
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr}, lambda_proj{nullptr};
};
TORCH_MODULE(DiffV2Attention);

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
  DecoderLayerImpl(const ModelConfig& c, int64_t layer) : c(c) {
    if (c.is_diff_v2())
      diff_v2_attn = register_module("self_attn", DiffV2Attention(c));
    else if (c.is_diff())
      diff_attn = register_module("self_attn", DiffAttention(c, layer));
    else
      base_attn = register_module("self_attn", BaselineAttention(c));
    mlp = register_module("mlp", SwiGlu(c.hidden_size, c.intermediate_size));
    input_layernorm = register_module("input_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.rms_norm_eps));
  }
  // The architecture's inputs and output around the shared attention math, with the run's interventions.
  AttentionInputs inputs(const Tensor& x, const Rope& rope) {
    AttentionInputs in = diff_v2_attn ? diff_v2_attn->inputs(x, rope)
                         : diff_attn  ? diff_attn->inputs(x, rope)
                                      : base_attn->inputs(x, rope);
    apply_edit(in);
    return in;
  }
  // The edit's λ into inputs made elsewhere too (the CPU's packed layer pass), and its knockouts attached.
  void apply_edit(AttentionInputs& in) const {
    in.edit = edit;
    if (edit) apply_lambda_edit(in, *edit);
  }
  // What o_proj reads of each head [B, H, rows, dv] (DIFF: after the per-head norm and scale).
  Tensor head_outputs(const Tensor& o) {
    return diff_v2_attn ? diff_v2_attn->head_outputs(o)
           : diff_attn  ? diff_attn->head_outputs(o)
                        : base_attn->head_outputs(o);
  }
  // o [B, H, rows, dv], the heads' outputs of query rows [row0, row0 + rows) -> [B, rows, E], the run's
  // head ablations applied.
  Tensor output(const Tensor& o, int64_t row0 = 0) {
    if (!edit || edit->ablate.empty())
      return diff_v2_attn ? diff_v2_attn->output(o) : diff_attn ? diff_attn->output(o) : base_attn->output(o);
    return project(edited_head_outputs(o, row0));
  }
  // head_outputs with the run's head ablations applied: what o_proj reads.
  Tensor edited_head_outputs(const Tensor& o, int64_t row0 = 0) {
    if (!edit || edit->ablate.empty()) return head_outputs(o);
    Tensor n = head_outputs(o).clone();
    for (const auto& [h, mean] : edit->ablate) {
      if (mean)
        n.select(1, h).copy_(
            ablation_mean(h, n, row0).unsqueeze(1).expand({n.size(0), n.size(2), n.size(3)}));
      else
        n.select(1, h).zero_();
    }
    return n;
  }
  Tensor project(const Tensor& n) {
    return diff_v2_attn ? diff_v2_attn->project(n)
           : diff_attn  ? diff_attn->project(n)
                        : base_attn->project(n);
  }
  const Tensor& o_proj_weight() const {
    return diff_v2_attn ? diff_v2_attn->o_proj->weight
           : diff_attn  ? diff_attn->o_proj->weight
                        : base_attn->o_proj->weight;
  }
  // Head h's mean output over the prompt's positions [0, mean_positions) [B, dv], from `n` (rows from
  // `row0`, as head_outputs gives them) when it holds them, else as the pass that held them kept it (the
  // key/value cache's later steps).
  Tensor ablation_mean(int64_t h, const Tensor& n, int64_t row0) {
    const int64_t P = mean_positions > 0 ? mean_positions : n.size(2);
    if (row0 == 0 && n.size(2) >= P) {
      Tensor m = n.select(1, h).narrow(1, 0, P).to(at::kFloat).mean(1).to(n.scalar_type());
      head_means[h] = m;
      return m;
    }
    const auto it = head_means.find(h);
    if (it == head_means.end())
      throw Error("mean ablation of head " + std::to_string(h) +
                  ": its mean over the prompt is not known yet");
    return it->second;
  }

  // The attention's heads' outputs o [B, H, T, dv] from its inputs, computed `block_rows` query rows at a
  // time (memory O(T · block) instead of O(T²) when block_rows < T); `visit(block)` sees every block in
  // order. One block of every row is the plain forward (and what training differentiates).
  template <typename Visit>
  Tensor attend_blocks(const AttentionInputs& in, int64_t block_rows, Visit&& visit) {
    const AttentionInputs g = expand_groups(in);
    const int64_t T = in.q1.size(2);
    block_rows = std::clamp<int64_t>(block_rows, 1, T);
    const std::pair<Tensor, Tensor> steps = logit_steps(g, c, logit_bits, block_rows);
    if (block_rows == T) {
      AttentionBlock b = attend_rows(g, c, 0, T, steps);
      const Tensor o = b.o;
      visit(b);
      return o;
    }
    Tensor o = at::empty({in.q1.size(0), g.q1.size(1), T, g.v.size(-1)}, g.v.options());
    for (int64_t r0 = 0; r0 < T; r0 += block_rows) {
      AttentionBlock b = attend_rows(g, c, r0, std::min(block_rows, T - r0), steps);
      o.narrow(2, r0, b.rows).copy_(b.o);
      visit(b);
    }
    return o;
  }

  // The attention of x [B, T, E] (normed) -> [B, T, E], in blocks as attend_blocks().
  template <typename Visit>
  Tensor attention(const Tensor& x, const Rope& rope, int64_t block_rows, AttentionInputs& in,
                   Visit&& visit) {
    in = inputs(x, rope);
    return output(attend_blocks(in, block_rows, visit));
  }

  // The layer over h [B, T, E] with the heads' outputs computed by `attend(in)` -> o [B, H, T, dv]: the
  // tensor blocks below, or the CPU's fused pass (core/cpu/attention_cpu.h) in a capture. `in` receives the
  // inputs.
  // `row0`: the position of h's first row (a generation step's new tokens after the cached ones).
  template <typename Attend>
  Tensor forward_with(const Tensor& h, const Rope& rope, AttentionInputs& in, Attend&& attend,
                      int64_t row0 = 0) {
    in = inputs(input_layernorm(h), rope);
    const Tensor y = h + output(attend(in), row0);
    return y + mlp(post_attention_layernorm(y));
  }

  // The layer over h [B, T, E], attention in blocks of `block_rows` query rows (see attend_blocks()).
  template <typename Visit>
  Tensor forward_blocked(const Tensor& h, const Rope& rope, int64_t block_rows, AttentionInputs& in,
                         Visit&& visit) {
    return forward_with(h, rope, in,
                        [&](const AttentionInputs& i) { return attend_blocks(i, block_rows, visit); });
  }

  // h [B, T, E] -> [B, T, E] with no map kept (training, evaluation): the fused attention where it can run,
  // else the whole map at once.
  Tensor forward_unkept(const Tensor& h, const Rope& rope) {
    AttentionInputs in;
    return forward_with(h, rope, in, [&](const AttentionInputs& i) {
      if (can_fuse_attention(i, c, logit_bits)) return fused_attention(i);
      return attend_blocks(i, i.q1.size(2), [](AttentionBlock&) {});
    });
  }

  // h [B, T, E] -> [B, T, E], the whole map at once; its attention stays in `block`, the inputs in `in`.
  Tensor forward(const Tensor& h, const Rope& rope, AttentionInputs& in, AttentionBlock& block) {
    return forward_blocked(h, rope, h.size(1), in, [&](AttentionBlock& b) { block = std::move(b); });
  }

  ModelConfig c;
  int logit_bits = 0;  // quantize the attention logits before the softmax (0: exact)
  // The interventions of the run in progress (null: none), set and cleared by the Model for each run
  // (InterventionScope, core/model/model_impl.h); the mean ablations' prompt length and the means found so
  // far.
  const LayerEdit* edit = nullptr;
  int64_t mean_positions = 0;
  std::map<int64_t, Tensor> head_means;
  DiffAttention diff_attn{nullptr};
  DiffV2Attention diff_v2_attn{nullptr};
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
    Tensor h = model->embed_tokens(ids);  // [B, T, E]
    for (auto& layer : model->layer_ptrs) h = layer->forward_unkept(h, rope);
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
