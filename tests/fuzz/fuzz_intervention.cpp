// Fuzz target: the intervention grammar (--intervene, the Why view, serve requests). What parses must be
// canonical (its text parses to the same spec), keep λ finite within the range taken, and resolve against a
// model's shape and a prompt (first byte: its length, second: the answer, third: the query) or be refused
// with a message; a resolved spec lies inside the prompt and the model.
#include <cmath>

#include "core/formats/config.h"
#include "core/formats/error.h"
#include "core/formats/intervention.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  if (size < 3) return 0;
  const int64_t T = 1 + data[0] % 64;
  PromptMarks marks;
  marks.answer = {data[1] % T, data[1] % T + 1 + data[2] % 3};
  marks.query = data[2] % T;
  const std::string text(reinterpret_cast<const char*>(data + 3), size - 3);
  InterventionSpec spec;
  try {
    spec = parse_intervention(text);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(parse_intervention(spec.text()) == spec);
  if (spec.kind == InterventionKind::Lambda && !spec.lambda_init)
    FUZZ_CHECK(std::isfinite(spec.value) && std::fabs(spec.value) <= kLambdaLimit);
  ModelConfig c;
  c.attention = (data[0] & 0x80) ? AttentionKind::Diff : AttentionKind::Baseline;
  c.hidden_size = 32;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.vocab_size = 259;
  try {
    const Interventions iv = resolve_interventions(std::vector<std::string>{text}, c, marks, T);
    for (const auto& [written, as_run] : iv.applied) {
      const InterventionSpec r = parse_intervention(as_run);  // what a trace records reads back
      if (r.kind == InterventionKind::Knockout)
        for (const TokenRange& k : r.key_ranges) FUZZ_CHECK(k.first >= 0 && k.first <= k.second);
      FUZZ_CHECK(r.layer < c.num_hidden_layers);
    }
  } catch (const Error&) {
  }
  return 0;
}
