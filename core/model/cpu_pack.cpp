// A CPU model's layers handed to the plain-C++ passes (cpu_pack.h): weights packed per layer for
// core/cpu/layer_cpu.h, attention inputs handed to core/cpu/attention_cpu.h's fused pass, both on LibTorch's
// threads.
#include "core/model/cpu_pack.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <atomic>
#include <cmath>
#include <cstdlib>

#include "core/cpu/layer_cpu.h"
#include "core/formats/error.h"
#include "core/model/capture_plan.h"

namespace difflens {

using at::Tensor;

namespace {

WeightDtype weight_dtype(const Tensor& w) {
  switch (w.scalar_type()) {
    case at::kFloat:
      return WeightDtype::F32;
    case at::kHalf:
      return WeightDtype::F16;
    case at::kBFloat16:
      return WeightDtype::BF16;
    default:
      throw Error(std::string("a weight of dtype ") + c10::toString(w.scalar_type()) +
                  " (expected F32, F16 or BF16)");
  }
}

}  // namespace

FusedInputs::FusedInputs(const nn::AttentionInputs& in, const ModelConfig& c, int bits) {
  q1 = in.q1[0].to(at::kCPU, at::kFloat).contiguous();
  k1 = in.k1[0].to(at::kCPU, at::kFloat).contiguous();
  v = in.v[0].to(at::kCPU, at::kFloat).contiguous();
  ci.T = k1.size(1);  // every position's keys; the queries may be the last rows only (a generation step)
  ci.q_row0 = ci.T - q1.size(1);
  ci.heads = q1.size(0);
  ci.kv_heads = k1.size(0);
  ci.d = q1.size(2);
  ci.dv = v.size(2);
  ci.q1 = q1.data_ptr<float>();
  ci.k1 = k1.data_ptr<float>();
  ci.v = v.data_ptr<float>();
  if (in.diff()) {
    q2 = in.q2[0].to(at::kCPU, at::kFloat).contiguous();
    ci.q2 = q2.data_ptr<float>();
    if (in.k2.is_same(in.k1)) {  // DIFF V2: one set of keys for both components
      ci.k2 = ci.k1;
    } else {
      k2 = in.k2[0].to(at::kCPU, at::kFloat).contiguous();
      ci.k2 = k2.data_ptr<float>();
    }
    if (in.lambda_rows.defined()) {
      lambda_rows = in.lambda_rows[0].to(at::kCPU, at::kFloat).contiguous();
      ci.lambda_rows = lambda_rows.data_ptr<float>();
    } else {
      ci.lambda = in.lambda.item<float>();
    }
  }
  ci.window = c.sliding_window;
  ci.bits = bits;
  if (in.knocks_out()) ci.knockouts = &in.edit->knockouts;
}

// A fixed split into one range per thread made every pass wait for its slower half: the same work measured
// 20-35 % idle on one of this VM's two cores.
const CpuParallelFor& cpu_parallel() {
  static const CpuParallelFor parallel = [](int64_t n, const auto& body) {
    const int threads = at::get_num_threads();
    if (n <= 0) return;
    if (threads <= 1 || n == 1 || at::in_parallel_region()) return body(0, n, at::get_thread_num());
    const int64_t chunk = std::max<int64_t>(1, n / (8 * static_cast<int64_t>(threads)));
    std::atomic<int64_t> next{0};
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
      const int worker = at::get_thread_num();
      for (int64_t b = next.fetch_add(chunk); b < n; b = next.fetch_add(chunk))
        body(b, std::min(n, b + chunk), worker);
    });
  };
  return parallel;
}

void run_fused(const CpuAttentionInputs& ci, CpuAttentionOutputs& co) {
  attention_cpu(ci, co, at::get_num_threads(), cpu_parallel());
}

// A layer as the plain-C++ passes read it (core/cpu/layer_cpu.h): its weights packed, the norm weights as
// float32, and what the packing saw of each weight (its storage and version), so that a weight changed
// in place or moved is packed again; and the matrix code and instruction set it was packed for (which
// matrices keep their rows for cblas_sgemm, matmul_keeps_rows), so that a change packs it again.
struct CpuLayerPack {
  CpuLayer layer;
  Tensor input_norm, post_norm, head_norm;
  std::vector<std::pair<const void*, int64_t>> seen;
  std::pair<MatmulCode, CpuIsa> packed_for{matmul_code(), cpu_isa()};

  static std::vector<std::pair<const void*, int64_t>> look(nn::DecoderLayerImpl& l) {
    std::vector<std::pair<const void*, int64_t>> v;
    for (const Tensor& t : l.parameters()) v.emplace_back(t.data_ptr(), static_cast<int64_t>(t._version()));
    return v;
  }

  CpuLayerPack(nn::DecoderLayerImpl& l, const ModelConfig& c) : seen(look(l)) {
    CpuLayer& L = layer;
    L.E = c.hidden_size;
    L.F = c.intermediate_size;
    L.eps = c.rms_norm_eps;
    L.columns = qkv_layout(c);  // the columns the packing below stacks: q, k, v (, λ)
    auto f32 = [](const Tensor& t) { return t.to(at::kCPU, at::kFloat).contiguous(); };
    input_norm = f32(l.input_layernorm->weight);
    post_norm = f32(l.post_attention_layernorm->weight);
    L.input_norm = input_norm.data_ptr<float>();
    L.post_norm = post_norm.data_ptr<float>();
    auto part = [](const Tensor& w) {
      if (!w.is_contiguous() || w.device().is_cuda()) throw Error("a weight not contiguous on the host");
      return MatrixPart{w.data_ptr(), weight_dtype(w), w.size(0)};
    };
    auto pack = [&](std::initializer_list<Tensor> ws) {
      std::vector<MatrixPart> parts;
      for (const Tensor& w : ws) parts.push_back(part(w));
      return pack_matrix(parts, ws.begin()->size(1));
    };
    if (l.diff_v2_attn) {
      auto& a = *l.diff_v2_attn;
      L.qkv = pack({a.q_proj->weight, a.k_proj->weight, a.v_proj->weight, a.lambda_proj->weight});
      L.o = pack({a.o_proj->weight});
    } else if (l.diff_attn) {
      auto& a = *l.diff_attn;
      L.qkv = pack({a.q_proj->weight, a.k_proj->weight, a.v_proj->weight});
      L.o = pack({a.o_proj->weight});
      L.head_norm = true;
      if (a.subln) {
        head_norm = f32(a.subln->weight);
        L.head_norm_weight = head_norm.data_ptr<float>();
      }
      L.head_norm_eps = c.subln_eps;
      L.head_scale = 1.0 - a.lambda_init;
    } else {
      auto& a = *l.base_attn;
      L.qkv = pack({a.q_proj->weight, a.k_proj->weight, a.v_proj->weight});
      L.o = pack({a.o_proj->weight});
    }
    L.gate_up = pack({l.mlp->gate_proj->weight, l.mlp->up_proj->weight});
    L.down = pack({l.mlp->down_proj->weight});
    L.rope_interleaved = c.rope_style == RopeStyle::Interleaved;
    L.q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  }
};

namespace {

// The packed copies of a CPU model's layers may take up to this much memory (DIFFLENS_PACKED_WEIGHTS_MB,
// default 1024): up to it, a capture's layers run in plain C++ (layer_cpu.h); beyond it a layer runs as
// LibTorch's modules (nn.h), its attention still the fused pass.
double packed_budget_bytes() {
  const char* env = std::getenv("DIFFLENS_PACKED_WEIGHTS_MB");
  double mb = 1024;
  if (env && *env) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end && *end == '\0' && v >= 0) mb = v;
  }
  return mb * 1024 * 1024;
}

// Layer `i` of a CPU model packed (made on first use, kept while the weights are unchanged), or null when
// the model's packed layers would exceed the budget.
std::shared_ptr<const CpuLayerPack> cpu_layer(CpuLayerCache& cache, const ModelConfig& c,
                                              nn::DecoderLayerImpl& l, int64_t i) {
  const std::lock_guard<std::mutex> lock(cache.mutex);
  // The F32 copies of all layers, estimated from the shapes before anything is packed.
  const int64_t d = c.head_dim, E = c.hidden_size;
  const double per_layer =
      4.0 *
      static_cast<double>((c.num_attention_heads + 2 * c.num_key_value_heads) * d * E + c.map_heads() * E +
                          c.map_heads() * (c.is_diff() ? 2 * d : d) * E + 3 * E * c.intermediate_size);
  // Beside the panels, W's rows of the products cblas_sgemm may compute.
  const QkvLayout cols = qkv_layout(c);
  const int64_t F = c.intermediate_size, heads_width = cols.q.heads * cols.dv();
  double rows = 0;
  for (const auto& [N, K] : {std::pair{cols.width(), E}, {E, heads_width}, {2 * F, E}, {E, F}})
    if (matmul_keeps_rows(N, K)) rows += 4.0 * static_cast<double>(N * K);
  if ((per_layer + rows) * static_cast<double>(c.num_hidden_layers) > packed_budget_bytes()) return nullptr;
  if (cache.layers.size() != static_cast<size_t>(c.num_hidden_layers))
    cache.layers.assign(static_cast<size_t>(c.num_hidden_layers), nullptr);
  auto& slot = cache.layers[static_cast<size_t>(i)];
  const std::pair<MatmulCode, CpuIsa> packed_for{matmul_code(), cpu_isa()};
  if (!slot || slot->seen != CpuLayerPack::look(l) || slot->packed_for != packed_for)
    slot = std::make_shared<const CpuLayerPack>(l, c);
  return slot;
}

}  // namespace

Tensor forward_cpu(CpuLayerCache& cache, const ModelConfig& c, nn::DecoderLayerImpl& layer, int64_t i,
                   const Tensor& h, const nn::Rope& rope, nn::AttentionInputs& in, const Attend& attend,
                   int64_t row0) {
  const std::shared_ptr<const CpuLayerPack> pack = cpu_layer(cache, c, layer, i);
  if (!pack) return layer.forward_with(h, rope, in, attend, row0);
  const CpuLayer& L = pack->layer;
  const QkvLayout& cols = L.columns;
  const int64_t T = h.size(1), heads = cols.q.heads, kv_heads = cols.k.heads, d = cols.q.d;
  Tensor out = h.to(at::kFloat).contiguous().clone();  // [1, T, E]: the inputs read it, the output adds to it
  const auto f = at::TensorOptions().dtype(at::kFloat);
  in = nn::AttentionInputs();
  CpuLayerInputs io;
  in.q1 = at::empty({1, heads, T, d}, f);
  in.k1 = at::empty({1, kv_heads, T, d}, f);
  in.v = at::empty({1, kv_heads, T, cols.dv()}, f);
  io.q1 = in.q1.data_ptr<float>();
  io.k1 = in.k1.data_ptr<float>();
  io.v = in.v.data_ptr<float>();
  if (cols.q.components == 2) {
    in.q2 = at::empty({1, heads, T, d}, f);
    io.q2 = in.q2.data_ptr<float>();
    if (!cols.two_keys()) {
      in.k2 = in.k1;  // DIFF V2: both components read one set of keys
    } else {
      in.k2 = at::empty({1, kv_heads, T, d}, f);
      io.k2 = in.k2.data_ptr<float>();
    }
  }
  if (cols.lambda_logits > 0) {
    in.lambda_logits = at::empty({1, heads, T}, f);
    in.lambda_rows = at::empty({1, heads, T}, f);
    io.lambda_logits = in.lambda_logits.data_ptr<float>();
    io.lambda_rows = in.lambda_rows.data_ptr<float>();
  }
  const Tensor cos = rope.cos.to(at::kFloat).contiguous(), sin = rope.sin.to(at::kFloat).contiguous();
  const int workers = at::get_num_threads();
  layer_inputs_cpu(L, out.data_ptr<float>(), T, cos.data_ptr<float>(), sin.data_ptr<float>(), io, workers,
                   cpu_parallel());
  if (layer.diff_attn) layer.diff_attn->set_lambda(in);
  layer.apply_edit(in);
  const Tensor o = attend(in).to(at::kFloat).contiguous();
  // Head ablations: the ablated heads read zero, or their mean over the prompt, after the per-head norm.
  std::vector<const float*> replace;
  Tensor values;
  if (layer.edit && !layer.edit->ablate.empty()) {
    values = at::zeros({o.size(1), o.size(3)}, f);
    replace.assign(static_cast<size_t>(o.size(1)), nullptr);
    Tensor normed;
    for (const auto& [hd, mean] : layer.edit->ablate) {
      if (mean) {
        if (!normed.defined()) normed = layer.head_outputs(o);
        values[hd].copy_(layer.ablation_mean(hd, normed, row0)[0]);
      }
      replace[static_cast<size_t>(hd)] = values[hd].data_ptr<float>();
    }
  }
  layer_output_cpu(L, o.data_ptr<float>(), out.data_ptr<float>(), T, workers, cpu_parallel(),
                   replace.empty() ? nullptr : &replace);
  return out;
}

Tensor attend_fused(const nn::AttentionInputs& in, const ModelConfig& c, int bits,
                    const std::vector<int64_t>* map_heads, const CaptureOptions& options, LayerTrace& lt) {
  const FusedInputs f(in, c, bits);
  const CpuAttentionInputs& ci = f.ci;
  const int64_t T = ci.T, H = ci.heads;
  Tensor o = at::empty({1, H, T, ci.dv}, at::TensorOptions().dtype(at::kFloat));
  CpuAttentionOutputs co;
  co.row0 = 0;
  co.row1 = co.ld = T;
  co.o = o.data_ptr<float>();
  auto allocate = [&](FloatArray& a, int64_t heads) {
    a.shape = {heads, T, T};
    a.data.resize(static_cast<size_t>(heads * T * T));
    return a.data.data();
  };
  if (map_heads) {
    lt.heads.assign(map_heads->begin(), map_heads->end());
    co.map_heads = *map_heads;
    const int64_t n = static_cast<int64_t>(map_heads->size());
    co.a = allocate(lt.a, n);
    if (in.diff()) {
      co.a1 = allocate(lt.a1, n);
      co.a2 = allocate(lt.a2, n);
    }
  }
  if (options.keep_logits && layer_selected(options, lt.index)) {
    co.logits1 = allocate(lt.logits1, H);
    if (in.diff()) co.logits2 = allocate(lt.logits2, H);
  }
  if (options.logit_stats) {
    co.logit_stats = &lt.logit_stats;
    co.stats_from = options.stats_from;
  }
  run_fused(ci, co);
  return o;
}

}  // namespace difflens
