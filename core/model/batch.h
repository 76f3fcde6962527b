// A researcher's own prompt set run on a model, item by item (`difflens batch`): each item is a prompt and
// the answer that should follow it; the model reads the prompt and the answer once (teacher forcing), and
// DiffLens reports how likely the answer was, whether greedy decoding would have written it, the log-odds
// against the likeliest other token, and, per layer and head, where the measured rows' attention went (the
// answer's keys, the noise) as core/formats/metrics defines it. Plain data in and out; the caller streams
// items.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/formats/metrics.h"
#include "core/formats/patch_site.h"
#include "core/model/model.h"

namespace difflens {

// One line of an items file (JSON object; core/FORMATS.md "Prompt sets"):
//   "id"            any string or number (default: the line number)
//   "prompt"        the text, read by the model's tokenizer with its BOS; or
//   "token_ids"     the ids themselves (exactly one of the two)
//   "answer"        the text that should follow the prompt (required): its tokens are the prompt + answer's
//                   beyond the prompt's own
//   "answer_span"   [BEGIN, END): the answer's tokens in the prompt, whose keys attention to the answer
//                   counts (default: the last place the answer's text stands in a text prompt; none: the
//                   attention measures are left empty)
//   "query"         [BEGIN, END): the rows measured (default: the prompt's last token, the one that predicts
//                   the answer)
//   "corrupt"       a corrupted prompt (text) for activation patching, as many tokens as the prompt; or
//   "corrupt_ids"   its ids; with either, "corrupt_answer": the text that follows it
//   (core/formats/patch_site.h: each
//                   head's output is patched from the clean run into the corrupt one)
//   other fields    kept as they are (tags), written back with the item's results
struct BatchItem {
  std::string id;
  int64_t line = 0;
  std::optional<std::string> prompt;
  std::vector<int64_t> token_ids;
  std::string answer;
  std::optional<TokenSpan> answer_span, query;
  std::optional<std::string> corrupt;
  std::vector<int64_t> corrupt_ids;
  std::string corrupt_answer;
  bool has_corrupt() const { return corrupt.has_value() || !corrupt_ids.empty(); }
  BatchItem corrupted() const;  // the corrupt prompt and its answer as an item of their own
  std::string tags;             // the other fields, as one JSON object ("{}" when none)
};
// Throws Error "LINE: what is wrong" (a field of the wrong type, neither or both of prompt and token_ids, no
// answer, a span that is not [BEGIN, END) with BEGIN < END).
BatchItem parse_batch_item(const std::string& json_line, int64_t line);

struct BatchHead {
  int layer = 0, head = 0;
  AttentionShare share;  // over the measured rows
};
struct BatchResult {
  int64_t prompt_tokens = 0, answer_tokens = 0;
  TokenSpan answer_span{-1, -1}, query{-1, -1};  // as measured (answer_span -1: none found)
  double p_answer = 0;  // P(answer's tokens | prompt), teacher-forced: the product over its tokens
  // The answer's first token that writes more than spaces (SentencePiece's "▁" before a number's digits is
  // nearly certain and says nothing): its index in the answer, its probability given the prompt and the
  // answer before it, its rank (1: the likeliest), the likeliest other token there and the logit difference
  // logit(it) − logit(other) (= the log-probability difference: one softmax).
  int64_t first = 0;
  double p_first = 0;
  int64_t rank_first = 0;
  int64_t alternative = -1;
  std::string alternative_text;
  double logit_diff = 0;
  bool greedy_right = false;  // every answer token the likeliest given the true prefix (what greedy writes)
  std::vector<BatchHead> heads;  // every layer and head (empty when no answer span)
  AttentionShare mean;           // over layers and heads
  std::vector<std::pair<std::string, std::string>>
      interventions;  // what the run changed (as written, as run)
};

// The item's ids (prompt and answer) as the model reads them: throws Error when the prompt is empty, the
// answer adds no token, or the model cannot read text and the item gives text.
struct BatchIds {
  std::vector<int64_t> prompt, answer;
  // The prompt's own last tokens that the answer's text changes when read together (a prompt ending "is 48"
  // and the answer "23" read as "482", "3"): the prompt is measured without them. 0 almost always.
  int64_t prompt_trimmed = 0;
  std::optional<TokenSpan> answer_span;  // found in a text prompt, or as given
};
BatchIds batch_ids(const Model& model, const BatchItem& item);

// A clean/corrupt pair for activation patching (core/formats/patch_site.h) from two items of the same shape:
// each prompt read with its answer as batch_ids() reads them; where the answers begin with the same tokens
// (SentencePiece's "▁" before a number), those are added to both prompts, so that the logit difference is
// taken at the first token where the answers differ: `target` (the clean answer's) against `alternative` (the
// corrupt one's). Throws Error when the answers never differ or the prompts end up of different lengths.
struct PatchPair {
  std::vector<int64_t> clean, corrupt;
  int64_t target = -1, alternative = -1;
  int64_t shared = 0;  // the answers' common first tokens, added to both prompts
};
PatchPair patch_pair(const Model& model, const BatchItem& clean, const BatchItem& corrupt);

// Runs the item on the model (one capture of prompt + answer, every map kept for the measured rows) under
// `interventions` (resolved against the model and prompt + answer by the caller; empty: as trained).
// `cancel` (optional) is polled between layers: Cancelled is thrown when it is set.
BatchResult run_batch_item(const Model& model, const BatchItem& item, const BatchIds& ids,
                           const Interventions& interventions = {},
                           const std::atomic<bool>* cancel = nullptr);

// One item on one model as `batch` and serve's POST /v1/item run it: its ids, its readouts under the specs
// the model can take (the others' reasons go to `refused`, as takeable_interventions gives them) and, when
// the item has a corrupt prompt, every head's output patched from the clean run into the corrupt one.
struct BatchOutcome {
  BatchIds ids;
  BatchResult result;
  std::optional<PatchReport> patch;
  std::string patch_error;  // why a corrupt prompt could not be patched ("" when it was, or there is none)
};
BatchOutcome run_batch_entry(const Model& model, const BatchItem& item, const std::vector<std::string>& specs,
                             std::vector<std::string>& refused, const std::atomic<bool>* cancel = nullptr);

// The item's record (one line of items.jsonl, core/FORMATS.md "Prompt sets"): line, id, model, the readouts,
// the interventions as run, the tags and, with a corrupt prompt, the patch's ends. `detail` adds every head's
// measures ("heads") and each head's patching ("patch".heads): what serve answers.
std::string batch_record_json(const BatchItem& item, const BatchOutcome& outcome, const std::string& model,
                              bool detail = false);

}  // namespace difflens
