// Internal to core (includes LibTorch's Tensor): tensors copied into the plain host arrays a Trace holds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstring>
#include <vector>

#include "core/formats/trace.h"

namespace difflens {

// Any tensor's values as float32, row-major, on the host.
inline std::vector<float> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  std::vector<float> v(static_cast<size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.data_ptr<float>(), v.size() * sizeof(float));
  return v;
}

// The same with the tensor's shape.
inline FloatArray to_array(const at::Tensor& t) {
  FloatArray a;
  a.shape.assign(t.sizes().begin(), t.sizes().end());
  const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  a.data.resize(static_cast<size_t>(c.numel()));
  if (!a.data.empty()) std::memcpy(a.data.data(), c.data_ptr<float>(), a.data.size() * sizeof(float));
  return a;
}

}  // namespace difflens
