// The needle lab's plain records: a cell, one episode's run on one model and what a sweep of them sums to,
// how a sweep expands into episodes. No Model here (core/model/needle.h runs them), so the remote protocol
// (core/formats/remote.h) and the reports read and write them without the lab.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/data.h"
#include "core/formats/metrics.h"
#include "core/formats/stats.h"
#include "core/formats/trace.h"

namespace difflens {

struct NeedleCell {
  int64_t length = 256;  // context tokens (haystack + needles + questions)
  double depth = 0.5;    // where the queried needles sit, 0..1 of the haystack; < 0: uniform random
  int needles = 1;       // N
  int queried = 1;       // R ≤ N
};

// One episode run on one model.
struct NeedleRun {
  NeedleCell cell;
  uint64_t seed = 0;
  int64_t tokens = 0;
  // Where the asked needles were put (mean of Episode::placed_depths over them): a needle goes between
  // sentences, so a short context's 25 % may be 22 %.
  double placed_depth = 0;
  int answered = 0, asked = 0;       // questions whose whole code the model produced greedily
  std::vector<std::string> replies;  // what the model produced for each question (decoded)
  std::vector<std::string> truths;   // the codes asked
  std::vector<bool> right;           // per question: the whole code and its full stop, greedily
  // Attention while reading the LAST question: to the asked needle's code (the answer span) vs to
  // everything but that code and the question (kAttentionShareDefinition), per layer and averaged.
  NoiseReadout attention;
  // The same shares while ANSWERING it: the query rows are the tokens whose next token is a code token
  // (the last question token or the space before the code, then the code's digits but the last), with
  // the true code given; the question and the answer so far stay out of the noise.
  NoiseReadout answering;
  double seconds = 0;
  std::vector<std::string> interventions;  // what the episode ran under, as written (empty: as trained)
  // What a reader needs to recompute the readouts: the captured tokens (the prompt to the end of the last
  // question, then the true code but its last digit), the asked needle's code span in them, the rows of the
  // two readouts (attention: the last question; answering: the rows whose next token is a code token) and
  // the code. `trace`: that capture (q, k, v kept), only when run_needle was asked to keep it.
  std::vector<int64_t> ids;
  TokenSpan code_span, question_rows, answering_rows;
  std::string code;
  std::shared_ptr<const Trace> trace;
};

// The episode of (cell, seed): the same on every machine and for every model with the same tokenizer.
// Queried needles sit at `depth`; the others (N > R) at uniform random depths.
Episode needle_episode(const EpisodeBuilder& builder, const NeedleCell& cell, uint64_t seed);

struct NeedleCellSummary {
  NeedleCell cell;
  int runs = 0;
  double accuracy = 0;       // answered / asked over the seeds
  AttentionShare attention;  // mean over seeds (layers and heads averaged)
  AttentionShare answering;  // the same while answering (NeedleRun::answering)
  double answering_head =
      0;  // the strongest head's attention mass on the answer while answering, mean over seeds
  double placed_depth = 0;  // NeedleRun::placed_depth, mean over seeds
  // 95 % intervals over the seeds (core/formats/stats.h): accuracy (Wilson, over the questions asked) and the
  // question rows' noise as attention mass and as output share (bootstrap over the episodes).
  Interval accuracy_ci, noise_mass_ci, noise_output_ci;
  int asked = 0, answered = 0;  // questions over the seeds (accuracy = answered / asked)
};

std::vector<NeedleCellSummary> summarize(const std::vector<NeedleRun>& runs);

// The while-answering readout of one context length and (N, R), averaged over its cells (the depths);
// `cells` is 0 when the sweep has none.
struct AnsweringMean {
  AttentionShare share;
  double strongest_head = 0;
  int cells = 0;
};
AnsweringMean answering_over_depths(const std::vector<NeedleCellSummary>& cells, int64_t length, int needles,
                                    int queried);

// A sweep: every length × (N, R) × depth cell, `seeds` episodes each (seeds 1..K). The CLI and the app's
// lab tab expand it the same way, so both produce the same episodes in the same order.
struct NeedleSweep {
  std::vector<int64_t> lengths{256, 512};
  std::vector<double> depths{0, 0.25, 0.5, 0.75, 1};         // 0..1
  std::vector<std::pair<int, int>> needles_queried{{1, 1}};  // (N, R)
  int seeds = 3;
  int first_seed =
      1;  // episodes first_seed .. first_seed + seeds - 1 (fresh episodes: seeds not used before)
};

struct NeedleJob {
  NeedleCell cell;
  uint64_t seed = 1;
};

// Throws Error naming the offending field: lengths < 64 or over `max_positions` (when > 0), depths outside
// [0, 1], R outside 1..N, N over 16, seeds < 1, an empty list, or more than 100,000 episodes.
void validate(const NeedleSweep& sweep, int64_t max_positions = 0);
std::vector<NeedleJob> expand(const NeedleSweep& sweep);

// A sweep from text fields as a user types them: "128,256" tokens, "0,50,100" percent, needles "1,2,4"
// and queried "1,2" (every combination with R <= N), seeds (from first_seed). Throws Error naming the field;
// validated.
NeedleSweep parse_needle_sweep(const std::string& lengths, const std::string& depths_percent,
                               const std::string& needles, const std::string& queried, int seeds,
                               int first_seed = 1);

}  // namespace difflens
