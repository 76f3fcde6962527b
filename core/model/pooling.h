// Internal to core (includes LibTorch's Tensor): the pooled maps of a long-prompt capture, each P x P cell
// the mean and the largest-magnitude entry of its tokens' causal entries. The grid of cells, the pooling of
// a block's maps on the host (a GPU model the kernels cannot run) and by core/cuda's kernels on a GPU. A CPU
// model's maps are pooled by the fused pass itself as rows are made (core/cpu/attention_cpu.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/formats/trace.h"

namespace difflens {

// Bins of a pooled map (viz::pool_region's): cell r covers rows/columns [r·T/P, (r+1)·T/P); `count` holds
// each cell's number of causal entries (key <= query).
struct PoolGrid {
  int64_t T = 0, P = 0;
  std::vector<int64_t> bin;    // token -> cell index
  std::vector<int64_t> start;  // cell -> its first token (P + 1 values, the last = T)
  std::vector<int64_t> count;  // [P, P]
  PoolGrid(int64_t T_, int64_t P_);
};

// Adds the maps of query rows [row0, row0 + rows) to the host's pooled cells: src[m] holds map m of the
// block for every head, [heads, rows, keys]; sum and best [k * maps + m] are the [P, P] cells of kept head
// k's (keep_heads[k]'s) map m. On LibTorch's intra-op threads, one job per head and map.
void pool_block_on_host(const PoolGrid& grid, const std::vector<int64_t>& keep_heads, int64_t maps,
                        const float* const src[3], int64_t row0, int64_t rows,
                        std::vector<std::vector<float>>& sum, std::vector<std::vector<float>>& best);

// The cells, each row's log-sum-exp and the layer's logit statistics by core/cuda's kernels, straight
// from the rotated queries and keys: no map is made for them (the heads' outputs come from the fused
// attention, or for a sliding window from blocks of rows; the long-prompt path of a CUDA model when this
// build has the kernels). Two passes over every visible entry: each row's log-sum-exp (and largest |logit|),
// then the maps' cells and the statistics, in chunks of query rows.
class KernelPooler {
 public:
  // Why a model whose components are d wide cannot use the kernels ("" when it can): a build without them
  // (no CUDA compiler, or a LibTorch without CUDA), or components wider than they take.
  static std::string unsupported(int64_t d, bool diff);
  // Why the kernels cannot read a matrix product's logits ("" when they can: any width): a build without
  // them.
  static std::string unbuilt();

  // keep_heads: whose maps are pooled (slots in that order); heads: the layer's map heads. products_bytes >
  // 0: the logits come from cuBLAS matrix products, a chunk of rows at a time, each chunk's within that many
  // bytes (PoolingPath::Products); 0: the kernels compute each logit from the queries and keys.
  KernelPooler(const PoolGrid& grid, const std::vector<int64_t>& keep_heads, int64_t heads, bool diff,
               at::Device dev, size_t products_bytes = 0);

  // One layer: q [H, T, d] rotated and scaled, k [Hkv, T, d] (component 2 undefined for the baseline);
  // λ a 0-dim tensor (DIFF) or lambda_rows [H, T] (DIFF V2). Statistics (when `stats`) of rows ≥ stats_from.
  // `between()` runs before each chunk of `chunk_rows` query rows (it may throw to cancel).
  void run(const at::Tensor& q1, const at::Tensor& k1, const at::Tensor& q2, const at::Tensor& k2,
           const at::Tensor& lambda, const at::Tensor& lambda_rows, int64_t window, bool stats,
           int64_t stats_from, int64_t chunk_rows, const std::function<void()>& between);

  at::Tensor lse1, lse2;  // [H, T] on the device, after run()

  // Sums and largest magnitudes of map m, [kept heads, P, P], on the host; the statistics.
  std::vector<float> sums(int64_t m) const;
  std::vector<float> bests(int64_t m) const;
  ValueStats stats() const;

 private:
  const PoolGrid& grid_;
  bool diff_;
  int64_t heads_;
  size_t products_bytes_ = 0;
  at::Tensor bin_, slot_;
  std::vector<at::Tensor> sum_, best_;
  at::Tensor hist_, abs_sum_, top_;
};

}  // namespace difflens
