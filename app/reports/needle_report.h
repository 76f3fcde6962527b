// Writes a needle sweep's results: needle.json (every run), needle.csv (one row per model and cell),
// tables.md (the paper's Table 3 layout and the multi-needle table, with the paper's numbers beside) and
// heatmaps of accuracy and attention to answer (depth × length) per model, each as PNG (`cell` pixels per
// cell: the resolution) and SVG.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/model/needle.h"

namespace difflens::app {

// A CSV field as RFC 4180 writes it: quoted when it holds a comma, a quote or a line break (quotes doubled).
std::string csv_field(const std::string& s);

// A model name as part of a file name: letters, digits, '-' and '.' kept, runs of anything else as one '_'.
std::string file_name(const std::string& s);

// needle --keep-traces: the run's capture as a trace bundle in `dir` and episode.json beside it (the ids, the
// code, its span, the readouts' rows, the interventions; core/FORMATS.md). Throws Error when it cannot write.
void write_kept_episode(const std::filesystem::path& dir, const std::string& model, const NeedleRun& run);

// Returns the markdown tables it wrote (also printed by the CLI). Throws Error when `out` is not writable.
std::string write_needle_report(const std::filesystem::path& out, const std::vector<std::string>& models,
                                const std::vector<std::vector<NeedleRun>>& runs, int cell = 72);

}  // namespace difflens::app
