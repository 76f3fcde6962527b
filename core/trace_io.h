// Trace bundles: the unit of exchange between the CLI, GPU servers and the GUI.
// A bundle is a directory with trace.json (tokens, config, λ, statistics, next-token top-k) and
// maps.safetensors (layers.{i}.A1 / A2 / A, each [heads, T, T] F32; optional logits and hidden states).
#pragma once

#include <filesystem>

#include "core/trace.h"

namespace difflens {

constexpr int kTraceBundleVersion = 1;

void write_trace_bundle(const Trace& trace, const std::filesystem::path& dir);
// Throws FormatError naming the file and the field or tensor that is wrong.
Trace read_trace_bundle(const std::filesystem::path& dir);

}  // namespace difflens
