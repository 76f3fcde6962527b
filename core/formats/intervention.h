// Interventions: what a run changes inside a model to ask why it answers as it does. Plain data and text,
// no LibTorch: the CLI, the app, `serve` requests and trace bundles share one grammar (core/FORMATS.md,
// "Interventions"):
//
//   lambda=V            every DIFF layer as lambda:L=V (init: each layer its own λ_init)
//   lambda:L=V          every head of DIFF layer L uses λ = V (a number, or `init`: the layer's λ_init);
//                       DIFF V2: every head's per-token λ replaced by the constant V
//   lambda:L:H=V        head H of layer L only
//   ablate:L:H          head H of layer L outputs zero (after DIFF's per-head norm, before o_proj)
//   ablate:L:H=mean     ... its mean over the prompt's positions instead
//   knockout[:L[:H]]=WHAT[@ROWS]
//                       query rows ROWS (default: the query to the end) of every layer / layer L / head H
//                       of it lose keys before the softmax (both of DIFF's softmaxes). WHAT:
//                         not-answer   the answer's keys removed
//                         only-answer  every key but the answer's removed
//                         not-noise    the noise removed: keys outside the answer and the query to the end
//                         drop:B-E[+B-E...]   those keys removed (B-E: tokens [B, E), E exclusive)
//                         keep:B-E[+B-E...]   every key but those removed
//                       ROWS: B-E, or B- (B to the end, tokens a generation writes included), or `query-`
//                       (key ranges may end open too: B-)
//
// A spec is parsed as written (presets and `query` unresolved), then resolved against a prompt (its answer
// span and query) into numbers only: what a model runs. A row that a knockout leaves with no key at all
// attends to nothing (its row of every map is zero, and so its output).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/config.h"

namespace difflens {

// The largest |λ| a spec may set (a model's own lies near 0..1; larger overflows float32 maps and states).
inline constexpr double kLambdaLimit = 1000;

// Half-open token ranges [first, second); second = kToEnd: to the end of the sequence.
using TokenRange = std::pair<int64_t, int64_t>;
inline constexpr int64_t kToEnd = INT64_MAX;

enum class InterventionKind { Lambda, Ablate, Knockout };
enum class KnockoutKeys { NotAnswer, OnlyAnswer, NotNoise, Drop, Keep };

// One intervention as written. layer/head -1: every layer / every head (knockout only; λ needs a layer).
struct InterventionSpec {
  InterventionKind kind = InterventionKind::Lambda;
  int64_t layer = -1, head = -1;
  // lambda
  bool lambda_init = false;  // `init`: the layer's λ_init
  double value = 0;
  // ablate
  bool mean = false;
  // knockout
  KnockoutKeys keys = KnockoutKeys::NotAnswer;
  std::vector<TokenRange> key_ranges;  // drop / keep
  bool rows_from_query = true;         // ROWS absent or `query-`
  TokenRange rows{0, kToEnd};          // else

  std::string text() const;  // the canonical form (parse(text()) == *this)
  bool operator==(const InterventionSpec& o) const;
};

// Parses one spec; throws Error naming the part that is wrong and showing the grammar.
InterventionSpec parse_intervention(const std::string& text);

// What a prompt gives the presets: the answer's tokens (first >= second: none) and the query row.
struct PromptMarks {
  TokenRange answer{-1, -1};
  int64_t query = -1;
};

// One knockout as a model runs it: rows [rows.first, rows.second) of `head` (-1: all) lose `ranges` (keep:
// every key but them). Ranges sorted, non-overlapping.
struct KeyKnockout {
  int64_t head = -1;
  TokenRange rows{0, kToEnd};
  std::vector<TokenRange> ranges;
  bool keep = false;
  // Whether key j is removed for query row i of head h.
  bool removes(int64_t h, int64_t i, int64_t j) const;
  bool applies(int64_t h, int64_t i) const {
    return (head < 0 || head == h) && i >= rows.first && i < rows.second;
  }
};

// A layer's share of a run's interventions, numbers only.
struct LayerEdit {
  std::optional<double> lambda;  // every head (DIFF V1: the layer's λ; V2: each token's)
  std::vector<std::pair<int64_t, double>> head_lambda;  // (head, λ): overrides `lambda` for that head
  std::vector<std::pair<int64_t, bool>> ablate;         // (head, mean?)
  std::vector<KeyKnockout> knockouts;
  bool empty() const { return !lambda && head_lambda.empty() && ablate.empty() && knockouts.empty(); }
  // λ of head h given the model's own `own` (the edit's value where one applies).
  double lambda_of(int64_t h, double own) const;
  bool lambda_changed(int64_t h) const;
};

// A run's interventions, resolved: one LayerEdit per layer (empty() when none), and the specs as written
// with their resolved text (what a trace records).
struct Interventions {
  std::vector<LayerEdit> layers;
  // Mean ablations average the first mean_positions positions (the prompt's; 0: every position of the run).
  int64_t mean_positions = 0;
  std::vector<std::pair<std::string, std::string>> applied;  // (as written, as run)
  bool empty() const { return applied.empty(); }
};

// The specs against a model and a prompt: layers, heads and λ checked against `config` (a baseline layer
// asked for λ, a layer or head out of range, a preset without an answer, rows beyond `tokens`), presets and
// `query` resolved with `marks`. Throws Error naming the spec and what is wrong.
Interventions resolve_interventions(const std::vector<InterventionSpec>& specs, const ModelConfig& config,
                                    const PromptMarks& marks, int64_t tokens);
// The same from texts (each parsed first).
Interventions resolve_interventions(const std::vector<std::string>& specs, const ModelConfig& config,
                                    const PromptMarks& marks, int64_t tokens);

// Of `specs`, those `config` can take, each resolved alone against `marks` and `tokens`, in their order; each
// other one's reason (the Error resolve_interventions gives) goes to `refused`. The app applies one list to
// two different models (a baseline has no λ).
std::vector<std::string> takeable_interventions(const std::vector<std::string>& specs,
                                                const ModelConfig& config, const PromptMarks& marks,
                                                int64_t tokens, std::vector<std::string>& refused);
// " under A, B" ("" for none): how a run under interventions is named after its model's name.
std::string under_interventions(const std::vector<std::string>& specs);

// The knockouts a trace ran under in `layer`, from its recorded specs as run (Trace::interventions); what
// recomputes its exact tiles.
std::vector<KeyKnockout> knockouts_in_layer(const std::vector<std::pair<std::string, std::string>>& applied,
                                            int64_t layer);

// The grammar in a few lines, for --help and messages.
const char* intervention_grammar();

}  // namespace difflens
