// Model::generate: a prompt continued token by token, greedy or sampled from the top k. With the key/value
// cache (the default) the prompt runs once and each new token then costs its own row of every layer: its
// queries, keys and values are computed for it alone, its keys and values join the layer's cache, and its
// attention row reads every cached key (the CPU's fused pass from row q_row0, or the tensor operations a GPU
// runs, nn::attend_rows). Without it every token runs the whole sequence again (the reference the cache is
// tested against).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/formats/error.h"
#include "core/model/cpu_pack.h"
#include "core/model/devices.h"
#include "core/model/model_impl.h"

namespace difflens {

using at::Tensor;

namespace {

// One layer's keys and values of every position read so far, on the layer's device: k1 [1, Hkv, T, d], k2
// (undefined for a baseline, k1 itself for DIFF V2), v [1, Hkv, T, dv].
struct LayerKv {
  Tensor k1, k2, v;
};

// The new positions' attention inputs `in` ([p0, p0 + n)) with the layer's cache in front: keys and values of
// every position so far, queries (and DIFF V2's λ rows) of the new positions only, from row q_row0 = p0. The
// cache then holds the new keys and values too.
nn::AttentionInputs join_cache(const nn::AttentionInputs& in, LayerKv& kv, int64_t p0) {
  nn::AttentionInputs full = in;
  if (p0 > 0) {
    full.k1 = at::cat({kv.k1, in.k1}, 2);
    full.v = at::cat({kv.v, in.v}, 2);
    if (in.k2.defined()) full.k2 = in.k2.is_same(in.k1) ? full.k1 : at::cat({kv.k2, in.k2}, 2);
  }
  full.q_row0 = p0;
  kv.k1 = full.k1;
  kv.k2 = full.k2;
  kv.v = full.v;
  return full;
}

// Map rows [1, H, n, T] (or [H, n, T]) of a block: the last row of each head as [H, T] on the host.
FloatArray last_row(const Tensor& block) {
  const Tensor b = block.dim() == 4 ? block[0] : block;
  const Tensor r = b.select(1, b.size(1) - 1).to(at::kCPU, at::kFloat).contiguous();
  FloatArray out;
  out.shape = {r.size(0), r.size(1)};
  out.data.assign(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
  return out;
}

// The fused pass over the query rows [q_row0, T) of `full` (keys and values of every position): the heads'
// outputs of those rows [1, H, n, dv]; with `rows`, the last row of every head's A1, A2 and A appended.
Tensor attend_fused_rows(const nn::AttentionInputs& full, const ModelConfig& c, GeneratedRows* rows) {
  const FusedInputs f(full, c, 0);
  const CpuAttentionInputs& ci = f.ci;
  const int64_t T = ci.T, H = ci.heads, n = T - ci.q_row0;
  Tensor o = at::empty({1, H, T, ci.dv}, at::TensorOptions().dtype(at::kFloat));
  CpuAttentionOutputs co;
  co.row0 = ci.q_row0;
  co.row1 = co.ld = T;
  co.o = o.data_ptr<float>();
  Tensor a1, a2, a;
  if (rows) {
    for (int64_t h = 0; h < H; ++h) co.map_heads.push_back(h);
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    a = at::empty({H, n, T}, opts);
    co.a = a.data_ptr<float>();
    if (ci.q2) {
      a1 = at::empty({H, n, T}, opts);
      a2 = at::empty({H, n, T}, opts);
      co.a1 = a1.data_ptr<float>();
      co.a2 = a2.data_ptr<float>();
    }
  }
  run_fused(ci, co);
  if (rows) {
    rows->a.push_back(last_row(a));
    if (ci.q2) {
      rows->a1.push_back(last_row(a1));
      rows->a2.push_back(last_row(a2));
    }
  }
  return o.narrow(2, ci.q_row0, n);
}

// The next token from the last position's logits: the most likely, or sampled from the top k.
int64_t pick_token(const Tensor& logits, const GenerateOptions& o, int64_t vocab, at::Generator& gen) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  auto [vals, idx] = at::topk(logits, std::min<int64_t>(std::max(o.top_k, 1), vocab));
  Tensor probs = at::softmax(vals / o.temperature, -1);
  return idx[at::multinomial(probs, 1, false, gen).item<int64_t>()].item<int64_t>();
}

}  // namespace

std::vector<int64_t> Model::generate(const std::vector<int64_t>& ids, int max_new, double temperature,
                                     int top_k, uint64_t seed) const {
  GenerateOptions o;
  o.max_new = max_new;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  return generate(ids, o).ids;
}

Generation Model::generate(const std::vector<int64_t>& ids, const GenerateOptions& o,
                           const std::atomic<bool>* cancel) const {
  const ModelConfig& c = impl_->config;
  if (ids.empty()) throw Error("generate: the prompt is empty");
  if (static_cast<int64_t>(ids.size()) > c.max_position_embeddings)
    throw Error("generate: the prompt has " + std::to_string(ids.size()) +
                " tokens; this model reads at most " + std::to_string(c.max_position_embeddings));
  c10::InferenceMode inference;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  auto& net = *impl_->net->model;
  Generation g;
  // DIFFLENS_KV_CACHE=0 turns the cache off for every caller (the needle lab's time before and after,
  // docs/benchmarks.md).
  const char* env = std::getenv("DIFFLENS_KV_CACHE");
  g.cached = o.cache && impl_->logit_bits == 0 && !(env && std::string(env) == "0");
  // Interventions hold for every token; a mean ablation averages the prompt's positions.
  Interventions edits = o.interventions;
  edits.mean_positions = static_cast<int64_t>(ids.size());
  const InterventionScope scope(impl_->net, edits, edits.mean_positions);
  std::vector<int64_t> all = ids;
  std::vector<LayerKv> kv(net.layer_ptrs.size());
  int64_t cached = 0;  // positions whose keys and values the cache holds

  // Runs the positions not yet read (all of them without the cache) through every layer; returns the last
  // one's hidden state. `rows`: the last position's row of every layer's maps (cached steps only).
  auto feed = [&](GeneratedRows* rows) {
    const int64_t T = static_cast<int64_t>(all.size()), p0 = g.cached ? cached : 0, n = T - p0;
    const std::vector<int64_t> part(all.begin() + p0, all.end());
    Tensor h = net.embed_tokens(
        at::tensor(part, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(impl_->device));
    // On the CPU the fused pass (heads' outputs only, unless rows are kept); on a GPU the tensor blocks, a
    // long prompt in blocks of query rows, never a T x T tensor per layer.
    const int64_t block_rows = n <= 1024 ? n : 256;
    RopeByDevice ropes(T, c);
    for (size_t i = 0; i < net.layer_ptrs.size(); ++i) {
      if (cancel && cancel->load()) throw Cancelled();  // a long prompt's first pass stops between layers
      auto& layer = net.layer_ptrs[i];
      const at::Device ld = device_of(*layer);
      if (h.device() != ld) h = h.to(ld);
      nn::Rope rope = ropes.on(ld);  // the new positions' rows of the rotary tables
      rope.cos = rope.cos.narrow(0, p0, n);
      rope.sin = rope.sin.narrow(0, p0, n);
      const bool fused = !ld.is_cuda() && !o.tensor_ops;
      auto attend = [&](const nn::AttentionInputs& in) -> Tensor {
        const nn::AttentionInputs full = g.cached ? join_cache(in, kv[i], p0) : in;
        if (p0 == 0 && !rows) {  // the whole prompt, as a capture reads it
          if (fused) {
            CaptureOptions outputs_only;
            outputs_only.logit_stats = false;
            LayerTrace unused;
            return attend_fused(full, c, layer->logit_bits, nullptr, outputs_only, unused);
          }
          return layer->attend_blocks(full, block_rows, [](const nn::AttentionBlock&) {});
        }
        if (fused) return attend_fused_rows(full, c, rows);
        const nn::AttentionBlock b = nn::attend_rows(nn::expand_groups(full), c, p0, n, {});
        if (rows) {
          rows->a.push_back(last_row(b.a));
          if (b.a1.defined()) {
            rows->a1.push_back(last_row(b.a1));
            rows->a2.push_back(last_row(b.a2));
          }
        }
        return b.o;
      };
      nn::AttentionInputs in;
      h = fused ? forward_cpu(impl_->cpu_cache, c, *layer, static_cast<int64_t>(i), h, rope, in, attend, p0)
                : layer->forward_with(h, rope, in, attend, p0);
    }
    cached = T;
    return h[0][n - 1];
  };

  Tensor last = feed(nullptr);
  for (int k = 0; k < o.max_new && static_cast<int64_t>(all.size()) < c.max_position_embeddings; ++k) {
    if (cancel && cancel->load()) throw Cancelled();
    const int64_t next = pick_token(impl_->next_logits(last).to(at::kCPU, at::kFloat), o, c.vocab_size, gen);
    all.push_back(next);
    g.ids.push_back(next);
    if (o.on_token) o.on_token(next);
    const bool more = k + 1 < o.max_new && next != c.eos_token_id &&
                      static_cast<int64_t>(all.size()) < c.max_position_embeddings;
    if (g.cached && o.keep_rows) {  // the written token read once for its own row
      g.rows.emplace_back();
      last = feed(&g.rows.back());
    } else if (more) {
      last = feed(nullptr);
    }
    if (!more) break;
  }
  if (o.keep_rows && !g.cached && !g.ids.empty()) {  // the written tokens' rows from one whole capture
    CaptureOptions whole;
    whole.interventions = edits;  // the same edits, means over the prompt's positions
    const Trace t = capture(all, whole);
    const int64_t T = t.length();
    if (!t.layers.empty() && t.layers[0].pooled > 0)
      throw Error("generate: the written tokens' rows of " + std::to_string(T) +
                  " tokens need exact maps; this length is captured pooled");
    for (int64_t p = static_cast<int64_t>(ids.size()); p < T; ++p) {
      GeneratedRows r;
      for (const LayerTrace& lt : t.layers) {
        auto row = [&](const FloatArray& m) {
          FloatArray out;
          const int64_t H = m.shape[0];
          out.shape = {H, p + 1};
          for (int64_t h = 0; h < H; ++h)
            out.data.insert(out.data.end(), m.data.begin() + (h * T + p) * T,
                            m.data.begin() + (h * T + p) * T + p + 1);
          return out;
        };
        r.a.push_back(row(lt.a));
        if (!lt.a1.empty()) {
          r.a1.push_back(row(lt.a1));
          r.a2.push_back(row(lt.a2));
        }
      }
      g.rows.push_back(std::move(r));
    }
  }
  return g;
}

}  // namespace difflens
