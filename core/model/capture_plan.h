// What a capture will do before it runs: which maps it keeps, whether they are exact or pooled, how many
// query rows a block of a long-prompt capture holds, what memory it needs, and which requests it refuses.
// Plain arithmetic over the configuration and the machine's memory (no LibTorch), so it is tested alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/config.h"
#include "core/model/model.h"

namespace difflens {

// The machine a capture runs on, as far as the plan needs it.
struct CaptureMachine {
  uint64_t host_available = 0;  // bytes of memory available (0: unknown, nothing is refused for it)
  bool cuda = false;            // the model is on a GPU
  uint64_t device_total = 0;    // the GPU's memory (0: unknown)
  double weight_bytes = 0;      // the model's parameters, on the GPU beside one layer's attention
  // Why core/cuda's kernels cannot pool this model's long prompts ("" when they can: a CUDA model, a build
  // with the kernels, components they take).
  std::string no_kernels = "the model is not on a CUDA GPU";
  // Why --pooling products cannot run ("" when it can): a build without the kernels (any width is taken).
  std::string no_products = "the model is not on a CUDA GPU";
};

struct CapturePlan {
  int64_t tokens = 0;
  std::vector<int64_t> heads;   // whose maps are kept (every head when the options name none)
  bool all_heads = true;        // heads holds every head in order
  std::vector<bool> layers;     // per layer: its maps are kept
  int64_t kept_layers = 0;      // layers whose maps are kept (0 without keep_maps)
  double exact_map_bytes = 0;   // the kept maps, exact (float32)
  double layer_bytes = 0;       // one layer's attention computed whole: logits and maps of every head
  double logits_bytes = 0;      // kept full logits (keep_logits)
  double activation_bytes = 0;  // one layer's activations (hidden states, projections, MLP)
  double host_bytes = 0;        // the capture's peak on the host beyond what the process held before
  double device_bytes = 0;      // an exact capture's peak on a GPU beside the weights
  // > 0: attention in blocks of query rows and each kept map pooled to pooled x pooled cells (1 when no maps
  // are kept: blocks, nothing pooled). 0: exact maps.
  int64_t pooled = 0;
  int64_t block_rows = 0;        // pooled: query rows per block
  bool pool_by_kernels = false;  // pooled: by core/cuda's kernels, no block of maps (a GPU model)

  bool keeps_layer(int64_t layer) const { return layers[static_cast<size_t>(layer)]; }
};

// Checks the request (ids in the vocabulary, the prompt's length, kept layers and heads, logit widths,
// statistics' start) and plans it. `logit_bits` is the width the capture will use (the options', else the
// model's). Throws Error with the numbers for what cannot run: a prompt too long, an exact capture the
// host or the GPU cannot hold (suggesting a pooled budget), full logits or quantized logits with pooled maps.
CapturePlan plan_capture(const ModelConfig& config, const std::vector<int64_t>& ids,
                         const CaptureOptions& options, int logit_bits, const CaptureMachine& machine);

// A layer --layers selects (every layer when none is named): what keep_logits, keep_hidden and keep_qkv
// keep, whether or not its maps are kept (--no-maps).
bool layer_selected(const CaptureOptions& options, int64_t layer);

// Consecutive layers on consecutive devices (`difflens serve --device cuda:0,cuda:1`): device k takes layers
// while the weights placed so far stay within the first k+1 devices' share of the whole, shares in proportion
// to `capacity` (the bytes each may hold), the embedding (`first_bytes`) with the first layer and the final
// norm and output (`last_bytes`) with the last. Returns each layer's device index. Throws Error with the
// numbers, naming the devices (`names`), when the weights cannot fit.
std::vector<int> plan_layer_split(const std::vector<double>& layer_bytes, double first_bytes,
                                  double last_bytes, const std::vector<double>& capacity,
                                  const std::vector<std::string>& names);

}  // namespace difflens
