// The pooled maps of a long-prompt capture (pooling.h): the grid, the host's loops over a block's maps, and
// the same cells by core/cuda's kernels (KernelPooler).
#include "core/model/pooling.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

#include "core/formats/error.h"
#include "core/model/to_host.h"

#ifdef DIFFLENS_CUDA_CAPTURE
#include "core/cuda/pooled_attention.h"
#endif

namespace difflens {

using at::Tensor;

PoolGrid::PoolGrid(int64_t T_, int64_t P_) : T(T_), P(P_) {
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

void pool_block_on_host(const PoolGrid& grid, const std::vector<int64_t>& keep_heads, int64_t maps,
                        const float* const src[3], int64_t row0, int64_t rows,
                        std::vector<std::vector<float>>& sum, std::vector<std::vector<float>>& best) {
  const int64_t P = grid.P;
  const size_t nh = keep_heads.size();
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
}

// ---- KernelPooler ----

#ifdef DIFFLENS_CUDA_CAPTURE
static_assert(cuda::kLogMin == LogHistogram::kLogMin &&
                  cuda::kBinsPerDecade == LogHistogram::kBinsPerDecade &&
                  cuda::kBins == LogHistogram::kBins && cuda::kTopK == ValueStats::kTopK,
              "the kernels' statistics must be laid out as LogHistogram and ValueStats");

namespace {
void check_cuda(int code, const char* what) {
  if (code != 0)
    throw Error(std::string("CUDA kernel ") + what + " failed (cudaError_t " + std::to_string(code) + ")");
}
}  // namespace

std::string KernelPooler::unsupported(int64_t d, bool diff) {
  if (cuda::supports(static_cast<int>(d), diff)) return "";
  return "the CUDA kernels take components up to " + std::string(diff ? "64 wide for DIFF" : "128 wide") +
         "; this model's are " + std::to_string(d);
}

KernelPooler::KernelPooler(const PoolGrid& grid, const std::vector<int64_t>& keep_heads, int64_t heads,
                           bool diff, at::Device dev, size_t products_bytes)
    : grid_(grid), diff_(diff), heads_(heads), products_bytes_(products_bytes) {
  const auto ints = at::TensorOptions().dtype(at::kInt);
  std::vector<int32_t> bin(grid.bin.begin(), grid.bin.end());
  bin_ = at::tensor(bin, ints).to(dev);
  if (!keep_heads.empty()) {
    std::vector<int32_t> slot(static_cast<size_t>(heads), -1);
    for (size_t k = 0; k < keep_heads.size(); ++k)
      slot[static_cast<size_t>(keep_heads[k])] = static_cast<int32_t>(k);
    slot_ = at::tensor(slot, ints).to(dev);
    const int64_t nh = static_cast<int64_t>(keep_heads.size());
    for (int64_t m = 0; m < (diff ? 3 : 1); ++m) {
      sum_.push_back(at::zeros({nh, grid.P, grid.P}, at::TensorOptions().device(dev)));
      best_.push_back(at::zeros({nh, grid.P, grid.P}, at::TensorOptions().device(dev)));
    }
  }
}

std::string KernelPooler::unbuilt() {
  return "";
}

void KernelPooler::run(const Tensor& q1, const Tensor& k1, const Tensor& q2, const Tensor& k2,
                       const Tensor& lambda, const Tensor& lambda_rows, int64_t window, bool stats,
                       int64_t stats_from, int64_t chunk_rows, const std::function<void()>& between) {
  auto f32 = [](const Tensor& t) { return t.defined() ? t.to(at::kFloat).contiguous() : t; };
  const Tensor Q1 = f32(q1), K1 = f32(k1), Q2 = diff_ ? f32(q2) : Tensor(), K2 = diff_ ? f32(k2) : Tensor();
  const int64_t H = Q1.size(0), T = Q1.size(1), d = Q1.size(2);
  if (H != heads_ || T != grid_.T)
    throw Error("KernelPooler: the inputs' heads or tokens differ from the grid's");
  const bool products = products_bytes_ > 0;
  if (!products) {
    const std::string why = unsupported(d, diff_);
    if (!why.empty()) throw Error(why);
  }
  const auto floats = Q1.options();
  // LibTorch's operations and the kernels share the default stream (DiffLens never sets another).
  void* stream = nullptr;
  lse1 = at::empty({H, T}, floats);
  lse2 = diff_ ? at::empty({H, T}, floats) : Tensor();
  const Tensor max_abs = stats ? at::empty({H, T}, floats) : Tensor();
  chunk_rows = std::clamp<int64_t>(chunk_rows, 1, T);
  auto rows_of = [&](cuda::AttentionRows& a) {
    a.q1 = Q1.data_ptr<float>();
    a.k1 = K1.data_ptr<float>();
    if (diff_) {
      a.q2 = Q2.data_ptr<float>();
      a.k2 = K2.data_ptr<float>();
    }
    a.H = static_cast<int>(H);
    a.Hkv = static_cast<int>(K1.size(0));
    a.T = static_cast<int>(T);
    a.d = static_cast<int>(d);
    a.window = static_cast<int>(window);
    a.stream = stream;
    a.device = Q1.device().index();
  };
  cuda::RowLseArgs la;
  rows_of(la);
  la.lse1 = lse1.data_ptr<float>();
  if (diff_) la.lse2 = lse2.data_ptr<float>();
  if (stats) la.max_abs = max_abs.data_ptr<float>();

  cuda::PooledAttentionArgs pa;
  rows_of(pa);
  pa.lse1 = lse1.data_ptr<float>();
  Tensor lam_rows;
  if (diff_) {
    pa.lse2 = lse2.data_ptr<float>();
    if (lambda_rows.defined()) {
      lam_rows = f32(lambda_rows);
      pa.lambda_rows = lam_rows.data_ptr<float>();
    } else {
      pa.lambda = lambda.item<float>();
    }
  }
  pa.P = static_cast<int>(grid_.P);
  pa.bin = bin_.data_ptr<int32_t>();
  if (slot_.defined()) {
    pa.head_slot = slot_.data_ptr<int32_t>();
    pa.suma = sum_.back().data_ptr<float>();
    pa.besta = best_.back().data_ptr<float>();
    if (diff_) {
      pa.sum1 = sum_[0].data_ptr<float>();
      pa.best1 = best_[0].data_ptr<float>();
      pa.sum2 = sum_[1].data_ptr<float>();
      pa.best2 = best_[1].data_ptr<float>();
    }
  }
  stats_from = std::clamp<int64_t>(stats_from, 0, T);
  if (stats && stats_from < T) {
    hist_ = at::zeros({cuda::kHistBuckets}, floats.dtype(at::kLong));
    abs_sum_ = at::zeros({1}, floats.dtype(at::kDouble));
    pa.hist = reinterpret_cast<unsigned long long*>(hist_.data_ptr<int64_t>());
    pa.abs_sum = abs_sum_.data_ptr<double>();
    pa.stats_from = static_cast<int>(stats_from);
  }
  // The pooled pass over rows [r0, r0 + rows): each warp's kTopK largest |logits| kept with the best so far.
  auto pooled_pass = [&](int r0, int rows) {
    pa.row0 = r0;
    pa.rows = rows;
    Tensor top;
    if (pa.hist) {
      top = at::empty({static_cast<int64_t>(cuda::top_slots(pa))}, floats);
      pa.top = top.data_ptr<float>();
    }
    check_cuda(cuda::pooled_attention(pa, diff_), "pooled_attention");
    if (!top.defined()) return;
    const Tensor t = std::get<0>(at::topk(top, std::min<int64_t>(cuda::kTopK, top.numel())));
    top_ = top_.defined() ? std::get<0>(at::topk(at::cat({top_, t}), cuda::kTopK)) : t;
  };
  const bool second_pass = pa.head_slot || pa.hist;  // else it would have nothing to do

  if (products) {
    // A chunk of rows at a time: their logits against the keys they may see, one batched matrix product per
    // component (cuBLAS in fp32: LibTorch leaves TF32 off for them unless a program turns it on, and DiffLens
    // does not), then both passes over them. Rows per chunk: the logits within products_bytes_, a multiple
    // of the kernels' 128 rows where that fits, else fewer (16 at least: beyond 16 x T x H x 4 x 2 bytes a
    // chunk goes over the budget); the floor of the statistics' top list comes from the rows' largest |logit|
    // so far (each is an entry, so the kTopK-th largest of them bounds the kTopK-th largest entry below).
    const int64_t Hkv = K1.size(0), group = H / Hkv, components = diff_ ? 2 : 1;
    const double per_cell = static_cast<double>(H) * 4.0 * static_cast<double>(components);
    const double cells = static_cast<double>(products_bytes_) / per_cell;
    Tensor best_rows;
    for (int64_t r0 = 0; r0 < T;) {
      between();
      const int64_t key0 = window > 0 ? std::max<int64_t>(0, r0 - window + 1) : 0, before = r0 - key0;
      // rows · (before + rows) ≤ cells
      const double fit = (std::sqrt(static_cast<double>(before) * before + 4.0 * cells) - before) / 2.0;
      const int64_t fits = static_cast<int64_t>(fit);
      const int64_t rows =
          std::min({fits >= 128 ? fits / 128 * 128 : std::max<int64_t>(16, fits), chunk_rows, T - r0});
      const int64_t cols = before + rows;
      auto product = [&](const Tensor& Q, const Tensor& K) {
        const Tensor q = Q.narrow(1, r0, rows).reshape({Hkv, group * rows, d});
        return at::bmm(q, K.narrow(1, key0, cols).transpose(1, 2)).contiguous();  // = [H, rows, cols]
      };
      const Tensor S1 = product(Q1, K1), S2 = diff_ ? product(Q2, K2) : Tensor();
      for (cuda::AttentionRows* a :
           {static_cast<cuda::AttentionRows*>(&la), static_cast<cuda::AttentionRows*>(&pa)}) {
        a->s1 = S1.data_ptr<float>();
        a->s2 = diff_ ? S2.data_ptr<float>() : nullptr;
        a->key0 = static_cast<int>(key0);
        a->ld = static_cast<int>(cols);
        a->row0 = static_cast<int>(r0);
        a->rows = static_cast<int>(rows);
      }
      const Tensor scratch = at::empty({static_cast<int64_t>(cuda::lse_scratch_floats(la, diff_))}, floats);
      la.scratch = scratch.data_ptr<float>();
      check_cuda(cuda::row_lse(la, diff_), "row_lse");
      if (pa.hist && r0 + rows > stats_from) {
        const int64_t from = std::max(r0, stats_from);
        const Tensor m = max_abs.narrow(1, from, r0 + rows - from).flatten();
        best_rows = best_rows.defined() ? at::cat({best_rows, m}) : m;
        best_rows = std::get<0>(at::topk(best_rows, std::min<int64_t>(cuda::kTopK, best_rows.numel())));
        if (best_rows.numel() >= cuda::kTopK) pa.top_floor = best_rows.min().item<float>();
      }
      if (second_pass) pooled_pass(static_cast<int>(r0), static_cast<int>(rows));
      check_cuda(cuda::synchronize(Q1.device().index()),
                 "synchronize");  // so that `between` can stop a layer
      r0 += rows;
    }
    return;
  }

  auto chunks = [&](auto&& launch) {
    for (int64_t r0 = 0; r0 < T; r0 += chunk_rows) {
      between();
      launch(static_cast<int>(r0), static_cast<int>(std::min(chunk_rows, T - r0)));
      check_cuda(cuda::synchronize(Q1.device().index()),
                 "synchronize");  // so that `between` can stop a layer midway
    }
  };
  chunks([&](int r0, int rows) {
    la.row0 = r0;
    la.rows = rows;
    check_cuda(cuda::row_lse(la, diff_), "row_lse");
  });
  if (pa.hist) {
    // Every row's largest |logit| is an entry of its own, so the kTopK-th largest of them bounds the
    // kTopK-th largest entry from below: entries under it never enter the warps' lists.
    const Tensor row_max = max_abs.narrow(1, stats_from, T - stats_from).flatten();
    if (row_max.numel() >= cuda::kTopK)
      pa.top_floor = std::get<0>(at::topk(row_max, cuda::kTopK)).min().item<float>();
  }
  if (second_pass) chunks(pooled_pass);
}
#else
std::string KernelPooler::unsupported(int64_t, bool) {
  return unbuilt();
}
std::string KernelPooler::unbuilt() {
  return "this build has no CUDA kernels (built without a CUDA compiler or against a LibTorch without CUDA)";
}
KernelPooler::KernelPooler(const PoolGrid& grid, const std::vector<int64_t>&, int64_t heads, bool diff,
                           at::Device, size_t)
    : grid_(grid), diff_(diff), heads_(heads) {
  throw Error(unsupported(0, diff));
}
void KernelPooler::run(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, int64_t, bool, int64_t, int64_t, const std::function<void()>&) {
  throw Error(unsupported(0, diff_));
}
#endif

std::vector<float> KernelPooler::sums(int64_t m) const {
  return to_vector(sum_[static_cast<size_t>(m)]);
}
std::vector<float> KernelPooler::bests(int64_t m) const {
  return to_vector(best_[static_cast<size_t>(m)]);
}

ValueStats KernelPooler::stats() const {
  ValueStats s;
  if (!hist_.defined()) return s;
  const Tensor c = hist_.to(at::kCPU).contiguous();
  const int64_t* cp = c.data_ptr<int64_t>();
  s.histogram.below = static_cast<uint64_t>(cp[0]);
  for (int i = 0; i < LogHistogram::kBins; ++i)
    s.histogram.counts[static_cast<size_t>(i)] = static_cast<uint64_t>(cp[i + 1]);
  s.histogram.above = static_cast<uint64_t>(cp[LogHistogram::kBins + 1]);
  s.count = s.histogram.total();
  if (s.count == 0) return s;
  s.mean = static_cast<float>(abs_sum_.item<double>() / static_cast<double>(s.count));
  if (top_.defined())
    for (float t : to_vector(top_))
      if (t >= 0 && s.top.size() < std::min<uint64_t>(ValueStats::kTopK, s.count)) s.top.push_back(t);
  s.median = static_cast<float>(s.histogram.quantile(0.5));
  return s;
}

}  // namespace difflens
