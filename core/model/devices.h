// Internal to core (includes LibTorch): which device a model runs on, and the per-prompt RoPE tables of a
// model whose layers are spread over several.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/model/model.h"
#include "core/model/nn.h"

namespace difflens {

// The device a choice names: CPU, the first GPU (Error when LibTorch has none), or the first GPU if any.
at::Device resolve_device(DeviceChoice choice);

// The device a module's parameters live on (a model's layers may be spread over several, place_layers).
at::Device device_of(const torch::nn::Module& m);

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

}  // namespace difflens
