// The attention of one layer on the CPU in one fused pass, for inference: per head and query row, the
// logits of the keys the row may see (never the causal future), their quantization, the statistics of
// |logits|, the softmax in place, A1 − λA2 for DIFF, each map row written once straight into the trace's
// buffer, and the row's output A·V. No T x T temporary: memory is the inputs, the outputs and a few rows
// per worker. The same math as nn::attend_rows (core/model/nn.h), which training and the GPU use; a test
// holds the two equal. Plain C++ on float arrays (no LibTorch), vectorised for AVX-512, AVX2 or plain x86-64,
// picked at run time (set_cpu_isa).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/formats/intervention.h"
#include "core/formats/trace.h"

namespace difflens {

// One layer's attention inputs, row-major float32. Queries are rotated and scaled by d^-1/2; keys rotated.
struct CpuAttentionInputs {
  int64_t T = 0, heads = 0, kv_heads = 0, d = 0, dv = 0;
  const float* q1 = nullptr;  // [heads, T, d]
  const float* k1 = nullptr;  // [kv_heads, T, d]
  const float* q2 = nullptr;  // DIFF: the second component (null: baseline)
  const float* k2 = nullptr;
  const float* v = nullptr;  // [kv_heads, T, dv]
  float lambda = 0;          // DIFF: A = A1 − λ A2
  const float* lambda_rows =
      nullptr;         // DIFF V2: λ per head and query row [heads, T] (used instead of lambda)
  int64_t window = 0;  // sliding window W: keys j <= i − W hidden too (0: none)
  int bits = 0;        // absmax-quantized logits, per head over its visible entries (0: exact)
  // q1, q2 and lambda_rows hold only the rows [q_row0, T) ([heads, T − q_row0, ...]): a generation step's
  // new tokens against every key so far (the outputs' rows must lie in that range; bits must be 0).
  int64_t q_row0 = 0;
  // Knockouts (core/formats/intervention.h; null: none): keys removed from rows before both softmaxes. The
  // logits written and their statistics are the model's own; a row left with no key is zero in every map.
  const std::vector<KeyKnockout>* knockouts = nullptr;
  // The keys as the pass reads them (transposed, padded), made by the first call and kept here so that the
  // calls of a blocked capture share them.
  mutable std::shared_ptr<const std::vector<float>> k1t, k2t;
};

// What the pass writes. Rows [row0, row1) of the map; buffers indexed by (slot, row − row0, key) with a row
// stride of `ld` keys (a whole map: row0 = 0, row1 = T, ld = T).
struct CpuAttentionOutputs {
  int64_t row0 = 0, row1 = 0, ld = 0;
  float* o = nullptr;              // [heads, T, dv]: rows [row0, row1) written (required)
  std::vector<int64_t> map_heads;  // the heads whose maps are written, in this order (slots)
  float* a1 = nullptr;             // DIFF: [slots, rows, ld] softmax 1
  float* a2 = nullptr;             // DIFF: softmax 2
  float* a = nullptr;              // [slots, rows, ld]: DIFF A1 − λA2, baseline its softmax
  float* logits1 = nullptr;        // [heads, rows, ld] scaled logits, hidden keys -inf (optional)
  float* logits2 = nullptr;        // DIFF
  float* lse1 = nullptr;           // [heads, T] log-sum-exp of each row's logits (rows [row0, row1))
  float* lse2 = nullptr;
  // |logits| of the visible entries of rows >= stats_from, both components pooled (null: none). With
  // exact_median the median is found exactly (a second pass over the logits); else it is the histogram's.
  ValueStats* logit_stats = nullptr;
  int64_t stats_from = 0;
  bool exact_median = true;
  // Long prompts: instead of map rows, each kept map pooled as its rows are made. Cell (r, c) of a
  // P x P grid covers rows and keys [pool_start[r], pool_start[r + 1]) x [pool_start[c], pool_start[c + 1]);
  // its causal entries' sum and the entry of largest magnitude (+x on a tie with -x) are added to
  // pool_sum[slot * maps + m] and pool_best[...] ([P, P] each; maps: DIFF A1, A2, A; baseline A). The rows
  // of one cell row go to one worker, so no two threads touch a cell.
  int64_t pool_cells = 0;               // P (0: no pooling)
  const int64_t* pool_start = nullptr;  // [P + 1]
  const int64_t* pool_bin = nullptr;    // [T]: token -> cell
  std::vector<float*> pool_sum, pool_best;
  // Quantization steps per head (bits > 0): computed over the whole map when empty, else used as given
  // (a blocked capture computes them once, see cpu_logit_steps).
  std::vector<float> step1, step2;
};

// Runs body(begin, end) over parts of [0, n) on up to `workers` threads; body also gets the thread's index
// (0 <= index < workers).
using CpuParallelFor =
    std::function<void(int64_t n, const std::function<void(int64_t begin, int64_t end, int worker)>& body)>;

// The CPU passes' parallel loop (attention, layer_cpu): LibTorch's intra-op threads, each claiming the next
// few jobs as it comes free (defined in core/model/cpu_pack.cpp, which is compiled with OpenMP).
const CpuParallelFor& cpu_parallel();

// The pass. Throws nothing for valid shapes (the caller's tensors define them).
void attention_cpu(const CpuAttentionInputs& in, CpuAttentionOutputs& out, int workers,
                   const CpuParallelFor& parallel);

// The absmax quantization steps of both components per head over the whole map (empty when bits is 0):
// step = max |logit| over the head's visible entries / (2^(bits−1) − 1), as nn::logit_steps.
std::pair<std::vector<float>, std::vector<float>> cpu_logit_steps(const CpuAttentionInputs& in, int workers,
                                                                  const CpuParallelFor& parallel);

// Statistics of |values| (count, exact top-k, mean, histogram, the exact lower median or, without
// exact_median, the histogram's) in plain C++: what the capture keeps of each layer's hidden state.
ValueStats value_stats_cpu(const float* values, int64_t n, bool exact_median = true);

// The instruction set the pass runs with: by default the widest this CPU has (AVX-512, AVX2 + FMA, or plain
// x86-64); set_cpu_isa picks a narrower one (tests run every one the CPU has; benchmarks compare them) and
// returns false, changing nothing, when the CPU lacks it. Process-wide.
enum class CpuIsa { Auto = -1, Avx512 = 0, Avx2 = 1, Plain = 2 };
bool set_cpu_isa(CpuIsa isa);
const char* cpu_isa_name();
CpuIsa cpu_isa();  // the one in use (never Auto)

// The bin of LogHistogram that |v| falls in, as ValueStats' buckets: 0 below 10^kLogMin (zeros, NaN),
// 1..kBins the histogram's bins, kBins + 1 at or above 10^kLogMax. The same bins as LogHistogram::add.
int log_bucket(float v);

}  // namespace difflens
