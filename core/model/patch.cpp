// Model::patch: activation patching (core/formats/patch_site.h) in tensor operations, layer by layer, as
// nn::DecoderLayerImpl::forward_with computes a layer (interventions included): the run copied from keeps
// what the sites need, the run patched into keeps the residual stream entering each layer, and each patched
// run starts at its first patched layer from that stream (the layers before it are the unpatched run's).
#include <ATen/ops/tensor.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "core/formats/error.h"
#include "core/formats/patch_site.h"
#include "core/model/devices.h"
#include "core/model/model_impl.h"

namespace difflens {

using at::Tensor;

namespace {

// What a run keeps of one layer (on the layer's device): the residual stream entering it [T, E], each
// head's output as o_proj reads it [H, T, dv], the maps [H, T, T] (rows zero beyond the causal keys),
// DIFF V2's λ [H, T] and the MLP's output [T, E]. Undefined where not asked for.
struct LayerRecord {
  Tensor resid, heads, a1, a2, lambda, mlp;
};
constexpr size_t kComponents = 6;
size_t index(PatchComponent c) {
  return static_cast<size_t>(c);
}
// Which components a run keeps, per layer.
struct Needs {
  std::array<bool, kComponents> keep{};
  bool operator()(PatchComponent c) const { return keep[index(c)]; }
};
// A patched run's sites in one layer, by component.
struct LayerSites {
  std::array<std::vector<const PatchSite*>, kComponents> of;
  const std::vector<const PatchSite*>& operator()(PatchComponent c) const { return of[index(c)]; }
};

// Rows `positions` (all when empty) of `dst` along dim 0 from `src` (same shape).
void copy_rows(Tensor dst, const Tensor& src, const std::vector<int64_t>& positions) {
  const Tensor s = src.to(dst.device(), dst.scalar_type());
  if (positions.empty()) {
    dst.copy_(s);
    return;
  }
  const Tensor idx = at::tensor(positions, at::TensorOptions().dtype(at::kLong)).to(dst.device());
  dst.index_copy_(0, idx, s.index_select(0, idx));
}

struct Runner {
  const Model& model;
  const ModelConfig& c;
  int64_t T, q;
  const std::atomic<bool>* cancel;

  // The layers from `first` on over h [1, T, E] (the stream entering layer `first`): patched by `sites`
  // (per layer; null: none) from `source`, kept in `record` as `needs` asks. Returns the next-token logits
  // at the query [V] (float, on the CPU).
  Tensor run(Tensor h, int64_t first, const std::vector<LayerSites>* sites,
             const std::vector<LayerRecord>* source, std::vector<LayerRecord>* record,
             const std::vector<Needs>* needs) {
    auto& impl = ModelAccess::impl(model);
    auto& net = *impl.net->model;
    RopeByDevice ropes(T, c);
    for (int64_t i = first; i < c.num_hidden_layers; ++i) {
      if (cancel && cancel->load()) throw Cancelled();
      const size_t li = static_cast<size_t>(i);
      auto& layer = net.layer_ptrs[li];
      const at::Device ld = device_of(*layer);
      if (h.device() != ld) h = h.to(ld);
      const LayerSites none;
      const LayerSites& s = sites ? (*sites)[li] : none;
      const Needs keep = needs ? (*needs)[li] : Needs{};
      LayerRecord* rec = record ? &(*record)[li] : nullptr;
      const LayerRecord* src = source ? &(*source)[li] : nullptr;
      if (!s(PatchComponent::Resid).empty()) {
        h = h.clone();
        for (const PatchSite* p : s(PatchComponent::Resid)) copy_rows(h[0], src->resid, p->positions);
      }
      if (rec) rec->resid = h[0].clone();
      nn::AttentionInputs in = layer->inputs(layer->input_layernorm(h), ropes.on(ld));
      if (!s(PatchComponent::Lambda).empty()) {
        in.lambda_rows = in.lambda_rows.clone();
        for (const PatchSite* p : s(PatchComponent::Lambda))
          copy_rows(in.lambda_rows[0][p->head], src->lambda[p->head], p->positions);
      }
      if (rec && keep(PatchComponent::Lambda) && in.lambda_rows.defined())
        rec->lambda = in.lambda_rows[0].clone();
      const nn::AttentionInputs g = nn::expand_groups(in);
      const int64_t H = g.q1.size(1);
      const int64_t block = std::min<int64_t>(T, 256);
      const auto steps = nn::logit_steps(g, c, layer->logit_bits, block);
      const auto fopts = at::TensorOptions().dtype(at::kFloat).device(ld);
      if (rec && keep(PatchComponent::A1)) rec->a1 = at::zeros({H, T, T}, fopts);
      if (rec && keep(PatchComponent::A2) && g.diff()) rec->a2 = at::zeros({H, T, T}, fopts);
      Tensor o = at::empty({1, H, T, g.v.size(-1)}, g.v.options());
      for (int64_t r0 = 0; r0 < T; r0 += block) {
        nn::AttentionBlock b = nn::attend_rows(g, c, r0, std::min(block, T - r0), steps);
        // a1 is the baseline's one map: its A.
        Tensor& m1 = g.diff() ? b.a1 : b.a;
        bool patched = false;
        auto patch_map = [&](Tensor& m, const std::vector<const PatchSite*>& list, const Tensor& from) {
          for (const PatchSite* p : list) {
            std::vector<int64_t> rows;
            if (p->positions.empty())
              for (int64_t r = r0; r < r0 + b.rows; ++r) rows.push_back(r);
            for (int64_t r : p->positions)
              if (r >= r0 && r < r0 + b.rows) rows.push_back(r);
            for (int64_t r : rows) {
              m[0][p->head][r - r0].copy_(from[p->head][r].narrow(0, 0, r0 + b.rows).to(m.scalar_type()));
              patched = true;
            }
          }
        };
        if (src) {  // a run with sites: the run copied from holds the maps they need
          patch_map(m1, s(PatchComponent::A1), src->a1);
          patch_map(b.a2, s(PatchComponent::A2), src->a2);
        }
        if (patched) nn::finish_block(b, g);
        if (rec && keep(PatchComponent::A1))
          rec->a1.narrow(1, r0, b.rows).narrow(2, 0, r0 + b.rows).copy_(m1[0]);
        if (rec && keep(PatchComponent::A2) && g.diff())
          rec->a2.narrow(1, r0, b.rows).narrow(2, 0, r0 + b.rows).copy_(b.a2[0]);
        o.narrow(2, r0, b.rows).copy_(b.o);
      }
      Tensor n = layer->edited_head_outputs(o, 0);  // [1, H, T, dv]
      if (!s(PatchComponent::Head).empty()) {
        n = n.clone();
        for (const PatchSite* p : s(PatchComponent::Head))
          copy_rows(n[0][p->head], src->heads[p->head], p->positions);
      }
      if (rec && keep(PatchComponent::Head)) rec->heads = n[0].clone();
      const Tensor y = h + layer->project(n);
      Tensor m = layer->mlp(layer->post_attention_layernorm(y));
      if (!s(PatchComponent::Mlp).empty()) {
        m = m.clone();
        for (const PatchSite* p : s(PatchComponent::Mlp)) copy_rows(m[0], src->mlp, p->positions);
      }
      if (rec && keep(PatchComponent::Mlp)) rec->mlp = m[0].clone();
      h = y + m;
    }
    return impl.next_logits(h[0][q]).to(at::kCPU, at::kFloat);
  }
};

void check_ids(const std::vector<int64_t>& ids, const ModelConfig& c, const char* which) {
  if (ids.empty()) throw Error(std::string("patch: the ") + which + " prompt is empty");
  if (static_cast<int64_t>(ids.size()) > c.max_position_embeddings)
    throw Error(std::string("patch: the ") + which + " prompt has " + std::to_string(ids.size()) +
                " tokens; this model reads at most " + std::to_string(c.max_position_embeddings));
  for (int64_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw Error(std::string("patch: the ") + which + " prompt's token id " + std::to_string(id) +
                  " is outside the vocabulary");
}

}  // namespace

PatchReport Model::patch(const std::vector<int64_t>& clean, const std::vector<int64_t>& corrupt,
                         const std::vector<std::vector<PatchSite>>& runs, const PatchOptions& options,
                         const std::atomic<bool>* cancel, const Model* source_model) const {
  const ModelConfig& c = impl_->config;
  const Model& source = source_model ? *source_model : *this;
  const ModelConfig& sc = source.impl_->config;
  if (sc.num_hidden_layers != c.num_hidden_layers || sc.map_heads() != c.map_heads() ||
      sc.hidden_size != c.hidden_size || sc.head_dim != c.head_dim || sc.attention != c.attention ||
      sc.vocab_size != c.vocab_size)
    throw Error(
        "patch: the model copied from has another shape (layers, heads, widths, attention or vocabulary)");
  check_ids(clean, c, "clean");
  check_ids(corrupt, c, "corrupt");
  if (clean.size() != corrupt.size())
    throw Error("patch: the clean prompt has " + std::to_string(clean.size()) +
                " tokens and the corrupt one " + std::to_string(corrupt.size()) +
                "; patching copies position by position, so both need as many (another name of as many "
                "pieces, a code of as many digits)");
  for (int64_t t : {options.target, options.alternative})
    if (t >= c.vocab_size) throw Error("patch: token " + std::to_string(t) + " is outside the vocabulary");
  c10::InferenceMode inference;
  // Mean ablations average the prompts' own positions (not the tokens extend_shared adds).
  const int64_t prompt = static_cast<int64_t>(clean.size());
  const InterventionScope scope(impl_->net, options.interventions, prompt);
  std::optional<InterventionScope> source_scope;
  if (&source != this) source_scope.emplace(source.impl_->net, options.interventions, prompt);
  auto embed = [&](const Model& m, const std::vector<int64_t>& ids) {
    auto& net = *m.impl_->net->model;
    const at::Device d0 = device_of(*net.layer_ptrs.front());
    return net.embed_tokens(at::tensor(ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).to(d0));
  };
  const Model& clean_model = options.denoise ? source : *this;
  const Model& corrupt_model = options.denoise ? *this : source;

  // Both runs' greedy tokens the same (SentencePiece's "▁" before a number): both prompts go on with it.
  std::vector<int64_t> cl = clean, co = corrupt, shared;
  if (options.extend_shared > 0 && options.target < 0 && options.alternative < 0 && options.query < 0)
    for (int k = 0; k < options.extend_shared; ++k) {
      const int64_t n = static_cast<int64_t>(cl.size());
      if (n >= c.max_position_embeddings) break;
      Runner a{clean_model, clean_model.impl_->config, n, n - 1, cancel},
          b{corrupt_model, corrupt_model.impl_->config, n, n - 1, cancel};
      const int64_t ta =
          a.run(embed(clean_model, cl), 0, nullptr, nullptr, nullptr, nullptr).argmax().item<int64_t>();
      const int64_t tb =
          b.run(embed(corrupt_model, co), 0, nullptr, nullptr, nullptr, nullptr).argmax().item<int64_t>();
      if (ta != tb) break;
      cl.push_back(ta);
      co.push_back(ta);
      shared.push_back(ta);
    }
  const int64_t T = static_cast<int64_t>(cl.size());
  const int64_t q = options.query < 0 ? T - 1 : options.query;
  if (q >= T)
    throw Error("patch: the query " + std::to_string(q) + " is beyond the " + std::to_string(T) +
                "-token prompts");
  const size_t L = static_cast<size_t>(c.num_hidden_layers);

  // What the run copied from must keep, per layer.
  std::vector<Needs> needs(L);
  for (const auto& run : runs)
    for (const PatchSite& s : run) {
      check_patch_site(s, c, T);
      needs[static_cast<size_t>(s.layer)].keep[index(s.component)] = true;
    }
  double map_bytes = 0;
  for (const Needs& n : needs)
    map_bytes +=
        (n(PatchComponent::A1) + n(PatchComponent::A2)) * 4.0 * static_cast<double>(c.map_heads()) * T * T;
  if (map_bytes > 4.0 * (1 << 30))
    throw Error("patch: copying maps of " + std::to_string(T) + " tokens keeps " +
                std::to_string(static_cast<int64_t>(map_bytes / (1 << 20))) +
                " MiB of them; patch fewer layers' maps, or heads' outputs instead");

  const std::vector<int64_t>& from_ids = options.denoise ? cl : co;
  const std::vector<int64_t>& into_ids = options.denoise ? co : cl;
  Runner from_runner{source, sc, T, q, cancel};
  Runner into_runner{*this, c, T, q, cancel};
  std::vector<LayerRecord> from(L), into(L);
  const Tensor from_logits = from_runner.run(embed(source, from_ids), 0, nullptr, nullptr, &from, &needs);
  std::vector<Needs> resid_only(L);
  for (Needs& n : resid_only) n.keep[index(PatchComponent::Resid)] = true;
  const Tensor into_logits = into_runner.run(embed(*this, into_ids), 0, nullptr, nullptr, &into, &resid_only);
  const Tensor& clean_logits = options.denoise ? from_logits : into_logits;
  const Tensor& corrupt_logits = options.denoise ? into_logits : from_logits;

  PatchReport r;
  r.tokens = T;
  r.query = q;
  r.shared = shared;
  for (int64_t t : shared) r.shared_text += impl_->tokenizer.piece(t);
  r.denoise = options.denoise;
  r.target = options.target >= 0 ? options.target : clean_logits.argmax().item<int64_t>();
  r.alternative = options.alternative >= 0 ? options.alternative : corrupt_logits.argmax().item<int64_t>();
  if (r.target == r.alternative)
    throw Error("patch: the target and the alternative are both '" + impl_->tokenizer.piece(r.target) + "'" +
                (options.target < 0 && options.alternative < 0
                     ? " (both prompts' likeliest next token): give the answers to compare"
                     : ""));
  r.target_text = impl_->tokenizer.piece(r.target);
  r.alternative_text = impl_->tokenizer.piece(r.alternative);
  auto diff = [&](const Tensor& logits) {
    return logits[r.target].item<double>() - logits[r.alternative].item<double>();
  };
  r.clean_diff = diff(clean_logits);
  r.corrupt_diff = diff(corrupt_logits);
  const double span = r.clean_diff - r.corrupt_diff;
  if (std::fabs(span) < 1e-6)
    r.notes.push_back("the clean and corrupt runs give the same logit difference: normalised values are NaN");

  for (const auto& run : runs) {
    PatchResult pr;
    pr.sites = run;
    std::vector<LayerSites> sites(L);
    int64_t first = c.num_hidden_layers;
    for (const PatchSite& s : pr.sites) {
      sites[static_cast<size_t>(s.layer)].of[index(s.component)].push_back(&s);
      first = std::min(first, s.layer);
    }
    Tensor logits = into_logits;
    if (first < c.num_hidden_layers)
      logits = into_runner.run(into[static_cast<size_t>(first)].resid.unsqueeze(0), first, &sites, &from,
                               nullptr, nullptr);
    pr.logit_diff = diff(logits);
    pr.normalized = std::fabs(span) < 1e-6 ? std::numeric_limits<double>::quiet_NaN()
                                           : (pr.logit_diff - r.corrupt_diff) / span;
    r.results.push_back(std::move(pr));
  }
  return r;
}

}  // namespace difflens
