// One line about a loaded model.
#include "app/common/model_line.h"

#include <cstdio>
#include <string>

namespace difflens::cli {

std::string describe_model(const Model& m) {
  const ModelConfig& c = m.config();
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, %lld layers x %lld heads, %.2f M params, %s", to_string(c.attention),
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.map_heads()),
                static_cast<double>(m.parameter_count()) / 1e6, m.device_name().c_str());
  std::string d = buf;
  if (c.architecture != "difflens") d += ", " + c.architecture;
  if (c.is_diff() && c.diff_pairing == DiffPairing::Half) d += " (components in halves)";
  if (m.source_dtype() != "F32")
    d += ", " + m.source_dtype() + " weights (" + m.weight_storage() + " in memory, F32 arithmetic)";
  if (!m.tokenizer_note().empty()) d += "; " + m.tokenizer_note();
  return d;
}

}  // namespace difflens::cli
