// Fuzz target: config.json in DiffLens's own style or Hugging Face's (Llama, Mistral, DiffLlama; rope
// settings old and new). What is accepted must validate, survive a round trip through DiffLens's writer
// and give the numbers a model is built from.
#include <algorithm>

#include "core/formats/config.h"
#include "core/formats/error.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelConfig c;
  try {
    c = config_from_json_text(text, "config.json");
  } catch (const Error&) {
    return 0;
  }
  try {
    c.validate("config.json");
    (void)parameter_count(c);
    (void)rope_inv_freq(c);
    for (int64_t l = 0; l < std::min<int64_t>(c.num_hidden_layers, 64); ++l) (void)lambda_init(l);
  } catch (const Error&) {
    return 0;
  }
  // A valid config written by DiffLens reads back.
  const ModelConfig back = config_from_json_text(config_to_json_text(c), "round trip");
  FUZZ_CHECK(back.hidden_size == c.hidden_size && back.num_hidden_layers == c.num_hidden_layers &&
             back.num_attention_heads == c.num_attention_heads && back.vocab_size == c.vocab_size &&
             back.attention == c.attention && back.rope_theta == c.rope_theta);
  return 0;
}
