// Model: checkpoint binding, seeded initialisation and Trace capture over the modules of core/nn.h.
// One of the two translation units that include LibTorch (the other is train.cpp).
// Semantics: the README's "What the math is" and the checkpoint layouts of core/FORMATS.md.
#include "core/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "core/attention_cpu.h"
#include "core/capture_plan.h"
#include "core/checkpoint.h"
#include "core/error.h"
#include "core/layer_cpu.h"
#include "core/model_impl.h"
#include "core/safetensors.h"

namespace difflens {
namespace {

using at::Tensor;
using nn::Rope;

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
  const Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  a.data.resize(static_cast<size_t>(c.numel()));
  if (!a.data.empty()) std::memcpy(a.data.data(), c.data_ptr<float>(), a.data.size() * sizeof(float));
  return a;
}

// Exact statistics of |values| over several tensors of one shape, skipping the cells where `skip` is
// true (the causal future), without gathering the pool: every value gets its log10 bin in one vectorised
// pass (skipped cells go to a discard bucket), bincount gives the histogram, and the exact top-k and
// lower median are then read from the few values inside the bins where they must lie.
// `exact_median` false: the median is left to the histogram (blocks of a long capture, whose medians a
// merge replaces by the histogram estimate anyway).
ValueStats value_stats(const std::vector<Tensor>& parts, const Tensor& skip = Tensor(),
                       bool exact_median = true) {
  constexpr int64_t kBelow = 0, kAbove = LogHistogram::kBins + 1, kDiscard = LogHistogram::kBins + 2;
  std::vector<Tensor> values, buckets;  // per part: |v| and its bucket (0 below, 1..kBins, kBins+1 above)
  std::vector<int64_t> counts(kDiscard + 1, 0);
  double sum = 0;
  for (const Tensor& p : parts) {
    // NaN counts as "below" rather than poisoning; infinities stay infinite.
    Tensor v = at::nan_to_num(p.to(at::kFloat).abs(), 0.0, std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::infinity());
    // bucket = floor((log10|v| - kLogMin) · kBinsPerDecade) + 1, clamped to [0, kBins + 1]: in place, one
    // temporary (1027 buckets fit int16: a quarter of int64's memory).
    Tensor b = at::log10(v);
    b.sub_(LogHistogram::kLogMin).mul_(LogHistogram::kBinsPerDecade).floor_().clamp_(-1, LogHistogram::kBins);
    b = b.to(at::kShort).add_(1);
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
  if (!exact_median) {
    s.median = static_cast<float>(s.histogram.quantile(0.5));
    return s;
  }
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

// Statistics of a layer's |hidden state| h [1, T, E] from row `from` on: on the host in plain C++, on a GPU
// by value_stats()'s tensor operations.
ValueStats hidden_stats(const Tensor& h, int64_t from) {
  const Tensor rows = h[0].slice(0, from);
  if (h.is_cuda()) return value_stats({rows});
  const Tensor x = rows.to(at::kFloat).contiguous();
  return value_stats_cpu(x.data_ptr<float>(), x.numel());
}

// The statistics of value_stats() accumulated block by block on the blocks' own device, read back once at
// the end: bucket counts (histc over chunks of at most 2^24 values, whose float counts are exact), the sum
// of |values| and the running top-k. Equal to merging value_stats() of each block (exact top-k, mean and
// histogram; the median is the histogram's estimate), without a host round trip per block.
class StreamingStats {
 public:
  void add(const Tensor& part, const Tensor& skip) {
    constexpr int64_t kDiscard = LogHistogram::kBins + 2, kChunk = int64_t{1} << 24;
    Tensor v = at::nan_to_num(part.to(at::kFloat).abs(), 0.0, std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::infinity());
    // Bucket as value_stats(), as a float in the middle of its unit-wide histc bin: 0 below, 1..kBins,
    // kBins + 1 above, kDiscard skipped.
    Tensor b = at::log10(v);
    b.sub_(LogHistogram::kLogMin).mul_(LogHistogram::kBinsPerDecade).floor_().clamp_(-1, LogHistogram::kBins);
    b.add_(1.5).masked_fill_(skip, static_cast<double>(kDiscard) + 0.5);
    const Tensor flat = b.flatten();
    if (!counts_.defined()) {
      counts_ = at::zeros({kDiscard + 1}, v.options().dtype(at::kDouble));
      sum_ = at::zeros({}, v.options().dtype(at::kDouble));
    }
    for (int64_t at0 = 0; at0 < flat.numel(); at0 += kChunk)
      counts_.add_(at::histc(flat.narrow(0, at0, std::min(kChunk, flat.numel() - at0)), kDiscard + 1, 0,
                             static_cast<double>(kDiscard + 1)));
    sum_.add_(v.masked_fill(skip, 0.0f).sum(at::kDouble));
    // Skipped values enter the top-k as -1 and are dropped at the end (|values| are >= 0).
    const Tensor candidates = v.masked_fill_(skip, -1.0f).flatten();
    const int64_t k = std::min<int64_t>(ValueStats::kTopK, candidates.numel());
    if (k == 0) return;
    const Tensor t = std::get<0>(at::topk(candidates, k));
    top_ = top_.defined() ? std::get<0>(at::topk(at::cat({top_, t}),
                                                 std::min<int64_t>(ValueStats::kTopK, top_.numel() + k)))
                          : t;
  }

  ValueStats finish() const {
    ValueStats s;
    if (!counts_.defined()) return s;
    const std::vector<float> tops = top_.defined() ? to_vector(top_) : std::vector<float>{};
    const Tensor c = counts_.to(at::kCPU).contiguous();
    const double* cp = c.data_ptr<double>();
    s.histogram.below = static_cast<uint64_t>(cp[0]);
    for (int i = 0; i < LogHistogram::kBins; ++i) s.histogram.counts[i] = static_cast<uint64_t>(cp[i + 1]);
    s.histogram.above = static_cast<uint64_t>(cp[LogHistogram::kBins + 1]);
    s.count = s.histogram.total();
    if (s.count == 0) return s;
    s.mean = static_cast<float>(sum_.item<double>() / static_cast<double>(s.count));
    for (float t : tops)
      if (t >= 0 && s.top.size() < std::min<uint64_t>(ValueStats::kTopK, s.count)) s.top.push_back(t);
    s.median = static_cast<float>(s.histogram.quantile(0.5));
    return s;
  }

 private:
  Tensor counts_, sum_, top_;
};

// glibc serves every block over 32 MB with a fresh mmap and unmaps it on free, so each [H, T, T] map
// of a capture is page-faulted in anew: measured here at T=1024, 3.5-5.6 s per capture with more system
// than user time, against 0.42 s when large blocks come from the heap and stay there. A 512 MB trim
// threshold still let DIFF captures (≈0.5 GB transient) bounce between 0.41 and 1.15 s, so up to 2 GB of
// freed heap is kept for reuse. Process-wide; applied once, before the first model exists.
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

// The device a module's parameters live on (a model's layers may be spread over several, place_layers).
at::Device device_of(const torch::nn::Module& m) {
  for (const auto& p : m.parameters()) return p.device();
  return at::Device(at::kCPU);
}

// RoPE tables of one prompt on each device its layers use, made on first use.
class RopeByDevice {
 public:
  RopeByDevice(int64_t T, const ModelConfig& c) : T_(T), c_(c) {}
  const nn::Rope& on(at::Device d) {
    for (const auto& [device, rope] : tables_)
      if (device == d) return *rope;
    tables_.emplace_back(d, std::make_unique<nn::Rope>(T_, c_, d));
    return *tables_.back().second;
  }

 private:
  int64_t T_;
  const ModelConfig& c_;
  std::vector<std::pair<at::Device, std::unique_ptr<nn::Rope>>> tables_;
};

// Bins of a pooled map (viz::pool_region's): cell r covers rows/columns [r·T/P, (r+1)·T/P); `count` holds
// each cell's number of causal entries (key <= query).
struct PoolGrid {
  int64_t T = 0, P = 0;
  std::vector<int64_t> bin;    // token -> cell index
  std::vector<int64_t> start;  // cell -> its first token (P + 1 values, the last = T)
  std::vector<int64_t> count;  // [P, P]
  PoolGrid(int64_t T_, int64_t P_) : T(T_), P(P_) {
    if (P == 0) return;
    start.resize(static_cast<size_t>(P + 1));
    for (int64_t r = 0; r <= P; ++r) start[static_cast<size_t>(r)] = r * T / P;
    bin.resize(static_cast<size_t>(T));
    for (int64_t r = 0; r < P; ++r)
      for (int64_t i = r * T / P; i < (r + 1) * T / P; ++i) bin[static_cast<size_t>(i)] = r;
    count.assign(static_cast<size_t>(P * P), 0);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t r = bin[static_cast<size_t>(i)];
      for (int64_t cc = 0; cc <= r; ++cc) {
        const int64_t c0 = cc * T / P, c1 = std::min((cc + 1) * T / P, i + 1);
        count[static_cast<size_t>(r * P + cc)] += c1 - c0;
      }
    }
  }
};

// Pooling of a blocked capture's maps with tensor operations on the maps' own device (the GPU path: the
// maps never leave the device, and the pooled sums and largest-magnitude entries are read back once per
// layer). Every cell's tokens are listed in a [P, W] table (W: the widest cell), short cells padded with
// their own first token: a repeated entry cannot change a cell's largest magnitude, and a mask leaves it
// out of the sums. A block's rows and keys are gathered through this table, clamped to the block's range,
// which keeps every clamped slot inside its own cell (only the block's first and last cells are cut).
class DevicePooler {
 public:
  DevicePooler(const PoolGrid& grid, int64_t heads, int64_t maps, bool signed_last, at::Device dev)
      : grid_(grid), signed_last_(signed_last) {
    int64_t W = 1;
    for (int64_t c = 0; c < grid.P; ++c) W = std::max(W, grid.start[c + 1] - grid.start[c]);
    std::vector<int64_t> slots(static_cast<size_t>(grid.P * W));
    std::vector<uint8_t> own(slots.size());
    for (int64_t c = 0; c < grid.P; ++c)
      for (int64_t w = 0; w < W; ++w) {
        const int64_t t = grid.start[c] + w;
        const bool in = t < grid.start[c + 1];
        slots[static_cast<size_t>(c * W + w)] = in ? t : grid.start[c];
        own[static_cast<size_t>(c * W + w)] = in;
      }
    slots_ = at::tensor(slots, at::TensorOptions().dtype(at::kLong)).view({grid.P, W}).to(dev);
    own_ = at::tensor(at::ArrayRef<uint8_t>(own), at::TensorOptions().dtype(at::kByte))
               .view({grid.P, W})
               .to(dev, at::kBool);
    for (int64_t m = 0; m < maps; ++m) {
      sum_.push_back(at::zeros({heads, grid.P, grid.P}, at::TensorOptions().device(dev)));
      best_.push_back(at::zeros({heads, grid.P, grid.P}, at::TensorOptions().device(dev)));
    }
  }

  // Adds map `m` of a block, a [heads, rows, keys] slice (query rows [row0, row0 + rows), keys [0, keys)).
  // Entries of the causal future are 0 in the maps and change neither sums nor largest magnitudes.
  void add(int64_t m, const Tensor& a, int64_t row0) {
    const int64_t heads = a.size(0), rows = a.size(1), keys = a.size(2);
    const bool may_be_negative = signed_last_ && m + 1 == static_cast<int64_t>(sum_.size());
    auto [kc0, kslot, kown] = cells(0, keys);
    auto [rc0, rslot, rown] = cells(row0, row0 + rows);
    const int64_t kp = kslot.size(0), kw = kslot.size(1), rp = rslot.size(0), rw = rslot.size(1);
    // Keys first: [heads, rows, kp, kw] -> per row and key cell.
    const Tensor g = a.index_select(2, kslot.flatten()).view({heads, rows, kp, kw});
    const Tensor colsum = (g * kown).sum(-1);  // [heads, rows, kp]
    const Tensor colmax = g.amax(-1);
    // Then rows: [heads, rp, rw, kp] -> per cell.
    auto by_rows = [&](const Tensor& t) {
      return t.index_select(1, rslot.flatten()).view({heads, rp, rw, kp});
    };
    const Tensor cellsum = (by_rows(colsum) * rown.unsqueeze(-1)).sum(2);  // [heads, rp, kp]
    Tensor top = by_rows(colmax).amax(2);
    if (may_be_negative) {
      const Tensor low = by_rows(g.amin(-1)).amin(2);
      top = at::where(top.ge(low.neg()), top, low);  // ties of +x and -x: +x
    }
    sum_[static_cast<size_t>(m)].narrow(1, rc0, rp).narrow(2, kc0, kp).add_(cellsum);
    Tensor best = best_[static_cast<size_t>(m)].narrow(1, rc0, rp).narrow(2, kc0, kp);
    best.copy_(at::where(top.abs().gt(best.abs()), top, best));
  }

  // Sums and largest magnitudes of map m, [heads, P, P], on the host.
  std::vector<float> sums(int64_t m) const { return to_vector(sum_[static_cast<size_t>(m)]); }
  std::vector<float> bests(int64_t m) const { return to_vector(best_[static_cast<size_t>(m)]); }

 private:
  // The cells that tokens [t0, t1) touch: the first one, the slot table of those cells (token offsets from
  // t0, clamped into [0, t1 - t0)) and which slots are the cells' own tokens inside the range.
  std::tuple<int64_t, Tensor, Tensor> cells(int64_t t0, int64_t t1) const {
    const int64_t c0 = grid_.bin[static_cast<size_t>(t0)], c1 = grid_.bin[static_cast<size_t>(t1 - 1)];
    const Tensor s = slots_.narrow(0, c0, c1 - c0 + 1);
    const Tensor own = own_.narrow(0, c0, c1 - c0 + 1).logical_and(s.ge(t0)).logical_and(s.lt(t1));
    return {c0, s.clamp(t0, t1 - 1).sub_(t0), own};
  }

  const PoolGrid& grid_;
  bool signed_last_;  // the last map (DIFF's A1 − λA2) can be negative
  Tensor slots_, own_;
  std::vector<Tensor> sum_, best_;
};

// A DIFF layer's λ and its parts, from the inputs its attention ran with.
void keep_lambda(const nn::AttentionInputs& in, LayerTrace& lt) {
  if (!in.diff()) return;
  if (in.lambda_rows.defined()) {  // DIFF V2: per head and token
    lt.lambda_rows = to_array(in.lambda_rows[0]);
    lt.lambda_logits = to_array(in.lambda_logits[0]);
    double sum = 0;
    for (float x : lt.lambda_rows.data) sum += x;
    lt.lambda = lt.lambda_rows.data.empty() ? 0 : sum / static_cast<double>(lt.lambda_rows.data.size());
    return;
  }
  lt.lambda = in.lambda.item<double>();
  lt.lambda_exp1 = in.lambda_exp1.item<double>();
  lt.lambda_exp2 = in.lambda_exp2.item<double>();
  lt.lambda_init = in.lambda_init;
}

// A layer --layers selects (every layer when none is named): what keep_logits, keep_hidden and keep_qkv
// keep, whether or not its maps are kept (--no-maps).
bool layer_selected(const CaptureOptions& o, int64_t layer) {
  return o.layers.empty() || std::find(o.layers.begin(), o.layers.end(), layer) != o.layers.end();
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

// A layer's inputs as the CPU's fused pass (core/attention_cpu.h) reads them: contiguous float32 on the
// host, kept alive as long as this object.
struct FusedInputs {
  Tensor q1, k1, q2, k2, v, lambda_rows;
  CpuAttentionInputs ci;
  FusedInputs(const nn::AttentionInputs& in, const ModelConfig& c, int bits) {
    q1 = in.q1[0].to(at::kCPU, at::kFloat).contiguous();
    k1 = in.k1[0].to(at::kCPU, at::kFloat).contiguous();
    v = in.v[0].to(at::kCPU, at::kFloat).contiguous();
    ci.T = q1.size(1);
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
  }
};

// The CPU passes' parallel loop (attention, layer_cpu): LibTorch's intra-op threads, each claiming the next
// few jobs as it comes free. A fixed split into one range per thread made every pass wait for its slower
// half: the same work measured 20-35 % idle on one of this VM's two cores.
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

// The columns of each attention input in a row of the stacked q | k | v (| λ) projection, as nn.h's
// inputs() split them (BaselineAttention; DiffAttention::components, adjacent or split pairing;
// DiffV2Attention). tests/test_layer_cpu.cpp holds every architecture's inputs equal to the modules'.
void attention_columns(const ModelConfig& c, CpuLayer& L) {
  const int64_t d = c.head_dim, nq = c.num_attention_heads, nk = c.num_key_value_heads;
  const int64_t k0 = nq * d, v0 = k0 + nk * d;
  L.d = d;
  if (!c.is_diff()) {
    L.heads = nq;
    L.kv_heads = nk;
    L.dv = d;
    for (int64_t h = 0; h < nq; ++h) L.q1_col.push_back(h * d);
    for (int64_t g = 0; g < nk; ++g) {
      L.k1_col.push_back(k0 + g * d);
      L.v_col.push_back(v0 + g * d);
    }
    return;
  }
  if (c.is_diff_v2()) {  // q [H, 2, d] (sub-heads 2h, 2h + 1); keys and values [Hkv, d]; then H λ logits
    L.heads = nq / 2;
    L.kv_heads = nk;
    L.dv = d;
    for (int64_t h = 0; h < L.heads; ++h) {
      L.q1_col.push_back(2 * h * d);
      L.q2_col.push_back((2 * h + 1) * d);
    }
    for (int64_t g = 0; g < nk; ++g) {
      L.k1_col.push_back(k0 + g * d);
      L.v_col.push_back(v0 + g * d);
    }
    L.lambda_col = v0 + nk * d;
    return;
  }
  // DIFF V1: component `which` of head h among n, adjacent [n, 2, d] or split [2, n, d]; a value head is
  // its two components side by side (2d).
  const bool adjacent = c.diff_pairing == DiffPairing::Adjacent;
  auto part = [&](int64_t base, int64_t n, int64_t h, int64_t which) {
    return base + (adjacent ? 2 * h + which : which * n + h) * d;
  };
  L.heads = nq / 2;
  L.kv_heads = nk / 2;
  L.dv = 2 * d;
  for (int64_t h = 0; h < L.heads; ++h) {
    L.q1_col.push_back(part(0, L.heads, h, 0));
    L.q2_col.push_back(part(0, L.heads, h, 1));
  }
  for (int64_t g = 0; g < L.kv_heads; ++g) {
    L.k1_col.push_back(part(k0, L.kv_heads, g, 0));
    L.k2_col.push_back(part(k0, L.kv_heads, g, 1));
    L.v_col.push_back(part(v0, L.kv_heads, g, 0));
    L.v_col.push_back(part(v0, L.kv_heads, g, 1));
  }
}

}  // namespace

// A layer as the plain-C++ passes read it (core/layer_cpu.h): its weights packed, the norm weights as
// float32, and what the packing saw of each weight (its storage and version), so that a weight changed
// in place or moved is packed again.
struct CpuLayerPack {
  CpuLayer layer;
  Tensor input_norm, post_norm, head_norm;
  std::vector<std::pair<const void*, int64_t>> seen;

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
    attention_columns(c, L);
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
  if (per_layer * static_cast<double>(c.num_hidden_layers) > packed_budget_bytes()) return nullptr;
  if (cache.layers.size() != static_cast<size_t>(c.num_hidden_layers))
    cache.layers.assign(static_cast<size_t>(c.num_hidden_layers), nullptr);
  auto& slot = cache.layers[static_cast<size_t>(i)];
  if (!slot || slot->seen != CpuLayerPack::look(l)) slot = std::make_shared<const CpuLayerPack>(l, c);
  return slot;
}

// Layer i (`layer`) of a capture on the CPU over h [1, T, E] -> [1, T, E], the heads' outputs computed by
// `attend(in)` (the fused attention pass, core/attention_cpu.h) -> o [1, H, T, dv]; `in` receives the
// attention's inputs. The layer's other work runs in plain C++ when its packed weights fit the budget,
// else as the LibTorch modules.
template <typename Attend>
Tensor forward_cpu(CpuLayerCache& cache, const ModelConfig& c, nn::DecoderLayerImpl& layer, int64_t i,
                   const Tensor& h, const nn::Rope& rope, nn::AttentionInputs& in, Attend&& attend) {
  const std::shared_ptr<const CpuLayerPack> pack = cpu_layer(cache, c, layer, i);
  if (!pack) return layer.forward_with(h, rope, in, attend);
  const CpuLayer& L = pack->layer;
  const int64_t T = h.size(1);
  Tensor out = h.to(at::kFloat).contiguous().clone();  // [1, T, E]: the inputs read it, the output adds to it
  const auto f = at::TensorOptions().dtype(at::kFloat);
  in = nn::AttentionInputs();
  CpuLayerInputs io;
  in.q1 = at::empty({1, L.heads, T, L.d}, f);
  in.k1 = at::empty({1, L.kv_heads, T, L.d}, f);
  in.v = at::empty({1, L.kv_heads, T, L.dv}, f);
  io.q1 = in.q1.data_ptr<float>();
  io.k1 = in.k1.data_ptr<float>();
  io.v = in.v.data_ptr<float>();
  if (!L.q2_col.empty()) {
    in.q2 = at::empty({1, L.heads, T, L.d}, f);
    io.q2 = in.q2.data_ptr<float>();
    if (L.k2_col.empty()) {
      in.k2 = in.k1;  // DIFF V2: both components read one set of keys
    } else {
      in.k2 = at::empty({1, L.kv_heads, T, L.d}, f);
      io.k2 = in.k2.data_ptr<float>();
    }
  }
  if (L.lambda_col >= 0) {
    in.lambda_logits = at::empty({1, L.heads, T}, f);
    in.lambda_rows = at::empty({1, L.heads, T}, f);
    io.lambda_logits = in.lambda_logits.data_ptr<float>();
    io.lambda_rows = in.lambda_rows.data_ptr<float>();
  }
  const Tensor cos = rope.cos.to(at::kFloat).contiguous(), sin = rope.sin.to(at::kFloat).contiguous();
  const int workers = at::get_num_threads();
  layer_inputs_cpu(L, out.data_ptr<float>(), T, cos.data_ptr<float>(), sin.data_ptr<float>(), io, workers,
                   cpu_parallel());
  if (layer.diff_attn) layer.diff_attn->set_lambda(in);
  const Tensor o = attend(static_cast<const nn::AttentionInputs&>(in)).to(at::kFloat).contiguous();
  layer_output_cpu(L, o.data_ptr<float>(), out.data_ptr<float>(), T, workers, cpu_parallel());
  return out;
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
  // Pooling on the maps' device (tensor operations, one read-back per layer) or on the host (a CPU model:
  // the fused pass; a GPU model: the loops of pool_host): see CaptureOptions::pooling. Rows per block: see
  // plan_capture.
  const bool on_device = plan.pool_on_device;
  const int64_t block_rows = plan.block_rows;
  const size_t nh = keep_heads.size();
  const size_t cells = static_cast<size_t>(P * P);
  std::vector<std::vector<float>> sum(nh * static_cast<size_t>(maps),
                                      std::vector<float>(on_device ? 0 : cells, 0.0f));
  std::vector<std::vector<float>> best(nh * static_cast<size_t>(maps),
                                       std::vector<float>(on_device ? 0 : cells, 0.0f));
  const at::Device lse_device = on_device ? h.device() : at::Device(at::kCPU);
  Tensor lse1 = at::empty({H, T}, at::TensorOptions().device(lse_device));
  Tensor lse2 = diff ? at::empty({H, T}, at::TensorOptions().device(lse_device)) : Tensor();
  ValueStats stats;
  StreamingStats streamed;
  bool have_stats = false;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(h.device());
  std::unique_ptr<DevicePooler> pooler;
  Tensor head_index;
  if (on_device && nh > 0) {
    pooler = std::make_unique<DevicePooler>(grid, static_cast<int64_t>(nh), maps, diff, h.device());
    if (!plan.all_heads) head_index = at::tensor(keep_heads, opts);
  }
  // Adds the maps of query rows [row0, row0 + rows) to the host's pooled cells (a GPU model pooling on the
  // host): src[m] holds map m of the block for every head, [heads, rows, keys].
  auto pool_host = [&](const float* const src[3], int64_t row0, int64_t rows) {
    const int64_t K = row0 + rows;
    at::parallel_for(0, static_cast<int64_t>(nh) * maps, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t job = lo; job < hi; ++job) {
        const int64_t k = job / maps, m = job % maps;
        const float* a = src[m] + keep_heads[static_cast<size_t>(k)] * rows * K;
        float* su = sum[static_cast<size_t>(job)].data();
        float* be = best[static_cast<size_t>(job)].data();
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t q = row0 + i;
          const int64_t rb = grid.bin[static_cast<size_t>(q)];
          const float* row = a + i * K;
          // One column cell at a time: a tight loop over its keys, then one update of the cell.
          for (int64_t c = 0; c <= rb; ++c) {
            const int64_t j0 = grid.start[static_cast<size_t>(c)];
            const int64_t j1 = std::min(grid.start[static_cast<size_t>(c + 1)], q + 1);
            float sum = 0, top = be[static_cast<size_t>(rb * P + c)];
            for (int64_t j = j0; j < j1; ++j) {
              const float v = row[j];
              sum += v;
              if (std::fabs(v) > std::fabs(top)) top = v;
            }
            su[static_cast<size_t>(rb * P + c)] += sum;
            be[static_cast<size_t>(rb * P + c)] = top;
          }
        }
      }
    });
  };
  nn::AttentionInputs in;
  if (!on_device && !h.is_cuda()) {  // the CPU: the fused pass block by block, pooling as it goes
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
  } else {
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
        if (on_device && !one_block) {
          streamed.add(b.l1, skip);
          if (diff) streamed.add(b.l2, skip);
        } else {
          ValueStats s =
              diff ? value_stats({b.l1, b.l2}, skip, one_block) : value_stats({b.l1}, skip, one_block);
          if (!have_stats)
            stats = std::move(s);
          else
            stats.merge(s);
        }
        have_stats = true;
      }
      if (nh == 0) return;
      const Tensor* src[3] = {diff ? &b.a1 : &b.a, diff ? &b.a2 : nullptr, diff ? &b.a : nullptr};
      if (on_device) {
        for (int64_t m = 0; m < maps; ++m)
          pooler->add(m, head_index.defined() ? src[m]->index_select(0, head_index) : *src[m], b.row0);
        return;
      }
      std::vector<Tensor> cpu;
      for (int64_t m = 0; m < maps; ++m) cpu.push_back(src[m]->to(at::kCPU, at::kFloat).contiguous());
      const float* host[3] = {cpu[0].data_ptr<float>(), diff ? cpu[1].data_ptr<float>() : nullptr,
                              diff ? cpu[2].data_ptr<float>() : nullptr};
      pool_host(host, b.row0, b.rows);
    });
  }
  LayerTrace lt;
  lt.index = index;
  lt.pooled = P;
  keep_lambda(in, lt);
  if (have_stats) lt.logit_stats = on_device && grid.T > block_rows ? streamed.finish() : std::move(stats);
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
    if (pooler)  // one read-back per map: [heads, P, P] sums and largest magnitudes
      for (int64_t m = 0; m < maps; ++m) {
        const std::vector<float> su = pooler->sums(m), be = pooler->bests(m);
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

void tune_allocator() {
#if defined(__GLIBC__)
  static const bool done = [] {
    mallopt(M_ARENA_MAX, 1);  // other threads' arenas are 64 MB heaps: a worker thread ran 7x slower
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 2047 * 1024 * 1024);
    mallopt(M_TOP_PAD, 64 * 1024 * 1024);
    return true;
  }();
  (void)done;
#endif
}

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

bool cuda_memory(uint64_t& free_bytes, uint64_t& total_bytes) {
  free_bytes = total_bytes = 0;
  if (!torch::cuda::is_available()) return false;
  // cudaError_t cudaMemGetInfo(size_t*, size_t*) of the runtime LibTorch's CUDA library links (0: success).
  using MemGetInfo = int (*)(size_t*, size_t*);
  static const auto get_info = reinterpret_cast<MemGetInfo>(dlsym(RTLD_DEFAULT, "cudaMemGetInfo"));
  size_t f = 0, t = 0;
  if (!get_info || get_info(&f, &t) != 0 || t == 0) return false;
  free_bytes = f;
  total_bytes = t;
  return true;
}
int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

bool cuda_memory_on(int device, uint64_t& free_bytes, uint64_t& total_bytes) {
  free_bytes = total_bytes = 0;
  if (!torch::cuda::is_available()) return false;
  using GetDevice = int (*)(int*);
  using SetDevice = int (*)(int);
  static const auto get_device = reinterpret_cast<GetDevice>(dlsym(RTLD_DEFAULT, "cudaGetDevice"));
  static const auto set_device = reinterpret_cast<SetDevice>(dlsym(RTLD_DEFAULT, "cudaSetDevice"));
  int current = 0;
  if (!get_device || !set_device || get_device(&current) != 0 || set_device(device) != 0) return false;
  const bool ok = cuda_memory(free_bytes, total_bytes);
  set_device(current);
  return ok;
}

void set_num_threads(int threads) {
  at::set_num_threads(std::max(1, threads));
}
int num_threads() {
  return at::get_num_threads();
}

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

namespace {

// A Hugging Face directory's tokenizer: SentencePiece (tokenizer.model) when present, else what the
// directory offers; `note` says why text cannot be encoded when no usable tokenizer is there.
Tokenizer hf_tokenizer(const std::filesystem::path& dir, ModelConfig& config, std::string& note) {
  if (std::filesystem::exists(dir / "tokenizer.model")) {
    Tokenizer t = Tokenizer::sentencepiece(dir / "tokenizer.model");
    if (t.vocab_size() > config.vocab_size)
      throw Error((dir / "tokenizer.model").string() + ": has " + std::to_string(t.vocab_size()) +
                  " pieces, more than the model's vocab_size " + std::to_string(config.vocab_size));
    config.tokenizer = TokenizerKind::SentencePiece;
    return t;
  }
  config.tokenizer = TokenizerKind::ByteLevelBpe;
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    try {
      Tokenizer t =
          Tokenizer::byte_level_bpe(dir / "tokenizer.json", config.bos_token_id, config.eos_token_id);
      if (t.vocab_size() > config.vocab_size)
        throw Error("it has " + std::to_string(t.vocab_size()) +
                    " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size));
      return t;
    } catch (const std::exception& e) {  // the weights are still worth exploring with token ids
      note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
      return Tokenizer::without_files(config);
    }
  }
  note = "no tokenizer.model or tokenizer.json in the directory: give token ids";
  return Tokenizer::without_files(config);
}

// The tokenizer for a checkpoint directory (its config may be updated with the tokenizer kind found).
Tokenizer directory_tokenizer(const std::filesystem::path& dir, ModelConfig& config, std::string& note) {
  if (config.architecture != "difflens") return hf_tokenizer(dir, config, note);
  if (config.tokenizer == TokenizerKind::ByteLevelBpe) {
    try {  // as for Hugging Face directories: an unusable tokenizer.json leaves token ids
      return Tokenizer::for_model(dir, config);
    } catch (const std::exception& e) {
      note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
      return Tokenizer::without_files(config);
    }
  }
  if (config.tokenizer == TokenizerKind::SentencePiece) {
    try {  // the weights are usable without it: token ids instead of text
      return Tokenizer::for_model(dir, config);
    } catch (const std::exception& e) {
      note = std::string("tokenizer not usable (") + e.what() + "): give token ids";
      return Tokenizer::without_files(config);
    }
  }
  return Tokenizer::for_model(dir, config);
}

}  // namespace

Tokenizer Model::load_tokenizer(const std::filesystem::path& dir, std::string& note) {
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": not a model directory");
  ModelConfig config = load_config(dir / "config.json");
  return directory_tokenizer(dir, config, note);
}

Model Model::load(const std::filesystem::path& dir, DeviceChoice device,
                  const std::function<void(int64_t, int64_t)>& progress, const std::atomic<bool>* cancel) {
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": not a model directory");
  ModelConfig config = load_config(dir / "config.json");
  std::string note;
  Tokenizer tokenizer = directory_tokenizer(dir, config, note);
  if (config.name.empty())
    config.name = std::filesystem::absolute(dir).lexically_normal().filename().string();
  if (config.name.empty()) config.name = dir.string();
  const CheckpointFiles files(dir);
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
      throw FormatError(e->file->path().string() + ": tensor '" + name + "' is " +
                        shape_string(e->info->shape) + ", config expects " + shape_string(expected));
    std::vector<float> data = e->file->read_f32(*e->info);
    if (progress) progress(++done, total);
    return data;
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
std::string Model::device_name() const {
  const auto devices = layer_devices();
  std::string out;
  size_t first = 0;
  for (size_t i = 1; i <= devices.size(); ++i)
    if (i == devices.size() || devices[i] != devices[first]) {
      if (first == 0 && i == devices.size()) return devices[0];  // one device
      out += (out.empty() ? "" : ", ") + devices[first] + " (layers " + std::to_string(first) +
             (i - 1 > first ? "-" + std::to_string(i - 1) : "") + ")";
      first = i;
    }
  return out.empty() ? impl_->device.str() : out;
}

std::vector<std::string> Model::layer_devices() const {
  std::vector<std::string> out;
  for (const auto& layer : impl_->net->model->layer_ptrs) out.push_back(device_of(*layer).str());
  return out;
}

std::vector<int> Model::place_layers(const std::vector<std::string>& devices) {
  if (devices.empty()) throw Error("--device: no devices given");
  std::vector<at::Device> ds;
  std::vector<double> capacity;
  const uint64_t host = available_memory_bytes();
  size_t cpus = 0;
  for (const std::string& d : devices) cpus += d == "cpu";
  for (const std::string& d : devices) {
    at::Device dev(at::kCPU);
    try {
      dev = at::Device(d);
    } catch (const c10::Error&) {
      throw Error("--device: '" + d + "' is not a device (cuda:0, cuda:1, ... or cpu)");
    }
    if (dev.is_cuda()) {
      if (!torch::cuda::is_available())
        throw Error("--device " + d + ": this LibTorch build has no usable CUDA device");
      const int index = dev.has_index() ? dev.index() : 0;
      if (index >= static_cast<int>(torch::cuda::device_count()))
        throw Error("--device " + d + ": this machine has " + std::to_string(torch::cuda::device_count()) +
                    " GPU(s)");
      dev = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
      uint64_t free_bytes = 0, total = 0;
      if (!cuda_memory_on(index, free_bytes, total))
        throw Error("--device " + d + ": cannot read its free memory");
      // What this model already holds there counts as room; a tenth is kept for the activations.
      double held = 0;
      for (const auto& p : impl_->net->parameters())
        if (p.device() == dev) held += static_cast<double>(p.numel() * p.element_size());
      capacity.push_back(0.9 * static_cast<double>(free_bytes) + held);
    } else if (dev.is_cpu()) {
      capacity.push_back(host > 0 ? static_cast<double>(host) / static_cast<double>(cpus) : 1e18);
    } else {
      throw Error("--device: '" + d + "' is neither a GPU nor the CPU");
    }
    if (!ds.empty() && dev.is_cuda() != ds.front().is_cuda())
      throw Error("--device " + d + ": the layers go on GPUs or on the CPU, not both");
    ds.push_back(dev);
  }
  auto bytes_of = [](const torch::nn::Module& m) {
    double b = 0;
    for (const auto& p : m.parameters()) b += static_cast<double>(p.numel() * p.element_size());
    return b;
  };
  auto& model = *impl_->net->model;
  std::vector<double> layer_bytes;
  for (const auto& layer : model.layer_ptrs) layer_bytes.push_back(bytes_of(*layer));
  const double last = bytes_of(*model.norm) + (impl_->net->lm_head ? bytes_of(*impl_->net->lm_head) : 0.0);
  const std::vector<int> plan =
      plan_layer_split(layer_bytes, bytes_of(*model.embed_tokens), last, capacity, devices);
  at::NoGradGuard no_grad;
  model.embed_tokens->to(ds[static_cast<size_t>(plan.front())]);
  for (size_t i = 0; i < plan.size(); ++i) model.layer_ptrs[i]->to(ds[static_cast<size_t>(plan[i])]);
  model.norm->to(ds[static_cast<size_t>(plan.back())]);
  if (impl_->net->lm_head) impl_->net->lm_head->to(ds[static_cast<size_t>(plan.back())]);
  impl_->device = ds[static_cast<size_t>(plan.front())];
  return plan;
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

// One layer's attention by the fused pass: the maps the plan keeps, the logits and statistics asked for,
// written straight into the layer's trace; returns the heads' outputs o [1, H, T, dv].
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

Trace Model::capture(const std::vector<int64_t>& ids, const CaptureOptions& options,
                     const std::atomic<bool>* cancel) const {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = impl_->config;
  const at::Device dev = impl_->device;
  CaptureMachine machine;
  machine.host_available = available_memory_bytes();
  machine.cuda = dev.is_cuda();
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
  Trace trace;
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

std::vector<int64_t> Model::generate(const std::vector<int64_t>& ids, int max_new, double temperature,
                                     int top_k, uint64_t seed) const {
  const ModelConfig& c = impl_->config;
  if (ids.empty()) throw Error("generate: the prompt is empty");
  c10::InferenceMode inference;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> all = ids, out;
  for (int i = 0; i < max_new && static_cast<int64_t>(all.size()) < c.max_position_embeddings; ++i) {
    Tensor x = at::tensor(all, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(impl_->device);
    // On the CPU the fused pass (heads' outputs only: no maps, no statistics); on a GPU the tensor blocks,
    // long contexts in blocks of query rows, never a T x T tensor per layer.
    const int64_t T = x.size(1), block_rows = T <= 1024 ? T : 256;
    RopeByDevice ropes(T, c);
    Tensor h = impl_->net->model->embed_tokens(x);
    for (size_t i = 0; i < impl_->net->model->layer_ptrs.size(); ++i) {
      auto& layer = impl_->net->model->layer_ptrs[i];
      nn::AttentionInputs in;
      const at::Device ld = device_of(*layer);
      if (h.device() != ld) h = h.to(ld);
      const nn::Rope& rope = ropes.on(ld);
      if (!ld.is_cuda()) {
        CaptureOptions outputs_only;
        outputs_only.logit_stats = false;
        LayerTrace unused;
        h = forward_cpu(impl_->cpu_cache, c, *layer, static_cast<int64_t>(i), h, rope, in,
                        [&](const nn::AttentionInputs& inputs) {
                          return attend_fused(inputs, c, layer->logit_bits, nullptr, outputs_only, unused);
                        });
      } else {
        h = layer->forward_blocked(h, rope, block_rows, in, [](const nn::AttentionBlock&) {});
      }
    }
    const Tensor logits = impl_->next_logits(h[0][T - 1]).to(at::kCPU, at::kFloat);
    int64_t next;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto [vals, idx] = at::topk(logits, std::min<int64_t>(std::max(top_k, 1), c.vocab_size));
      Tensor probs = at::softmax(vals / temperature, -1);
      next = idx[at::multinomial(probs, 1, false, gen).item<int64_t>()].item<int64_t>();
    }
    all.push_back(next);
    out.push_back(next);
    if (next == c.eos_token_id) break;
  }
  return out;
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
  const Rope rope(T, c, dev);
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
