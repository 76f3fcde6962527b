// Writes an outlier measurement: tables.md (the paper's Table 5 layout, the paper's 3B numbers beside),
// outliers.json and outliers.csv (pooled and per layer), and logits.png / hidden.png histograms with all
// models overlaid on the same axes.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/model/outliers.h"

namespace difflens::app {

// Returns the markdown it wrote. Throws Error when `out` is not writable.
std::string write_outlier_report(const std::filesystem::path& out, const std::vector<std::string>& models,
                                 const std::vector<OutlierStats>& stats);

// One model's readout line under an outlier figure: "NAME: top-1 30.7, top-2 ..., top-100 22.5, median
// 0.591".
std::string top_k_line(const std::string& model, const ValueStats& stats);

}  // namespace difflens::app
