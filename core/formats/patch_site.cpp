// Patching sites (core/formats/patch_site.h): names, checks and sweeps. Plain C++, no LibTorch.
#include <string>
#include <vector>

#include "core/formats/error.h"
#include "core/formats/patch_site.h"

namespace difflens {

namespace {

bool has_head(PatchComponent c) {
  return c != PatchComponent::Mlp && c != PatchComponent::Resid;
}

}  // namespace

std::string to_string(PatchComponent c) {
  switch (c) {
    case PatchComponent::Head:
      return "head";
    case PatchComponent::A1:
      return "a1";
    case PatchComponent::A2:
      return "a2";
    case PatchComponent::Lambda:
      return "lambda";
    case PatchComponent::Mlp:
      return "mlp";
    case PatchComponent::Resid:
      return "resid";
  }
  return "?";
}

PatchComponent parse_patch_component(const std::string& s) {
  for (PatchComponent c : {PatchComponent::Head, PatchComponent::A1, PatchComponent::A2,
                           PatchComponent::Lambda, PatchComponent::Mlp, PatchComponent::Resid})
    if (s == to_string(c)) return c;
  throw Error("unknown patching component '" + s + "': one of head, a1, a2, lambda, mlp, resid");
}

std::string PatchSite::text() const {
  std::string t = to_string(component) + " L" + std::to_string(layer);
  if (head >= 0) t += " H" + std::to_string(head);
  t += " @ ";
  if (positions.empty()) return t + "all";
  for (size_t i = 0; i < positions.size(); ++i) t += (i ? "," : "") + std::to_string(positions[i]);
  return t;
}

void check_patch_site(const PatchSite& s, const ModelConfig& c, int64_t tokens) {
  const std::string name = s.text();
  if (s.layer < 0 || s.layer >= c.num_hidden_layers)
    throw Error("patch " + name + ": the model has layers 0-" + std::to_string(c.num_hidden_layers - 1));
  if (has_head(s.component)) {
    if (s.head < 0 || s.head >= c.map_heads())
      throw Error("patch " + name + ": layer " + std::to_string(s.layer) + " has heads 0-" +
                  std::to_string(c.map_heads() - 1));
  } else if (s.head >= 0) {
    throw Error("patch " + name + ": " + to_string(s.component) + " is a layer's, not a head's");
  }
  if (!c.is_diff() && (s.component == PatchComponent::A2 || s.component == PatchComponent::Lambda))
    throw Error("patch " + name + ": a baseline head has one map (a1) and no lambda");
  if (c.is_diff() && !c.is_diff_v2() && s.component == PatchComponent::Lambda)
    throw Error("patch " + name +
                ": DIFF's lambda is a weight of the layer, the same in the clean and the corrupt run: "
                "nothing to patch (DIFF V2's lambda is computed from each token)");
  for (int64_t p : s.positions)
    if (p < 0 || p >= tokens)
      throw Error("patch " + name + ": position " + std::to_string(p) + " is beyond the " +
                  std::to_string(tokens) + "-token prompts");
}

std::vector<PatchSite> head_sweep(const ModelConfig& c, PatchComponent component,
                                  const std::vector<int64_t>& positions) {
  std::vector<PatchSite> out;
  if (!has_head(component)) return out;
  if (!c.is_diff() && (component == PatchComponent::A2 || component == PatchComponent::Lambda)) return out;
  if (c.is_diff() && !c.is_diff_v2() && component == PatchComponent::Lambda) return out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (int64_t h = 0; h < c.map_heads(); ++h) out.push_back({component, l, h, positions});
  return out;
}

std::vector<PatchSite> resid_sweep(const ModelConfig& c, int64_t tokens) {
  std::vector<PatchSite> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (int64_t p = 0; p < tokens; ++p) out.push_back({PatchComponent::Resid, l, -1, {p}});
  return out;
}

}  // namespace difflens
