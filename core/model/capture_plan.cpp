// Planning a capture (see capture_plan.h).
#include "core/model/capture_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/formats/checkpoint.h"
#include "core/formats/error.h"

namespace difflens {

namespace {

std::string bytes(double b) {
  return human_bytes(static_cast<uint64_t>(b));
}

void check_request(const ModelConfig& c, const std::vector<int64_t>& ids, const CaptureOptions& o,
                   int logit_bits) {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (T == 0) throw Error("the prompt is empty: nothing to run");
  if (T > c.max_position_embeddings)
    throw Error("the prompt has " + std::to_string(T) + " tokens; this model supports at most " +
                std::to_string(c.max_position_embeddings));
  for (int64_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(c.vocab_size) + ")");
  if (logit_bits == 1 || logit_bits > 32 || logit_bits < 0)
    throw Error("logit quantization: bits must be between 2 and 32 (0: off)");
  const int64_t heads = c.map_heads();
  for (int h : o.heads)
    if (h < 0 || h >= heads)
      throw Error("head " + std::to_string(h) + " does not exist (model has " + std::to_string(heads) + ")");
  for (int l : o.layers)
    if (l < 0 || l >= c.num_hidden_layers)
      throw Error("layer " + std::to_string(l) + " does not exist (model has " +
                  std::to_string(c.num_hidden_layers) + ")");
  if (o.stats_from < 0 || o.stats_from >= T)
    throw Error("capture: statistics from position " + std::to_string(o.stats_from) + " of a " +
                std::to_string(T) + "-token prompt");
}

}  // namespace

CapturePlan plan_capture(const ModelConfig& c, const std::vector<int64_t>& ids, const CaptureOptions& o,
                         int logit_bits, const CaptureMachine& machine) {
  check_request(c, ids, o, logit_bits);
  CapturePlan p;
  const int64_t T = static_cast<int64_t>(ids.size()), H = c.map_heads();
  const double TT = static_cast<double>(T) * static_cast<double>(T);
  p.tokens = T;
  if (o.heads.empty()) {
    for (int64_t h = 0; h < H; ++h) p.heads.push_back(h);
  } else {
    p.heads.assign(o.heads.begin(), o.heads.end());
  }
  p.all_heads = static_cast<int64_t>(p.heads.size()) == H;
  for (int64_t h = 0; p.all_heads && h < H; ++h) p.all_heads = p.heads[static_cast<size_t>(h)] == h;
  p.layers.assign(static_cast<size_t>(c.num_hidden_layers), o.keep_maps && o.layers.empty());
  if (o.keep_maps)
    for (int l : o.layers) p.layers[static_cast<size_t>(l)] = true;
  p.kept_layers = std::count(p.layers.begin(), p.layers.end(), true);

  const double maps_per_head = c.is_diff() ? 3 : 1;  // DIFF: A1, A2 and A
  const double kept_maps =
      static_cast<double>(p.kept_layers) * static_cast<double>(p.heads.size()) * maps_per_head;
  p.exact_map_bytes = kept_maps * TT * 4.0;
  // One layer's attention computed whole: DIFF holds two logits and three maps per head, the baseline one of
  // each.
  p.layer_bytes = static_cast<double>(H) * TT * 4.0 * (c.is_diff() ? 5.0 : 2.0);
  // One layer's activations, T rows of: the hidden state and its norm, the q | k | v (| lambda) projection
  // and the rotated copies the attention reads, the heads' outputs, and the SwiGLU's gate, up and product.
  const double qkv = static_cast<double>((c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim);
  p.activation_bytes = static_cast<double>(T) * 4.0 *
                       (4.0 * static_cast<double>(c.hidden_size) + 2.0 * qkv +
                        static_cast<double>(c.num_attention_heads * c.head_dim) +
                        3.0 * static_cast<double>(c.intermediate_size));
  const double budget = static_cast<double>(o.pooled_budget_bytes);

  // Long prompts: pooled maps when the exact ones, or one layer computed whole, would not fit the budget.
  if (o.pooled_budget_bytes > 0 && (p.exact_map_bytes > budget || p.layer_bytes > budget)) {
    if (logit_bits > 0) throw Error("long-prompt capture does not combine with logit quantization");
    if (o.keep_logits) throw Error("full logits (--keep-logits) do not fit a long-prompt capture");
    // Each kept map keeps a mean and a max grid: 2 x pooled^2 floats per map within the budget.
    const double grids = std::max(1.0, kept_maps * 2.0);
    p.pooled = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(budget / (grids * 4.0))));
    if (p.exact_map_bytes == 0)
      p.pooled = 1;  // no maps kept: blocks, nothing pooled
    else if (p.pooled >= T)
      p.pooled = 0;  // room for every entry: exact maps after all
  }

  if (p.pooled > 0) {
    // Rows per block: the block's logits and maps (2 + 3 tensors per head for DIFF, 2 for the baseline)
    // within ~24 MB on the CPU (statistics and pooling make a few temporary copies of a block). On a GPU a
    // 32nd of its memory, between 256 MB and 2 GB: each block costs a few dozen kernel launches, so fewer,
    // larger blocks keep it busy (64K tokens of the bundled DIFF: ~400 rows per block, 160 blocks per layer
    // on an 80 GB GPU).
    const int64_t per_row = H * T * 4 * (c.is_diff() ? 5 : 2);
    int64_t block_bytes = int64_t{24} << 20;
    if (machine.cuda)
      block_bytes = machine.device_total > 0
                        ? std::clamp<int64_t>(static_cast<int64_t>(machine.device_total / 32),
                                              int64_t{256} << 20, int64_t{2} << 30)
                        : int64_t{512} << 20;
    p.block_rows = o.block_rows > 0 ? std::min<int64_t>(o.block_rows, T)
                                    : std::clamp<int64_t>(block_bytes / std::max<int64_t>(per_row, 1), 16, T);
    const bool products = o.pooling == PoolingPath::Products;
    if (products && !machine.cuda)
      throw Error(
          "--pooling products: the model is on the CPU (the products are a CUDA model's) "
          "(--pooling host pools on the host)");
    if (products && !machine.no_products.empty())
      throw Error("--pooling products: " + machine.no_products + " (--pooling host pools on the host)");
    if (o.pooling == PoolingPath::Kernel && !machine.no_kernels.empty())
      throw Error("--pooling kernel: " + machine.no_kernels + " (--pooling host pools on the host)");
    p.pool_by_kernels = o.pooling == PoolingPath::Kernel || products ||
                        (o.pooling == PoolingPath::Auto && machine.cuda && machine.no_kernels.empty());
    // On the host: each kept map's mean and max grids, the activations, and on the CPU a block's logits and
    // maps with the few temporary copies its statistics and pooling make (4 blocks' worth).
    const double grids =
        p.exact_map_bytes > 0 ? kept_maps * 2.0 * static_cast<double>(p.pooled * p.pooled) * 4.0 : 0.0;
    p.host_bytes = grids + (machine.cuda ? 0.0
                                         : p.activation_bytes + 4.0 * static_cast<double>(p.block_rows) *
                                                                    static_cast<double>(per_row));
    return p;
  }

  // An exact capture's peak on the host. The CPU's fused pass writes each kept map once, straight into the
  // Trace's buffers, and never holds a layer's attention whole (a few rows per thread), beside the layer's
  // activations (activation_bytes); on a GPU each kept layer's maps also pass through one host tensor on
  // their way into the Trace (to_array), so one layer's kept maps more. Both: the kept logits. Measured
  // against peak RSS by tests/test_capture_plan.cpp (the bundled DIFF at 2K tokens) and `bench` (which prints
  // both). Full logits are kept for every head of the layers --layers selects (all without it): --heads
  // selects maps only.
  const double logit_layers =
      o.layers.empty() ? static_cast<double>(c.num_hidden_layers) : static_cast<double>(o.layers.size());
  p.logits_bytes =
      o.keep_logits ? logit_layers * static_cast<double>(H) * TT * 4.0 * (c.is_diff() ? 2.0 : 1.0) : 0.0;
  const double layer_maps = p.kept_layers > 0 ? p.exact_map_bytes / static_cast<double>(p.kept_layers) : 0.0;
  p.host_bytes = p.exact_map_bytes + p.logits_bytes + (machine.cuda ? layer_maps : p.activation_bytes);
  if (machine.host_available > 0 && p.host_bytes > static_cast<double>(machine.host_available))
    throw Error(
        "an exact capture of " + std::to_string(T) + " tokens would need about " + bytes(p.host_bytes) +
        " of memory (the kept maps, " + bytes(p.exact_map_bytes) +
        (machine.cuda ? ", and one layer's more while it comes from the GPU" : "") +
        (p.logits_bytes > 0 ? ", the kept logits, " + bytes(p.logits_bytes) : std::string()) + "), and " +
        bytes(machine.host_available) +
        " is available: give a pooled budget (--pooled-budget MB; in the app the long-prompt MB) to keep "
        "pooled maps with exact values on zoom, or keep fewer layers or heads (--layers, --heads)");
  // On a GPU, one layer's attention computed whole lives there, beside the weights; the kept maps are copied
  // to the host as above. What can never fit the device is refused now; what does not fit its free memory at
  // the moment surfaces as LibTorch's out-of-memory error, translated by the capture.
  p.device_bytes = p.layer_bytes + 2.0 * TT + p.activation_bytes;
  if (machine.cuda && machine.device_total > 0 &&
      p.device_bytes + machine.weight_bytes > static_cast<double>(machine.device_total))
    throw Error(
        "an exact capture of " + std::to_string(T) + " tokens would need about " + bytes(p.device_bytes) +
        " of GPU memory for one layer's attention beside the weights (" + bytes(machine.weight_bytes) +
        "), and the GPU has " + bytes(static_cast<double>(machine.device_total)) +
        ": give a pooled budget (--pooled-budget MB; in the app the long-prompt MB), or capture on the CPU");
  return p;
}

std::vector<int> plan_layer_split(const std::vector<double>& layer_bytes, double first_bytes,
                                  double last_bytes, const std::vector<double>& capacity,
                                  const std::vector<std::string>& names) {
  if (capacity.empty() || capacity.size() != names.size())
    throw Error("plan_layer_split: one name per device");
  if (layer_bytes.empty()) throw Error("plan_layer_split: a model without layers");
  const size_t D = capacity.size();
  double total = first_bytes + last_bytes, room = 0;
  for (double b : layer_bytes) total += b;
  for (double c : capacity) room += std::max(0.0, c);
  auto gb = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
    return std::string(buf);
  };
  auto devices = [&] {
    std::string s;
    for (size_t k = 0; k < D; ++k) s += (k ? ", " : "") + names[k] + " " + gb(std::max(0.0, capacity[k]));
    return s;
  };
  if (total > room)
    throw Error("the weights need " + gb(total) + " and the devices can hold " + gb(room) + " (" + devices() +
                "): add a device or load a smaller or half-precision checkpoint");
  std::vector<int> out(layer_bytes.size(), 0);
  std::vector<double> used(D, 0.0);
  std::vector<int> layers_on(D, 0);
  size_t d = 0;
  used[0] = first_bytes;
  double placed = first_bytes, share = std::max(0.0, capacity[0]);
  for (size_t i = 0; i < layer_bytes.size(); ++i) {
    const double b = layer_bytes[i] + (i + 1 == layer_bytes.size() ? last_bytes : 0.0);
    // Move on when this layer would pass the device's proportional share (of the whole model) or its room.
    while (d + 1 < D) {
      const bool past_share = layers_on[d] > 0 && placed + b > total * share / room * (1 + 1e-12);
      const bool no_room = used[d] + b > capacity[d];
      if (!past_share && !no_room) break;
      ++d;
      share += std::max(0.0, capacity[d]);
    }
    if (used[d] + b > capacity[d])
      throw Error("layer " + std::to_string(i) + " (" + gb(b) + ") does not fit on " + names[d] + " beside " +
                  gb(used[d]) + " already placed there; the weights need " + gb(total) + " in all (" +
                  devices() + ")");
    used[d] += b;
    ++layers_on[d];
    placed += b;
    out[i] = static_cast<int>(d);
  }
  return out;
}

bool layer_selected(const CaptureOptions& o, int64_t layer) {
  return o.layers.empty() || std::find(o.layers.begin(), o.layers.end(), layer) != o.layers.end();
}

}  // namespace difflens
