// Model::generate: a prompt continued token by token, greedy or sampled from the top k, each step a forward
// pass over the whole sequence (the CPU's plain-C++ layers and fused attention; a GPU's blocks of rows).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "core/cpu_pack.h"
#include "core/devices.h"
#include "core/error.h"
#include "core/model_impl.h"

namespace difflens {

using at::Tensor;

std::vector<int64_t> Model::generate(const std::vector<int64_t>& ids, int max_new, double temperature,
                                     int top_k, uint64_t seed) const {
  const ModelConfig& c = impl_->config;
  if (ids.empty()) throw Error("generate: the prompt is empty");
  c10::InferenceMode inference;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> all = ids, out;
  for (int i = 0; i < max_new && static_cast<int64_t>(all.size()) < c.max_position_embeddings; ++i) {
    Tensor x = at::tensor(all, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(impl_->device);
    // On the CPU the fused pass (heads' outputs only: no maps, no statistics); on a GPU the tensor blocks,
    // long contexts in blocks of query rows, never a T x T tensor per layer.
    const int64_t T = x.size(1), block_rows = T <= 1024 ? T : 256;
    RopeByDevice ropes(T, c);
    Tensor h = impl_->net->model->embed_tokens(x);
    for (size_t i = 0; i < impl_->net->model->layer_ptrs.size(); ++i) {
      auto& layer = impl_->net->model->layer_ptrs[i];
      nn::AttentionInputs in;
      const at::Device ld = device_of(*layer);
      if (h.device() != ld) h = h.to(ld);
      const nn::Rope& rope = ropes.on(ld);
      if (!ld.is_cuda()) {
        CaptureOptions outputs_only;
        outputs_only.logit_stats = false;
        LayerTrace unused;
        h = forward_cpu(impl_->cpu_cache, c, *layer, static_cast<int64_t>(i), h, rope, in,
                        [&](const nn::AttentionInputs& inputs) {
                          return attend_fused(inputs, c, layer->logit_bits, nullptr, outputs_only, unused);
                        });
      } else {
        h = layer->forward_blocked(h, rope, block_rows, in, [](const nn::AttentionBlock&) {});
      }
    }
    const Tensor logits = impl_->next_logits(h[0][T - 1]).to(at::kCPU, at::kFloat);
    int64_t next;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto [vals, idx] = at::topk(logits, std::min<int64_t>(std::max(top_k, 1), c.vocab_size));
      Tensor probs = at::softmax(vals / temperature, -1);
      next = idx[at::multinomial(probs, 1, false, gen).item<int64_t>()].item<int64_t>();
    }
    all.push_back(next);
    out.push_back(next);
    if (next == c.eos_token_id) break;
  }
  return out;
}

}  // namespace difflens
