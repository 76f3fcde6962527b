// Needle episodes, greedy answers and attention readouts.
#include "core/model/needle.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include "core/formats/error.h"

namespace difflens {

NeedleRun run_needle(const Model& model, const EpisodeBuilder& builder, const NeedleCell& cell, uint64_t seed,
                     const std::atomic<bool>* cancel, const std::vector<std::string>& interventions,
                     bool keep_trace) {
  const auto t0 = std::chrono::steady_clock::now();
  const Episode ep = needle_episode(builder, cell, seed);
  NeedleRun run;
  run.cell = cell;
  run.seed = seed;
  run.tokens = static_cast<int64_t>(ep.ids.size());
  run.interventions = interventions;
  // The interventions for a prompt of `tokens` whose answer is the asked needle's code and whose query is
  // the question's first token.
  auto edits = [&](size_t question, int64_t tokens) {
    if (interventions.empty()) return Interventions{};
    PromptMarks marks;
    const Span code = ep.needle_code_spans[static_cast<size_t>(ep.queried[question])];
    marks.answer = {code.begin, code.end};
    marks.query = ep.question_spans[question].begin;
    return resolve_interventions(interventions, model.config(), marks, tokens);
  };
  for (int q : ep.queried) run.placed_depth += ep.placed_depths[static_cast<size_t>(q)];
  run.placed_depth /= static_cast<double>(std::max<size_t>(1, ep.queried.size()));
  const Tokenizer& tok = model.tokenizer();
  for (size_t q = 0; q < ep.answer_spans.size(); ++q) {
    const Span a = ep.answer_spans[q];
    const std::vector<int64_t> prompt(ep.ids.begin(), ep.ids.begin() + a.begin);
    const std::vector<int64_t> truth(ep.ids.begin() + a.begin, ep.ids.begin() + a.end);
    // The code and the token after it (its full stop): a reply must end where the code ends ("160." is not
    // "1604"), which matters once codes have several lengths.
    std::vector<int64_t> expected = truth;
    if (a.end < static_cast<int64_t>(ep.ids.size())) expected.push_back(ep.ids[static_cast<size_t>(a.end)]);
    GenerateOptions greedy;
    greedy.max_new = static_cast<int>(expected.size());
    greedy.temperature = 0.0;
    greedy.interventions = edits(q, static_cast<int64_t>(prompt.size()));
    const std::vector<int64_t> reply = model.generate(prompt, greedy, cancel).ids;
    run.replies.push_back(tok.decode(reply));
    run.truths.push_back(tok.decode(truth));
    run.right.push_back(reply == expected);
    run.answered += reply == expected;
    ++run.asked;
    if (cancel && cancel->load()) throw Cancelled();
  }
  // Attention while reading the last question and while answering it (the true code given), towards the
  // code of the needle it asks about: one causal capture holds both (later tokens leave earlier rows as
  // they are).
  const Span last_q = ep.question_spans.back(), reply = ep.answer_spans.back();
  const Span code = ep.needle_code_spans[static_cast<size_t>(ep.queried.back())];
  const std::vector<int64_t> ids(ep.ids.begin(), ep.ids.begin() + reply.end - 1);
  CaptureOptions opt;
  opt.logit_stats = false;
  opt.next_token_top_k = 1;
  opt.pooled_budget_bytes = size_t{256} << 20;  // long contexts: blocked capture, readout from exact tiles
  opt.keep_qkv = true;                          // the values, for the output shares
  opt.interventions = edits(ep.answer_spans.size() - 1, static_cast<int64_t>(ids.size()));
  auto trace = std::make_shared<const Trace>(model.capture(ids, opt, cancel));
  run.ids = ids;
  run.code_span = {code.begin, code.end};
  run.question_rows = {last_q.begin, last_q.end};
  run.answering_rows = {reply.begin - 1, reply.end - 1};
  run.code = ep.needles[static_cast<size_t>(ep.queried.back())].code;
  run.attention = attention_noise(*trace, run.code_span, run.question_rows);
  run.answering = attention_noise(*trace, run.code_span, {last_q.begin, reply.end - 1}, run.answering_rows);
  if (keep_trace) run.trace = std::move(trace);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace difflens
