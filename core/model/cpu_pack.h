// Internal to core (includes LibTorch): a CPU model's layers handed to the plain-C++ passes. Each layer's
// weights packed once for core/cpu/layer_cpu.h (kept while they are unchanged), its attention's inputs handed
// to the fused pass of core/cpu/attention_cpu.h, and the loop that runs both on LibTorch's threads.
#pragma once

#include <functional>
#include <vector>

#include "core/cpu/attention_cpu.h"
#include "core/model/model_impl.h"

namespace difflens {

// A layer's inputs as the CPU's fused pass reads them: contiguous float32 on the host, kept alive as long
// as this object. T is the keys' length; queries of fewer rows are the last ones (q_row0 = T − their rows).
struct FusedInputs {
  at::Tensor q1, k1, q2, k2, v, lambda_rows;
  CpuAttentionInputs ci;
  FusedInputs(const nn::AttentionInputs& in, const ModelConfig& c, int bits);
};

// The fused pass on LibTorch's threads.
void run_fused(const CpuAttentionInputs& ci, CpuAttentionOutputs& co);

// One layer's attention by the fused pass: the maps of `map_heads` (null: none), the logits and statistics
// `options` ask for, written straight into the layer's trace; returns the heads' outputs o [1, H, T, dv].
at::Tensor attend_fused(const nn::AttentionInputs& in, const ModelConfig& c, int bits,
                        const std::vector<int64_t>* map_heads, const CaptureOptions& options, LayerTrace& lt);

// Computes the heads' outputs o [1, H, T, dv] from a layer's attention inputs.
using Attend = std::function<at::Tensor(const nn::AttentionInputs&)>;

// Layer i (`layer`) of a capture on the CPU over h [1, T, E] -> [1, T, E], the heads' outputs computed by
// `attend(in)` (the fused attention pass); `in` receives the attention's inputs. The layer's other work runs
// in plain C++ (core/cpu/layer_cpu.h) when the model's packed weights fit DIFFLENS_PACKED_WEIGHTS_MB, else as
// the LibTorch modules.
// The layer's interventions (its `edit`) apply as in nn::DecoderLayerImpl::forward_with; `row0` is the
// position of h's first row (a generation step's new tokens).
at::Tensor forward_cpu(CpuLayerCache& cache, const ModelConfig& c, nn::DecoderLayerImpl& layer, int64_t i,
                       const at::Tensor& h, const nn::Rope& rope, nn::AttentionInputs& in,
                       const Attend& attend, int64_t row0 = 0);

}  // namespace difflens
