// Trace bundles: the unit of exchange between the CLI, GPU servers and the GUI.
// A bundle is a directory with trace.json (tokens, config, λ, statistics, next-token top-k) and
// maps.safetensors (layers.{i}.A1 / A2 / A, each [heads, T, T] F32; optional logits and hidden states).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "core/formats/trace.h"

namespace difflens {

constexpr int kTraceBundleVersion = 1;

void write_trace_bundle(const Trace& trace, const std::filesystem::path& dir);
// Throws FormatError naming the file and the field or tensor that is wrong.
Trace read_trace_bundle(const std::filesystem::path& dir);

// The same bundle as one safetensors file in memory (what `difflens serve` answers with): the arrays of
// maps.safetensors, and in its __metadata__ "format" = "difflens-trace", "trace.json" = the bundle's JSON,
// plus `extra` entries. trace_from_bytes checks it as read_trace_bundle does (`where` names it in
// messages) and hands back the metadata when asked.
std::string trace_to_bytes(const Trace& trace, const std::map<std::string, std::string>& extra = {});
Trace trace_from_bytes(const std::string& bytes, const std::string& where,
                       std::map<std::string, std::string>* metadata = nullptr);

}  // namespace difflens
