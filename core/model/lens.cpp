// Model::explain_answer: the logit lens and direct logit attribution (core/model/lens.h), from one forward
// pass in tensor operations, layer by layer, as nn::DecoderLayerImpl::forward_with computes it (interventions
// included), keeping the residual stream after each layer and, at the query, every head's output.
#include <ATen/ops/einsum.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <limits>

#include "core/formats/error.h"
#include "core/model/cpu_pack.h"
#include "core/model/devices.h"
#include "core/model/model_impl.h"

namespace difflens {

using at::Tensor;

double LogitAttribution::total() const {
  double t = embedding;
  for (const auto& layer : heads)
    for (double v : layer) t += v;
  for (double v : mlps) t += v;
  return t;
}

namespace {

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

AnswerExplanation Model::explain_answer(const std::vector<int64_t>& ids, const LensOptions& options,
                                        const std::atomic<bool>* cancel) const {
  const ModelConfig& c = impl_->config;
  const int64_t T = static_cast<int64_t>(ids.size()), L = c.num_hidden_layers, H = c.map_heads();
  if (T == 0) throw Error("explain: the prompt is empty");
  if (T > c.max_position_embeddings)
    throw Error("explain: the prompt has " + std::to_string(T) + " tokens; this model reads at most " +
                std::to_string(c.max_position_embeddings));
  for (int64_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw Error("explain: token id " + std::to_string(id) + " is outside the vocabulary");
  const int64_t q = options.query < 0 ? T - 1 : options.query;
  if (q >= T)
    throw Error("explain: the query " + std::to_string(q) + " is beyond the " + std::to_string(T) +
                "-token prompt");
  if (options.target >= c.vocab_size)
    throw Error("explain: the target token " + std::to_string(options.target) + " is outside the vocabulary");
  const int K = std::max(1, std::min<int>(options.top_k, static_cast<int>(c.vocab_size)));

  c10::InferenceMode inference;
  const InterventionScope scope(impl_->net, options.interventions, T);
  auto& net = *impl_->net->model;
  AnswerExplanation out;
  out.interventions = options.interventions.applied;
  LogitAttribution& attr = out.attribution;
  attr.query = q;

  const at::Device d0 = device_of(*net.layer_ptrs.front());
  Tensor h = net.embed_tokens(at::tensor(ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(d0));
  const Tensor embedded = h[0][q].to(at::kCPU, at::kFloat).clone();
  std::vector<Tensor> after;  // [T, E] after each layer, on the host
  // At the query: each layer's heads as o_proj reads them (DIFF: also their A1 and −λA2 parts), its MLP.
  std::vector<Tensor> head_vectors, part1, part2, mlp_vectors;
  std::vector<std::vector<bool>> split_ok(static_cast<size_t>(L));
  RopeByDevice ropes(T, c);
  const int64_t block_rows = std::min<int64_t>(T, 256);
  for (int64_t i = 0; i < L; ++i) {
    if (cancel && cancel->load()) throw Cancelled();
    auto& layer = net.layer_ptrs[static_cast<size_t>(i)];
    const at::Device ld = device_of(*layer);
    if (h.device() != ld) h = h.to(ld);
    const nn::Rope& rope = ropes.on(ld);
    Tensor a1q, a2q;  // [H, T] rows of the query
    const nn::AttentionInputs in = layer->inputs(layer->input_layernorm(h), rope);
    Tensor o;
    if (!ld.is_cuda()) {
      // The CPU's fused pass, as a capture runs it: every row's output without maps, then the query's row of
      // each map alone (a change in the Why view costs a capture's attention, not T x T maps in tensors).
      const FusedInputs f(in, c, layer->logit_bits);
      const auto opts = at::TensorOptions().dtype(at::kFloat);
      o = at::empty({1, f.ci.heads, f.ci.T, f.ci.dv}, opts);
      CpuAttentionOutputs every;
      every.row1 = every.ld = f.ci.T;
      every.o = o.data_ptr<float>();
      run_fused(f.ci, every);
      if (f.ci.q2) {
        CpuAttentionOutputs row;
        row.row0 = q;
        row.row1 = q + 1;
        row.ld = f.ci.T;
        row.o = o.data_ptr<float>();  // row q again, the same values
        for (int64_t hd = 0; hd < f.ci.heads; ++hd) row.map_heads.push_back(hd);
        const Tensor a = at::zeros({f.ci.heads, 1, f.ci.T}, opts);
        a1q = at::zeros({f.ci.heads, 1, f.ci.T}, opts);
        a2q = at::zeros({f.ci.heads, 1, f.ci.T}, opts);
        row.a = a.data_ptr<float>();
        row.a1 = a1q.data_ptr<float>();
        row.a2 = a2q.data_ptr<float>();
        run_fused(f.ci, row);
        a1q = a1q.select(1, 0);  // [H, keys]
        a2q = a2q.select(1, 0);
      }
      o = o.to(in.v.scalar_type());
    } else {
      o = layer->attend_blocks(in, block_rows, [&](nn::AttentionBlock& b) {
        if (q < b.row0 || q >= b.row0 + b.rows || !b.a1.defined()) return;
        a1q = b.a1[0].select(1, q - b.row0);  // [H, keys]
        a2q = b.a2[0].select(1, q - b.row0);
      });
    }
    const Tensor n = layer->edited_head_outputs(o, 0);  // [1, H, T, dv]
    const Tensor y = h + layer->project(n);
    const Tensor m = layer->mlp(layer->post_attention_layernorm(y));
    h = y + m;
    after.push_back(h[0].to(at::kCPU, at::kFloat));
    mlp_vectors.push_back(m[0][q].to(at::kCPU, at::kFloat));
    // Each head through its o_proj columns: [H, E].
    const Tensor w = layer->o_proj_weight().to(at::kFloat);  // [E, H · dv]
    const int64_t dv = n.size(3);
    const Tensor nq = n[0].select(1, q).to(at::kFloat);  // [H, dv]
    auto through_o = [&](const Tensor& per_head) {       // [H, dv] -> [H, E]
      return at::einsum("ehd,hd->he", {w.view({w.size(0), H, dv}), per_head.to(w.device())}).to(at::kCPU);
    };
    head_vectors.push_back(through_o(nq));
    split_ok[static_cast<size_t>(i)].assign(static_cast<size_t>(H), false);
    if (a1q.defined()) {
      // o_h = A1·V − λ A2·V at the query; the per-head norm's scale (DIFF V1) frozen at o_h's value.
      const int64_t groups = in.q1.size(1) / in.v.size(1);
      const Tensor v =
          (groups > 1 ? in.v.repeat_interleave(groups, 1) : in.v)[0].to(at::kFloat);  // [H, T, dv]
      const int64_t keys = a1q.size(1);
      const Tensor o1 = at::einsum("hk,hkd->hd", {a1q.to(at::kFloat), v.narrow(1, 0, keys)});
      const Tensor o2 = at::einsum("hk,hkd->hd", {a2q.to(at::kFloat), v.narrow(1, 0, keys)});
      Tensor lambda = in.lambda_rows.defined()
                          ? in.lambda_rows[0].select(1, q - in.q_row0).to(at::kFloat).unsqueeze(1)  // [H, 1]
                          : in.lambda.to(at::kFloat).expand({H, 1});
      Tensor scale = at::ones({H, 1}, o1.options());
      Tensor weight = at::ones({dv}, o1.options());
      if (layer->diff_attn) {
        const Tensor oq = o[0].select(1, q).to(at::kFloat);  // [H, dv]
        scale = at::rsqrt(oq.pow(2).mean(-1, true) + c.subln_eps) * (1.0 - layer->diff_attn->lambda_init);
        if (layer->diff_attn->subln) weight = layer->diff_attn->subln->weight.to(at::kFloat);
      }
      part1.push_back(through_o(o1 * scale * weight));
      part2.push_back(through_o(-lambda * o2 * scale * weight));
      for (int64_t hd = 0; hd < H; ++hd) {
        bool ablated = false;
        if (layer->edit)
          for (const auto& a : layer->edit->ablate) ablated = ablated || a.first == hd;
        split_ok[static_cast<size_t>(i)][static_cast<size_t>(hd)] = !ablated;
      }
    }
  }

  // The final norm and the unembedding, on the device of the last layer's output.
  const Tensor hf = h[0];  // [T, E]
  const Tensor normed = net.norm(hf);
  const Tensor query_logits = impl_->net->unembed(normed[q]).to(at::kCPU, at::kFloat);  // [V]
  int64_t target = options.target;
  if (target < 0)
    target = q + 1 < T ? ids[static_cast<size_t>(q + 1)] : query_logits.argmax().item<int64_t>();
  attr.target = target;
  attr.target_text = impl_->tokenizer.piece(target);
  attr.logit = query_logits[target].item<double>();

  // Direct attribution: s · (U_t ⊙ w) · c for every additive part c of the residual stream at the query.
  const Tensor xq = hf[q].to(at::kCPU, at::kFloat);
  attr.norm_scale = 1.0 / std::sqrt(xq.pow(2).mean().item<double>() + c.rms_norm_eps);
  const Tensor unembed_row =
      (impl_->net->lm_head ? impl_->net->lm_head->weight : net.embed_tokens->weight)[target].to(at::kCPU,
                                                                                                at::kFloat);
  const Tensor read = unembed_row * net.norm->weight.to(at::kCPU, at::kFloat) * attr.norm_scale;  // [E]
  auto share = [&](const Tensor& vectors) { return to_doubles(at::matmul(vectors, read)); };
  attr.embedding = (embedded * read).sum().item<double>();
  const bool diff = c.is_diff();
  for (int64_t i = 0; i < L; ++i) {
    attr.heads.push_back(share(head_vectors[static_cast<size_t>(i)]));
    attr.mlps.push_back((mlp_vectors[static_cast<size_t>(i)] * read).sum().item<double>());
    if (diff && static_cast<size_t>(i) < part1.size()) {
      std::vector<double> p1 = share(part1[static_cast<size_t>(i)]),
                          p2 = share(part2[static_cast<size_t>(i)]);
      for (int64_t hd = 0; hd < H; ++hd)
        if (!split_ok[static_cast<size_t>(i)][static_cast<size_t>(hd)])
          p1[static_cast<size_t>(hd)] = p2[static_cast<size_t>(hd)] =
              std::numeric_limits<double>::quiet_NaN();
      attr.heads_a1.push_back(std::move(p1));
      attr.heads_a2.push_back(std::move(p2));
    }
  }

  // The lens: each layer's residual stream through the final norm and the unembedding, in blocks of rows.
  out.targets.assign(static_cast<size_t>(T), -1);
  for (int64_t t = 0; t < T; ++t)
    out.targets[static_cast<size_t>(t)] = t == q ? target : t + 1 < T ? ids[static_cast<size_t>(t + 1)] : -1;
  const Tensor targets_t = at::tensor(out.targets, at::TensorOptions().dtype(at::kLong));
  for (int64_t i = 0; i < L; ++i) {
    if (cancel && cancel->load()) throw Cancelled();
    LensLayer layer;
    layer.top.resize(static_cast<size_t>(T));
    layer.target_probability.assign(static_cast<size_t>(T), std::numeric_limits<float>::quiet_NaN());
    layer.target_rank.assign(static_cast<size_t>(T), 0);
    const Tensor& hl = after[static_cast<size_t>(i)];
    const int64_t first = options.lens_at_query_only ? q : 0, end = options.lens_at_query_only ? q + 1 : T;
    for (int64_t r0 = first; r0 < end; r0 += 64) {
      const int64_t n = std::min<int64_t>(64, end - r0);
      const Tensor x = hl.narrow(0, r0, n).to(hf.device());
      const Tensor probs =
          at::softmax(impl_->net->unembed(net.norm(x)).to(at::kFloat), -1).to(at::kCPU);  // [n, V]
      const auto [vals, idx] = at::topk(probs, K, -1);
      const Tensor tg = targets_t.narrow(0, r0, n).clamp_min(0);
      const Tensor pt = probs.gather(1, tg.unsqueeze(1)).squeeze(1);  // [n]
      const Tensor rank = probs.gt(pt.unsqueeze(1)).sum(1) + 1;       // [n]
      const auto va = vals.accessor<float, 2>();
      const auto ia = idx.accessor<int64_t, 2>();
      for (int64_t r = 0; r < n; ++r) {
        const size_t t = static_cast<size_t>(r0 + r);
        for (int k = 0; k < K; ++k) {
          const int64_t id = ia[r][k];
          layer.top[t].push_back({id, impl_->tokenizer.piece(id), va[r][k]});
        }
        if (out.targets[t] >= 0) {
          layer.target_probability[t] = pt[r].item<float>();
          layer.target_rank[t] = rank[r].item<int64_t>();
        }
      }
    }
    out.layers.push_back(std::move(layer));
  }
  return out;
}

}  // namespace difflens
