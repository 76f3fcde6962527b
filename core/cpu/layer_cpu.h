// A decoder layer's work around its attention, on the CPU in plain C++ (no LibTorch), for a capture: the
// pre-attention RMSNorm, the q/k/v projections as one matrix product, RoPE and the 1/sqrt(d) scale written
// straight into the attention pass's input layout (core/cpu/attention_cpu.h), and after the pass the heads'
// outputs (DIFF: per-head RMSNorm × (1 − λ_init)), o_proj, the residual, the post-attention RMSNorm, the
// SwiGLU MLP and its residual. Rows are independent, so each part is one parallel pass over blocks of rows
// with every intermediate in a few rows of scratch per worker: two parallel regions per layer instead of
// one per tensor operation, which at a few hundred tokens is most of a layer's time.
//
// The math is the LibTorch modules' (core/model/nn.h: DecoderLayerImpl, used by training and GPUs); tests
// hold the two equal (tests/test_layer_cpu.cpp). Matrix products use register-blocked kernels per instruction
// set (AVX-512, AVX2 + FMA, plain x86-64, as the attention pass: set_cpu_isa) over weights packed once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu/attention_cpu.h"
#include "core/cpu/qkv_layout.h"

namespace difflens {

enum class WeightDtype { F32, F16, BF16 };

// One weight matrix W [rows, K] (row-major, as nn.Linear stores it) in any of the stored dtypes.
struct MatrixPart {
  const void* data = nullptr;
  WeightDtype dtype = WeightDtype::F32;
  int64_t rows = 0;
};

// The right-hand side of y = x · Wᵀ as the kernels read it: W's rows stacked from one or more parts (q, k
// and v as one matrix), converted to float32 and cut into panels of kPanel output columns, each [K, kPanel]
// row-major (zero past N). Where matmul_cpu may call cblas_sgemm, also W itself, [N, K] float32 row-major.
struct PackedMatrix {
  static constexpr int64_t kPanel = 64;
  int64_t N = 0, K = 0;
  std::vector<float> panels;
  std::vector<float> rows;  // empty when packed for the kernel alone
};
PackedMatrix pack_matrix(const std::vector<MatrixPart>& parts, int64_t K);

// Which code computes a product: the hand-written kernel over the packed panels, or OpenBLAS's
// cblas_sgemm over W's rows. Auto: cblas_sgemm where `difflens bench --matmul` measured the kernel less
// than 5% faster (calls of many rows while OpenBLAS runs its AVX-512 or AVX2 kernels, a single row of a
// large matrix; docs/benchmarks.md), the kernel elsewhere.
enum class MatmulCode { Auto, Kernel, Blas };

// Process-wide, as set_cpu_isa: the code matmul_cpu uses (tests and benchmarks pick one). Returns false,
// changing nothing, for Blas in a build without OpenBLAS.
bool set_matmul_code(MatmulCode code);
MatmulCode matmul_code();
// Whether matmul_cpu may call cblas_sgemm for a matrix [N, K] with the code and instruction set in force:
// pack_matrix then keeps W's rows beside the panels (twice the memory).
bool matmul_keeps_rows(int64_t N, int64_t K);

// y [M, N] (row stride ldy) = x [M, K] (row stride ldx) · Wᵀ, or y += x · Wᵀ with accumulate (each entry
// y + the product, as y + (x · Wᵀ) rounds). On the calling thread (cblas_sgemm too: inside the passes'
// parallel loop OpenBLAS's OpenMP build runs single-threaded).
void matmul_cpu(const float* x, int64_t M, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
                bool accumulate);

// Whether this build has OpenBLAS's cblas_sgemm, and which of OpenBLAS's kernels run on this CPU
// ("SkylakeX", "Haswell"; "Prescott": its generic ones, for a CPU it does not know); "" without OpenBLAS.
bool blas_available();
std::string blas_core_name();

// Rows per block of the layer passes below, for T rows on `workers` threads: each block's products are
// one matmul_cpu call of that many rows.
int64_t layer_block_rows(int64_t T, int workers);

// One layer as the passes read it. Pointers borrow from the model (norm weights float32).
struct CpuLayer {
  int64_t E = 0, F = 0;  // hidden size, MLP width
  double eps = 1e-5;     // the two layer norms'
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  PackedMatrix qkv;  // output columns: the q, k, v projections' (and DIFF V2's λ projection's) in turn
  PackedMatrix o, gate_up, down;  // gate_up: gate's F columns, then up's
  QkvLayout columns;              // which columns of qkv's output feed which head (core/cpu/qkv_layout.h)
  bool rope_interleaved = true;   // pairs (2i, 2i + 1); else halves (i, i + d/2)
  float q_scale = 1;              // d^-1/2
  // DIFF V1's output: each head's dv values RMS-normed (times head_norm_weight unless null) and scaled.
  bool head_norm = false;
  const float* head_norm_weight = nullptr;
  double head_norm_eps = 1e-5;
  double head_scale = 1;
};

// Where layer_inputs_cpu writes, in CpuAttentionInputs' layouts: q1, q2 [heads, T, d]; k1, k2 [kv_heads,
// T, d] (k2 unused when the components share keys); v [kv_heads, T, dv]; DIFF V2's λ logits z and σ(z)
// [heads, T]. Null where the layer has none.
struct CpuLayerInputs {
  float *q1 = nullptr, *q2 = nullptr, *k1 = nullptr, *k2 = nullptr, *v = nullptr;
  float *lambda_logits = nullptr, *lambda_rows = nullptr;
};

// h [T, E] -> the attention's inputs. cos, sin: [T, d/2] rotary tables (core/model/nn.h Rope).
void layer_inputs_cpu(const CpuLayer& L, const float* h, int64_t T, const float* cos, const float* sin,
                      const CpuLayerInputs& out, int workers, const CpuParallelFor& parallel);

// h [T, E] += o_proj(the heads' outputs o [heads, T, dv]), then h += MLP(post-norm(h)): the layer's output,
// in place. `replace` (null, or one pointer per head): a head whose pointer is set reads that [dv] vector
// at every position instead of its own output after the per-head norm (a head ablation,
// core/formats/intervention.h).
void layer_output_cpu(const CpuLayer& L, const float* o, float* h, int64_t T, int workers,
                      const CpuParallelFor& parallel, const std::vector<const float*>* replace = nullptr);

}  // namespace difflens
