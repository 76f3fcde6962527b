// CUDA kernels for long-prompt captures on a GPU: each query row's log-sum-exp, then the pooled maps (sum and
// largest-magnitude entry per cell) of A1, A2 and A1 − λA2 (the baseline's A) and the statistics of the
// attention logits (LogHistogram's buckets, Σ|l|, the largest |l|), all recomputed tile by tile from the
// rotated queries and keys: no T x T map is ever written. Plain device pointers (F32, row-major), so the
// kernels do not depend on LibTorch; core/model/pooling.cpp (KernelPooler) runs them in a capture, and the
// exact reference of any entry is core/formats/tiles.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace difflens::cuda {

// The logit statistics' layout, as core/formats/trace.h's LogHistogram and ValueStats (checked there at
// compile time by core/model/pooling.cpp): bucket 0 counts |l| < 10^kLogMin (zeros included),
// buckets 1..kBins the log10 grid of kBinsPerDecade bins a decade from 10^kLogMin, bucket kBins + 1 |l| ≥
// 10^kLogMax.
constexpr int kLogMin = -8;
constexpr int kBinsPerDecade = 64;
constexpr int kBins = 16 * kBinsPerDecade;
constexpr int kHistBuckets = kBins + 2;
constexpr int kTopK = 100;

// What both passes read: query rows [row0, row0 + rows) of every head against the keys they may see.
struct AttentionRows {
  // Rotated queries scaled by d^-1/2 [H, T, d] and rotated keys [Hkv, T, d]; component 2 only for DIFF
  // (DIFF V2: k2 may be k1).
  const float *q1 = nullptr, *k1 = nullptr, *q2 = nullptr, *k2 = nullptr;
  int H = 0, Hkv = 0, T = 0, d = 0;
  int window = 0;  // > 0: keys at least `window` back are hidden (sliding window)
  int row0 = 0, rows = 0;
  void* stream = nullptr;  // a cudaStream_t (nullptr: the default stream)
  int device = -1;         // the CUDA device holding the pointers (-1: the current one)
  // Instead of recomputing each logit from q and k: the logits of rows [row0, row0 + rows) against keys
  // [key0, key0 + ld), as a matrix product wrote them, [H, rows, ld] per component (s2: DIFF only). The
  // caller's key0 must be the first key row0 sees (0, or a sliding window's first) and key0 + ld ≥ row0 +
  // rows. Each block then takes kSplitKeys keys of its rows, so a launch of few rows still fills the GPU.
  const float *s1 = nullptr, *s2 = nullptr;
  int key0 = 0, ld = 0;
  int split = 0;  // keys a block takes from the logits (0: kSplitKeys)
};

// Keys a block takes from the logits (AttentionRows::s1) unless AttentionRows::split says otherwise.
constexpr int kSplitKeys = 2048;

// Pass 1: lse[h, i] = log Σ_{visible j} exp(q[h, i] · k[kv(h), j]) for each component, and (when max_abs is
// set) the largest |logit| of the row over both components, [H, T].
struct RowLseArgs : AttentionRows {
  float *lse1 = nullptr, *lse2 = nullptr, *max_abs = nullptr;
  // From the logits: room for each block's partial sums before they are combined, lse_scratch_floats().
  float* scratch = nullptr;
};

// Pass 2: every visible entry added into its cell; the statistics of |logits| of rows ≥ stats_from.
struct PooledAttentionArgs : AttentionRows {
  const float *lse1 = nullptr, *lse2 = nullptr;  // [H, T], from row_lse()
  float lambda = 0;                              // DIFF: A = A1 − λ A2
  const float* lambda_rows = nullptr;            // DIFF V2: λ per head and query row [H, T] (instead)
  int P = 0;
  const int* bin = nullptr;  // [T]: the pooled cell of each token
  const int* head_slot =
      nullptr;  // [H]: the head's place in the outputs, -1: not pooled; nullptr: no pooling
  // Outputs [slots, P, P], zeroed by the caller, added to launch after launch: sums and largest-magnitude
  // entries of A1, A2, A (the baseline: only the `a` pair).
  float *sum1 = nullptr, *best1 = nullptr, *sum2 = nullptr, *best2 = nullptr, *suma = nullptr,
        *besta = nullptr;
  // Statistics (hist nullptr: none): bucket counts [kHistBuckets] and Σ|l| [1], added to; `top` receives
  // top_slots() floats, each warp's kTopK largest |l| (-1 where it saw fewer). |l| below top_floor cannot be
  // among the kTopK largest (a lower bound of the kTopK-th largest, e.g. from row_lse's max_abs; 0: none).
  int stats_from = 0;
  float top_floor = 0;
  unsigned long long* hist = nullptr;
  double* abs_sum = nullptr;
  float* top = nullptr;
};

// Whether the kernels take components of width d (DIFF: two per head, held in registers).
bool supports(int d, bool diff);

// Launches (asynchronous on args.stream); returns a cudaError_t value (0: success).
int row_lse(const RowLseArgs& args, bool diff);
int pooled_attention(const PooledAttentionArgs& args, bool diff);

// Floats pooled_attention() writes to args.top.
size_t top_slots(const AttentionRows& args);

// Floats row_lse() needs at args.scratch when it reads logits (0 otherwise).
size_t lse_scratch_floats(const AttentionRows& args, bool diff);

// Waits for the device (-1: the current one); returns a cudaError_t value (0: success).
int synchronize(int device = -1);

// Number of CUDA devices (0 when there is no driver or no GPU).
int device_count();

}  // namespace difflens::cuda
