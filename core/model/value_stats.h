// Internal to core (includes LibTorch's Tensor): statistics of |values| held in tensors on any device, for
// the captures that run as tensor operations (a GPU's layers; the modules' path). The CPU's fused pass
// computes the same statistics in plain C++ (value_stats_cpu, core/cpu/attention_cpu.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/formats/trace.h"

namespace difflens {

// Exact statistics of |values| over several tensors of one shape, skipping the cells where `skip` is true
// (the causal future). `exact_median` false: the median is the histogram's estimate (blocks of a long
// capture, whose medians a merge replaces by the histogram's anyway).
ValueStats value_stats(const std::vector<at::Tensor>& parts, const at::Tensor& skip = at::Tensor(),
                       bool exact_median = true);

// Statistics of a layer's |hidden state| h [1, T, E] from row `from` on: on the host in plain C++, on a GPU
// by value_stats()'s tensor operations.
ValueStats hidden_stats(const at::Tensor& h, int64_t from);

}  // namespace difflens
