// Model::capture: a prompt's forward pass kept as a Trace (maps, logits, λ, statistics, hidden states, next
// token), exact or, for long prompts, in blocks of query rows with pooled maps; and the one-layer probe.
#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/cpu/attention_cpu.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/model/capture_plan.h"
#include "core/model/cpu_pack.h"
#include "core/model/devices.h"
#include "core/model/model_impl.h"
#include "core/model/pooling.h"
#include "core/model/to_host.h"
#include "core/model/value_stats.h"

namespace difflens {

using at::Tensor;

namespace {

// A DIFF layer's λ and its parts, from the inputs its attention ran with.
void keep_lambda(const nn::AttentionInputs& in, LayerTrace& lt) {
  if (!in.diff()) return;
  if (in.lambda_rows.defined()) {  // DIFF V2 (or V1 with λ set per head): per head and token
    lt.lambda_rows = to_array(in.lambda_rows[0]);
    if (in.lambda_logits.defined()) lt.lambda_logits = to_array(in.lambda_logits[0]);
    double sum = 0;
    for (float x : lt.lambda_rows.data) sum += x;
    lt.lambda = lt.lambda_rows.data.empty() ? 0 : sum / static_cast<double>(lt.lambda_rows.data.size());
    if (!in.lambda.defined()) return;
  } else {
    lt.lambda = in.lambda.item<double>();
  }
  lt.lambda_exp1 = in.lambda_exp1.item<double>();
  lt.lambda_exp2 = in.lambda_exp2.item<double>();
  lt.lambda_init = in.lambda_init;
}

// What CaptureOptions::keep_qkv keeps of one layer: rotated queries (scaled) and keys (unless a long-prompt
// capture has them already), values, and the DIFF output norm's weight (ones when the model has none, so a
// recomputation needs no special case).
void keep_inputs(const nn::AttentionInputs& in, nn::DecoderLayerImpl& layer, LayerTrace& lt) {
  if (lt.q1.empty()) {
    lt.q1 = to_array(in.q1[0]);
    lt.k1 = to_array(in.k1[0]);
    if (in.q2.defined()) {
      lt.q2 = to_array(in.q2[0]);
      lt.k2 = to_array(in.k2[0]);
    }
  }
  lt.v = to_array(in.v[0]);
  if (layer.diff_attn) {
    const int64_t dv = in.v.size(-1);
    lt.subln_weight = layer.diff_attn->subln
                          ? to_array(layer.diff_attn->subln->weight)
                          : to_array(at::ones({dv}, at::TensorOptions().dtype(at::kFloat)));
  }
}

// The heads' outputs o [B, H, T, dv] of a layer whose maps core/cuda's kernels pool: only the attention's
// product is needed here, by the fused attention where it runs (one head at a time, so that a fallback to
// LibTorch's plain path holds one T x T map), else by the tensor blocks.
Tensor kernel_path_output(nn::DecoderLayerImpl& layer, const nn::AttentionInputs& in, const ModelConfig& c,
                          int64_t block_rows) {
  if (nn::can_fuse_attention(in, c, layer.logit_bits)) return nn::fused_attention(in, 1);
  return layer.attend_blocks(in, block_rows, [](nn::AttentionBlock&) {});
}

// One layer of a long-prompt capture: attention in blocks of query rows; each kept head's maps pooled
// (mean and largest-magnitude entry per cell), exact statistics, each row's log-sum-exp, and the rotated
// queries and keys, so that any tile can be recomputed exactly later.
LayerTrace capture_layer_pooled(CpuLayerCache& cache, nn::DecoderLayerImpl& layer, Tensor& h,
                                const nn::Rope& rope, const ModelConfig& c, int index,
                                const std::vector<int64_t>& keep_heads, const PoolGrid& grid,
                                const CapturePlan& plan, const CaptureOptions& options,
                                const std::atomic<bool>* cancel) {
  const int64_t T = grid.T, P = grid.P, H = c.map_heads();
  const bool diff = c.is_diff();
  const int64_t maps = diff ? 3 : 1;
  // Pooled by core/cuda's kernels on the GPU (no maps made; one read-back per layer) or on the host (a CPU
  // model: by the fused pass; a GPU model the kernels cannot run: its blocks' maps copied to the host's
  // loops): see CaptureOptions::pooling. Rows per block: see plan_capture.
  const bool by_kernels = plan.pool_by_kernels;
  const int64_t block_rows = plan.block_rows;
  const size_t nh = keep_heads.size();
  const size_t cells = static_cast<size_t>(P * P);
  const size_t host_cells = by_kernels ? 0 : cells;
  std::vector<std::vector<float>> sum(nh * static_cast<size_t>(maps), std::vector<float>(host_cells, 0.0f));
  std::vector<std::vector<float>> best(nh * static_cast<size_t>(maps), std::vector<float>(host_cells, 0.0f));
  Tensor lse1 = at::empty({H, T}, at::TensorOptions().dtype(at::kFloat));
  Tensor lse2 = diff ? at::empty({H, T}, at::TensorOptions().dtype(at::kFloat)) : Tensor();
  ValueStats stats;
  bool have_stats = false;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(h.device());
  nn::AttentionInputs in;
  std::unique_ptr<KernelPooler> kernels;
  if (by_kernels) {  // a GPU: core/cuda's kernels from the queries and keys, no block of maps
    // --pooling products: each chunk's logits within a quarter of the GPU's free memory, but at least 256 MB
    // and at most 4 GB.
    size_t products_bytes = 0;
    if (options.pooling == PoolingPath::Products) {
      uint64_t free_bytes = 0, total_bytes = 0;
      cuda_memory(free_bytes, total_bytes);
      products_bytes =
          static_cast<size_t>(std::clamp<uint64_t>(free_bytes / 4, uint64_t{256} << 20, uint64_t{4} << 30));
    }
    kernels = std::make_unique<KernelPooler>(grid, keep_heads, H, diff, h.device(), products_bytes);
    h = layer.forward_with(h, rope, in, [&](const nn::AttentionInputs& inputs) {
      const bool want_stats = options.logit_stats && T > options.stats_from;
      // Rows per launch: at least ~2K blocks of 128 rows (a launch's last blocks leave the GPU idle), unless
      // the options ask for a block size (tests); the cancel flag is read between launches.
      const int64_t rows = options.block_rows > 0
                               ? block_rows
                               : (std::max<int64_t>(block_rows, (int64_t{1} << 18) / H) + 127) / 128 * 128;
      kernels->run(inputs.q1[0], inputs.k1[0], diff ? inputs.q2[0] : Tensor(), diff ? inputs.k2[0] : Tensor(),
                   inputs.lambda, inputs.lambda_rows.defined() ? inputs.lambda_rows[0] : Tensor(),
                   c.sliding_window, want_stats, options.stats_from, rows, [&] {
                     if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
                   });
      lse1 = kernels->lse1;
      if (diff) lse2 = kernels->lse2;
      if (want_stats) {
        stats = kernels->stats();
        have_stats = true;
      }
      return kernel_path_output(layer, inputs, c, block_rows);
    });
  } else if (!h.is_cuda()) {  // the CPU: the fused pass block by block, pooling as it goes
    h = forward_cpu(cache, c, layer, index, h, rope, in, [&](const nn::AttentionInputs& inputs) {
      const FusedInputs f(inputs, c, 0);
      Tensor o = at::empty({1, H, T, f.ci.dv}, at::TensorOptions().dtype(at::kFloat));
      // The kept heads' maps are pooled by the pass itself as their rows are made: no block of maps.
      std::vector<float*> pool_sum, pool_best;
      for (size_t job = 0; job < sum.size(); ++job) {
        pool_sum.push_back(sum[job].data());
        pool_best.push_back(best[job].data());
      }
      // Blocks here hold no maps, only the cancellation points: about 16M entries each (unless the options
      // ask for a block size).
      const int64_t rows =
          options.block_rows > 0 ? block_rows : std::clamp<int64_t>((int64_t{1} << 24) / T, block_rows, T);
      for (int64_t r0 = 0; r0 < T; r0 += rows) {
        if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
        const int64_t r1 = std::min(r0 + rows, T);
        CpuAttentionOutputs co;
        co.row0 = r0;
        co.row1 = co.ld = r1;
        co.o = o.data_ptr<float>();
        co.lse1 = lse1.data_ptr<float>();
        if (diff) co.lse2 = lse2.data_ptr<float>();
        if (nh > 0) {
          co.map_heads = keep_heads;
          co.pool_cells = P;
          co.pool_start = grid.start.data();
          co.pool_bin = grid.bin.data();
          co.pool_sum = pool_sum;
          co.pool_best = pool_best;
        }
        ValueStats block_stats;
        if (options.logit_stats && r1 > options.stats_from) {
          co.logit_stats = &block_stats;
          co.stats_from = options.stats_from;
          co.exact_median = r0 == 0 && r1 == T;  // several blocks merge into the histogram's median
        }
        run_fused(f.ci, co);
        if (co.logit_stats) {
          if (!have_stats)
            stats = std::move(block_stats);
          else
            stats.merge(block_stats);
          have_stats = true;
        }
      }
      return o;
    });
  } else {  // a GPU model the kernels cannot run: each block's maps pooled by the host's loops
    h = layer.forward_blocked(h, rope, block_rows, in, [&](const nn::AttentionBlock& block) {
      if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
      struct {  // the block of the one sequence: [H, rows, keys]
        int64_t row0, rows;
        Tensor l1, l2, a1, a2, a;
      } b{block.row0,
          block.rows,
          block.l1[0],
          diff ? block.l2[0] : Tensor(),
          diff ? block.a1[0] : Tensor(),
          diff ? block.a2[0] : Tensor(),
          block.a[0]};
      lse1.narrow(1, b.row0, b.rows).copy_(at::logsumexp(b.l1, -1));
      if (diff) lse2.narrow(1, b.row0, b.rows).copy_(at::logsumexp(b.l2, -1));
      if (options.logit_stats && b.row0 + b.rows > options.stats_from) {
        // Hidden keys are -inf; rows before stats_from are left out too.
        Tensor skip = b.l1.isinf();
        if (options.stats_from > b.row0)
          skip = skip.logical_or(
              at::arange(b.row0, b.row0 + b.rows, opts).lt(options.stats_from).view({1, b.rows, 1}));
        // A single block (short prompts) keeps the exact median; several merge into the histogram's.
        const bool one_block = b.rows == T;
        ValueStats s =
            diff ? value_stats({b.l1, b.l2}, skip, one_block) : value_stats({b.l1}, skip, one_block);
        if (!have_stats)
          stats = std::move(s);
        else
          stats.merge(s);
        have_stats = true;
      }
      if (nh == 0) return;
      const Tensor* src[3] = {diff ? &b.a1 : &b.a, diff ? &b.a2 : nullptr, diff ? &b.a : nullptr};
      std::vector<Tensor> cpu;
      for (int64_t m = 0; m < maps; ++m) cpu.push_back(src[m]->to(at::kCPU, at::kFloat).contiguous());
      const float* host[3] = {cpu[0].data_ptr<float>(), diff ? cpu[1].data_ptr<float>() : nullptr,
                              diff ? cpu[2].data_ptr<float>() : nullptr};
      pool_block_on_host(grid, keep_heads, maps, host, b.row0, b.rows, sum, best);
    });
  }
  LayerTrace lt;
  lt.index = index;
  lt.pooled = P;
  keep_lambda(in, lt);
  if (have_stats) lt.logit_stats = std::move(stats);
  lt.hidden_stats = hidden_stats(h, options.stats_from);
  if (options.keep_hidden && layer_selected(options, index)) lt.hidden = to_array(h[0]);
  lt.q1 = to_array(in.q1[0]);
  lt.k1 = to_array(in.k1[0]);
  lt.lse1 = to_array(lse1);
  if (diff) {
    lt.q2 = to_array(in.q2[0]);
    lt.k2 = to_array(in.k2[0]);
    lt.lse2 = to_array(lse2);
  }
  if (options.keep_qkv && layer_selected(options, index)) keep_inputs(in, layer, lt);
  if (nh > 0) {
    lt.heads.assign(keep_heads.begin(), keep_heads.end());
    if (kernels)  // one read-back per map: [heads, P, P] sums and largest magnitudes
      for (int64_t m = 0; m < maps; ++m) {
        const std::vector<float> su = kernels->sums(m), be = kernels->bests(m);
        for (size_t k = 0; k < nh; ++k) {
          const size_t job = k * static_cast<size_t>(maps) + static_cast<size_t>(m);
          sum[job].assign(su.begin() + static_cast<std::ptrdiff_t>(k * cells),
                          su.begin() + static_cast<std::ptrdiff_t>((k + 1) * cells));
          best[job].assign(be.begin() + static_cast<std::ptrdiff_t>(k * cells),
                           be.begin() + static_cast<std::ptrdiff_t>((k + 1) * cells));
        }
      }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    FloatArray* means[3] = {diff ? &lt.a1_mean : &lt.a_mean, &lt.a2_mean, &lt.a_mean};
    FloatArray* maxes[3] = {diff ? &lt.a1_max : &lt.a_max, &lt.a2_max, &lt.a_max};
    for (int64_t m = 0; m < maps; ++m) {
      FloatArray& mean = *means[m];
      FloatArray& mx = *maxes[m];
      mean.shape = mx.shape = {static_cast<int64_t>(nh), P, P};
      mean.data.resize(nh * cells);
      mx.data.resize(nh * cells);
      for (size_t k = 0; k < nh; ++k) {
        const size_t job = k * static_cast<size_t>(maps) + static_cast<size_t>(m);
        for (size_t cell = 0; cell < cells; ++cell) {
          const int64_t n = grid.count[cell];
          mean.data[k * cells + cell] =
              n > 0 ? static_cast<float>(sum[job][cell] / static_cast<double>(n)) : nan;
          mx.data[k * cells + cell] = n > 0 ? best[job][cell] : nan;
        }
      }
    }
  }
  return lt;
}

}  // namespace

std::string kernel_pooling_unsupported(const ModelConfig& c) {
  return KernelPooler::unsupported(c.head_dim, c.is_diff());
}

Trace Model::capture(const std::vector<int64_t>& ids, const CaptureOptions& options,
                     const std::atomic<bool>* cancel) const {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = impl_->config;
  const at::Device dev = impl_->device;
  CaptureMachine machine;
  machine.host_available = available_memory_bytes();
  machine.cuda = dev.is_cuda();
  machine.no_kernels = machine.cuda
                           ? KernelPooler::unsupported(c.head_dim, c.is_diff())
                           : "the model is on the CPU (the kernels pool a CUDA model's long prompts)";
  machine.no_products = machine.cuda ? KernelPooler::unbuilt() : machine.no_kernels;
  if (machine.cuda) {
    uint64_t free_bytes = 0;
    cuda_memory(free_bytes, machine.device_total);
    for (const auto& p : impl_->net->parameters())
      machine.weight_bytes += static_cast<double>(p.numel() * p.element_size());
  }
  const CapturePlan plan = plan_capture(
      c, ids, options, options.logit_bits >= 0 ? options.logit_bits : impl_->logit_bits, machine);
  const int64_t T = plan.tokens, pooled = plan.pooled;
  // A per-capture quantization width, restored afterwards (also when the capture throws).
  struct BitsGuard {
    Model::Impl& impl;
    int saved;
    ~BitsGuard() { impl.apply_logit_bits(saved); }
  } bits_guard{*impl_, impl_->logit_bits};
  if (options.logit_bits >= 0) impl_->apply_logit_bits(options.logit_bits);

  c10::InferenceMode inference;  // thread-local: set on whichever thread captures
  const InterventionScope interventions(impl_->net, options.interventions, T);
  Trace trace;
  trace.interventions = options.interventions.applied;
  trace.config = c;
  trace.model_path = impl_->path.string();
  trace.token_ids = ids;
  for (int64_t id : ids) trace.tokens.push_back(impl_->tokenizer.piece(id));
  const Tensor head_index = at::tensor(plan.heads, at::TensorOptions().dtype(at::kLong));
  RopeByDevice ropes(T, c);
  // The capture itself; a GPU's out-of-memory error is translated at the end of this function.
  auto run = [&]() -> Trace {
    // The cells left out of the logit statistics, T x T: built only for exact captures on a GPU (the CPU's
    // fused pass has no masks), once per GPU the layers use: the causal future (and beyond a sliding
    // window), and rows before stats_from.
    std::vector<std::pair<at::Device, Tensor>> skips;
    auto stats_skip_on = [&](at::Device d) -> const Tensor& {
      for (const auto& [device, mask] : skips)
        if (device == d) return mask;
      Tensor skip = nn::hidden_keys(0, T, c, d);
      if (options.stats_from > 0)
        skip = skip.logical_or(at::arange(T, at::TensorOptions().dtype(at::kLong).device(d))
                                   .lt(options.stats_from)
                                   .unsqueeze(1)
                                   .expand({T, T}));
      skips.emplace_back(d, skip);
      return skips.back().second;
    };
    trace.pooled_budget = pooled > 0 ? options.pooled_budget_bytes : 0;
    PoolGrid grid(T, pooled);

    std::vector<std::pair<size_t, Tensor>> host_hidden;  // (layer, its hidden state's counted rows)
    // The pending host layers' hidden-state statistics, several layers at once on the intra-op threads
    // (each a serial pass over T x E values).
    auto hidden_stats_of = [&](std::vector<std::pair<size_t, Tensor>>& pending) {
      at::parallel_for(0, static_cast<int64_t>(pending.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          const auto& [layer, rows] = pending[static_cast<size_t>(k)];
          trace.layers[layer].hidden_stats = value_stats_cpu(rows.data_ptr<float>(), rows.numel());
        }
      });
      pending.clear();
    };
    Tensor id_tensor = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).to(dev);
    Tensor h = impl_->net->model->embed_tokens(id_tensor.unsqueeze(0));  // [1, T, E]
    auto& layers = impl_->net->model->layer_ptrs;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
      if (options.on_layer) options.on_layer(i, c.num_hidden_layers);
      // A model spread over devices: the hidden state follows the layers (a no-op on one device).
      const at::Device ld = device_of(*layers[i]);
      if (h.device() != ld) h = h.to(ld);
      const nn::Rope& rope = ropes.on(ld);
      if (pooled > 0) {
        trace.layers.push_back(capture_layer_pooled(
            impl_->cpu_cache, *layers[i], h, rope, c, static_cast<int>(i),
            plan.keeps_layer(i) ? plan.heads : std::vector<int64_t>{}, grid, plan, options, cancel));
        continue;
      }
      nn::AttentionInputs in;
      LayerTrace lt;
      lt.index = static_cast<int>(i);
      if (!ld.is_cuda()) {
        h = forward_cpu(impl_->cpu_cache, c, *layers[i], i, h, rope, in,
                        [&](const nn::AttentionInputs& inputs) {
                          return attend_fused(inputs, c, layers[i]->logit_bits,
                                              plan.keeps_layer(i) ? &plan.heads : nullptr, options, lt);
                        });
      } else {
        nn::AttentionBlock r;  // every row: [1, H, T, T]
        h = layers[i]->forward(h, rope, in, r);
        if (plan.keeps_layer(i)) {
          lt.heads.assign(plan.heads.begin(), plan.heads.end());
          auto kept = [&](const Tensor& maps) {
            return to_array(plan.all_heads ? maps[0] : maps[0].index_select(0, head_index.to(ld)));
          };
          lt.a = kept(r.a);
          if (c.is_diff()) {
            lt.a1 = kept(r.a1);
            lt.a2 = kept(r.a2);
          }
        }
        if (options.logit_stats) {
          // Causal entries of every head (DIFF: both components pooled).
          const Tensor& stats_skip = stats_skip_on(ld);
          lt.logit_stats = r.l2.defined() ? value_stats({r.l1[0], r.l2[0]}, stats_skip)
                                          : value_stats({r.l1[0]}, stats_skip);
        }
        if (options.keep_logits && layer_selected(options, static_cast<int64_t>(i))) {
          lt.logits1 = to_array(r.l1[0]);  // hidden keys -inf
          if (r.l2.defined()) lt.logits2 = to_array(r.l2[0]);
        }
      }
      keep_lambda(in, lt);
      if (options.keep_qkv && layer_selected(options, static_cast<int64_t>(i)))
        keep_inputs(in, *layers[i], lt);
      if (ld.is_cuda())
        lt.hidden_stats = hidden_stats(h, options.stats_from);
      else
        host_hidden.emplace_back(trace.layers.size(),
                                 h[0].slice(0, options.stats_from).to(at::kFloat).contiguous());
      if (options.keep_hidden && layer_selected(options, static_cast<int64_t>(i))) lt.hidden = to_array(h[0]);
      trace.layers.push_back(std::move(lt));
      // Up to one pending layer per thread (and 64 MB) is kept for the statistics below.
      // (None on a GPU: its statistics were taken above.)
      if (!host_hidden.empty() &&
          (static_cast<int>(host_hidden.size()) >= at::get_num_threads() ||
           static_cast<double>(host_hidden.size()) * static_cast<double>(host_hidden.back().second.nbytes()) >
               64.0 * 1024 * 1024))
        hidden_stats_of(host_hidden);
    }
    hidden_stats_of(host_hidden);
    Tensor probs = at::softmax(impl_->next_logits(h[0][T - 1]).to(at::kFloat), -1);  // [vocab]
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
    if (options.position_top_k > 0) {  // every kept position's top k and the actual next token's odds
      Predictions& pr = trace.predictions;
      pr.k = std::min<int64_t>(options.position_top_k, c.vocab_size);
      const double per_row = static_cast<double>(c.hidden_size) * static_cast<double>(c.vocab_size);
      const int64_t rows =
          std::clamp<int64_t>(static_cast<int64_t>(options.prediction_budget / per_row), 1, T);
      pr.from = T - rows;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      auto make = [&](FloatArray& a, int64_t cols) {
        a.shape = {T, cols};
        a.data.assign(static_cast<size_t>(T * cols), nan);
      };
      make(pr.ids, pr.k);
      make(pr.probs, pr.k);
      make(pr.actual, 2);
      const Tensor ids_t = at::tensor(ids, at::TensorOptions().dtype(at::kLong));
      constexpr int64_t kBlock = 256;  // rows of logits at a time: [256, vocab] floats
      for (int64_t r0 = pr.from; r0 < T; r0 += kBlock) {
        const int64_t n = std::min(kBlock, T - r0);
        const Tensor p = at::softmax(impl_->next_logits(h[0].narrow(0, r0, n)).to(at::kFloat), -1);  // [n, V]
        auto [tp, ti] = at::topk(p, pr.k);
        const Tensor tp_h = tp.to(at::kCPU).contiguous(), ti_h = ti.to(at::kCPU, at::kFloat).contiguous();
        std::copy_n(tp_h.data_ptr<float>(), n * pr.k, pr.probs.data.begin() + r0 * pr.k);
        std::copy_n(ti_h.data_ptr<float>(), n * pr.k, pr.ids.data.begin() + r0 * pr.k);
        for (int64_t j = 0; j < n * pr.k; ++j) {
          const int64_t id = static_cast<int64_t>(ti_h.data_ptr<float>()[j]);
          if (!pr.pieces.count(id)) pr.pieces[id] = impl_->tokenizer.piece(id);
        }
        const int64_t m = std::min(n, T - 1 - r0);  // rows with a token after them
        if (m <= 0) continue;
        const Tensor pm = p.narrow(0, 0, m);
        const Tensor next = ids_t.narrow(0, r0 + 1, m).to(p.device()).unsqueeze(1);
        const Tensor pa = pm.gather(1, next);                     // [m, 1]
        const Tensor rank = pm.gt(pa).sum(1).to(at::kFloat) + 1;  // tokens strictly likelier, + 1
        const Tensor both =
            at::cat({pa.squeeze(1).unsqueeze(1), rank.unsqueeze(1)}, 1).to(at::kCPU).contiguous();
        std::copy_n(both.data_ptr<float>(), 2 * m, pr.actual.data.begin() + 2 * r0);
      }
      // A position whose logits were not finite (an overflow) has no prediction: its row is left empty.
      const float nan_row = std::numeric_limits<float>::quiet_NaN();
      for (int64_t r = pr.from; r < T; ++r) {
        bool finite = true;
        for (int64_t j = 0; j < pr.k; ++j)
          finite &= std::isfinite(pr.probs.data[static_cast<size_t>(r * pr.k + j)]);
        if (r + 1 < T) finite &= std::isfinite(pr.actual.data[static_cast<size_t>(2 * r)]);
        if (finite) continue;
        for (int64_t j = 0; j < pr.k; ++j)
          pr.ids.data[static_cast<size_t>(r * pr.k + j)] = pr.probs.data[static_cast<size_t>(r * pr.k + j)] =
              nan_row;
        pr.actual.data[static_cast<size_t>(2 * r)] = pr.actual.data[static_cast<size_t>(2 * r + 1)] = nan_row;
      }
    }
    trace.logit_bits = impl_->logit_bits;
    trace.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::move(trace);
  };
  try {
    return run();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (!dev.is_cuda() || what.find("out of memory") == std::string::npos) throw;
    uint64_t now_free = 0, total = 0;
    cuda_memory(now_free, total);
    throw Error("the GPU ran out of memory capturing " + std::to_string(T) + " tokens" +
                (pooled == 0 ? " (one layer's attention computed whole takes about " +
                                   human_bytes(static_cast<uint64_t>(plan.device_bytes)) + ")"
                             : std::string(" (pooled, in blocks of query rows)")) +
                (total > 0
                     ? "; " + human_bytes(now_free) + " of the GPU's " + human_bytes(total) + " is free now"
                     : "") +
                (pooled == 0 ? ": give a pooled budget (--pooled-budget MB; in the app the long-prompt MB)"
                             : ": close other programs on the GPU or capture on the CPU"));
  }
}

LayerTrace Model::attention_probe(int layer, const std::vector<float>& x, int64_t T,
                                  std::vector<float>* output, bool tensor_ops) const {
  const ModelConfig& c = impl_->config;
  if (layer < 0 || layer >= c.num_hidden_layers)
    throw Error("layer " + std::to_string(layer) + " does not exist");
  if (T <= 0 || static_cast<int64_t>(x.size()) != T * c.hidden_size)
    throw Error("attention_probe: x must hold T x hidden_size values");
  c10::InferenceMode inference;
  const at::Device dev = device_of(*impl_->net->model->layer_ptrs[layer]);
  std::vector<float> copy = x;
  Tensor xt = at::from_blob(copy.data(), {1, T, c.hidden_size}, at::TensorOptions().dtype(at::kFloat))
                  .to(dev)
                  .clone();
  const nn::Rope rope(T, c, dev);
  nn::DecoderLayerImpl& l = *impl_->net->model->layer_ptrs[layer];
  nn::AttentionInputs in;
  LayerTrace lt;
  lt.index = layer;
  Tensor out;
  if (!dev.is_cuda() && !tensor_ops) {
    in = l.inputs(xt, rope);
    std::vector<int64_t> heads(static_cast<size_t>(c.map_heads()));
    std::iota(heads.begin(), heads.end(), int64_t{0});
    CaptureOptions o;
    o.keep_logits = true;
    o.logit_stats = false;
    out = l.output(attend_fused(in, c, l.logit_bits, &heads, o, lt));
  } else {
    nn::AttentionBlock r;
    out = l.attention(xt, rope, T, in, [&](nn::AttentionBlock& b) { r = b; });
    for (int64_t hd = 0; hd < c.map_heads(); ++hd) lt.heads.push_back(static_cast<int>(hd));
    lt.a = to_array(r.a[0]);
    lt.logits1 = to_array(r.l1[0]);  // hidden keys -inf
    if (c.is_diff()) {
      lt.a1 = to_array(r.a1[0]);
      lt.a2 = to_array(r.a2[0]);
      lt.logits2 = to_array(r.l2[0]);
    }
  }
  keep_lambda(in, lt);
  if (output) *output = to_vector(out[0]);
  return lt;
}

}  // namespace difflens
