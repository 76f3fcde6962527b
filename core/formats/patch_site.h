// Activation patching: a clean prompt and a corrupted one of the same length (another name, another code)
// run on one model; one component's activation is copied from one run into the other, and the logit
// difference between the clean answer and the corrupt one at the query says how much of the clean behaviour
// that component carries. Plain data in and out; Model::patch (core/model/patch.cpp) runs it in tensor
// operations, layer by layer, as nn::DecoderLayerImpl::forward_with computes a layer (interventions
// included).
//
// Components, each at a layer, a head where it has one, and positions (the rows copied; none: every one):
//   head     a head's output as o_proj reads it (DIFF: after its per-head norm and scale)
//   a1       a head's first softmax map (a baseline's one map), query rows copied whole
//   a2       a DIFF head's second softmax map
//   lambda   DIFF V2: a head's per-token λ = σ(z). DIFF's λ is a weight of the layer, the same in both runs:
//            nothing to patch (refused, and left out of sweeps with a note)
//   mlp      a layer's MLP output
//   resid    the residual stream entering the layer (its layer's input before the norm; layer 0: the
//            embedding)
// The measure: LD = logit(target) − logit(alternative) at the query, and its normalised form
// (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt): 0 the corrupt run, 1 the clean one, in both
// directions (denoising: clean into the corrupt run; noising: corrupt into the clean run, where 1 means the
// component changed nothing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/intervention.h"

namespace difflens {

enum class PatchComponent { Head, A1, A2, Lambda, Mlp, Resid };
std::string to_string(PatchComponent c);
PatchComponent parse_patch_component(const std::string& s);  // throws Error listing the names

struct PatchSite {
  PatchComponent component = PatchComponent::Head;
  int64_t layer = 0;
  int64_t head = -1;               // head, a1, a2, lambda: the head; mlp and resid: -1
  std::vector<int64_t> positions;  // the rows copied; empty: every position
  std::string text() const;        // "head L1 H3 @ 17" / "resid L0 @ all"
};

// Throws Error when `config` has no such component (a baseline's a2 or λ, DIFF's λ), the layer or head is out
// of range, or a position is beyond `tokens`.
void check_patch_site(const PatchSite& site, const ModelConfig& config, int64_t tokens);

// Every head of every layer, one site each (a1, a2, lambda: the heads that have them), at `positions`.
std::vector<PatchSite> head_sweep(const ModelConfig& config, PatchComponent component,
                                  const std::vector<int64_t>& positions = {});
// Every layer's residual stream at each position in [0, tokens), one site each (layer-major).
std::vector<PatchSite> resid_sweep(const ModelConfig& config, int64_t tokens);

struct PatchOptions {
  int64_t query = -1;        // the position whose next-token logits are read (default: the last)
  int64_t target = -1;       // the clean answer's token (default: the clean run's greedy token)
  int64_t alternative = -1;  // the corrupt answer's token (default: the corrupt run's greedy token)
  bool denoise = true;       // copy clean into the corrupt run (false: corrupt into the clean run)
  // With no target, alternative or query given: while both runs' greedy tokens are the same (SentencePiece's
  // "▁" before a number), both prompts go on with it, up to this many tokens, and the difference is taken at
  // the first token where the runs part (PatchReport::shared). 0: never.
  int extend_shared = 0;
  Interventions interventions;  // every run under them (resolved for the clean prompt)
};

struct PatchResult {
  std::vector<PatchSite> sites;  // patched together
  double logit_diff = 0;
  double normalized = 0;  // NaN when the clean and corrupt runs' differences are equal
};

struct PatchReport {
  int64_t tokens = 0, query = 0;
  int64_t target = 0, alternative = 0;
  std::string target_text, alternative_text;
  double clean_diff = 0, corrupt_diff = 0;  // LD of the two runs unpatched
  bool denoise = true;
  std::vector<int64_t> shared;  // tokens added to both prompts (PatchOptions::extend_shared)
  std::string shared_text;
  std::vector<PatchResult> results;  // one per run asked, in order
  std::vector<std::string> notes;    // what was left out and why
};

}  // namespace difflens
