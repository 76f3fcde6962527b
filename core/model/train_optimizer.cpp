// AdamW (decoupled weight decay, global-norm clipping), ours so that its state saves on any LibTorch version.
#include <cmath>
#include <vector>

#include "core/model/train_impl.h"

namespace difflens::training {

using at::Tensor;

void adamw_step(ModelState& s, const TrainOptions& o, int64_t step, double lr) {
  at::NoGradGuard no_grad;
  auto params = ModelAccess::impl(s.model).named();
  // Global-norm clipping. The factor stays a 0-dim device tensor: no host round trip per parameter.
  std::vector<Tensor> squares;
  for (auto& [name, p] : params)
    if (p.grad().defined()) squares.push_back(p.grad().to(at::kDouble).pow(2).sum());
  Tensor clip;  // undefined: no clipping
  if (o.grad_clip > 0 && !squares.empty()) {
    const Tensor norm = at::stack(squares).sum().sqrt();
    clip = at::where(norm > o.grad_clip, o.grad_clip / (norm + 1e-6), at::ones_like(norm)).to(at::kFloat);
  }
  // The moments count from the run's first step (init_step when it started from other weights).
  const double t = static_cast<double>(step + 1 - (o.init_from.empty() ? 0 : o.init_step));
  const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
  for (auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    Tensor g = clip.defined() ? p.grad() * clip : p.grad();
    Tensor& m = s.exp_avg[name];
    Tensor& v = s.exp_avg_sq[name];
    if (!m.defined()) {
      m = at::zeros_like(p);
      v = at::zeros_like(p);
    }
    if (p.dim() >= 2 && o.weight_decay > 0)
      p.mul_(1 - lr * o.weight_decay);  // decoupled decay, matrices only
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    p.addcdiv_(m / bc1, (v / bc2).sqrt_().add_(o.adam_eps), -lr);
    p.grad().zero_();
  }
}

}  // namespace difflens::training
