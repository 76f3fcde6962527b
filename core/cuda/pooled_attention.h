// CUDA kernels for long-prompt captures: each row's log-sum-exp, and the pooled maps (sum and
// largest-magnitude entry per cell) of A1, A2 and A1 − λA2 (or the baseline's A), computed tile by tile
// straight into the P x P outputs without materialising T x T. Plain device pointers (F32, row-major), so
// the kernels do not depend on LibTorch; the host-side CPU path is Model::capture's blocked capture,
// and core/tiles.cpp is the exact reference for any entry.
#pragma once

#include <cstdint>

namespace difflens::cuda {

struct PooledAttentionArgs {
  // Rotated queries scaled by d^-1/2 [H, T, d] and keys [Hkv, T, d]; component 2 only for DIFF.
  const float *q1 = nullptr, *k1 = nullptr, *q2 = nullptr, *k2 = nullptr;
  const float *lse1 = nullptr, *lse2 = nullptr;  // [H, T], from row_lse()
  float lambda = 0;                              // DIFF: A = A1 − λ A2
  const float* lambda_rows = nullptr;            // DIFF V2: λ per head and query row [H, T] (instead)
  int H = 0, Hkv = 0, T = 0, d = 0, P = 0;
  int window = 0;            // > 0: keys at least `window` back are hidden (sliding window)
  const int* bin = nullptr;  // [T]: the pooled cell of each token
  // Outputs [H, P, P], zeroed by the caller: sums and largest-magnitude entries of A1, A2, A (baseline:
  // only the `a` pair).
  float *sum1 = nullptr, *best1 = nullptr, *sum2 = nullptr, *best2 = nullptr, *suma = nullptr,
        *besta = nullptr;
};

// lse[h, i] = log Σ_{visible j} exp(q[h, i] · k[kv(h), j]). Returns a cudaError_t value (0: success).
int row_lse(const float* q, const float* k, float* lse, int H, int Hkv, int T, int d, int window);

// Accumulates every visible entry into its cell. Returns a cudaError_t value (0: success).
int pooled_attention(const PooledAttentionArgs& args, bool diff);

// Number of CUDA devices (0 when there is no driver or no GPU).
int device_count();

}  // namespace difflens::cuda
